// SwiGLU, gpt-oss's clamped SwiGLU and GeGLU (tanh gelu). Layouts: gate, up f32 [n] (the rows of
// the gate and up projections, contiguous); the result replaces gate (input of the down
// projection). Grid-stride over all elements. expf is CUDA's accurate version (few ulp vs the CPU).
#include "launch.cuh"
#include "swiglu.cuh"

namespace llmkv::cuda {

namespace {

__global__ void swiglu_kernel(float *__restrict__ gate, const float *__restrict__ up, size_t n) {
    for (size_t k = size_t(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
         k += size_t(gridDim.x) * blockDim.x) {
        const float g = gate[k];
        gate[k] = __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), up[k]);
    }
}

// gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))), in the CPU's order
// (gelu_tanh of src/backend/cpu/cpu_backend.h) without FMA contraction; tanhf is CUDA's
// accurate version (few ulp vs the CPU).
__global__ void geglu_kernel(float *__restrict__ gate, const float *__restrict__ up, size_t n) {
    for (size_t k = size_t(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
         k += size_t(gridDim.x) * blockDim.x) {
        const float g = gate[k];
        const float cube = __fmul_rn(__fmul_rn(__fmul_rn(0.044715f, g), g), g);
        const float inner = __fmul_rn(0.7978845608028654f, __fadd_rn(g, cube));
        const float gelu = __fmul_rn(__fmul_rn(0.5f, g), __fadd_rn(1.0f, tanhf(inner)));
        gate[k] = __fmul_rn(gelu, up[k]);
    }
}

__global__ void swiglu_oai_kernel(float *__restrict__ gate, const float *__restrict__ up, size_t n,
                                  float alpha, float limit) {
    for (size_t k = size_t(blockIdx.x) * blockDim.x + threadIdx.x; k < n;
         k += size_t(gridDim.x) * blockDim.x) {
        const float x = fminf(gate[k], limit);
        const float y = fminf(fmaxf(up[k], -limit), limit);
        const float glu = __fdiv_rn(x, __fadd_rn(1.0f, expf(-__fmul_rn(alpha, x))));
        gate[k] = __fmul_rn(glu, __fadd_rn(y, 1.0f));
    }
}

}  // namespace

cudaError_t launch_swiglu_oai(float *gate, const float *up, size_t n, float alpha, float limit,
                              cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    const size_t blocks = (n + 255) / 256;
    LLMKV_LAUNCH(swiglu_oai_kernel, unsigned(blocks < 65536 ? blocks : 65536), 256, 0, stream)
    (gate, up, n, alpha, limit);
    return cudaGetLastError();
}

cudaError_t launch_geglu(float *gate, const float *up, size_t n, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    const size_t blocks = (n + 255) / 256;
    LLMKV_LAUNCH(geglu_kernel, unsigned(blocks < 65536 ? blocks : 65536), 256, 0, stream)
    (gate, up, n);
    return cudaGetLastError();
}

cudaError_t launch_swiglu(float *gate, const float *up, size_t n, cudaStream_t stream) {
    if (n == 0) return cudaSuccess;
    const size_t blocks = (n + 255) / 256;
    LLMKV_LAUNCH(swiglu_kernel, unsigned(blocks < 65536 ? blocks : 65536), 256, 0, stream)
    (gate, up, n);
    return cudaGetLastError();
}

}  // namespace llmkv::cuda
