// Paged attention: the SIMD path against the double-precision reference, over sealed
// blocks and fp16 windows at every fill level, for both f16 and bf16 sealed blocks.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend/cpu/attention.h"
#include "common/half.h"
#include "kv/codec.h"

namespace llmkv {
namespace {

struct AttentionCase {
    llmkv_kv_dtype dtype;
    uint32_t head_dim;
};

class PagedAttention : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(PagedAttention, MatchesTheReferenceAtEveryFillLevel) {
    const AttentionCase ac = GetParam();
    KvGeometry g;
    g.n_layers = 2;
    g.n_kv_heads = 2;
    g.head_dim = ac.head_dim;
    g.block_tokens = 4;
    g.dtype_k = ac.dtype;
    g.dtype_v = ac.dtype;
    KvCache cache(g, 32, 2);
    ThreadPool pool(2);
    cpu::AttentionScratch scratch;
    std::mt19937 rng(11);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    const uint32_t n_heads = 6, D = ac.head_dim, B = 4;

    for (uint32_t pos0 = 0; pos0 < 14; ++pos0) {
        for (uint32_t n : {1u, 3u, 6u}) {
            SessionKv kv;
            ASSERT_TRUE(cache.reserve(kv, pos0 + n));
            // Sealed blocks before the window hold random encoded values.
            const uint32_t ws = pos0 / B * B;
            std::vector<uint16_t> rows(size_t(B) * D);
            for (uint32_t b = 0; b < ws / B; ++b) {
                for (uint32_t h = 0; h < g.n_kv_heads; ++h) {
                    for (auto &x : rows) x = fp32_to_fp16(dist(rng));
                    codec_encode_head(g.dtype_k, rows.data(), B, D, cache.sealed_data(kv.blocks[b]) + g.sealed_k_offset(1, h));
                    for (auto &x : rows) x = fp32_to_fp16(dist(rng));
                    codec_encode_head(g.dtype_v, rows.data(), B, D, cache.sealed_data(kv.blocks[b]) + g.sealed_v_offset(1, h));
                }
            }
            const uint32_t cap = pos0 - ws + n;
            std::vector<uint16_t> wk(size_t(g.n_kv_heads) * cap * D), wv(wk.size());
            for (auto &x : wk) x = fp32_to_fp16(dist(rng));
            for (auto &x : wv) x = fp32_to_fp16(dist(rng));
            std::vector<float> q(size_t(n) * n_heads * D);
            for (auto &x : q) x = dist(rng);
            std::vector<float> out(q.size()), ref(q.size());
            cpu::AttentionSpan span{&kv, wk.data(), wv.data(), ws, cap, pos0, n, q.data(), out.data()};
            cpu::AttentionParams params{1, n_heads, 1.0f / std::sqrt(float(D)), n_heads * D, n_heads * D};
            cpu::paged_attention(cache, params, &span, 1, pool, scratch);
            span.out = ref.data();
            cpu::paged_attention_reference(cache, params, &span, 1);
            for (size_t i = 0; i < out.size(); ++i) {
                ASSERT_NEAR(out[i], ref[i], 2e-5f * (1.0f + std::fabs(ref[i]))) << "pos0 " << pos0 << " n " << n << " i " << i;
            }
            cache.release(kv);
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Codecs, PagedAttention,
                         ::testing::Values(AttentionCase{LLMKV_KV_F16, 64}, AttentionCase{LLMKV_KV_BF16, 64},
                                           AttentionCase{LLMKV_KV_F16, 20}, AttentionCase{LLMKV_KV_BF16, 8}));

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
    EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7C00);             // rounds up to infinity
    EXPECT_EQ(fp32_to_fp16(5.9604645e-08f), 0x0001);       // smallest subnormal
    EXPECT_EQ(fp32_to_fp16(2.9802322e-08f), 0x0000);       // half of it: ties to even (0)
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
