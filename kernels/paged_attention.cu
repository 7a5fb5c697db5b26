// Paged attention (decode and prefill chunks), split over context partitions.
//
// Layouts:
//   q        f32 [n_rows][q_stride]; query head h at columns [h*D, h*D + D), RoPE applied.
//   pool     sealed blocks [n_blocks][sealed_block_bytes] (kv_layout.cuh), heads in the codecs
//            of src/kv/codec.h; K of (layer l, kv head h) at sealed_k_offset(l, h). An id past
//            the pool names a block of the host tier (host_blocks, mapped pinned memory, the
//            same layout) read in place: only the layer's K/V rows cross the bus.
//   window   fp16 per span: K [H][win_cap][D] then V [H][win_cap][D] (step.cuh); row r holds
//            position win_start + r.
//   out      f32 or fp16 [n_rows][out_stride], head h at columns [h*D, h*D + D).
//   workspace  m, l f32 [entries][2], then acc f32 [entries][D]; entry = item_local *
//            n_heads + head, item = one partition of one row (row r's items are
//            [row_parts[r], row_parts[r + 1]), partition p = item - row_parts[r]).
//
// Semantics (cpu::paged_attention): the query at position p reads sealed_blocks(p) sealed
// blocks in their codec and positions [sealed_blocks(p) * B, p] from the fp16 window; with a
// sliding window W only positions [lo, p], lo = max(0, p + 1 - W), and no sealed block wholly
// before lo is read (a partition before lo is an empty partial); with layer groups the
// blocks of the layer's group are read (block table entry [token block][layer_group]); with
// the KV sink, a sealed position 0 is read from the tail slot's fp16 sink row instead (its
// sealed copy weighs 0; the row is attended after the sealed part, in the unrotated domain);
// rotated K codecs score against H q, rotated V codecs accumulate in the rotated domain and
// H is applied once to the sealed part of the sum.
//
// Work split: one CTA of 128 threads per (work item = partition of 256 positions of one
// query row, kv head, chunk of up to GMAX query heads of that kv head's group): a row has
// position / 256 + 1 items, so a batch mixing one long row with short ones launches what each
// row needs (not every row at the longest row's count). Inside the CTA a "row group" of
// `lanes` lanes (lanes = next power of two >= D/8, 8 consecutive dims per lane) reads one
// K/V row at a time, so one read of a block serves every query head of the group (GQA).
// Each row group keeps an online softmax (m, l, acc) per head; the CTA merges its row
// groups in a fixed order and writes one partial result per head; a second kernel merges
// the partitions in order. Partition size and merge order are fixed, so results are
// deterministic and independent of the batch composition and chunking (cuBLAS GEMMs
// elsewhere in the forward are not: see kernels/README.md).
#include <math.h>

#include "device_math.cuh"
#include "launch.cuh"
#include "paged_attention.cuh"

namespace llmkv::cuda {

namespace {

constexpr uint32_t kThreads = 128;

// N 32-bit words from p (p 2-byte aligned; 4 * N-byte aligned when `aligned`).
template <int N>
__device__ __forceinline__ void load_words(const uint8_t *p, bool aligned, uint32_t (&w)[N]) {
    if (aligned) {
        if constexpr (N == 4) {
            const uint4 u = __ldg(reinterpret_cast<const uint4 *>(p));
            w[0] = u.x, w[1] = u.y, w[2] = u.z, w[3] = u.w;
        } else if constexpr (N == 2) {
            const uint2 u = __ldg(reinterpret_cast<const uint2 *>(p));
            w[0] = u.x, w[1] = u.y;
        } else {
            w[0] = __ldg(reinterpret_cast<const unsigned int *>(p));
        }
    } else {
        const uint16_t *s = reinterpret_cast<const uint16_t *>(p);
#pragma unroll
        for (int i = 0; i < N; ++i) w[i] = uint32_t(s[2 * i]) | (uint32_t(s[2 * i + 1]) << 16);
    }
}

__device__ __forceinline__ void unpack_16bit(const uint32_t (&w)[4], bool bf16, float (&x)[8]) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const uint16_t lo = uint16_t(w[j] & 0xffffu), hi = uint16_t(w[j] >> 16);
        x[2 * j] = bf16 ? bf16_bits_to_f32(lo) : fp16_bits_to_f32(lo);
        x[2 * j + 1] = bf16 ? bf16_bits_to_f32(hi) : fp16_bits_to_f32(hi);
    }
}

// Dims [d0, d0 + 8) of token ti of a sealed head in codec C, as raw values x and a per-token
// scale s (value = s * x) for the 16-bit / 8-bit codecs. int4 is handled by the callers.
template <uint32_t C>
__device__ __forceinline__ void load_scaled_row(const uint8_t *head, uint32_t ti, uint32_t d0,
                                                uint32_t B, uint32_t D, bool aligned, float (&x)[8],
                                                float &s) {
    if constexpr (C == kF16 || C == kBF16) {
        uint32_t w[4];
        load_words<4>(head + (size_t(ti) * D + d0) * 2, aligned, w);
        unpack_16bit(w, C == kBF16, x);
        s = 1.0f;
    } else {
        uint32_t w[2];
        load_words<2>(head + size_t(ti) * D + d0, aligned, w);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const uint32_t b = (w[j / 4] >> (8 * (j % 4))) & 0xffu;
            x[j] = C == kFP8 ? fp8_e4m3_to_f32(b) : float(int8_t(uint8_t(b)));
        }
        s = load_fp16(head + size_t(B) * D + size_t(ti) * 2);
    }
}

__device__ __forceinline__ void load_nibbles(const uint8_t *head, uint32_t ti, uint32_t d0,
                                             uint32_t D, bool aligned, float (&x)[8]) {
    uint32_t w[1];
    load_words<1>(head + (size_t(ti) * D + d0) / 2, aligned, w);
#pragma unroll
    for (int j = 0; j < 8; ++j) x[j] = float((w[0] >> (4 * j)) & 0xfu);
}

// One K/V row for every head of the chunk: score, online softmax, accumulate. All lanes of
// the warp call it (the dot product is reduced over the row group); `valid` says whether
// the row exists; v = vs * x + vz.
template <uint32_t GMAX>
__device__ __forceinline__ void attend_row(const float (&q)[GMAX][8], const float (&k)[8], float ks,
                                           const float (&v)[8], float vs, float vz, bool valid,
                                           uint32_t nh, uint32_t lanes, float scale,
                                           float (&m)[GMAX], float (&l)[GMAX],
                                           float (&acc)[GMAX][8]) {
#pragma unroll
    for (uint32_t h = 0; h < GMAX; ++h) {
        if (h >= nh) break;  // uniform over the CTA
        float dot = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; ++j) dot = fmaf(q[h][j], k[j], dot);
        dot = group_sum(dot, lanes);
        if (valid) {
            const float s = dot * ks * scale;
            float corr, p;
            if (s > m[h]) {
                corr = expf(m[h] - s);
                p = 1.0f;
                m[h] = s;
            } else {
                corr = 1.0f;
                p = expf(s - m[h]);
            }
            l[h] = l[h] * corr + p;
            const float pw = p * vs, pz = p * vz;
#pragma unroll
            for (int j = 0; j < 8; ++j) acc[h][j] = fmaf(acc[h][j], corr, fmaf(pw, v[j], pz));
        }
    }
}

struct LaunchShape {
    uint32_t row_begin, row_end;  // rows of this launch
    uint32_t item_begin;          // row_parts[row_begin]
    uint32_t lanes;
    uint32_t head_chunks;
    size_t entries_cap;  // workspace entries (each D + 2 floats)
    bool aligned;
    float hadamard_scale;
};

// Minimum CTAs per SM in __launch_bounds__: 0 leaves the register budget to ptxas. int4 K
// keeps 16 more floats per lane (the cached block's per-channel scale and min); left alone,
// ptxas for sm_90 (nvcc 13.0) caps int4-K/16-bit-V at GMAX 4 at 128 registers and spills
// 4 bytes; 1 lets it take the ~150 it needs (3 CTAs per SM, like int4 K with the other V
// codecs). sm_80/86/89 do not spill there and keep ptxas's choice. tools/cuda-resources.sh
// checks that no attention kernel spills.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
constexpr bool kInt4KeyMinCtas = true;
#else
constexpr bool kInt4KeyMinCtas = false;
#endif
template <uint32_t KC>
constexpr unsigned kPartitionMinCtas = (KC == kINT4 && kInt4KeyMinCtas) ? 1u : 0u;

template <uint32_t KC, uint32_t VC, uint32_t GMAX>
__global__ void __launch_bounds__(kThreads, kPartitionMinCtas<KC>)
    attention_partition_kernel(const AttentionArgs a, const LaunchShape sh) {
    LLMKV_DYNAMIC_SHARED(float, smem);
    const KvGeometry &g = a.g;
    const uint32_t D = g.head_dim, B = g.block_tokens;
    const uint32_t item = sh.item_begin + blockIdx.x;
    // One load (a binary search over row_parts here costs registers: ptxas spilled).
    const uint32_t row = __ldg(a.item_row + item), part = item - __ldg(a.row_parts + row);
    const uint32_t kvh = blockIdx.y / sh.head_chunks, chunk = blockIdx.y % sh.head_chunks;
    const StepSpan sp = a.spans[a.row_span[row]];
    const uint32_t pos = sp.pos0 + (row - sp.row0);
    const uint32_t n_ctx = pos + 1;
    const uint32_t group = a.n_heads / g.n_kv_heads;
    const uint32_t h_first = kvh * group + chunk * GMAX;
    const uint32_t nh = min(GMAX, group - chunk * GMAX);
    float *ws_ml = a.workspace;                        // f32 [entries_cap][2]
    float *ws_acc = a.workspace + 2 * sh.entries_cap;  // f32 [entries_cap][D]
    const size_t entry0 = size_t(blockIdx.x) * a.n_heads + h_first;

    // Visible positions [lo, pos]: a sliding window starts at lo, and no position (no sealed
    // block) before it is read.
    const uint32_t lo =
        a.sliding_window != 0 && n_ctx > a.sliding_window ? n_ctx - a.sliding_window : 0u;
    const uint32_t t0 = max(part * kAttentionPartitionTokens, lo);
    if (t0 >= n_ctx || t0 >= (part + 1) * kAttentionPartitionTokens) {
        // nothing to read in this partition: an empty partial
        if (threadIdx.x < nh) {
            ws_ml[(entry0 + threadIdx.x) * 2] = -INFINITY;
            ws_ml[(entry0 + threadIdx.x) * 2 + 1] = 0.0f;
        }
        return;
    }
    const uint32_t t1 = min((part + 1) * kAttentionPartitionTokens, n_ctx);
    const uint32_t S = g.sealed_blocks(pos) * B;  // positions < S are read from sealed blocks
    const uint32_t lanes = sh.lanes;
    const uint32_t r = threadIdx.x % lanes, grp = threadIdx.x / lanes, n_groups = kThreads / lanes;
    const uint32_t d0 = r * 8;
    const bool active = d0 < D;

    float q[GMAX][8], acc[GMAX][8], m[GMAX], l[GMAX];
#pragma unroll
    for (uint32_t h = 0; h < GMAX; ++h) {
        m[h] = -INFINITY;
        l[h] = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[h][j] = 0.0f;
    }
    const float *q_row = a.q + size_t(row) * a.q_stride + size_t(h_first) * D + d0;
    auto load_q = [&](bool rotate) {
#pragma unroll
        for (uint32_t h = 0; h < GMAX; ++h) {
#pragma unroll
            for (int j = 0; j < 8; ++j)
                q[h][j] = (h < nh && active) ? q_row[size_t(h) * D + j] : 0.0f;
            if (rotate && h < nh) group_hadamard(q[h], lanes, sh.hadamard_scale);
        }
    };

    // Sealed part: positions [t0, min(t1, S)); with the sink, position 0 comes after it.
    const uint32_t seal_end = min(t1, S);
    if (t0 < seal_end) {
        const bool sink_here = g.sink && t0 == 0;
        load_q(g.rotate_k);
        const size_t block_bytes = g.sealed_block_bytes();
        const size_t k_off = g.sealed_k_offset(a.layer, kvh),
                     v_off = g.sealed_v_offset(a.layer, kvh);
        const uint32_t *ids = a.block_ids + sp.blocks_offset;
        const uint32_t n_groups_kv = g.n_groups, layer_group = g.layer_group(a.layer);
        uint32_t cached_block = 0xffffffffu;
        float k_scale[8], k_min[8];  // int4 K: per-channel parameters of cached_block
#pragma unroll
        for (int j = 0; j < 8; ++j) k_scale[j] = k_min[j] = 0.0f;
        for (uint32_t base = t0; base < seal_end; base += n_groups) {
            const uint32_t t = base + grp;
            const bool valid = t < seal_end && !(sink_here && t == 0);
            float k[8], v[8], ks = 1.0f, vs = 0.0f, vz = 0.0f;
#pragma unroll
            for (int j = 0; j < 8; ++j) k[j] = v[j] = 0.0f;
            if (valid && active) {
                const uint32_t blk = t / B, ti = t % B;
                const uint32_t id = ids[blk * n_groups_kv + layer_group];
                const uint8_t *block = id < a.n_pool_blocks ? a.pool + size_t(id) * block_bytes
                                                            : a.host_blocks[id - a.n_pool_blocks];
                const uint8_t *kh = block + k_off;
                const uint8_t *vh = block + v_off;
                if constexpr (KC == kINT4) {
                    if (blk != cached_block) {
                        const uint8_t *sc = kh + size_t(B) * D / 2 + size_t(d0) * 2;
                        const uint8_t *mn = sc + size_t(D) * 2;
#pragma unroll
                        for (int j = 0; j < 8; ++j) {
                            k_scale[j] = load_fp16(sc + 2 * j);
                            k_min[j] = load_fp16(mn + 2 * j);
                        }
                        cached_block = blk;
                    }
                    load_nibbles(kh, ti, d0, D, sh.aligned, k);
#pragma unroll
                    for (int j = 0; j < 8; ++j) k[j] = fmaf(k_scale[j], k[j], k_min[j]);
                } else {
                    load_scaled_row<KC>(kh, ti, d0, B, D, sh.aligned, k, ks);
                }
                if constexpr (VC == kINT4) {
                    const uint32_t G = int4_v_group(D), ng = D / G;
                    const size_t gi = size_t(ti) * ng + d0 / G;
                    const uint8_t *sc = vh + size_t(B) * D / 2;
                    vs = load_fp16(sc + gi * 2);
                    vz = load_fp16(sc + size_t(B) * ng * 2 + gi * 2);
                    load_nibbles(vh, ti, d0, D, sh.aligned, v);
                } else {
                    load_scaled_row<VC>(vh, ti, d0, B, D, sh.aligned, v, vs);
                }
            }
            attend_row<GMAX>(q, k, ks, v, vs, vz, valid, nh, lanes, a.scale, m, l, acc);
        }
        if (g.rotate_v) {  // back from the rotated V domain (H^T = H), once for the sealed sum
#pragma unroll
            for (uint32_t h = 0; h < GMAX; ++h) {
                if (h < nh) group_hadamard(acc[h], lanes, sh.hadamard_scale);
            }
        }
        if (sink_here) {  // position 0 from the sink row (fp16), by the first row group
            if (g.rotate_k) load_q(false);
            float k[8], v[8];
#pragma unroll
            for (int j = 0; j < 8; ++j) k[j] = v[j] = 0.0f;
            const bool mine = grp == 0;
            if (mine && active) {
                const uint8_t *slot = a.tails + size_t(sp.tail_slot) * g.tail_block_bytes();
                uint32_t w[4];
                load_words<4>(slot + g.tail_sink_k_offset(a.layer, kvh) + size_t(d0) * 2, true, w);
                unpack_16bit(w, false, k);
                load_words<4>(slot + g.tail_sink_v_offset(a.layer, kvh) + size_t(d0) * 2, true, w);
                unpack_16bit(w, false, v);
            }
            attend_row<GMAX>(q, k, 1.0f, v, 1.0f, 0.0f, mine, nh, lanes, a.scale, m, l, acc);
        }
    }

    // Window part: positions [max(t0, S), t1), fp16.
    const uint32_t w_begin = max(t0, S);
    if (w_begin < t1) {
        load_q(false);
        const size_t head_rows = size_t(kvh) * sp.win_cap;
        const uint16_t *wk = a.window + sp.win_offset;
        const uint16_t *wv = wk + size_t(g.n_kv_heads) * sp.win_cap * D;
        for (uint32_t base = w_begin; base < t1; base += n_groups) {
            const uint32_t t = base + grp;
            const bool valid = t < t1;
            float k[8], v[8];
#pragma unroll
            for (int j = 0; j < 8; ++j) k[j] = v[j] = 0.0f;
            if (valid && active) {
                const size_t off = (head_rows + (t - sp.win_start)) * D + d0;  // 16-byte aligned
                uint32_t w[4];
                load_words<4>(reinterpret_cast<const uint8_t *>(wk + off), true, w);
                unpack_16bit(w, false, k);
                load_words<4>(reinterpret_cast<const uint8_t *>(wv + off), true, w);
                unpack_16bit(w, false, v);
            }
            attend_row<GMAX>(q, k, 1.0f, v, 1.0f, 0.0f, valid, nh, lanes, a.scale, m, l, acc);
        }
    }

    // Merge the row groups in order: shared m, l f32 [n_groups][GMAX], acc f32 [n_groups][GMAX][D].
    float *sm_m = smem;
    float *sm_l = sm_m + n_groups * GMAX;
    float *sm_acc = sm_l + n_groups * GMAX;
#pragma unroll
    for (uint32_t h = 0; h < GMAX; ++h) {
        if (h >= nh) break;
        if (r == 0) {
            sm_m[grp * GMAX + h] = m[h];
            sm_l[grp * GMAX + h] = l[h];
        }
        if (active) {
#pragma unroll
            for (int j = 0; j < 8; ++j) sm_acc[(size_t(grp) * GMAX + h) * D + d0 + j] = acc[h][j];
        }
    }
    __syncthreads();
    for (uint32_t idx = threadIdx.x; idx < nh * D; idx += kThreads) {
        const uint32_t h = idx / D, d = idx % D;
        float M = -INFINITY;
        for (uint32_t gi = 0; gi < n_groups; ++gi) M = fmaxf(M, sm_m[gi * GMAX + h]);
        float A = 0.0f, L = 0.0f;
        for (uint32_t gi = 0; gi < n_groups; ++gi) {
            const float mg = sm_m[gi * GMAX + h];
            if (mg == -INFINITY) continue;
            const float f = expf(mg - M);
            A = fmaf(sm_acc[(size_t(gi) * GMAX + h) * D + d], f, A);
            L = fmaf(sm_l[gi * GMAX + h], f, L);
        }
        const size_t entry = entry0 + h;
        ws_acc[entry * D + d] = A;
        if (d == 0) {
            ws_ml[entry * 2] = M;
            ws_ml[entry * 2 + 1] = L;
        }
    }
}

__global__ void item_rows_kernel(const uint32_t *__restrict__ row_parts,
                                 uint32_t *__restrict__ item_row) {
    const uint32_t r = blockIdx.x;
    for (uint32_t i = row_parts[r] + threadIdx.x; i < row_parts[r + 1]; i += blockDim.x)
        item_row[i] = r;
}

// One CTA per (row, head), one thread per dim: merges the row's partitions in order (entry
// of partition p: (row_parts[row] - item_begin + p) * n_heads + h).
__global__ void attention_merge_kernel(const AttentionArgs a, const LaunchShape sh) {
    const uint32_t D = a.g.head_dim;
    const uint32_t d = threadIdx.x;
    if (d >= D) return;
    const uint32_t row = sh.row_begin + blockIdx.x, h = blockIdx.y;
    const uint32_t n_parts = a.row_parts[row + 1] - a.row_parts[row];
    const size_t first = a.row_parts[row] - sh.item_begin;
    const float *ws_ml = a.workspace;
    const float *ws_acc = a.workspace + 2 * sh.entries_cap;
    auto entry = [&](uint32_t p) { return (first + p) * a.n_heads + h; };
    float M = -INFINITY;
    for (uint32_t p = 0; p < n_parts; ++p) {
        if (ws_ml[entry(p) * 2 + 1] > 0.0f) M = fmaxf(M, ws_ml[entry(p) * 2]);
    }
    // A learned sink joins the maximum and the denominator, weighing no value.
    const float sink = a.sinks ? a.sinks[h] : -INFINITY;
    M = fmaxf(M, sink);
    float A = 0.0f, L = 0.0f;
    for (uint32_t p = 0; p < n_parts; ++p) {
        const float lp = ws_ml[entry(p) * 2 + 1];
        if (!(lp > 0.0f)) continue;
        const float f = expf(ws_ml[entry(p) * 2] - M);
        A = fmaf(ws_acc[entry(p) * D + d], f, A);
        L = fmaf(lp, f, L);
    }
    if (a.sinks) L += expf(sink - M);
    const float o = A / L;
    const size_t at = size_t(row) * a.out_stride + size_t(h) * D + d;
    if (a.out_f32) {
        a.out_f32[at] = o;
    } else {
        a.out_f16[at] = f32_to_fp16_bits(o);
    }
}

using PartitionKernel = void (*)(const AttentionArgs, const LaunchShape);

template <uint32_t KC, uint32_t VC>
PartitionKernel pick_gmax(bool wide) {
    return wide ? attention_partition_kernel<KC, VC, 8> : attention_partition_kernel<KC, VC, 4>;
}

template <uint32_t KC>
PartitionKernel pick_v(uint32_t vc, bool wide) {
    switch (vc) {
        case kF16:
            return pick_gmax<KC, kF16>(wide);
        case kBF16:
            return pick_gmax<KC, kBF16>(wide);
        case kFP8:
            return pick_gmax<KC, kFP8>(wide);
        case kINT8:
            return pick_gmax<KC, kINT8>(wide);
        case kINT4:
            return pick_gmax<KC, kINT4>(wide);
        default:
            return nullptr;
    }
}

PartitionKernel pick_kernel(uint32_t kc, uint32_t vc, bool wide) {
    switch (kc) {
        case kF16:
            return pick_v<kF16>(vc, wide);
        case kBF16:
            return pick_v<kBF16>(vc, wide);
        case kFP8:
            return pick_v<kFP8>(vc, wide);
        case kINT8:
            return pick_v<kINT8>(vc, wide);
        case kINT4:
            return pick_v<kINT4>(vc, wide);
        default:
            return nullptr;
    }
}

uint32_t n_partitions(uint32_t max_context) {
    return max_context == 0
               ? 1u
               : (max_context + kAttentionPartitionTokens - 1) / kAttentionPartitionTokens;
}

}  // namespace

size_t attention_min_workspace(uint32_t n_heads, uint32_t head_dim, uint32_t max_context) {
    return size_t(n_heads) * n_partitions(max_context) * (size_t(head_dim) + 2) * sizeof(float);
}

bool attention_partition_plan(const int32_t *position, uint32_t n_rows, uint32_t *base) {
    uint64_t sum = 0;
    base[0] = 0;
    for (uint32_t r = 0; r < n_rows; ++r) {
        sum += n_partitions(uint32_t(position[r]) + 1);
        if (sum > 0xffffffffull) return false;
        base[r + 1] = uint32_t(sum);
    }
    return true;
}

cudaError_t launch_attention_item_rows(const uint32_t *row_parts, uint32_t n_rows,
                                       uint32_t *item_row, cudaStream_t stream) {
    if (n_rows == 0) return cudaSuccess;
    LLMKV_LAUNCH(item_rows_kernel, n_rows, 128, 0, stream)(row_parts, item_row);
    return cudaGetLastError();
}

cudaError_t launch_paged_attention(const AttentionArgs &a, cudaStream_t stream) {
    if (a.n_rows == 0) return cudaSuccess;
    const KvGeometry &g = a.g;
    if (kv_layout_unsupported(g) || a.n_heads == 0 || a.n_heads % g.n_kv_heads != 0 ||
        (g.sink && a.tails == nullptr))
        return cudaErrorInvalidValue;
    if ((a.out_f32 == nullptr) == (a.out_f16 == nullptr) || a.workspace == nullptr ||
        a.row_parts == nullptr || a.row_parts_host == nullptr || a.item_row == nullptr)
        return cudaErrorInvalidValue;
    const uint32_t D = g.head_dim;
    uint32_t lanes = 1;
    while (lanes * 8 < D) lanes *= 2;  // D <= 256: lanes <= 32
    const uint32_t group = a.n_heads / g.n_kv_heads;
    const bool wide = group > 4;
    const uint32_t gmax = wide ? 8 : 4;
    const uint32_t head_chunks = (group + gmax - 1) / gmax;
    if (size_t(g.n_kv_heads) * head_chunks > 65535) return cudaErrorInvalidValue;
    PartitionKernel kernel = pick_kernel(g.dtype_k, g.dtype_v, wide);
    if (!kernel) return cudaErrorInvalidValue;

    LaunchShape sh{};
    sh.lanes = lanes;
    sh.head_chunks = head_chunks;
    sh.entries_cap = a.workspace_bytes / ((size_t(D) + 2) * sizeof(float));
    sh.aligned = kv_vector_aligned(g) && (reinterpret_cast<uintptr_t>(a.pool) % 16 == 0);
    sh.hadamard_scale = float(1.0 / sqrt(double(D)));
    const size_t smem = size_t(kThreads / lanes) * gmax * (size_t(D) + 2) * sizeof(float);
    const uint32_t merge_threads = (D + 31) / 32 * 32;
    const uint32_t *base = a.row_parts_host;

    // Launches over row ranges whose items fit the workspace (n_heads entries per item).
    const size_t items_cap = sh.entries_cap / a.n_heads;
    uint32_t row_begin = 0;
    while (row_begin < a.n_rows) {
        uint32_t row_end = row_begin;
        while (row_end < a.n_rows && row_end - row_begin < 65535 &&
               size_t(base[row_end + 1] - base[row_begin]) <= items_cap)
            ++row_end;
        if (row_end == row_begin) return cudaErrorInvalidValue;  // one row does not fit
        sh.row_begin = row_begin;
        sh.row_end = row_end;
        sh.item_begin = base[row_begin];
        const uint32_t items = base[row_end] - base[row_begin];
        LLMKV_LAUNCH(kernel, dim3(items, g.n_kv_heads * head_chunks), kThreads, smem, stream)
        (a, sh);
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) return e;
        LLMKV_LAUNCH(attention_merge_kernel, dim3(row_end - row_begin, a.n_heads), merge_threads, 0,
                     stream)
        (a, sh);
        e = cudaGetLastError();
        if (e != cudaSuccess) return e;
        row_begin = row_end;
    }
    return cudaSuccess;
}

}  // namespace llmkv::cuda
