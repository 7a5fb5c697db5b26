// llmkv's CUDA emulator: what its other libraries (the NCCL stand-in) need from the runtime.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>

namespace cudaemu {

// Runs `op` in `stream`'s order (now, or when held work is demanded: LLMKV_EMU=hold).
CUDAEMU_API cudaError_t enqueue(cudaStream_t stream, std::function<void()> op);

}  // namespace cudaemu
