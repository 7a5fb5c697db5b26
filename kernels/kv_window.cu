// Window build / tail write-back. Layouts: tail slot (kv_layout.cuh) for each layer K
// [H][C'][D] fp16 then V [H][C'][D] (C' = B + R, one more with the KV sink, whose row the
// store of a span with pos0 == 0 writes); window per span K [H][win_cap][D] then V (step.cuh);
// K and V f32 rows [n_rows][ld_k] / [n_rows][ld_v]. Pure copies plus f32 -> fp16 (bit-exact port of
// the CPU's fp32_to_fp16), so windows and tails are bitwise identical to the CPU's. Grids:
// load/store: (n_spans, H, 2 = K/V) CTAs copying 16-byte vectors (D % 8 == 0, all row starts
// 16-byte aligned); append: one CTA per batch row.
#include "device_math.cuh"
#include "kv_window.cuh"
#include "launch.cuh"

namespace llmkv::cuda {

namespace {

constexpr uint32_t kThreads = 128;

// Copies `rows` rows of D fp16 (D % 8 == 0, 16-byte aligned) as uint4 vectors.
__device__ __forceinline__ void copy_rows(const uint16_t *src, uint16_t *dst, uint32_t rows,
                                          uint32_t D) {
    const uint32_t n_vec = rows * D / 8;
    const uint4 *s = reinterpret_cast<const uint4 *>(src);
    uint4 *d = reinterpret_cast<uint4 *>(dst);
    for (uint32_t i = threadIdx.x; i < n_vec; i += blockDim.x) d[i] = s[i];
}

__global__ void load_tail_kernel(KvGeometry g, uint32_t layer, const uint8_t *__restrict__ tails,
                                 const StepSpan *__restrict__ spans,
                                 uint16_t *__restrict__ window) {
    const StepSpan sp = spans[blockIdx.x];
    const uint32_t h = blockIdx.y, is_v = blockIdx.z;
    const uint32_t old_rows = sp.pos0 - sp.win_start;
    if (old_rows == 0) return;
    const uint8_t *tail = tails + size_t(sp.tail_slot) * g.tail_block_bytes() +
                          (is_v ? g.tail_v_offset(layer, h) : g.tail_k_offset(layer, h));
    uint16_t *dst =
        window + sp.win_offset + (size_t(is_v) * g.n_kv_heads + h) * sp.win_cap * g.head_dim;
    copy_rows(reinterpret_cast<const uint16_t *>(tail), dst, old_rows, g.head_dim);
}

__global__ void store_tail_kernel(KvGeometry g, uint32_t layer, const uint16_t *__restrict__ window,
                                  const StepSpan *__restrict__ spans, uint8_t *__restrict__ tails) {
    const StepSpan sp = spans[blockIdx.x];
    const uint32_t h = blockIdx.y, is_v = blockIdx.z;
    const uint32_t end = sp.pos0 + sp.n;
    const uint32_t tail_start = g.sealed_blocks(end) * g.block_tokens;
    uint8_t *slot = tails + size_t(sp.tail_slot) * g.tail_block_bytes();
    const uint16_t *head =
        window + sp.win_offset + (size_t(is_v) * g.n_kv_heads + h) * sp.win_cap * g.head_dim;
    // KV sink: the span that computes position 0 (window row 0) keeps it in the sink row.
    if (g.sink && sp.pos0 == 0) {
        copy_rows(head,
                  reinterpret_cast<uint16_t *>(slot + (is_v ? g.tail_sink_v_offset(layer, h)
                                                            : g.tail_sink_k_offset(layer, h))),
                  1, g.head_dim);
    }
    if (end <= tail_start) return;
    uint8_t *tail = slot + (is_v ? g.tail_v_offset(layer, h) : g.tail_k_offset(layer, h));
    const uint16_t *src = head + size_t(tail_start - sp.win_start) * g.head_dim;
    copy_rows(src, reinterpret_cast<uint16_t *>(tail), end - tail_start, g.head_dim);
}

__global__ void append_kernel(KvGeometry g, const float *__restrict__ k, uint32_t ld_k,
                              const float *__restrict__ v, uint32_t ld_v,
                              const uint32_t *__restrict__ row_span,
                              const StepSpan *__restrict__ spans, uint16_t *__restrict__ window) {
    const uint32_t row = blockIdx.x;
    const StepSpan sp = spans[row_span[row]];
    const uint32_t win_row = sp.pos0 + (row - sp.row0) - sp.win_start;
    const uint32_t width = g.n_kv_heads * g.head_dim;
    const float *src_k = k + size_t(row) * ld_k;
    const float *src_v = v + size_t(row) * ld_v;
    for (uint32_t i = threadIdx.x; i < 2 * width; i += blockDim.x) {
        const uint32_t is_v = i / width, hd = i % width, h = hd / g.head_dim, d = hd % g.head_dim;
        const float x = is_v ? src_v[hd] : src_k[hd];
        window[sp.win_offset +
               ((size_t(is_v) * g.n_kv_heads + h) * sp.win_cap + win_row) * g.head_dim + d] =
            f32_to_fp16_bits(x);
    }
}

}  // namespace

cudaError_t launch_window_load_tail(const KvGeometry &g, uint32_t layer, const uint8_t *tails,
                                    const StepSpan *spans, uint32_t n_spans, uint16_t *window,
                                    cudaStream_t stream) {
    if (n_spans == 0) return cudaSuccess;
    LLMKV_LAUNCH(load_tail_kernel, dim3(n_spans, g.n_kv_heads, 2), kThreads, 0, stream)
    (g, layer, tails, spans, window);
    return cudaGetLastError();
}

cudaError_t launch_window_append(const KvGeometry &g, const float *k, uint32_t ld_k, const float *v,
                                 uint32_t ld_v, const uint32_t *row_span, uint32_t n_rows,
                                 const StepSpan *spans, uint16_t *window, cudaStream_t stream) {
    if (n_rows == 0) return cudaSuccess;
    LLMKV_LAUNCH(append_kernel, n_rows, kThreads, 0, stream)
    (g, k, ld_k, v, ld_v, row_span, spans, window);
    return cudaGetLastError();
}

cudaError_t launch_window_store_tail(const KvGeometry &g, uint32_t layer, const uint16_t *window,
                                     const StepSpan *spans, uint32_t n_spans, uint8_t *tails,
                                     cudaStream_t stream) {
    if (n_spans == 0) return cudaSuccess;
    LLMKV_LAUNCH(store_tail_kernel, dim3(n_spans, g.n_kv_heads, 2), kThreads, 0, stream)
    (g, layer, window, spans, tails);
    return cudaGetLastError();
}

}  // namespace llmkv::cuda
