// CPU matmul: argument checks, kernel-family dispatch (AVX-512 VNNI, AVX2, portable),
// threading over output rows, the portable scalar kernels (same integer math as the SIMD ones)
// and the double-precision reference used by the tests.
#include "backend/cpu/matmul.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstring>
#include <new>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/matmul_packed.h"
#include "common/error.h"
#include "common/float_math.h"
#include "common/half.h"

namespace llmkv::cpu {

using detail::kQBlock;
using detail::MatmulJob;

// ---- scratch ---------------------------------------------------------------------------------

void MatmulScratch::Free::operator()(uint8_t *p) const {
    ::operator delete(p, std::align_val_t(64));
}

void MatmulScratch::grow(std::unique_ptr<uint8_t, Free> &buf, size_t &capacity, size_t bytes) {
    if (bytes > capacity || !buf) {
        size_t cap = std::max<size_t>(bytes, 4096);
        cap = std::max(cap, capacity + capacity / 2);  // geometric growth
        cap = (cap + 63) & ~size_t(63);
        buf.reset();
        capacity = 0;
        buf.reset(static_cast<uint8_t *>(::operator new(cap, std::align_val_t(64))));
        capacity = cap;
    }
}

uint8_t *MatmulScratch::reserve(size_t bytes) {
    grow(buf_, capacity_, bytes);
    return buf_.get();
}

uint8_t *MatmulScratch::reserve_packed(size_t bytes) {
    grow(packed_, packed_capacity_, bytes);
    return packed_.get();
}

// ---- kernel family selection -------------------------------------------------------------------

namespace {

std::atomic<int> g_kernel{int(MatmulKernel::kAuto)};

// The family matmul() runs now: never kAuto.
MatmulKernel active_family() {
#if defined(LLMKV_MATMUL_HAVE_AVX2)
    const MatmulKernel k = MatmulKernel(g_kernel.load(std::memory_order_relaxed));
    if (k != MatmulKernel::kAuto) return k;  // only settable when available
    if (cpu_has_avx512_vnni()) return MatmulKernel::kAvx512;
    if (cpu_has_avx2()) return MatmulKernel::kAvx2;
#endif
    return MatmulKernel::kPortable;
}

// Whether the CPU could run a family at all (the LLMKV_CPU_FEATURES cap aside).
bool family_available(MatmulKernel kernel) {
#if defined(LLMKV_MATMUL_HAVE_AVX2)
    const CpuFeatures &f = cpu_features();
    const bool avx2 = f.avx2 && f.fma && f.f16c;
    switch (kernel) {
        case MatmulKernel::kAuto:
        case MatmulKernel::kPortable:
            return true;
        case MatmulKernel::kAvx2:
            return avx2;
        case MatmulKernel::kAvx512:
            return avx2 && f.avx512_vnni;
    }
    return false;
#else
    return kernel == MatmulKernel::kAuto || kernel == MatmulKernel::kPortable;
#endif
}

}  // namespace

bool set_matmul_kernel(MatmulKernel kernel) {
    if (!family_available(kernel)) return false;
    g_kernel.store(int(kernel), std::memory_order_relaxed);
    return true;
}

const char *matmul_kernel_name() {
    switch (active_family()) {
        case MatmulKernel::kAvx512:
            return "avx512";
        case MatmulKernel::kAvx2:
            return "avx2";
        default:
            return "portable";
    }
}

std::string matmul_kernel_id(int revision) {
    return std::string(matmul_kernel_name()) + "-r" + std::to_string(revision);
}

// ---- portable kernels --------------------------------------------------------------------------

namespace detail {

namespace {

inline uint16_t load_u16(const uint8_t *p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
}

// fp16 -> fp32 without branches: the 15 exponent+mantissa bits placed at the top of an f32
// mantissa give the value scaled by 2^-112 (subnormals included, exactly), so one multiply
// by 2^112 restores it; Inf/NaN (exponent 31) are rebuilt directly. Same bits as
// fp16_to_fp32 for all 65536 inputs.
inline float f16_to_f32_fast(uint16_t h) {
    const uint32_t em = h & 0x7fffu;
    uint32_t bits = em << 13;
    float f;
    std::memcpy(&f, &bits, 4);
    f *= 0x1p112f;
    std::memcpy(&bits, &f, 4);
    if (em >= 0x7c00u) bits = 0x7f800000u | ((em & 0x3ffu) << 13);
    bits |= uint32_t(h & 0x8000u) << 16;
    std::memcpy(&f, &bits, 4);
    return f;
}

template <TensorType kType>
inline float load_weight(const uint8_t *w, int64_t i) {
    if constexpr (kType == TensorType::F32) {
        float v;
        std::memcpy(&v, w + i * 4, 4);
        return v;
    } else if constexpr (kType == TensorType::F16) {
        return f16_to_f32_fast(load_u16(w + i * 2));
    } else {
        return bf16_to_fp32(load_u16(w + i * 2));
    }
}

// Eight interleaved partial sums (i mod 8), combined pairwise, then the tail in order.
template <TensorType kType>
__attribute__((noinline)) float dot_float(const uint8_t *w, const float *x, int64_t n) {
    float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const int64_t n8 = n & ~int64_t(7);
    for (int64_t i = 0; i < n8; i += 8) {
        for (int j = 0; j < 8; ++j) part[j] += load_weight<kType>(w, i + j) * x[i + j];
    }
    float acc =
        ((part[0] + part[4]) + (part[2] + part[6])) + ((part[1] + part[5]) + (part[3] + part[7]));
    for (int64_t i = n8; i < n; ++i) acc += load_weight<kType>(w, i) * x[i];
    return acc;
}

constexpr int64_t kTokenGroup = 64;  // tokens whose activations are reused per weight pass
constexpr int64_t kRowBlock = 16;    // weight rows kept hot in L1 while tokens loop

template <typename Dot>
void rows_loop(const MatmulJob &job, int64_t r0, int64_t r1, Dot &&dot) {
    for (int64_t tg = 0; tg < job.n_tokens; tg += kTokenGroup) {
        const int64_t tg_end = std::min(job.n_tokens, tg + kTokenGroup);
        for (int64_t rb = r0; rb < r1; rb += kRowBlock) {
            const int64_t rb_end = std::min(r1, rb + kRowBlock);
            for (int64_t t = tg; t < tg_end; ++t) {
                float *yt = job.y + t * job.ldy;
                for (int64_t r = rb; r < rb_end; ++r) {
                    yt[r] = dot(job.w + size_t(r) * job.row_bytes, t);
                }
            }
        }
    }
}

}  // namespace

void matmul_rows_portable(const MatmulJob &job, int64_t r0, int64_t r1) {
    auto xrow = [&](int64_t t) { return job.x + t * job.ldx; };
    if (is_packed_type(job.type))
        return packed_rows_portable(job, r0, r1);  // job.w: the packed copy
    switch (job.type) {
        case TensorType::F32:
            rows_loop(job, r0, r1, [&](const uint8_t *w, int64_t t) {
                return dot_float<TensorType::F32>(w, xrow(t), job.cols);
            });
            return;
        case TensorType::F16:
            rows_loop(job, r0, r1, [&](const uint8_t *w, int64_t t) {
                return dot_float<TensorType::F16>(w, xrow(t), job.cols);
            });
            return;
        case TensorType::BF16:
            rows_loop(job, r0, r1, [&](const uint8_t *w, int64_t t) {
                return dot_float<TensorType::BF16>(w, xrow(t), job.cols);
            });
            return;
        default:
            return;  // Q8_K: not a weight type (tensor_type_supported)
    }
}

void quantize_act_row_portable(const float *x, int64_t nb, uint8_t *dst) {
    int8_t *qs = reinterpret_cast<int8_t *>(dst);
    float *d = reinterpret_cast<float *>(dst + nb * kQBlock);
    uint8_t *s = dst + nb * (kQBlock + 4);
    // The same bits as quantize_act_row_avx2 for every input, NaN, Inf and subnormal scales
    // included (the kernel families agree bitwise only if their codes do): max
    // in the AVX2 reduction order with maxps' NaN rule, and the conversion's saturation.
    auto maxps = [](float a, float b) { return a > b ? a : b; };
    for (int64_t b = 0; b < nb; ++b) {
        const float *xb = x + b * kQBlock;
        float m8[8];
        for (int i = 0; i < 8; ++i) {
            m8[i] = maxps(maxps(std::fabs(xb[i]), std::fabs(xb[i + 8])),
                          maxps(std::fabs(xb[i + 16]), std::fabs(xb[i + 24])));
        }
        float m4[4];
        for (int i = 0; i < 4; ++i) m4[i] = maxps(m8[i], m8[i + 4]);
        const float m2_0 = maxps(m4[0], m4[2]), m2_1 = maxps(m4[1], m4[3]);
        const float amax = maxps(m2_0, m2_1);
        const float db = amax / 127.0f;
        const float id = db != 0.0f ? 1.0f / db : 0.0f;
        int32_t half[2] = {0, 0};
        for (int i = 0; i < 32; ++i) {
            const float v = std::nearbyint(xb[i] * id);
            // cvtps2dq gives INT32_MIN for NaN and out-of-range values; packs saturate to int8.
            const int32_t q32 = v >= -2147483648.0f && v < 2147483648.0f ? int32_t(v) : INT32_MIN;
            const int32_t q = std::clamp(q32, -127, 127);
            qs[b * kQBlock + i] = int8_t(q);
            half[i / 16] += q;
        }
        d[b] = db;
        std::memcpy(s + 8 * b, half, 8);
    }
}

}  // namespace detail

// ---- dispatch -----------------------------------------------------------------------------------

namespace {

using RowsFn = void (*)(const MatmulJob &, int64_t, int64_t);
using QuantFn = void (*)(const float *, int64_t, uint8_t *);

constexpr int64_t kRowGrain = 16;  // row chunks are multiples of this
// Row chunks per thread for the dynamic split. Few, long chunks stream best (measured: 2 beats
// 4 and 8 on the SmolLM2 decode set); more would balance better on a busy machine.
constexpr int64_t kChunksPerThread = 2;
// Calls streaming less than this run on the caller alone: a 192 x 576 Q4_1 matrix (69 KB, ~3 us)
// gains ~1 us from a second thread on an idle machine but loses 10+ us when the worker has to
// be woken on a busy one.
constexpr size_t kMinParallelBytes = 96 * 1024;
constexpr int64_t kMinParallelQuantElems = 16384;  // activation elements worth a dispatch

void check_args(const WeightMatrix &w, const float *x, int64_t ldx, int64_t n_tokens,
                const float *y, int64_t ldy, const char *what) {
    if (!tensor_type_supported(uint32_t(w.type))) {
        fail(LLMKV_ERR_UNSUPPORTED, "%s: weight type %u is not supported", what, unsigned(w.type));
    }
    if (w.rows < 0 || w.cols <= 0 || n_tokens < 0) {
        fail(LLMKV_ERR_INVALID_ARGUMENT, "%s: bad shape rows=%lld cols=%lld n_tokens=%lld", what,
             (long long)w.rows, (long long)w.cols, (long long)n_tokens);
    }
    const int64_t blk = tensor_type_block_elements(w.type);
    if (w.cols % blk != 0) {
        fail(LLMKV_ERR_INVALID_ARGUMENT, "%s: %s weights need cols %% %lld == 0, got cols=%lld",
             what, tensor_type_name(w.type), (long long)blk, (long long)w.cols);
    }
    const size_t need = size_t(w.cols / blk) * tensor_type_block_bytes(w.type);
    if (w.row_bytes < need) {
        fail(LLMKV_ERR_INVALID_ARGUMENT, "%s: row_bytes %zu < %zu needed for %lld %s values", what,
             w.row_bytes, need, (long long)w.cols, tensor_type_name(w.type));
    }
    if (w.rows == 0 || n_tokens == 0) return;
    if (!w.data || !x || !y) fail(LLMKV_ERR_INVALID_ARGUMENT, "%s: null pointer", what);
    if ((n_tokens > 1 && ldx < w.cols) || (n_tokens > 1 && ldy < w.rows)) {
        fail(LLMKV_ERR_INVALID_ARGUMENT, "%s: strides ldx=%lld ldy=%lld too small", what,
             (long long)ldx, (long long)ldy);
    }
}

// Splits [0, n) into ceil(n / grain) chunks, hands each worker a contiguous run of chunks.
inline void split(int64_t n, int64_t grain, unsigned t, unsigned nt, int64_t *b, int64_t *e) {
    const int64_t chunks = (n + grain - 1) / grain;
    const int64_t per = (chunks + nt - 1) / nt;
    *b = std::min(n, int64_t(t) * per * grain);
    *e = std::min(n, (int64_t(t) + 1) * per * grain);
}

}  // namespace

void matmul(const WeightMatrix &w, const float *x, int64_t ldx, int64_t n_tokens, float *y,
            int64_t ldy, ThreadPool &pool, MatmulScratch &scratch) {
    check_args(w, x, ldx, n_tokens, y, ldy, "matmul");
    if (w.rows == 0 || n_tokens == 0) return;

    const MatmulKernel family = active_family();
    RowsFn rows_fn = detail::matmul_rows_portable;
    QuantFn quant_fn = detail::quantize_act_row_portable;
#if defined(LLMKV_MATMUL_HAVE_AVX2)
    if (family != MatmulKernel::kPortable) {
        // Both SIMD families quantize activations with the AVX2 routine (the same codes as
        // the portable one) and run the float types on the AVX2 kernels.
        rows_fn = detail::matmul_rows_avx2;
        quant_fn = detail::quantize_act_row_avx2;
    }
#else
    (void)family;
#endif

    const bool packed = is_packed_type(w.type);
    if (packed) {
        switch (family) {
#if defined(LLMKV_MATMUL_HAVE_AVX2)
            case MatmulKernel::kAvx512:
                rows_fn = detail::packed_rows_avx512;
                break;
            case MatmulKernel::kAvx2:
                rows_fn = detail::packed_rows_avx2;
                break;
#endif
            default:
                rows_fn = detail::packed_rows_portable;
                break;
        }
    }

    MatmulJob job{};
    job.type = w.type;
    job.w = static_cast<const uint8_t *>(w.data);
    if (packed) {
        if (w.packed) {
            job.w = static_cast<const uint8_t *>(w.packed);
        } else {
            uint8_t *p = scratch.reserve_packed(packed_bytes(w));
            pack_weights(w, p, &pool);
            job.w = p;
        }
    }
    job.row_bytes = w.row_bytes;
    job.rows = w.rows;
    job.cols = w.cols;
    job.n_tokens = n_tokens;
    job.x = x;
    job.ldx = ldx;
    job.y = y;
    job.ldy = ldy;

    const unsigned nt = pool.size();
    if (packed) {
        const int64_t nb = w.cols / kQBlock;
        job.act_stride = detail::act_row_bytes(nb);
        uint8_t *act = scratch.reserve(job.act_stride * size_t(n_tokens));
        job.act = act;
        if (nt > 1 && n_tokens > 1 && n_tokens * w.cols >= kMinParallelQuantElems) {
            struct QuantCtx {
                QuantFn fn;
                TensorType type;
                const float *x;
                int64_t ldx, nb, n;
                uint8_t *act;
                size_t stride;
            } qc{quant_fn, w.type, x, ldx, nb, n_tokens, act, job.act_stride};
            pool.run([&qc](unsigned t, unsigned n_threads) {
                int64_t b, e;
                split(qc.n, 1, t, n_threads, &b, &e);
                for (int64_t i = b; i < e; ++i) {
                    uint8_t *row = qc.act + size_t(i) * qc.stride;
                    qc.fn(qc.x + i * qc.ldx, qc.nb, row);
                    detail::packed_act_terms(qc.type, row, qc.nb);
                }
            });
        } else {
            for (int64_t i = 0; i < n_tokens; ++i) {
                uint8_t *row = act + size_t(i) * job.act_stride;
                quant_fn(x + i * ldx, nb, row);
                detail::packed_act_terms(w.type, row, nb);
            }
        }
    }

    const size_t work = size_t(w.rows) * w.row_bytes * size_t(n_tokens);
    if (nt == 1 || w.rows <= kRowGrain || work < kMinParallelBytes) {
        rows_fn(job, 0, w.rows);
        return;
    }
    // Dynamic split: workers take chunks of rows from a shared counter, so a thread that is
    // descheduled or slower does not hold up the call. Which thread computes a row never
    // changes its value (each element is computed whole by one kernel call).
    int64_t chunk =
        (w.rows + int64_t(nt) * kChunksPerThread - 1) / (int64_t(nt) * kChunksPerThread);
    chunk = std::max(kRowGrain, (chunk + kRowGrain - 1) / kRowGrain * kRowGrain);
    struct alignas(64) RowsCtx {
        std::atomic<int64_t> next{0};
        RowsFn fn;
        const MatmulJob *job;
        int64_t rows, chunk;
    } rc;
    rc.fn = rows_fn;
    rc.job = &job;
    rc.rows = w.rows;
    rc.chunk = chunk;
    pool.run([&rc](unsigned, unsigned) {
        for (;;) {
            const int64_t b = rc.next.fetch_add(rc.chunk, std::memory_order_relaxed);
            if (b >= rc.rows) break;
            rc.fn(*rc.job, b, std::min(rc.rows, b + rc.chunk));
        }
    });
}

void dequantize_row(TensorType type, const void *src, float *dst, int64_t n) {
    if (!tensor_type_supported(uint32_t(type))) {
        fail(LLMKV_ERR_UNSUPPORTED, "dequantize_row: type %u is not supported", unsigned(type));
    }
    if (n % tensor_type_block_elements(type) != 0) {
        fail(LLMKV_ERR_INVALID_ARGUMENT, "dequantize_row: n=%lld is not a multiple of the %s block",
             (long long)n, tensor_type_name(type));
    }
#if defined(LLMKV_MATMUL_HAVE_AVX2)
    if (active_family() != MatmulKernel::kPortable) {
        detail::dequantize_row_avx2(type, src, dst, n);
        return;
    }
#endif
    dequantize_row_reference(type, src, dst, n);
}

void matmul_reference(const WeightMatrix &w, const float *x, int64_t ldx, int64_t n_tokens,
                      float *y, int64_t ldy) {
    check_args(w, x, ldx, n_tokens, y, ldy, "matmul_reference");
    std::vector<float> row(size_t(w.cols));
    for (int64_t r = 0; r < w.rows; ++r) {
        dequantize_row_reference(w.type,
                                 static_cast<const uint8_t *>(w.data) + size_t(r) * w.row_bytes,
                                 row.data(), w.cols);
        for (int64_t t = 0; t < n_tokens; ++t) {
            const float *xt = x + t * ldx;
            double acc = 0.0;
            for (int64_t k = 0; k < w.cols; ++k) acc += double(row[size_t(k)]) * double(xt[k]);
            y[t * ldy + r] = float(acc);
        }
    }
}

}  // namespace llmkv::cpu
