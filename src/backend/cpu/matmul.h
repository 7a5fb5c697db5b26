// CPU matrix multiplication over weights kept in their GGUF encoding (F32, F16, BF16, Q8_0,
// Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4, Q2_K..Q6_K): Y = X * W^T, threaded over output rows;
// AVX-512 VNNI and AVX2 kernels with a portable fallback. Results are deterministic: Y[t][r]
// depends only on row r of W and row t of X, and the AVX-512 kernels give the same bits as the AVX2
// ones.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/thread_pool.h"
#include "tensor/tensor_type.h"
#include "tensor/weights.h"

namespace llmkv::cpu {

// A weight matrix as stored (tensor/weights.h).
using WeightMatrix = llmkv::WeightMatrix;

// Reusable buffer for the quantized activations of a call. It only grows (to the largest
// n_tokens * cols seen), so steady-state calls do not allocate. One scratch per caller: a
// scratch must not be used by two matmul calls at the same time.
class MatmulScratch {
public:
    MatmulScratch() = default;
    MatmulScratch(const MatmulScratch &) = delete;
    MatmulScratch &operator=(const MatmulScratch &) = delete;
    MatmulScratch(MatmulScratch &&) = default;
    MatmulScratch &operator=(MatmulScratch &&) = default;

    // Returns a 64-byte aligned buffer of at least `bytes` bytes (contents unspecified).
    uint8_t *reserve(size_t bytes);
    size_t capacity() const { return capacity_; }
    // A second buffer, for weights packed on the fly (matmul of a packed type whose
    // WeightMatrix has no packed copy: tests, one-off calls).
    uint8_t *reserve_packed(size_t bytes);

private:
    struct Free {
        void operator()(uint8_t *p) const;
    };
    static void grow(std::unique_ptr<uint8_t, Free> &buf, size_t &capacity, size_t bytes);
    std::unique_ptr<uint8_t, Free> buf_;
    size_t capacity_ = 0;
    std::unique_ptr<uint8_t, Free> packed_;
    size_t packed_capacity_ = 0;
};

// Y (n_tokens, rows) = X (n_tokens, cols) * W^T. X is row-major f32 with row stride ldx
// (elements), Y row-major with row stride ldy. For the quantized types cols must be a
// multiple of the block (32, or 256 for the k-quants); every row of X is quantized once per call to
// q8 blocks of 32 and the dot products are integer ones. Q4_0, Q4_1 and Q8_0 are read from w.packed
// (matmul_packed.h), or packed into the scratch first when w.packed is null (a full copy per call:
// give long-lived matrices a PackedWeights). Throws llmkv::Error on unsupported types or bad
// shapes.
void matmul(const WeightMatrix &w, const float *x, int64_t ldx, int64_t n_tokens, float *y,
            int64_t ldy, ThreadPool &pool, MatmulScratch &scratch);

// Naive reference for tests: dequantizes each weight row to f32 and dots it with the
// (unquantized) X row in double precision. Single-threaded.
void matmul_reference(const WeightMatrix &w, const float *x, int64_t ldx, int64_t n_tokens,
                      float *y, int64_t ldy);

// Decodes n elements (a multiple of the type's block size) to f32. The result is exactly the
// GGUF definition evaluated in f32 (q4_1: nibble * d + m rounded after each operation).
void dequantize_row(TensorType type, const void *src, float *dst, int64_t n);

// "avx512", "avx2" or "portable": the kernel family that matmul() uses now.
const char *matmul_kernel_name();
// What snapshots record as the CPU kernels (Backend::kernel_id): the family and the revision of
// the arithmetic for a model's weight types ("avx512-r3"). Revision 2: Q4_0 / Q4_1 / Q8_0 on
// packed weights (matmul_packed.h), which changed their results; revision 3: Q5_0 / Q5_1 / Q4_K
// / Q5_K / Q6_K packed too; revision 4: Q3_K packed; revision 5: Q2_K and IQ4_NL packed (MXFP4,
// new, since). A model's revision is the highest of its matrices' (matmul_revision), so a model
// without the later types keeps "-r2" or "-r3": its results did not change. KV written by an
// earlier revision is not bitwise what this build computes, so its snapshots are refused unless
// loaded with "any kernel".
std::string matmul_kernel_id(int revision);
// The revision that last changed matmul()'s results for weights of this type (2 to 5).
constexpr int matmul_revision(TensorType type) {
    switch (type) {
        case TensorType::Q2_K:
        case TensorType::IQ4_NL:
        case TensorType::MXFP4:  // (packed from its first version)
            return 5;
        case TensorType::Q3_K:
            return 4;
        case TensorType::Q5_0:
        case TensorType::Q5_1:
        case TensorType::Q4_K:
        case TensorType::Q5_K:
        case TensorType::Q6_K:
            return 3;
        default:
            return 2;
    }
}

// Kernel family selection. kAuto (the default) uses AVX-512 when cpu_has_avx512_vnni(), else
// AVX2 when cpu_has_avx2() (LLMKV_CPU_FEATURES=avx2 / =portable cap it, see cpu_features.h).
// kAvx512 runs the quantized types on the AVX-512 VNNI kernels and the float types on AVX2;
// its results are bitwise those of kAvx2.
enum class MatmulKernel { kAuto, kPortable, kAvx2, kAvx512 };

// Test/benchmark hook: forces a kernel family for later calls (process-wide). Returns false,
// changing nothing, when kAvx2 or kAvx512 is requested but the CPU lacks it (the environment
// cap does not apply here). Not meant to be changed while other threads are inside matmul().
bool set_matmul_kernel(MatmulKernel kernel);

// ---- internals shared by matmul.cpp, matmul_avx2.cpp and the packed kernels ------------------
namespace detail {

inline constexpr int64_t kQBlock = 32;

// Quantized activations of one X row with nb blocks, at `base`:
//   int8  qs[nb * 32]   q = nearbyint(x * (1 / d))  (f32 math, ties to even), clamped to -127..127
//   float d[nb]         d = max|x| / 127 over the block (f32 division)
//   int32 s[2 * nb]     s[2b] = sum(qs[b * 32 .. b * 32 + 15]), s[2b + 1] = sum(qs[b * 32 + 16 ..
//                       b * 32 + 31]) (exact); packed_act_terms (matmul_packed.h) then turns them
//                       into the packed kernels' per-block terms in place
// Rows are act_row_bytes(nb) apart.
inline size_t act_row_bytes(int64_t nb) {
    size_t bytes = size_t(nb) * (kQBlock + 4 + 8);
    return (bytes + 63) & ~size_t(63);
}
inline const int8_t *act_qs(const uint8_t *row) {
    return reinterpret_cast<const int8_t *>(row);
}
inline const float *act_d(const uint8_t *row, int64_t nb) {
    return reinterpret_cast<const float *>(row + nb * kQBlock);
}
inline const float *act_s(const uint8_t *row, int64_t nb) {
    return act_d(row, nb) + nb;
}

// (Every quantized weight type is read from packed weights: matmul_packed.h, which defines the
// arithmetic all kernel families compute bit for bit.)

// Everything a row-range kernel needs for one call.
struct MatmulJob {
    TensorType type;
    const uint8_t *w;  // weight row 0
    size_t row_bytes;
    int64_t rows;
    int64_t cols;
    int64_t n_tokens;
    const float *x;  // float weight types: X itself
    int64_t ldx;
    const uint8_t *act;  // quantized types: activation row 0
    size_t act_stride;   // bytes between activation rows
    float *y;
    int64_t ldy;
};

// Computes Y[t][r] for all tokens and rows r in [r0, r1).
void matmul_rows_portable(const MatmulJob &job, int64_t r0, int64_t r1);
void quantize_act_row_portable(const float *x, int64_t nb, uint8_t *dst);

#if defined(__x86_64__) || defined(__i386__)
#define LLMKV_MATMUL_HAVE_AVX2 1
// Defined in matmul_avx2.cpp; only called when cpu_has_avx2().
void matmul_rows_avx2(const MatmulJob &job, int64_t r0, int64_t r1);
void quantize_act_row_avx2(const float *x, int64_t nb, uint8_t *dst);
void dequantize_row_avx2(TensorType type, const void *src, float *dst, int64_t n);
#endif

}  // namespace detail

}  // namespace llmkv::cpu
