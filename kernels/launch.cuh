// A kernel launch written once for nvcc and for the emulator (-DLLMKV_CUDA=EMU):
//   LLMKV_LAUNCH(kernel, grid, block, shared_bytes, stream)(args...);
// is kernel<<<grid, block, shared_bytes, stream>>>(args...) under nvcc, and a launch of the
// same function through the emulator's scheduler (kernels/emu/) when the host compiler builds
// the kernels. A macro in the sources rather than a rewrite at build time: the file compiled is
// the file read, diagnostics point at its lines, and nothing in the build parses C++.
// LLMKV_DYNAMIC_SHARED(type, name) declares the block's dynamic shared memory the same way.
#pragma once

#if defined(LLMKV_CUDA_EMU)
#define LLMKV_LAUNCH(kernel, grid, block, shared_bytes, stream) \
    ::cudaemu::launcher(kernel, #kernel, grid, block, shared_bytes, stream)
#define LLMKV_DYNAMIC_SHARED(type, name) \
    type *const name = static_cast<type *>(::cudaemu::dynamic_shared())
#else
#define LLMKV_LAUNCH(kernel, grid, block, shared_bytes, stream) \
    kernel<<<grid, block, shared_bytes, stream>>>
#define LLMKV_DYNAMIC_SHARED(type, name) extern __shared__ type name[]
#endif
