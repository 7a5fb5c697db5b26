// Paged attention over contexts longer than one partition (cpu::attention_partition_tokens):
// the output must not change by a bit with the thread count or with the other queries of the
// batch, for every K/V codec, with sliding windows and residual fp16 rows, and must agree
// with the double-precision reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/attention_kernels.h"
#include "backend/cpu/cpu_features.h"
#include "common/half.h"
#include "kv/codec.h"

namespace llmkv {
namespace {

struct PartitionCase {
    CodecSpec k, v;
    uint32_t residual = 0;
    uint32_t window = 0;
    bool sink = false;     // KV sink: position 0 read from the tail's sink rows
    bool learned = false;  // learned attention sinks (gpt-oss): they join every partition's merge
};

std::ostream &operator<<(std::ostream &os, const PartitionCase &c) {
    return os << codec_name(c.k.dtype) << (c.k.rotate ? "+rot" : "") << "/" << codec_name(c.v.dtype)
              << (c.v.rotate ? "+rot" : "") << " R" << c.residual << " W" << c.window
              << (c.sink ? " sink" : "") << (c.learned ? " learned-sinks" : "");
}

void fill(std::vector<uint16_t> &rows, uint32_t D, std::mt19937 &rng, bool outliers) {
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (size_t i = 0; i < rows.size(); ++i) {
        float x = dist(rng);
        if (outliers && i % D == 5) x = 5.0f * x + 8.0f;
        rows[i] = fp32_to_fp16(x);
    }
}

// One session's KV for `n_tokens` positions: sealed blocks encoded with random rows and an
// fp16 window of the rest; queries for its last `n_q` positions.
struct Session {
    SessionKv kv;
    std::vector<uint16_t> wk, wv;
    std::vector<float> q;
    uint32_t ws = 0, cap = 0, pos0 = 0, n = 0;
};

constexpr uint32_t kD = 64, kB = 16, kKvHeads = 3, kHeads = 9;

void make_session(KvCache &cache, const cpu::AttentionCodecs &c, uint32_t n_tokens, uint32_t n_q,
                  std::mt19937 &rng, Session &s) {
    const KvGeometry &g = cache.geometry();
    s.pos0 = n_tokens - n_q;
    s.n = n_q;
    ASSERT_TRUE(cache.reserve(s.kv, n_tokens));
    std::vector<uint16_t> rows(size_t(kB) * kD);
    for (uint32_t b = 0; b < g.sealed_blocks(n_tokens); ++b) {
        for (uint32_t h = 0; h < kKvHeads; ++h) {
            fill(rows, kD, rng, true);
            codec_encode_head(c.k, KvRole::K, rows.data(), kB, kD,
                              cache.sealed_data(s.kv.blocks[b]) + g.sealed_k_offset(0, h));
            fill(rows, kD, rng, false);
            codec_encode_head(c.v, KvRole::V, rows.data(), kB, kD,
                              cache.sealed_data(s.kv.blocks[b]) + g.sealed_v_offset(0, h));
        }
    }
    s.ws = g.sealed_blocks(s.pos0) * kB;
    s.cap = n_tokens - s.ws;
    s.wk.resize(size_t(kKvHeads) * s.cap * kD);
    s.wv.resize(s.wk.size());
    fill(s.wk, kD, rng, true);
    fill(s.wv, kD, rng, false);
    if (g.sink) {  // position 0's own rows, other than block 0's decoded copy
        std::vector<uint16_t> row(kD);
        for (uint32_t h = 0; h < kKvHeads; ++h) {
            fill(row, kD, rng, true);
            std::memcpy(cache.tail_data(s.kv.tail) + g.tail_sink_k_offset(0, h), row.data(),
                        kD * 2);
            fill(row, kD, rng, false);
            std::memcpy(cache.tail_data(s.kv.tail) + g.tail_sink_v_offset(0, h), row.data(),
                        kD * 2);
        }
    }
    s.q.resize(size_t(n_q) * kHeads * kD);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    for (auto &x : s.q) x = dist(rng);
}

const uint8_t *sink_of(KvCache &cache, const Session &s) {
    return cache.geometry().sink ? cache.tail_data(s.kv.tail) : nullptr;
}

cpu::AttentionSpan span_of(KvCache &cache, Session &s, float *out) {
    cpu::AttentionSpan span{&s.kv,  s.wk.data(), s.wv.data(), s.ws, s.cap,
                            s.pos0, s.n,         s.q.data(),  out};
    span.sink = sink_of(cache, s);
    return span;
}

class PartitionedAttention : public ::testing::TestWithParam<PartitionCase> {};

TEST_P(PartitionedAttention, BitwiseAcrossThreadsAndBatchesAndCloseToTheReference) {
    const PartitionCase pc = GetParam();
    KvGeometry g;
    g.n_layers = 1;
    g.n_kv_heads = kKvHeads;
    g.head_dim = kD;
    g.block_tokens = kB;
    g.dtype_k = pc.k.dtype;
    g.dtype_v = pc.v.dtype;
    g.residual_tokens = pc.residual;
    g.sink = pc.sink;
    const cpu::AttentionCodecs codecs{pc.k, pc.v};
    const uint32_t P = cpu::attention_partition_tokens(kB);
    ASSERT_EQ(P % kB, 0u);
    // Session A: 3 partitions and a bit, 4 queries (the last crosses nothing new); session B:
    // a prefill-like span of 6 queries that starts one position before a partition boundary.
    const uint32_t n_a = 3 * P + 37, n_b = 2 * P + 5;
    KvCache cache(g, (n_a + n_b) / kB + 8, 2);
    std::mt19937 rng(7);
    Session a, b;
    make_session(cache, codecs, n_a, 4, rng, a);
    make_session(cache, codecs, n_b, 6, rng, b);
    cpu::AttentionParams params{0, kHeads, 0.125f, kHeads * kD, kHeads * kD, pc.window};
    const float learned[kHeads] = {-4.0f, -1.0f, 0.0f, 0.5f, 1.0f, 2.0f, 3.0f, 5.0f, 9.0f};
    if (pc.learned) params.sinks = learned;
    cpu::AttentionScratch scratch;

    const size_t size_a = a.q.size(), size_b = b.q.size();
    std::vector<float> alone(size_a), ref(size_a);
    {
        ThreadPool one(1);
        cpu::AttentionSpan sa = span_of(cache, a, alone.data());
        cpu::paged_attention(cache, codecs, params, &sa, 1, one, scratch);
        sa.out = ref.data();
        cpu::paged_attention_reference(cache, codecs, params, &sa, 1);
    }
    for (size_t i = 0; i < size_a; ++i) {
        ASSERT_TRUE(std::isfinite(alone[i]));
        ASSERT_NEAR(alone[i], ref[i], 2e-5f * (1.0f + std::fabs(ref[i]))) << i;
    }
    std::vector<float> b_ref(size_b);
    {
        cpu::AttentionSpan sb = span_of(cache, b, b_ref.data());
        cpu::paged_attention_reference(cache, codecs, params, &sb, 1);
    }
    for (unsigned threads : {1u, 2u, 3u, 4u}) {
        ThreadPool pool(threads);
        // A alone on this many threads.
        std::vector<float> out(size_a, -1.0f);
        cpu::AttentionSpan sa = span_of(cache, a, out.data());
        cpu::paged_attention(cache, codecs, params, &sa, 1, pool, scratch);
        for (size_t i = 0; i < size_a; ++i)
            ASSERT_EQ(alone[i], out[i]) << threads << " threads, " << i;
        // A's last query alone (one decode row).
        std::vector<float> last(size_t(kHeads) * kD, -1.0f);
        cpu::AttentionSpan sl{
            &a.kv,      a.wk.data(),      a.wv.data(), a.ws,
            a.cap,      a.pos0 + a.n - 1, 1,           a.q.data() + size_t(a.n - 1) * kHeads * kD,
            last.data()};
        sl.sink = sink_of(cache, a);
        cpu::paged_attention(cache, codecs, params, &sl, 1, pool, scratch);
        for (size_t i = 0; i < last.size(); ++i) {
            ASSERT_EQ(alone[size_t(a.n - 1) * kHeads * kD + i], last[i])
                << threads << " threads, " << i;
        }
        // A inside a mixed batch (B first, then A).
        std::vector<float> out_a(size_a, -1.0f), out_b(size_b, -1.0f);
        cpu::AttentionSpan both[2] = {span_of(cache, b, out_b.data()),
                                      span_of(cache, a, out_a.data())};
        cpu::paged_attention(cache, codecs, params, both, 2, pool, scratch);
        for (size_t i = 0; i < size_a; ++i)
            ASSERT_EQ(alone[i], out_a[i]) << threads << " threads, batch, " << i;
        for (size_t i = 0; i < size_b; ++i) {
            ASSERT_NEAR(out_b[i], b_ref[i], 2e-5f * (1.0f + std::fabs(b_ref[i])))
                << threads << " threads, " << i;
        }
    }
    cache.release(a.kv);
    cache.release(b.kv);
}

constexpr CodecSpec F16{LLMKV_KV_F16, false}, BF16{LLMKV_KV_BF16, false};
constexpr CodecSpec FP8{LLMKV_KV_FP8_E4M3, false}, FP8R{LLMKV_KV_FP8_E4M3, true};
constexpr CodecSpec I8{LLMKV_KV_INT8, false}, I8R{LLMKV_KV_INT8, true};
constexpr CodecSpec I4{LLMKV_KV_INT4, false}, I4R{LLMKV_KV_INT4, true};
constexpr CodecSpec I4C{LLMKV_KV_INT4_COMPACT, false}, I4CR{LLMKV_KV_INT4_COMPACT, true};

INSTANTIATE_TEST_SUITE_P(
    Codecs, PartitionedAttention,
    ::testing::Values(PartitionCase{F16, F16}, PartitionCase{BF16, BF16}, PartitionCase{FP8, FP8},
                      PartitionCase{FP8R, FP8R}, PartitionCase{I8, I8}, PartitionCase{I8R, I8R},
                      PartitionCase{I8, I4}, PartitionCase{I8R, I4R}, PartitionCase{I4, I4},
                      PartitionCase{I4R, I4R}, PartitionCase{I4R, I4}, PartitionCase{I4CR, I4CR},
                      PartitionCase{I4C, I4C, 40},
                      // fp16 rows past the last sealed block that straddle a partition boundary
                      PartitionCase{I8, I8, 40}, PartitionCase{I4R, I4R, 40},
                      // sliding windows: longer than a partition (lo inside a block), shorter
                      // than one (one or two partitions depending on the query)
                      PartitionCase{F16, F16, 0, 1500}, PartitionCase{I4R, I4R, 0, 2100},
                      PartitionCase{I8, FP8, 0, 700}, PartitionCase{I8, I8, 40, 1030},
                      // the KV sink (read by partition 0 only; a window may hide position 0)
                      PartitionCase{I4CR, I4CR, 0, 0, true}, PartitionCase{I4, I4, 40, 0, true},
                      PartitionCase{I4R, I4R, 0, 2100, true},
                      // learned attention sinks: many partitions, a window of one or two
                      // partitions, with the KV sink and fp16 residue
                      PartitionCase{F16, F16, 0, 0, false, true},
                      PartitionCase{I8R, I4R, 40, 700, false, true},
                      PartitionCase{I4CR, I4CR, 0, 1030, true, true}));

// The partition softmax is the full softmax before its final scaling, bit for bit (a query
// with one partition keeps the normalized path; both share one exp).
TEST(PartitionedAttention, PartialSoftmaxIsTheSoftmaxBeforeNormalizing) {
    std::mt19937 rng(3);
    std::normal_distribution<float> dist(0.0f, 5.0f);
    using Full = void (*)(float *, uint32_t, float);
    using Partial = float (*)(float *, uint32_t, float, float *);
    std::vector<std::pair<Full, Partial>> paths = {
        {cpu::kernels::softmax_portable, cpu::kernels::softmax_partial_portable}};
#if defined(__x86_64__)
    if (cpu::cpu_has_avx2())
        paths.push_back({cpu::kernels::softmax_avx2, cpu::kernels::softmax_partial_avx2});
#endif
    for (auto [full, partial] : paths) {
        for (uint32_t n : {1u, 7u, 8u, 13u, 1024u, 1031u}) {
            std::vector<float> x(n);
            for (auto &v : x) v = dist(rng);
            auto a = x, b = x;
            full(a.data(), n, 0.125f);
            float m = 0.0f;
            const float sum = partial(b.data(), n, 0.125f, &m);
            float mx = -INFINITY;
            for (float v : x) mx = std::max(mx, v * 0.125f);
            EXPECT_EQ(m, mx);
            float total = 0.0f;
            for (uint32_t i = 0; i < n; ++i) {
                ASSERT_LE(b[i], 1.0f);
                ASSERT_EQ(b[i] * (1.0f / sum), a[i]) << n << " " << i;
                total += b[i];
            }
            EXPECT_NEAR(total, sum, 1e-5f * sum);
        }
    }
}

}  // namespace
}  // namespace llmkv
