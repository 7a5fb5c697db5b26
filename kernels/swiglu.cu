// SwiGLU. Layouts: gate_up f32 [n_rows][2 * n_ff] (gate columns then up columns, the
// output of the fused gate/up GEMM); out fp16 [n_rows][n_ff] (input of the down GEMM).
// Grid-stride over all elements. expf is CUDA's accurate version (few ulp vs the CPU).
#include "device_math.cuh"
#include "swiglu.cuh"

namespace llmkv::cuda {

namespace {

__global__ void swiglu_kernel(const float *__restrict__ gate_up, uint32_t n_ff, size_t total,
                              uint16_t *__restrict__ out) {
    for (size_t k = size_t(blockIdx.x) * blockDim.x + threadIdx.x; k < total;
         k += size_t(gridDim.x) * blockDim.x) {
        const size_t t = k / n_ff, i = k % n_ff;
        const float g = gate_up[t * 2 * n_ff + i];
        const float u = gate_up[t * 2 * n_ff + n_ff + i];
        const float v = __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);
        out[k] = f32_to_fp16_bits(v);
    }
}

}  // namespace

cudaError_t launch_swiglu(const float *gate_up, uint32_t n_ff, uint32_t n_rows, uint16_t *out,
                          cudaStream_t stream) {
    const size_t total = size_t(n_ff) * n_rows;
    if (total == 0) return cudaSuccess;
    const size_t blocks = (total + 255) / 256;
    swiglu_kernel<<<unsigned(blocks < 65536 ? blocks : 65536), 256, 0, stream>>>(gate_up, n_ff,
                                                                                 total, out);
    return cudaGetLastError();
}

}  // namespace llmkv::cuda
