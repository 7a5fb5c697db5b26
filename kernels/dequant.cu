// Dequantization of packed GGUF weight rows to fp16 on the device. One CTA per row (grid-
// striding over rows), threads striding over the columns: consecutive threads decode
// consecutive elements (coalesced fp16 stores; the block's scales are read by every thread of
// the block from L1). Each element is decoded independently by dequant_formats.cuh (the CPU
// reference's f32 operations in its order, _rn intrinsics, no FMA) and rounded with the
// ported fp32_to_fp16: bitwise the host path it replaces. Simple rather than fast: it runs once
// per matrix at load (fp16 weights), or per GEMM into a bounded scratch for a matrix kept in
// its GGUF encoding (the module's prefill path), where the GEMM's reads dominate.
// Also the gather of decoded rows (f32, unrounded): the embedding of a table kept encoded.
#include "dequant.cuh"
#include "dequant_formats.cuh"
#include "device_math.cuh"
#include "launch.cuh"

namespace llmkv::cuda {

namespace {

using llmkv::TensorType;

constexpr uint32_t kThreads = 256;
constexpr uint32_t kMaxGrid = 1u << 20;

template <TensorType T>
__global__ void __launch_bounds__(kThreads)
    dequant_f16_kernel(const uint8_t *__restrict__ packed, size_t row_bytes, uint32_t rows,
                       uint32_t cols, uint16_t *__restrict__ out,
                       unsigned long long *__restrict__ first_bad, unsigned long long index_base) {
    for (uint32_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const uint8_t *row = packed + size_t(r) * row_bytes;  // packed row r
        uint16_t *dst = out + size_t(r) * cols;               // fp16 row r
        for (uint32_t c = threadIdx.x; c < cols; c += kThreads) {
            const float f = dq::decode_at<T>(row, c);
            const uint16_t h = f32_to_fp16_bits(f);
            dst[c] = h;
            // fp16 inf from a finite f32: beyond the fp16 range (an f32 inf or NaN passes).
            if ((h & 0x7c00u) == 0x7c00u && (__float_as_uint(f) & 0x7f800000u) != 0x7f800000u &&
                first_bad)
                atomicMin(first_bad, index_base + size_t(r) * cols + c);
        }
    }
}

template <TensorType T>
cudaError_t launch(const void *packed, size_t row_bytes, uint32_t rows, uint32_t cols,
                   uint16_t *out, unsigned long long *first_bad, unsigned long long index_base,
                   cudaStream_t stream) {
    const uint32_t grid = rows < kMaxGrid ? rows : kMaxGrid;
    LLMKV_LAUNCH(dequant_f16_kernel<T>, grid, kThreads, 0, stream)
    (static_cast<const uint8_t *>(packed), row_bytes, rows, cols, out, first_bad, index_base);
    return cudaGetLastError();
}

template <TensorType T>
__global__ void __launch_bounds__(kThreads)
    gather_decoded_kernel(const uint8_t *__restrict__ packed, size_t row_bytes,
                          const int32_t *__restrict__ ids, uint32_t cols, float *__restrict__ out) {
    const uint8_t *row = packed + size_t(ids[blockIdx.x]) * row_bytes;
    float *dst = out + size_t(blockIdx.x) * cols;
    for (uint32_t c = threadIdx.x; c < cols; c += kThreads) dst[c] = dq::decode_at<T>(row, c);
}

}  // namespace

bool dequant_type_supported(uint32_t type) {
    switch (type) {
#define LLMKV_DQ_CASE(name) case uint32_t(TensorType::name):
        LLMKV_DQ_TYPES(LLMKV_DQ_CASE)
#undef LLMKV_DQ_CASE
        return true;
        default:
            return false;
    }
}

size_t dequant_row_bytes(uint32_t type, uint64_t cols) {
    switch (type) {
#define LLMKV_DQ_CASE(name)                                                      \
    case uint32_t(TensorType::name): {                                           \
        using F = dq::Format<TensorType::name>;                                  \
        return cols % F::kElems == 0 ? size_t(cols / F::kElems) * F::kBytes : 0; \
    }
        LLMKV_DQ_TYPES(LLMKV_DQ_CASE)
#undef LLMKV_DQ_CASE
        default:
            return 0;
    }
}

cudaError_t launch_dequant_f16(uint32_t type, const void *packed, size_t row_bytes, uint32_t rows,
                               uint32_t cols, uint16_t *out, unsigned long long *first_bad,
                               unsigned long long index_base, cudaStream_t stream) {
    if (rows == 0 || cols == 0) return cudaSuccess;
    switch (type) {
#define LLMKV_DQ_CASE(name)                                                                        \
    case uint32_t(TensorType::name):                                                               \
        return launch<TensorType::name>(packed, row_bytes, rows, cols, out, first_bad, index_base, \
                                        stream);
        LLMKV_DQ_TYPES(LLMKV_DQ_CASE)
#undef LLMKV_DQ_CASE
        default:
            return cudaErrorInvalidValue;
    }
}

cudaError_t launch_gather_decoded_rows(uint32_t type, const void *packed, size_t row_bytes,
                                       const int32_t *ids, uint32_t n, uint32_t cols, float *out,
                                       cudaStream_t stream) {
    if (n == 0 || cols == 0) return cudaSuccess;
    switch (type) {
#define LLMKV_DQ_CASE(name)                                                           \
    case uint32_t(TensorType::name):                                                  \
        LLMKV_LAUNCH(gather_decoded_kernel<TensorType::name>, n, kThreads, 0, stream) \
        (static_cast<const uint8_t *>(packed), row_bytes, ids, cols, out);            \
        return cudaGetLastError();
        LLMKV_DQ_TYPES(LLMKV_DQ_CASE)
#undef LLMKV_DQ_CASE
        default:
            return cudaErrorInvalidValue;
    }
}

}  // namespace llmkv::cuda
