// Paged attention: the SIMD path against the double-precision reference (which decodes the
// sealed blocks, undoing rotation) over sealed blocks and fp16 windows at every fill level,
// for every K/V codec pair with and without Hadamard rotation; AVX2 vs portable kernels.
#include "backend/cpu/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>

#include "backend/cpu/attention_kernels.h"
#include "backend/cpu/cpu_features.h"
#include "common/half.h"
#include "kv/codec.h"

namespace llmkv {
namespace {

struct AttentionCase {
    CodecSpec k, v;
    uint32_t head_dim;
    uint32_t block_tokens = 4;
    uint32_t residual = 0;
    bool sink = false;     // KV sink: position 0 read from the tail's sink rows
    bool learned = false;  // learned attention sinks (gpt-oss), one logit per head
};

std::ostream &operator<<(std::ostream &os, const AttentionCase &c) {
    return os << codec_name(c.k.dtype) << (c.k.rotate ? "+rot" : "") << "/" << codec_name(c.v.dtype)
              << (c.v.rotate ? "+rot" : "") << " D" << c.head_dim << " B" << c.block_tokens << " R"
              << c.residual << (c.sink ? " sink" : "") << (c.learned ? " learned-sinks" : "");
}

// K-like rows: normal values plus two outlier channels with an offset.
void fill_rows(std::vector<uint16_t> &rows, uint32_t D, std::mt19937 &rng, bool outliers) {
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (size_t i = 0; i < rows.size(); ++i) {
        float x = dist(rng);
        if (outliers && i % D == 3) x = 6.0f * x + 10.0f;
        if (outliers && i % D == D / 2 + 1) x = -4.0f + 0.3f * x;
        rows[i] = fp32_to_fp16(x);
    }
}

class PagedAttention : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(PagedAttention, MatchesTheReferenceAtEveryFillLevel) {
    const AttentionCase ac = GetParam();
    KvGeometry g;
    g.n_layers = 2;
    g.n_kv_heads = 2;
    g.head_dim = ac.head_dim;
    g.block_tokens = ac.block_tokens;
    g.dtype_k = ac.k.dtype;
    g.dtype_v = ac.v.dtype;
    g.residual_tokens = ac.residual;
    g.sink = ac.sink;
    const cpu::AttentionCodecs codecs{ac.k, ac.v};
    KvCache cache(g, 32, 2);
    ThreadPool pool(2);
    cpu::AttentionScratch scratch;
    std::mt19937 rng(11);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    const uint32_t n_heads = 6, D = ac.head_dim, B = ac.block_tokens;

    for (uint32_t pos0 = 0; pos0 < 3 * B + 2 + ac.residual; ++pos0) {
        for (uint32_t n : {1u, 3u, 6u}) {
            SessionKv kv;
            ASSERT_TRUE(cache.reserve(kv, pos0 + n));
            // Sealed blocks before the window hold random encoded values.
            const uint32_t ws = g.sealed_blocks(pos0) * B;
            std::vector<uint16_t> rows(size_t(B) * D);
            for (uint32_t b = 0; b < g.sealed_blocks(pos0 + n); ++b) {
                for (uint32_t h = 0; h < g.n_kv_heads; ++h) {
                    fill_rows(rows, D, rng, true);
                    codec_encode_head(ac.k, KvRole::K, rows.data(), B, D,
                                      cache.sealed_data(kv.blocks[b]) + g.sealed_k_offset(1, h));
                    fill_rows(rows, D, rng, false);
                    codec_encode_head(ac.v, KvRole::V, rows.data(), B, D,
                                      cache.sealed_data(kv.blocks[b]) + g.sealed_v_offset(1, h));
                }
            }
            const uint32_t cap = pos0 - ws + n;
            std::vector<uint16_t> wk(size_t(g.n_kv_heads) * cap * D), wv(wk.size());
            fill_rows(wk, D, rng, true);
            fill_rows(wv, D, rng, false);
            std::vector<float> q(size_t(n) * n_heads * D);
            for (auto &x : q) x = dist(rng);
            std::vector<float> out(q.size()), ref(q.size());
            cpu::AttentionSpan span{&kv,  wk.data(), wv.data(), ws,        cap,
                                    pos0, n,         q.data(),  out.data()};
            if (ac.sink) {
                // Position 0's own K / V rows: values other than block 0's decoded copy.
                std::vector<uint16_t> row(D);
                for (uint32_t h = 0; h < g.n_kv_heads; ++h) {
                    fill_rows(row, D, rng, true);
                    std::memcpy(cache.tail_data(kv.tail) + g.tail_sink_k_offset(1, h), row.data(),
                                D * 2);
                    fill_rows(row, D, rng, false);
                    std::memcpy(cache.tail_data(kv.tail) + g.tail_sink_v_offset(1, h), row.data(),
                                D * 2);
                }
                span.sink = cache.tail_data(kv.tail);
            }
            cpu::AttentionParams params{1, n_heads, 1.0f / std::sqrt(float(D)), n_heads * D,
                                        n_heads * D};
            // Learned sinks from well below to well above the scores' range.
            const float learned[6] = {-3.0f, -0.5f, 0.0f, 1.25f, 2.5f, 6.0f};
            if (ac.learned) params.sinks = learned;
            cpu::paged_attention(cache, codecs, params, &span, 1, pool, scratch);
            span.out = ref.data();
            cpu::paged_attention_reference(cache, codecs, params, &span, 1);
            for (size_t i = 0; i < out.size(); ++i) {
                ASSERT_TRUE(std::isfinite(out[i]));
                ASSERT_NEAR(out[i], ref[i], 2e-5f * (1.0f + std::fabs(ref[i])))
                    << "pos0 " << pos0 << " n " << n << " i " << i;
            }
            if (ac.sink && g.sealed_blocks(pos0 + n - 1) > 0) {
                // The sink rows are read: without them the last query's output differs.
                std::vector<float> without(q.size());
                span.sink = nullptr;
                span.out = without.data();
                cpu::paged_attention(cache, codecs, params, &span, 1, pool, scratch);
                const size_t last = size_t(n - 1) * n_heads * D;
                bool differs = false;
                for (size_t i = last; i < out.size(); ++i)
                    differs |= std::fabs(out[i] - without[i]) > 1e-4f;
                EXPECT_TRUE(differs) << "pos0 " << pos0 << " n " << n;
            }
            cache.release(kv);
        }
    }
}

constexpr CodecSpec F16{LLMKV_KV_F16, false}, BF16{LLMKV_KV_BF16, false};
constexpr CodecSpec FP8{LLMKV_KV_FP8_E4M3, false}, FP8R{LLMKV_KV_FP8_E4M3, true};
constexpr CodecSpec I8{LLMKV_KV_INT8, false}, I8R{LLMKV_KV_INT8, true};
constexpr CodecSpec I4{LLMKV_KV_INT4, false}, I4R{LLMKV_KV_INT4, true};
constexpr CodecSpec I4C{LLMKV_KV_INT4_COMPACT, false}, I4CR{LLMKV_KV_INT4_COMPACT, true};

INSTANTIATE_TEST_SUITE_P(
    Codecs, PagedAttention,
    ::testing::Values(
        AttentionCase{F16, F16, 64}, AttentionCase{BF16, BF16, 64}, AttentionCase{F16, F16, 20},
        AttentionCase{BF16, BF16, 8}, AttentionCase{FP8, FP8, 64}, AttentionCase{FP8R, FP8R, 64},
        AttentionCase{I8, I8, 64}, AttentionCase{I8R, I8R, 64}, AttentionCase{I8, I4, 64},
        AttentionCase{I8R, I4R, 64}, AttentionCase{I8R, I4, 64}, AttentionCase{I4, I4, 64},
        AttentionCase{I4R, I4R, 64}, AttentionCase{I4, I4R, 64},
        // portable paths (D % 8 != 0), int4 V groups of 16, larger heads and blocks
        AttentionCase{I8, FP8, 20}, AttentionCase{FP8, I8, 12}, AttentionCase{I4, I4, 48},
        AttentionCase{FP8R, I4R, 128, 16}, AttentionCase{I4R, I8R, 32, 5},
        AttentionCase{I4, I4, 64, 4, 3}, AttentionCase{I8R, I4R, 64, 16, 5},
        // the KV sink: rotated and not, AVX2 and portable paths, int4c
        AttentionCase{I4R, I4R, 64, 4, 0, true}, AttentionCase{I4C, I4C, 64, 16, 0, true},
        AttentionCase{I4CR, I4CR, 64, 4, 0, true}, AttentionCase{I8, FP8, 20, 4, 0, true},
        // learned attention sinks (gpt-oss), with and without the KV sink and fp16 residue
        AttentionCase{F16, F16, 64, 4, 0, false, true},
        AttentionCase{I8R, I4R, 64, 16, 5, false, true},
        AttentionCase{I8, FP8, 20, 4, 0, false, true},
        AttentionCase{I4CR, I4CR, 64, 4, 0, true, true}));

// A learned sink is a logit that joins the softmax and weighs no value: with one visible
// position, head h's output is v * e^s / (e^s + e^sink[h]) = v * sigmoid(s - sink[h]),
// computed here by hand; a sink of -inf leaves attention unchanged bit for bit.
TEST(PagedAttentionSinks, OnePositionIsTheValueTimesASigmoid) {
    KvGeometry g;
    g.n_layers = 1;
    g.n_kv_heads = 1;
    g.head_dim = 8;
    g.block_tokens = 4;
    const cpu::AttentionCodecs codecs = cpu::attention_codecs(g);
    KvCache cache(g, 4, 1);
    ThreadPool pool(1);
    cpu::AttentionScratch scratch;
    SessionKv kv;
    ASSERT_TRUE(cache.reserve(kv, 1));
    const uint32_t D = 8, n_heads = 2;
    std::vector<uint16_t> wk(D), wv(D);
    for (uint32_t d = 0; d < D; ++d) {
        wk[d] = fp32_to_fp16(0.25f * float(d + 1));
        wv[d] = fp32_to_fp16(float(d) - 3.5f);
    }
    std::vector<float> q(size_t(n_heads) * D);
    for (uint32_t i = 0; i < q.size(); ++i) q[i] = (i < D) ? 0.5f : -0.25f;
    std::vector<float> out(q.size()), plain(q.size()), neg(q.size());
    cpu::AttentionSpan span{&kv, wk.data(), wv.data(), 0, 1, 0, 1, q.data(), out.data()};
    const float scale = 0.5f;
    cpu::AttentionParams params{0, n_heads, scale, n_heads * D, n_heads * D};
    const float sinks[2] = {1.5f, -2.0f};
    params.sinks = sinks;
    cpu::paged_attention(cache, codecs, params, &span, 1, pool, scratch);
    for (uint32_t h = 0; h < n_heads; ++h) {
        double s = 0.0;
        for (uint32_t d = 0; d < D; ++d) s += double(q[h * D + d]) * double(fp16_to_fp32(wk[d]));
        const double w = 1.0 / (1.0 + std::exp(double(sinks[h]) - double(scale) * s));
        for (uint32_t d = 0; d < D; ++d) {
            const double want = w * double(fp16_to_fp32(wv[d]));
            EXPECT_NEAR(out[h * D + d], want, 1e-5 * (1.0 + std::fabs(want))) << h << " " << d;
        }
    }
    params.sinks = nullptr;
    span.out = plain.data();
    cpu::paged_attention(cache, codecs, params, &span, 1, pool, scratch);
    const float none[2] = {-INFINITY, -INFINITY};
    params.sinks = none;
    span.out = neg.data();
    cpu::paged_attention(cache, codecs, params, &span, 1, pool, scratch);
    for (size_t i = 0; i < q.size(); ++i) {
        EXPECT_EQ(plain[i], neg[i]) << i;
        EXPECT_NE(plain[i], out[i]) << i;
    }
    cache.release(kv);
}

TEST(PagedAttentionCodecs, GeometryOverloadReadsTheCacheCodecsAndIsDeterministic) {
    KvGeometry g;
    g.n_layers = 1;
    g.n_kv_heads = 3;
    g.head_dim = 64;
    g.block_tokens = 16;
    g.dtype_k = LLMKV_KV_INT8;
    g.dtype_v = LLMKV_KV_INT4;
    const cpu::AttentionCodecs c = cpu::attention_codecs(g);
    EXPECT_EQ(c.k.dtype, LLMKV_KV_INT8);
    EXPECT_EQ(c.v.dtype, LLMKV_KV_INT4);
    KvCache cache(g, 8, 1);
    SessionKv kv;
    const uint32_t pos0 = 70, n = 5, D = 64, n_heads = 9;
    ASSERT_TRUE(cache.reserve(kv, pos0 + n));
    std::mt19937 rng(4);
    std::vector<uint16_t> rows(16 * D);
    for (uint32_t b = 0; b < g.sealed_blocks(pos0 + n); ++b) {
        for (uint32_t h = 0; h < 3; ++h) {
            fill_rows(rows, D, rng, true);
            codec_encode_head(c.k, KvRole::K, rows.data(), 16, D,
                              cache.sealed_data(kv.blocks[b]) + g.sealed_k_offset(0, h));
            fill_rows(rows, D, rng, false);
            codec_encode_head(c.v, KvRole::V, rows.data(), 16, D,
                              cache.sealed_data(kv.blocks[b]) + g.sealed_v_offset(0, h));
        }
    }
    const uint32_t ws = g.sealed_blocks(pos0) * 16, cap = pos0 - ws + n;
    std::vector<uint16_t> wk(3 * cap * D), wv(wk.size());
    fill_rows(wk, D, rng, true);
    fill_rows(wv, D, rng, false);
    std::vector<float> q(n * n_heads * D);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (auto &x : q) x = dist(rng);
    cpu::AttentionParams params{0, n_heads, 0.125f, n_heads * D, n_heads * D};
    std::vector<float> a(q.size()), b(q.size());
    cpu::AttentionSpan span{&kv, wk.data(), wv.data(), ws, cap, pos0, n, q.data(), a.data()};
    cpu::AttentionScratch scratch;
    ThreadPool one(1), three(3);
    cpu::paged_attention(cache, params, &span, 1, one, scratch);
    span.out = b.data();
    cpu::paged_attention(cache, c, params, &span, 1, three, scratch);
    for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << i;  // bitwise
    // One query on more threads than K/V heads: the query heads of a group are split over
    // items, which must not change a bit either.
    ThreadPool five(5);
    cpu::AttentionSpan last{&kv,     wk.data(),    wv.data(), ws,
                            cap,     pos0 + n - 1, 1,         q.data() + (n - 1) * n_heads * D,
                            b.data()};
    cpu::paged_attention(cache, params, &last, 1, five, scratch);
    for (size_t i = 0; i < n_heads * D; ++i) ASSERT_EQ(a[(n - 1) * n_heads * D + i], b[i]) << i;
    // Specs that disagree with the cache's dtypes are an internal error.
    EXPECT_ANY_THROW(
        cpu::paged_attention(cache, cpu::AttentionCodecs{I8, I8}, params, &span, 1, one, scratch));
}

// ---- row kernels: AVX2 against portable, and against the decoded values ----------------------

struct KernelCase {
    llmkv_kv_dtype dtype;
    uint32_t n, d;
};

class RowKernels : public ::testing::TestWithParam<KernelCase> {};

using ByteKernel = void (*)(uint32_t, const float *const *, const uint8_t *, uint32_t, uint32_t,
                            float *const *);

struct KernelSet {
    ByteKernel dot_portable, axpy_portable;
#if defined(__x86_64__)
    ByteKernel dot_avx2, axpy_avx2;
#endif
};

template <void (*F)(uint32_t, const float *const *, const uint16_t *, uint32_t, uint32_t,
                    float *const *)>
void bytes_to_u16(uint32_t nh, const float *const *x, const uint8_t *head, uint32_t n, uint32_t d,
                  float *const *y) {
    F(nh, x, reinterpret_cast<const uint16_t *>(head), n, d, y);
}

KernelSet kernels_for(llmkv_kv_dtype dtype) {
    namespace k = cpu::kernels;
    switch (dtype) {
        case LLMKV_KV_F16:
            return {
                bytes_to_u16<k::dot_rows_f16_portable>, bytes_to_u16<k::axpy_rows_f16_portable>
#if defined(__x86_64__)
                    , bytes_to_u16<k::dot_rows_f16_avx2>, bytes_to_u16<k::axpy_rows_f16_avx2>
#endif
            };
        case LLMKV_KV_BF16:
            return {
                bytes_to_u16<k::dot_rows_bf16_portable>, bytes_to_u16<k::axpy_rows_bf16_portable>
#if defined(__x86_64__)
                    , bytes_to_u16<k::dot_rows_bf16_avx2>, bytes_to_u16<k::axpy_rows_bf16_avx2>
#endif
            };
        case LLMKV_KV_FP8_E4M3:
            return {
                k::dot_rows_fp8_portable, k::axpy_rows_fp8_portable
#if defined(__x86_64__)
                    ,
                    k::dot_rows_fp8_avx2, k::axpy_rows_fp8_avx2
#endif
            };
        case LLMKV_KV_INT8:
            return {
                k::dot_rows_i8_portable, k::axpy_rows_i8_portable
#if defined(__x86_64__)
                    ,
                    k::dot_rows_i8_avx2, k::axpy_rows_i8_avx2
#endif
            };
        case LLMKV_KV_INT4_COMPACT:
            return {
                k::dot_rows_i4ck_portable, k::axpy_rows_i4cv_portable
#if defined(__x86_64__)
                    ,
                    k::dot_rows_i4ck_avx2, k::axpy_rows_i4cv_avx2
#endif
            };
        default:
            return {
                k::dot_rows_i4k_portable, k::axpy_rows_i4v_portable
#if defined(__x86_64__)
                    ,
                    k::dot_rows_i4k_avx2, k::axpy_rows_i4v_avx2
#endif
            };
    }
}

// For nh query heads (1..kHeads) against one encoded K and V head: each path matches the
// double-precision sums over the decoded values; AVX2 matches portable; and each head's
// result is bitwise the same whichever heads are batched with it.
TEST_P(RowKernels, PortableAndAvx2AgreeWithTheDecodedRowsForEveryHeadCount) {
    const KernelCase kc = GetParam();
    const uint32_t n = kc.n, d = kc.d;
    constexpr uint32_t kHeads = 7;
    std::mt19937 rng(kc.n * 131 + kc.d);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<uint16_t> rows(size_t(n) * d);
    fill_rows(rows, d, rng, true);
    std::vector<float> q(kHeads * d), w(kHeads * n), out0(kHeads * d);
    for (auto &x : q) x = dist(rng);
    for (auto &x : w) x = std::fabs(dist(rng));
    for (auto &x : out0) x = dist(rng);

    std::vector<uint8_t> k_head(codec_head_bytes(kc.dtype, KvRole::K, n, d)),
        v_head(codec_head_bytes(kc.dtype, KvRole::V, n, d));
    codec_encode_head(CodecSpec{kc.dtype, false}, KvRole::K, rows.data(), n, d, k_head.data());
    codec_encode_head(CodecSpec{kc.dtype, false}, KvRole::V, rows.data(), n, d, v_head.data());
    std::vector<float> kd(rows.size()), vd(rows.size());
    codec_decode_head(CodecSpec{kc.dtype, false}, KvRole::K, k_head.data(), n, d, kd.data());
    codec_decode_head(CodecSpec{kc.dtype, false}, KvRole::V, v_head.data(), n, d, vd.data());

    // Double-precision references over the decoded values, with magnitudes for tolerances.
    std::vector<double> s_ref(kHeads * n), s_mag(kHeads * n), o_ref(kHeads * d), o_mag(kHeads * d);
    for (uint32_t h = 0; h < kHeads; ++h) {
        for (uint32_t t = 0; t < n; ++t) {
            for (uint32_t i = 0; i < d; ++i) {
                s_ref[h * n + t] += double(q[h * d + i]) * kd[size_t(t) * d + i];
                s_mag[h * n + t] += std::fabs(double(q[h * d + i]) * kd[size_t(t) * d + i]);
            }
        }
        for (uint32_t i = 0; i < d; ++i) {
            o_ref[h * d + i] = out0[h * d + i];
            o_mag[h * d + i] = std::fabs(out0[h * d + i]);
            for (uint32_t t = 0; t < n; ++t) {
                o_ref[h * d + i] += double(w[h * n + t]) * vd[size_t(t) * d + i];
                o_mag[h * d + i] += std::fabs(double(w[h * n + t]) * vd[size_t(t) * d + i]);
            }
        }
    }
    // Runs a kernel pair for heads [h0, h0 + nh) into s / o (all kHeads slots).
    auto run = [&](ByteKernel dot, ByteKernel axpy, uint32_t h0, uint32_t nh, std::vector<float> &s,
                   std::vector<float> &o) {
        const float *qp[kHeads], *wp[kHeads];
        float *sp[kHeads], *op[kHeads];
        for (uint32_t h = 0; h < nh; ++h) {
            qp[h] = q.data() + (h0 + h) * d;
            wp[h] = w.data() + (h0 + h) * n;
            sp[h] = s.data() + (h0 + h) * n;
            op[h] = o.data() + (h0 + h) * d;
        }
        dot(nh, qp, k_head.data(), n, d, sp);
        axpy(nh, wp, v_head.data(), n, d, op);
    };
    auto check = [&](ByteKernel dot, ByteKernel axpy, const char *which, std::vector<float> &s,
                     std::vector<float> &o) {
        s.assign(kHeads * n, NAN);
        o = out0;
        run(dot, axpy, 0, kHeads, s, o);
        for (uint32_t k = 0; k < kHeads * n; ++k)
            ASSERT_NEAR(s[k], s_ref[k], 4e-6 * (1 + s_mag[k])) << which << " score " << k;
        for (uint32_t k = 0; k < kHeads * d; ++k)
            ASSERT_NEAR(o[k], o_ref[k], 4e-6 * (1 + o_mag[k])) << which << " out " << k;
        for (uint32_t nh = 1; nh < kHeads; ++nh) {  // other batchings give the same bits
            std::vector<float> s2(kHeads * n, NAN), o2 = out0;
            for (uint32_t h0 = 0; h0 < kHeads; h0 += nh)
                run(dot, axpy, h0, std::min(nh, kHeads - h0), s2, o2);
            for (uint32_t k = 0; k < kHeads * n; ++k)
                ASSERT_EQ(s2[k], s[k]) << which << " nh " << nh << " score " << k;
            for (uint32_t k = 0; k < kHeads * d; ++k)
                ASSERT_EQ(o2[k], o[k]) << which << " nh " << nh << " out " << k;
        }
    };
    std::vector<float> s_portable, o_portable;
    const KernelSet ks = kernels_for(kc.dtype);
    check(ks.dot_portable, ks.axpy_portable, "portable", s_portable, o_portable);
#if defined(__x86_64__)
    if (!cpu::cpu_has_avx2())
        GTEST_SKIP() << "no AVX2 (or LLMKV_CPU_FEATURES=portable): portable path only";
    std::vector<float> s_avx2, o_avx2;
    check(ks.dot_avx2, ks.axpy_avx2, "avx2", s_avx2, o_avx2);
    for (uint32_t k = 0; k < kHeads * n; ++k)
        ASSERT_NEAR(s_avx2[k], s_portable[k], 8e-6 * (1 + s_mag[k]));
    for (uint32_t k = 0; k < kHeads * d; ++k)
        ASSERT_NEAR(o_avx2[k], o_portable[k], 8e-6 * (1 + o_mag[k]));
#endif
}

TEST(RowKernels, SoftmaxPathsAgree) {
    std::mt19937 rng(8);
    std::normal_distribution<float> dist(0.0f, 6.0f);
    for (uint32_t n : {1u, 5u, 8u, 13u, 64u, 1000u}) {
        std::vector<float> x(n);
        for (auto &v : x) v = dist(rng);
        x[n / 2] = -200.0f;  // underflows
        std::vector<double> ref(n);
        double mx = -INFINITY, sum = 0;
        for (uint32_t i = 0; i < n; ++i) mx = std::max(mx, 0.5 * x[i]);
        for (uint32_t i = 0; i < n; ++i) sum += (ref[i] = std::exp(0.5 * x[i] - mx));
        // float rounding of scale * x - max (half an ulp of the argument) bounds the error
        auto tol = [&](uint32_t i) {
            return (1e-6 + 1.2e-7 * std::fabs(0.5 * x[i] - mx)) * (ref[i] / sum) + 1e-30;
        };
        auto a = x;
        cpu::kernels::softmax_portable(a.data(), n, 0.5f);
        for (uint32_t i = 0; i < n; ++i) ASSERT_NEAR(a[i], ref[i] / sum, tol(i)) << n << " " << i;
#if defined(__x86_64__)
        if (!cpu::cpu_has_avx2()) continue;
        auto b = x;
        cpu::kernels::softmax_avx2(b.data(), n, 0.5f);
        for (uint32_t i = 0; i < n; ++i) ASSERT_NEAR(b[i], ref[i] / sum, tol(i)) << n << " " << i;
#endif
    }
}

INSTANTIATE_TEST_SUITE_P(
    Codecs, RowKernels,
    ::testing::Values(KernelCase{LLMKV_KV_F16, 16, 64}, KernelCase{LLMKV_KV_BF16, 5, 24},
                      KernelCase{LLMKV_KV_FP8_E4M3, 16, 64}, KernelCase{LLMKV_KV_FP8_E4M3, 13, 40},
                      KernelCase{LLMKV_KV_INT8, 16, 64}, KernelCase{LLMKV_KV_INT8, 3, 128},
                      KernelCase{LLMKV_KV_INT8, 16, 72}, KernelCase{LLMKV_KV_INT4, 16, 64},
                      KernelCase{LLMKV_KV_INT4, 16, 48}, KernelCase{LLMKV_KV_INT4, 9, 16},
                      KernelCase{LLMKV_KV_INT4, 16, 96}, KernelCase{LLMKV_KV_INT4, 16, 512},
                      KernelCase{LLMKV_KV_INT4, 32, 128}, KernelCase{LLMKV_KV_INT4_COMPACT, 16, 64},
                      KernelCase{LLMKV_KV_INT4_COMPACT, 16, 48},
                      KernelCase{LLMKV_KV_INT4_COMPACT, 9, 16},
                      KernelCase{LLMKV_KV_INT4_COMPACT, 16, 96},
                      KernelCase{LLMKV_KV_INT4_COMPACT, 16, 512},
                      KernelCase{LLMKV_KV_INT4_COMPACT, 32, 128}));

TEST(RowKernels, HeadScoresRejectUnsupportedShapes) {
    std::vector<uint8_t> head(1024);
    std::vector<float> q(24), s(16);
    EXPECT_ANY_THROW(cpu::head_scores(LLMKV_KV_INT4, q.data(), head.data(), 16, 24, s.data()));
    EXPECT_ANY_THROW(
        cpu::head_accumulate(llmkv_kv_dtype(6), s.data(), head.data(), 16, 24, q.data()));
}

TEST(KvCodec, F16RoundTripIsExactAndBf16KeepsEightBitsOfMantissa) {
    std::mt19937 rng(5);
    std::normal_distribution<float> dist(0.0f, 3.0f);
    std::vector<uint16_t> rows(16 * 64);
    for (auto &x : rows) x = fp32_to_fp16(dist(rng));
    std::vector<uint8_t> enc(codec_head_bytes(LLMKV_KV_F16, 16, 64));
    std::vector<float> dec(rows.size());
    codec_encode_head(LLMKV_KV_F16, rows.data(), 16, 64, enc.data());
    codec_decode_head(LLMKV_KV_F16, enc.data(), 16, 64, dec.data());
    for (size_t i = 0; i < rows.size(); ++i) ASSERT_EQ(dec[i], fp16_to_fp32(rows[i]));
    codec_encode_head(LLMKV_KV_BF16, rows.data(), 16, 64, enc.data());
    codec_decode_head(LLMKV_KV_BF16, enc.data(), 16, 64, dec.data());
    for (size_t i = 0; i < rows.size(); ++i) {
        float x = fp16_to_fp32(rows[i]);
        ASSERT_LE(std::fabs(dec[i] - x), std::fabs(x) * (1.0f / 256.0f)) << i;
    }
}

TEST(Half, Fp16ConversionRoundsToNearestEvenIncludingSubnormals) {
    EXPECT_EQ(fp32_to_fp16(1.0f), 0x3C00);
    EXPECT_EQ(fp32_to_fp16(-2.0f), 0xC000);
    EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7BFF);
    EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7C00);               // rounds up to infinity
    EXPECT_EQ(fp32_to_fp16(5.9604645e-08f), 0x0001);         // smallest subnormal
    EXPECT_EQ(fp32_to_fp16(2.9802322e-08f), 0x0000);         // half of it: ties to even (0)
    EXPECT_EQ(fp32_to_fp16(1.0f + 1.0f / 2048.0f), 0x3C00);  // tie between 1 and 1+2^-10: even
    EXPECT_TRUE(std::isnan(fp16_to_fp32(fp32_to_fp16(NAN))));
    for (uint32_t h = 0; h < 0x7C00; ++h) {  // every finite positive half round-trips
        ASSERT_EQ(fp32_to_fp16(fp16_to_fp32(uint16_t(h))), h);
    }
    EXPECT_EQ(fp32_to_bf16(1.0f), 0x3F80);
    EXPECT_EQ(bf16_to_fp32(0x3F80), 1.0f);
}

}  // namespace
}  // namespace llmkv
