// Sealing: quantize full fp16 window blocks into the sealed K/V codecs (codec_encode_head
// of src/kv/codec.h), with the optional Hadamard rotation.
#pragma once

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "kv_layout.cuh"
#include "step.cuh"

namespace llmkv::cuda {

// For every job, head h < H and role (K, V) of layer `layer`: encodes window rows
// [win_row, win_row + B) of the job's span into sealed block job.block_id.
// window: fp16 window buffer (step.cuh); jobs: [n_jobs][g.n_groups] (device), the layer's
// group's job taken from each; pool: sealed pool
// [n_blocks][sealed_block_bytes] (device).
cudaError_t launch_kv_seal(const KvGeometry &g, uint32_t layer, const uint16_t *window,
                           const StepSpan *spans, const SealJob *jobs, uint32_t n_jobs,
                           uint8_t *pool, cudaStream_t stream);

// Encodes n_heads independent heads: src fp16 [n_heads][B][D] -> dst [n_heads][head_bytes]
// where head_bytes = kv_head_bytes(codec, is_v, B, D). For parity tests and benchmarks.
cudaError_t launch_codec_encode_heads(uint32_t codec, bool rotate, bool is_v, const uint16_t *src,
                                      uint32_t n_heads, uint32_t B, uint32_t D, uint8_t *dst,
                                      cudaStream_t stream);

}  // namespace llmkv::cuda
