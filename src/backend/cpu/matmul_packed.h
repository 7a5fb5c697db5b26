// Packed weights for Q4_0, Q4_1 and Q8_0: the layout the CPU kernels read for these types, made
// once when the backend loads the weights (CpuBackend::load_weights), and the arithmetic that
// every kernel family (portable, AVX2, AVX-512 VNNI) computes on it, bit for bit.
//
// Layout. Rows are taken 16 at a time ("row group"; the last group is padded with zero rows).
// A group stores its 32-element blocks in order, each as one "group block":
//   f16 d[16]            the 16 rows' scales                       (32 bytes)
//   f16 m[16]            Q4_1 only: the rows' mins                 (32 bytes)
//   codes                Q4: 4 vectors of 64 bytes; vector k holds, for row j, the GGUF bytes
//                        qs[4k .. 4k + 3] at bytes 4j .. 4j + 3, so its low nibbles are the
//                        row's elements 4k .. 4k + 3 and its high nibbles elements
//                        16 + 4k .. 16 + 4k + 3.  Q8_0: 8 vectors of 64 bytes, vector k holding
//                        row j's codes 4k .. 4k + 3 at bytes 4j .. 4j + 3 as unsigned w + 128
//                        (the operand vpdpbusd takes; AVX2 flips them back to signed).
// Group g's block b is at g * nb * group_block_bytes + b * group_block_bytes. Packed and GGUF
// sizes are equal (Q4_0 288 = 16 x 18 bytes per group block, Q4_1 320, Q8_0 544) up to the
// padding of the last group.
//
// One 64-byte code vector is a 16 x 4 tile (16 rows, 4 consecutive elements): one AVX-512
// vpdpbusd multiplies it by 4 broadcast activation codes and adds 16 four-element dot products
// to 16 int32 sums; the AVX2 kernels read its two 32-byte halves (rows 0-7, 8-15). A block of a
// row group is 8 such steps for every token, and the float work (scale, fma) happens once per
// block per output, instead of once per 4 elements as in the lane formats (matmul.h).
//
// Arithmetic ("packed block formats"). For output (row r, token t), with activation codes x
// and scales d_x from the q8 quantizer (matmul.h, codes in -127..127), y starts at +0.0f and
// for each block b in order
//   I   = sum_k w_k x_k                      exact int32 (w: Q4_0 nibble - 8, Q4_1 nibble,
//                                            Q8_0 the int8 code); |I| < 2^24
//   y   = fma(d_w * d_x, float(I), y)        d_w * d_x rounded once to f32
//   y   = fma(m_w, xs, y)                    Q4_1 only; xs = d_x * float(sum_k x_k), rounded
// and Y[t][r] = y. The integer sum is exact however a kernel groups it, so kernels are free in
// how they split it; the float steps are the same everywhere. Results depend only on row r and
// token t: not on the batch, the thread count or the kernel family.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/thread_pool.h"
#include "model/tensor_type.h"
#include "model/weights.h"

namespace llmkv::cpu {

// Whether matmul() reads `type` from packed weights.
constexpr bool is_packed_type(TensorType type) {
    return type == TensorType::Q4_0 || type == TensorType::Q4_1 || type == TensorType::Q8_0;
}

inline constexpr int64_t kPackRows = 16;

// Bytes of one group block (see above).
constexpr size_t packed_group_block_bytes(TensorType type) {
    return type == TensorType::Q4_0 ? 288 : type == TensorType::Q4_1 ? 320 : 544;
}

// Byte offset of the code vectors inside a group block (after d, and m for Q4_1).
constexpr size_t packed_codes_offset(TensorType type) { return type == TensorType::Q4_1 ? 64 : 32; }

// First element, within the 32-element block, of code vector k's four codes (k < 8; the Q4
// vectors k and k + 4 are the low and high nibbles of the same 64 bytes).
constexpr int packed_elem_of(TensorType type, int k) {
    return type == TensorType::Q8_0 ? 4 * k : k < 4 ? 4 * k : 16 + 4 * (k - 4);
}

// Bytes of the packed copy of an is_packed_type matrix.
size_t packed_bytes(const WeightMatrix &w);

// Writes the packed copy of w (an is_packed_type matrix with cols % 32 == 0) to dst, which has
// packed_bytes(w) bytes. Threaded over row groups when a pool is given.
void pack_weights(const WeightMatrix &w, uint8_t *dst, ThreadPool *pool = nullptr);

// An owned, 64-byte aligned packed copy.
class PackedWeights {
public:
    PackedWeights() = default;
    explicit PackedWeights(const WeightMatrix &w, ThreadPool *pool = nullptr);
    const uint8_t *data() const { return buf_.get(); }
    size_t bytes() const { return bytes_; }

private:
    struct Free {
        void operator()(uint8_t *p) const;
    };
    std::unique_ptr<uint8_t, Free> buf_;
    size_t bytes_ = 0;
};

namespace detail {

struct MatmulJob;

// Per-block activation term of the packed kernels, in the activation record's s region
// (matmul.h: act_s), one value per block: Q4_0 the int32 -8 * S_b, Q8_0 the int32 -128 * S_b
// (S_b the sum of the block's codes; the SIMD kernels start their unsigned-code dot products
// there), Q4_1 the float xs_b = d_b * float(S_b).
void packed_act_terms(TensorType type, uint8_t *act, size_t act_stride, int64_t n_tokens,
                      int64_t nb);

// Y[t][r] for all tokens and rows r in [r0, r1), r0 a multiple of kPackRows; job.w is the
// packed copy.
void packed_rows_portable(const MatmulJob &job, int64_t r0, int64_t r1);
#if defined(__x86_64__) || defined(__i386__)
void packed_rows_avx2(const MatmulJob &job, int64_t r0, int64_t r1);
void packed_rows_avx512(const MatmulJob &job, int64_t r0, int64_t r1);
#endif

}  // namespace detail

}  // namespace llmkv::cpu
