// Rank and device planning for tensor parallelism (the set-up stage's part in parallel/):
// which device each GPU rank runs on and how the ranks' all-reduces travel, and what a
// rank backend can do, decided before any rank is built.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/factory.h"
#include "parallel/tensor_parallel.h"

namespace llmkv {

// LLMKV_TP_COLLECTIVES: how the all-reduces of GPU ranks travel. auto: NCCL when every
// in-process rank has a device of its own (ranks in other processes: always) and NCCL
// loads, else through host memory; nccl: NCCL or fail; host: host memory.
enum class Collectives : uint8_t { kAuto, kNccl, kHost };

// GPU ranks: every rank's device into setup.devices and, where NCCL serves, the
// communicator id (setup.device_collectives = 1). devices: engine_params.devices (one per
// rank, one for all, or none: rank r on device r); in_process: the ranks are threads of
// this process (else each process resolves its own -1 entries). UNSUPPORTED without a
// usable CUDA device, or with nccl asked for and unavailable.
void plan_gpu_ranks(TpSetup &setup, uint32_t tp_size, const std::vector<int32_t> &devices,
                    bool in_process, Collectives collectives);

// What tensor-parallel ranks of rank_backend can do: a rank backend never reads host-tier
// blocks in place (the ranks' tables carry pool blocks only).
BackendCapabilities rank_capabilities(llmkv_backend rank_backend);

}  // namespace llmkv
