// Packed weights for every quantized weight type (Q4_0, Q4_1, Q8_0, Q5_0, Q5_1, IQ4_NL, MXFP4,
// Q2_K, Q3_K, Q4_K, Q5_K and Q6_K): the layout the CPU kernels read for these types, made once when
// the backend loads the weights (CpuBackend::load_weights), and the arithmetic that every kernel
// family (portable, AVX2, AVX-512 VNNI) computes on it, bit for bit.
//
// Layout. Rows are taken 16 at a time ("row group"; the last group is padded with zero rows).
// A group stores its 32-element blocks in order, each as one "group block". The k-quants
// (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) first store, for every super-block of 256 elements (8 blocks),
// a super-block header with the rows' super-block scales, followed by its 8 group blocks:
//   Q4_0   d[16] f16 | codes (4 x 64, nibbles)                                     288 bytes
//   IQ4_NL as Q4_0 (the nibbles are indices into kIq4nlValues)                      288
//   MXFP4  e[16] u16 (the E8M0 byte, zero-extended) | codes as IQ4_NL's (indices into
//          kMxfp4Values)                                                            288
//   Q4_1   d[16] f16 | m[16] f16 | codes (4 x 64, nibbles)                         320
//   Q8_0   d[16] f16 | codes (8 x 64, bytes w + 128)                               544
//   Q5_0   d[16] f16 | codes (4 x 64, nibbles) | high bits (64)                    352
//   Q5_1   d[16] f16 | m[16] f16 | codes (4 x 64, nibbles) | high bits (64)        384
//   Q4_K   header d[16] f16, dminneg[16] f16 (64, per super-block); block:
//          sc[16] u8 | m[16] u8 | codes (4 x 64, nibbles)                          288
//   Q5_K   as Q4_K, then high bits (64)                                            352
//   Q6_K   header d[16] f16 (32, per super-block); block:
//          sc[16] i8 (elements 0-15) | sc[16] i8 (16-31) | codes (4 x 64, nibbles)
//          | high bits (2 x 64)                                                    416
//   Q3_K   header d[16] f16 (32, per super-block); block:
//          sc[16] i8 (elements 0-15) | sc[16] i8 (16-31) | low bits (2 x 64)
//          | high bits (64)                                                        224
//   Q2_K   header d[16] f16, dminneg[16] f16 (64, per super-block); block:
//          sc[16] u8 | m[16] u8 | low bits (2 x 64)                                160
// (dminneg is the GGUF dmin with its sign flipped, exactly; sc / m of Q4_K and Q5_K are the 6-bit
// scale and min of the block's sub-block, of Q6_K the int8 scales of its two halves, of Q3_K its
// two halves' 6-bit scales minus 32, of Q2_K the 4-bit scales (sc) and mins (m) of its two halves,
// elements 0-15 in the low nibble and 16-31 in the high one.) A code vector
// of 64 bytes holds four consecutive elements of each of the 16 rows: row j at bytes
// 4j .. 4j + 3. Nibble vector k (k < 4) holds elements 4k .. 4k + 3 in its low nibbles and
// 16 + 4k .. 16 + 4k + 3 in its high nibbles, so "code vector k" for k = 0..7 always means
// elements 4k .. 4k + 3 of the block (Q8_0: 8 byte vectors, same numbering). The unsigned code
// u of element 4k + e of row j is
//   Q4_0, Q4_1, Q4_K   the nibble                                        0..15
//   IQ4_NL             kIq4nlValues[nibble] + 128 (the level + 128)      1..241
//   MXFP4              kMxfp4Values[nibble] + 128                        116..140
//   Q8_0               the byte, the int8 code + 128                     0..255
//   Q5_0, Q5_1, Q5_K   nibble | bit k of high byte 4j + e, as bit 4      0..31
//   Q6_K               nibble | bits 2(k % 4), 2(k % 4) + 1 of byte 4j + e of high vector k / 4,
//                      as bits 4-5                                       0..63
//   Q3_K               bits 2(k % 4), 2(k % 4) + 1 of byte 4j + e of low vector k / 4
//                      | bit k of high byte 4j + e, as bit 2             0..7
//   Q2_K               bits 2(k % 4), 2(k % 4) + 1 of byte 4j + e of low vector k / 4   0..3
// Group g's block b is at g * group_bytes + (b / U) * (H + U * gbb) + H + (b % U) * gbb
// (U = 8 blocks per super-block and H its header size for the k-quants, U = 1 and H = 0
// otherwise; group_bytes = nb / U * (H + U * gbb)). Packed and GGUF sizes are equal (Q2_K: 1,344
// bytes per group super-block) for all but Q4_K, Q5_K and Q3_K (2,368 vs 2,304, 2,880 vs 2,816
// and 1,824 vs 1,760 bytes per group super-block: the unpacked 6-bit scales), up to the padding
// of the last group.
//
// One 64-byte code vector is a 16 x 4 tile (16 rows, 4 consecutive elements): one AVX-512
// vpdpbusd multiplies it by 4 broadcast activation codes and adds 16 four-element dot products
// to 16 int32 sums; the AVX2 kernels read its two 32-byte halves (rows 0-7, 8-15). A block of a
// row group is 8 such steps for every token, and the float work (scale, fma) happens once per
// block per output, instead of once per 4 elements as in the per-row "lane" kernels these
// replaced.
//
// Arithmetic ("packed block formats"). For output (row r, token t), with activation codes x
// and scales d_x from the q8 quantizer (matmul.h, codes in -127..127), y starts at +0.0f and
// for each block b in order
//   I   = sum_k w_k x_k                      exact int32, w_k the signed weight code:
//                                            Q4_0 u - 8, Q4_1, Q5_1 u, Q8_0, IQ4_NL, MXFP4 u - 128,
//                                            Q5_0 u - 16, Q4_K, Q5_K u; Q6_K, Q3_K, Q2_K: I = sc_lo
//                                            * J_lo + sc_hi * J_hi, J the sums of (u_k - o) x_k (o
//                                            = 32, 4, 0) over the halves k < 16 and k >= 16; |I| <
//                                            2^24
//   y   = fma(D * d_x, float(I), y)          D * d_x rounded once to f32; D = d_w, except
//                                            Q4_K, Q5_K: D = float(sc) * d (exact in f32);
//                                            MXFP4: D = 2^(e - 128) (mxfp4_scale_bits)
//   y   = fma(M, xs, y)                      Q4_1, Q5_1 (M = m_w), Q4_K, Q5_K (M = float(m) *
//                                            dminneg, exact) only; xs = d_x *
//                                            float(sum_k x_k), rounded
//   y   = fma(dminneg * d_x, float(Im), y)   Q2_K only: Im = m_lo * S_lo + m_hi * S_hi, S the
//                                            sums of x_k over the halves (exact, |Im| < 2^17);
//                                            dminneg * d_x rounded once
// and Y[t][r] = y. The integer sums are exact however a kernel groups them, so kernels are free
// in how they split them; the float steps are the same everywhere. Results depend only on row
// r and token t: not on the batch, the thread count or the kernel family.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>

#include "common/thread_pool.h"
#include "tensor/tensor_type.h"
#include "tensor/weights.h"

namespace llmkv::cpu {

// Whether matmul() reads `type` from packed weights.
constexpr bool is_packed_type(TensorType type) {
    switch (type) {
        case TensorType::Q4_0:
        case TensorType::Q4_1:
        case TensorType::Q8_0:
        case TensorType::Q5_0:
        case TensorType::Q5_1:
        case TensorType::IQ4_NL:
        case TensorType::MXFP4:
        case TensorType::Q2_K:
        case TensorType::Q3_K:
        case TensorType::Q4_K:
        case TensorType::Q5_K:
        case TensorType::Q6_K:
            return true;
        default:
            return false;
    }
}

// Calls f(std::integral_constant<TensorType, T>{}) with T = type, for the kernels' per-type
// templates; type must be is_packed_type.
template <class F>
void visit_packed_type(TensorType type, F &&f) {
    switch (type) {
        case TensorType::Q4_0:
            return f(std::integral_constant<TensorType, TensorType::Q4_0>{});
        case TensorType::Q4_1:
            return f(std::integral_constant<TensorType, TensorType::Q4_1>{});
        case TensorType::Q5_0:
            return f(std::integral_constant<TensorType, TensorType::Q5_0>{});
        case TensorType::Q5_1:
            return f(std::integral_constant<TensorType, TensorType::Q5_1>{});
        case TensorType::IQ4_NL:
            return f(std::integral_constant<TensorType, TensorType::IQ4_NL>{});
        case TensorType::MXFP4:
            return f(std::integral_constant<TensorType, TensorType::MXFP4>{});
        case TensorType::Q2_K:
            return f(std::integral_constant<TensorType, TensorType::Q2_K>{});
        case TensorType::Q3_K:
            return f(std::integral_constant<TensorType, TensorType::Q3_K>{});
        case TensorType::Q4_K:
            return f(std::integral_constant<TensorType, TensorType::Q4_K>{});
        case TensorType::Q5_K:
            return f(std::integral_constant<TensorType, TensorType::Q5_K>{});
        case TensorType::Q6_K:
            return f(std::integral_constant<TensorType, TensorType::Q6_K>{});
        default:
            return f(std::integral_constant<TensorType, TensorType::Q8_0>{});
    }
}

inline constexpr int64_t kPackRows = 16;

// Bytes of one group block (see above).
constexpr size_t packed_group_block_bytes(TensorType type) {
    switch (type) {
        case TensorType::Q4_0:
        case TensorType::IQ4_NL:
        case TensorType::MXFP4:
        case TensorType::Q4_K:
            return 288;
        case TensorType::Q4_1:
            return 320;
        case TensorType::Q5_0:
        case TensorType::Q5_K:
            return 352;
        case TensorType::Q5_1:
            return 384;
        case TensorType::Q6_K:
            return 416;
        case TensorType::Q3_K:
            return 224;
        case TensorType::Q2_K:
            return 160;
        default:
            return 544;
    }
}

// 32-element blocks per super-block (8 for the k-quants, else 1) and the super-block header's
// bytes (0 without one).
constexpr int packed_unit_blocks(TensorType type) {
    return tensor_type_is_k_quant(type) ? 8 : 1;
}
constexpr size_t packed_header_bytes(TensorType type) {
    return type == TensorType::Q4_K || type == TensorType::Q5_K || type == TensorType::Q2_K ? 64
           : type == TensorType::Q6_K || type == TensorType::Q3_K                           ? 32
                                                                                            : 0;
}
constexpr size_t packed_unit_bytes(TensorType type) {
    return packed_header_bytes(type) +
           size_t(packed_unit_blocks(type)) * packed_group_block_bytes(type);
}
// Bytes of one row group of a matrix with nb 32-element blocks per row.
constexpr size_t packed_group_bytes(TensorType type, int64_t nb) {
    return size_t(nb / packed_unit_blocks(type)) * packed_unit_bytes(type);
}
// Offset of block b inside its row group, and of the header of b's super-block.
constexpr size_t packed_block_offset(TensorType type, int64_t b) {
    const int u = packed_unit_blocks(type);
    return size_t(b / u) * packed_unit_bytes(type) + packed_header_bytes(type) +
           size_t(b % u) * packed_group_block_bytes(type);
}
constexpr size_t packed_header_offset(TensorType type, int64_t b) {
    return size_t(b / packed_unit_blocks(type)) * packed_unit_bytes(type);
}

// Byte offset of the code vectors inside a group block (after d, m or the scales).
constexpr size_t packed_codes_offset(TensorType type) {
    return type == TensorType::Q4_1 || type == TensorType::Q5_1 ? 64 : 32;
}
// Byte offset of the high-bit vectors (Q5_0, Q5_1, Q5_K, Q6_K, Q3_K): after the 4 nibble vectors,
// or Q3_K's 2 low-bit vectors.
constexpr size_t packed_high_offset(TensorType type) {
    return packed_codes_offset(type) + (type == TensorType::Q3_K ? 2 : 4) * 64;
}
// Whether the codes have one high bit (Q5_0, Q5_1, Q5_K; Q6_K has two).
constexpr bool packed_has_high_bit(TensorType type) {
    return type == TensorType::Q5_0 || type == TensorType::Q5_1 || type == TensorType::Q5_K;
}
// Whether each block stores the rows' f16 mins after their scales (Q4_1, Q5_1).
constexpr bool packed_has_f16_min(TensorType type) {
    return type == TensorType::Q4_1 || type == TensorType::Q5_1;
}
// Whether the nibbles index a table of levels (IQ4_NL, MXFP4) and the table.
constexpr bool packed_has_levels(TensorType type) {
    return type == TensorType::IQ4_NL || type == TensorType::MXFP4;
}
constexpr const int8_t *packed_levels(TensorType type) {
    return type == TensorType::MXFP4 ? kMxfp4Values : kIq4nlValues;
}
// Whether each block's D is an E8M0 exponent byte (MXFP4) instead of f16.
constexpr bool packed_has_e8m0_scales(TensorType type) {
    return type == TensorType::MXFP4;
}
// Whether the codes are nibble vectors (all but Q8_0, Q3_K and Q2_K; IQ4_NL's and MXFP4's map
// to levels).
constexpr bool packed_has_nibbles(TensorType type) {
    return type != TensorType::Q8_0 && type != TensorType::Q3_K && type != TensorType::Q2_K;
}
// Whether the codes are 2-bit vectors (Q3_K, which adds one high bit, and Q2_K).
constexpr bool packed_has_crumbs(TensorType type) {
    return type == TensorType::Q3_K || type == TensorType::Q2_K;
}
// Whether every block carries two scales per row, one per 16-element half, that multiply the
// halves' exact sums (Q6_K, Q3_K: int8 bytes; Q2_K: the two nibbles of one byte).
constexpr bool packed_has_half_scales(TensorType type) {
    return type == TensorType::Q6_K || type == TensorType::Q3_K || type == TensorType::Q2_K;
}
// Whether every block carries two 4-bit mins per row, one per half, for the min step of Q2_K
// (y = fma(dminneg * d_x, float(Im), y)); the activation record then holds the halves' sums.
constexpr bool packed_has_half_mins(TensorType type) {
    return type == TensorType::Q2_K;
}
// The offset o that turns the unsigned code into the signed weight code (w = u - o).
constexpr int packed_code_offset(TensorType type) {
    switch (type) {
        case TensorType::Q4_0:
            return 8;
        case TensorType::Q8_0:
        case TensorType::IQ4_NL:
        case TensorType::MXFP4:
            return 128;
        case TensorType::Q5_0:
            return 16;
        case TensorType::Q6_K:
            return 32;
        case TensorType::Q3_K:
            return 4;
        default:
            return 0;
    }
}
// Whether the type has the min step y = fma(M, xs, y) (Q2_K's is packed_has_half_mins).
constexpr bool packed_has_min(TensorType type) {
    return type == TensorType::Q4_1 || type == TensorType::Q5_1 || type == TensorType::Q4_K ||
           type == TensorType::Q5_K;
}

// First element, within the 32-element block, of code vector k's four codes (k < 8).
constexpr int packed_elem_of(TensorType, int k) {
    return 4 * k;
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

// Per-block activation terms of the packed kernels, in the activation record's s region
// (matmul.h: act_s), two 4-byte values per block b at s[2b], s[2b + 1]: with S_b the sum of
// the block's codes, Q4_0 / Q8_0 / Q5_0 / IQ4_NL / MXFP4 the int32 -o * S_b (o =
// packed_code_offset: the SIMD kernels start their unsigned-code dot products there) and 0; Q4_1 /
// Q4_K / Q5_K the float xs_b = d_b * float(S_b) and 0; Q6_K / Q3_K the int32 -o * (sum of codes
// 0-15) and -o * (sum of codes 16-31); Q2_K the int32 sums of codes 0-15 and 16-31 (its codes need
// no offset; the sums feed the min step). `row` is one activation record of nb blocks as the
// quantizers leave it (s holding each block's two half sums, matmul.h); the terms replace the sums
// in place.
void packed_act_terms(TensorType type, uint8_t *row, int64_t nb);

// Y[t][r] for all tokens and rows r in [r0, r1), r0 a multiple of kPackRows; job.w is the
// packed copy.
void packed_rows_portable(const MatmulJob &job, int64_t r0, int64_t r1);
#if defined(__x86_64__) || defined(__i386__)
void packed_rows_avx2(const MatmulJob &job, int64_t r0, int64_t r1);
void packed_rows_avx512(const MatmulJob &job, int64_t r0, int64_t r1);
#endif

}  // namespace detail

}  // namespace llmkv::cpu
