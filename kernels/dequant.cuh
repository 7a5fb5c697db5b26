// Device dequantization of GGUF weight rows to fp16 (the cuBLAS GEMMs' weight format): rows
// are uploaded packed, as they are in the file, and decoded here (dequant_formats.cuh) instead
// of on the host.
#pragma once

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

namespace llmkv::cuda {

// True when the GGML type id has a device decoder (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0, IQ4_NL, MXFP4, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K).
bool dequant_type_supported(uint32_t type);

// Bytes of one packed row of `cols` elements of GGML type `type`; 0 when the type has no
// decoder or cols is not a whole number of its blocks.
size_t dequant_row_bytes(uint32_t type, uint64_t cols);

// out[r][c] (fp16 bits, row-major [rows][cols], device) = element c of packed row r (device,
// at packed + r * row_bytes) as dequantize_row_reference decodes it, rounded to fp16 with
// fp32_to_fp16, for r < rows, c < cols. Where a finite value is beyond the fp16 range (it
// rounds to +-inf) the kernel lowers *first_bad (device, atomicMin) to index_base + r * cols +
// c: the caller sets *first_bad to ~0 beforehand and reads the first such element after the
// stream; first_bad may be null. cudaErrorInvalidValue for a type without a decoder.
cudaError_t launch_dequant_f16(uint32_t type, const void *packed, size_t row_bytes, uint32_t rows,
                               uint32_t cols, uint16_t *out, unsigned long long *first_bad,
                               unsigned long long index_base, cudaStream_t stream);

// out[i][c] (f32, row-major [n][cols], device) = element c of packed row ids[i] (device int32
// ids, already validated against the matrix's rows) as dequantize_row_reference decodes it,
// unrounded: the embedding lookup of a table kept in its GGUF encoding. One CTA per output
// row. cudaErrorInvalidValue for a type without a decoder.
cudaError_t launch_gather_decoded_rows(uint32_t type, const void *packed, size_t row_bytes,
                                       const int32_t *ids, uint32_t n, uint32_t cols, float *out,
                                       cudaStream_t stream);

}  // namespace llmkv::cuda
