// Parity of each CUDA kernel with its CPU twin on random inputs:
//   sealing (every codec, K and V, with and without rotation): bitwise equal bytes;
//   RMSNorm, RoPE (both pair styles), SwiGLU, embedding: documented tolerances
//   (kernels/README.md); add, f32 -> fp16, row gather: bitwise;
//   paged attention, every codec pair, decode and prefill chunks, GQA, several spans
//   batched: against the CPU's double-precision reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "backend/cpu/attention.h"
#include "backend/cpu/cpu_backend.h"   // rms_norm, rope_rotate: the CPU twins
#include "backend/cuda/cuda_module.h"  // LLMKV_CUDA_RELEASED_BLOCK
#include "common/thread_pool.h"
#include "elementwise.cuh"
#include "embedding.cuh"
#include "gpu_test_util.h"
#include "kv/codec.h"
#include "kv/kv_cache.h"
#include "kv_seal.cuh"
#include "kv_window.cuh"
#include "paged_attention.cuh"
#include "rms_norm.cuh"
#include "rope.cuh"
#include "swiglu.cuh"

namespace llmkv {
namespace {

using gputest::DeviceBuffer;
using gputest::random_f32;
using gputest::random_fp16;

// ---- sealing -------------------------------------------------------------------------------

struct SealCase {
    llmkv_kv_dtype dtype;
    bool rotate;
    uint32_t block_tokens;
    uint32_t head_dim;
};

std::string seal_name(const ::testing::TestParamInfo<SealCase> &info) {
    const SealCase &c = info.param;
    return std::string(codec_name(c.dtype)) + (c.rotate ? "_rot" : "") + "_B" +
           std::to_string(c.block_tokens) + "_D" + std::to_string(c.head_dim);
}

class SealParity : public ::testing::TestWithParam<SealCase> {};

TEST_P(SealParity, EncodedBytesAreBitwiseIdenticalToTheCpuEncoder) {
    LLMKV_REQUIRE_DEVICE();
    const SealCase c = GetParam();
    const uint32_t n_heads = 24, B = c.block_tokens, D = c.head_dim;
    for (KvRole role : {KvRole::K, KvRole::V}) {
        const CodecSpec spec{c.dtype, c.rotate};
        ASSERT_TRUE(codec_supported(spec, role, B, D));
        // Random rows with the awkward cases mixed in: zero rows, constant rows, -0,
        // outliers near the fp16 limit, inf and NaN (sanitized by the encoders).
        std::vector<uint16_t> src =
            random_fp16(size_t(n_heads) * B * D, 1234 + uint32_t(role), 2.0f);
        for (uint32_t d = 0; d < D; ++d) {
            src[size_t(1) * B * D + d] = 0;                        // head 1, row 0: zeros
            src[size_t(2) * B * D + D + d] = fp32_to_fp16(0.75f);  // head 2, row 1: constant
            src[size_t(3) * B * D + d] = 0x8000;                   // head 3, row 0: -0
        }
        src[size_t(4) * B * D + 3] = fp32_to_fp16(60000.0f);
        src[size_t(5) * B * D + 1] = 0x7c00;  // +inf
        src[size_t(6) * B * D + 2] = 0x7e01;  // NaN
        std::fill(src.begin() + size_t(7) * B * D, src.begin() + size_t(8) * B * D,
                  0);  // whole head zero
        const size_t hb = codec_head_bytes(c.dtype, role, B, D);
        std::vector<uint8_t> want(n_heads * hb);
        for (uint32_t h = 0; h < n_heads; ++h) {
            codec_encode_head(spec, role, src.data() + size_t(h) * B * D, B, D,
                              want.data() + h * hb);
        }
        DeviceBuffer<uint16_t> d_src(src.size());
        DeviceBuffer<uint8_t> d_dst(want.size());
        ASSERT_TRUE(d_src.upload(src));
        CUDA_OK(cuda::launch_codec_encode_heads(uint32_t(c.dtype), c.rotate, role == KvRole::V,
                                                d_src.get(), n_heads, B, D, d_dst.get(), nullptr));
        CUDA_OK(cudaDeviceSynchronize());
        const std::vector<uint8_t> got = d_dst.download(want.size());
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < want.size(); ++i) {
            ASSERT_EQ(int(want[i]), int(got[i]))
                << (role == KvRole::K ? "K" : "V") << " byte " << i << " (head " << i / hb
                << ", offset " << i % hb << ")";
        }
    }
}

INSTANTIATE_TEST_SUITE_P(
    AllCodecs, SealParity,
    ::testing::Values(SealCase{LLMKV_KV_F16, false, 16, 64}, SealCase{LLMKV_KV_BF16, false, 16, 64},
                      SealCase{LLMKV_KV_FP8_E4M3, false, 16, 64},
                      SealCase{LLMKV_KV_FP8_E4M3, true, 16, 128},
                      SealCase{LLMKV_KV_INT8, false, 16, 64}, SealCase{LLMKV_KV_INT8, true, 16, 64},
                      SealCase{LLMKV_KV_INT8, false, 5, 40}, SealCase{LLMKV_KV_INT4, false, 16, 64},
                      SealCase{LLMKV_KV_INT4, true, 16, 128}, SealCase{LLMKV_KV_INT4, false, 4, 48},
                      SealCase{LLMKV_KV_INT4, true, 32, 256},
                      SealCase{LLMKV_KV_BF16, false, 4, 16}),
    seal_name);

// ---- RMSNorm, RoPE, SwiGLU, embedding ---------------------------------------------------------

TEST(KernelParity, RmsNormMatchesTheCpuWithinOneUlpAndGathersRows) {
    LLMKV_REQUIRE_DEVICE();
    const uint32_t rows = 7, n = 576;
    std::vector<float> x = random_f32(size_t(rows) * n, 5, 3.0f), w = random_f32(n, 6);
    DeviceBuffer<float> dx(x.size()), dw(n), dout(x.size());
    ASSERT_TRUE(dx.upload(x) && dw.upload(w));
    std::vector<int32_t> gather = {6, 0, 3};
    DeviceBuffer<int32_t> dg(gather.size());
    ASSERT_TRUE(dg.upload(gather));
    CUDA_OK(cuda::launch_rms_norm(dx.get(), n, dg.get(), 3, dw.get(), n, 1e-5f, nullptr, dout.get(),
                                  nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<float> got = dout.download(size_t(3) * n), want(n);
    for (size_t i = 0; i < gather.size(); ++i) {
        rms_norm(&x[size_t(gather[i]) * n], w.data(), n, 1e-5f, want.data());
        for (uint32_t e = 0; e < n; ++e) {
            // The double sum of squares differs only in order: at most 1 ulp in the scale.
            EXPECT_NEAR(got[i * n + e], want[e], 2.5e-7f * std::fabs(want[e]) + 1e-30f)
                << "row " << i << " e " << e;
        }
    }
}

TEST(KernelParity, RopeMatchesTheCpuWithinAFewUlp) {
    LLMKV_REQUIRE_DEVICE();
    const uint32_t rows = 5, n_heads = 9, n_kv = 3, D = 64, ld = (n_heads + 2 * n_kv) * D;
    std::vector<float> qk = random_f32(size_t(rows) * ld, 9);
    std::vector<int32_t> pos = {0, 1, 17, 1000, 31999};
    std::vector<float> inv_freq(D / 2);
    for (uint32_t i = 0; i < D / 2; ++i)
        inv_freq[i] = float(1.0 / std::pow(10000.0, double(2 * i) / D));
    DeviceBuffer<float> dqk(qk.size()), dfreq(inv_freq.size());
    DeviceBuffer<int32_t> dpos(rows);
    ASSERT_TRUE(dqk.upload(qk) && dfreq.upload(inv_freq) && dpos.upload(pos));
    // q heads, then the k heads right after them (one launch per tensor, as the ops do).
    CUDA_OK(cuda::launch_rope(dqk.get(), ld, rows, dpos.get(), n_heads, D, D, false, 1.0f,
                              dfreq.get(), nullptr));
    CUDA_OK(cuda::launch_rope(dqk.get() + n_heads * D, ld, rows, dpos.get(), n_kv, D, D, false,
                              1.0f, dfreq.get(), nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<float> got = dqk.download(qk.size());
    for (uint32_t t = 0; t < rows; ++t) {
        std::vector<float> want(qk.begin() + size_t(t) * ld, qk.begin() + size_t(t + 1) * ld);
        rope_rotate(want.data(), n_heads, D, D, uint32_t(pos[t]), 1.0f, inv_freq.data());
        rope_rotate(want.data() + n_heads * D, n_kv, D, D, uint32_t(pos[t]), 1.0f, inv_freq.data());
        for (uint32_t i = 0; i < ld; ++i) {
            if (i >= (n_heads + n_kv) * D) {  // V columns are untouched
                EXPECT_EQ(got[size_t(t) * ld + i], qk[size_t(t) * ld + i]);
                continue;
            }
            // cosf / sinf of CUDA and glibc differ by up to 2 ulp; angles up to ~3e4 rad.
            EXPECT_NEAR(got[size_t(t) * ld + i], want[i], 2e-6f * (1.0f + std::fabs(want[i])))
                << "row " << t << " col " << i;
        }
    }
}

// NeoX pairs (v[i], v[i + rope_dim / 2]) over a partial rotation (rope_dim < head_dim):
// against a scalar reference with the kernel's operation order (no FMA), so only the
// sincosf of CUDA vs the host libm differs.
TEST(KernelParity, RopeHalvesStyleRotatesSplitPairs) {
    LLMKV_REQUIRE_DEVICE();
    const uint32_t rows = 4, n_heads = 3, D = 64, rope_dim = 32, ld = n_heads * D + 8;
    std::vector<float> x = random_f32(size_t(rows) * ld, 19);
    std::vector<int32_t> pos = {0, 3, 250, 4097};
    std::vector<float> inv_freq(rope_dim / 2);
    for (uint32_t i = 0; i < rope_dim / 2; ++i)
        inv_freq[i] = float(1.0 / std::pow(500000.0, double(2 * i) / rope_dim));
    const float freq_scale = 0.5f;
    DeviceBuffer<float> dx(x.size()), dfreq(inv_freq.size());
    DeviceBuffer<int32_t> dpos(rows);
    ASSERT_TRUE(dx.upload(x) && dfreq.upload(inv_freq) && dpos.upload(pos));
    CUDA_OK(cuda::launch_rope(dx.get(), ld, rows, dpos.get(), n_heads, D, rope_dim, true,
                              freq_scale, dfreq.get(), nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<float> got = dx.download(x.size());
    std::vector<float> want = x;
    const uint32_t half = rope_dim / 2;
    for (uint32_t t = 0; t < rows; ++t) {
        const float p = float(pos[t]) * freq_scale;
        for (uint32_t h = 0; h < n_heads; ++h) {
            for (uint32_t i = 0; i < half; ++i) {
                const double angle = double(p * inv_freq[i]);
                const float c = float(std::cos(angle)), sn = float(std::sin(angle));
                float *v = want.data() + size_t(t) * ld + size_t(h) * D;
                const float x0 = v[i], x1 = v[i + half];
                v[i] = x0 * c - x1 * sn;
                v[i + half] = x0 * sn + x1 * c;
            }
        }
        for (uint32_t i = 0; i < ld; ++i) {
            const size_t k = size_t(t) * ld + i;
            if (i >= n_heads * D || i % D >= rope_dim) {  // unrotated dims and padding
                EXPECT_EQ(got[k], x[k]) << "row " << t << " col " << i;
                continue;
            }
            EXPECT_NEAR(got[k], want[k], 2e-6f * (1.0f + std::fabs(want[k])))
                << "row " << t << " col " << i;
        }
    }
}

TEST(KernelParity, SwigluMatchesTheCpuWithinAFewUlp) {
    LLMKV_REQUIRE_DEVICE();
    const uint32_t rows = 3, ff = 1536;
    const size_t n = size_t(rows) * ff;
    std::vector<float> gate = random_f32(n, 11, 4.0f), up = random_f32(n, 13, 4.0f);
    DeviceBuffer<float> dg(n), du(n);
    ASSERT_TRUE(dg.upload(gate) && du.upload(up));
    CUDA_OK(cuda::launch_swiglu(dg.get(), du.get(), n, nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<float> got = dg.download(n);
    for (size_t i = 0; i < n; ++i) {
        const float g = gate[i], u = up[i];
        const float want = g / (1.0f + std::exp(-g)) * u;
        // expf of CUDA and glibc differ by a few ulp; the rest is IEEE f32 in the same order.
        EXPECT_NEAR(got[i], want, 1e-6f * std::fabs(want) + 1e-30f) << i;
    }
}

TEST(KernelParity, AddConvertAndGatherAreExact) {
    LLMKV_REQUIRE_DEVICE();
    const uint32_t rows = 6, cols = 200;
    const size_t n = size_t(rows) * cols;
    std::vector<float> x = random_f32(n, 21, 3.0f), y = random_f32(n, 22, 3.0f);
    x[0] = 70000.0f;  // beyond fp16: inf
    x[1] = 1e-8f;     // fp16 subnormal range
    x[2] = -0.0f;
    DeviceBuffer<float> dx(n), dy(n), dout(n);
    DeviceBuffer<uint16_t> dh(n);
    std::vector<int32_t> sel = {5, 0, 3};
    DeviceBuffer<int32_t> dsel(sel.size());
    ASSERT_TRUE(dx.upload(x) && dy.upload(y) && dsel.upload(sel));
    CUDA_OK(cuda::launch_f32_to_f16(dx.get(), n, dh.get(), nullptr));
    CUDA_OK(cuda::launch_add(dx.get(), dy.get(), n, nullptr));
    CUDA_OK(cuda::launch_gather_rows(dx.get(), cols, dsel.get(), uint32_t(sel.size()), dout.get(),
                                     nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<uint16_t> h = dh.download(n);
    std::vector<float> sum = dx.download(n), gathered = dout.download(sel.size() * cols);
    for (size_t i = 0; i < n; ++i) {
        EXPECT_EQ(h[i], fp32_to_fp16(x[i])) << i;
        EXPECT_EQ(sum[i], x[i] + y[i]) << i;
    }
    for (size_t r = 0; r < sel.size(); ++r) {
        for (uint32_t c = 0; c < cols; ++c)
            EXPECT_EQ(gathered[r * cols + c], sum[size_t(sel[r]) * cols + c]);
    }
}

TEST(KernelParity, EmbeddingCopiesFp16RowsExactly) {
    LLMKV_REQUIRE_DEVICE();
    const uint32_t vocab = 100, E = 96;
    std::vector<uint16_t> table = random_fp16(size_t(vocab) * E, 12);
    std::vector<int32_t> tokens = {5, 99, 0, 5};
    DeviceBuffer<uint16_t> dt(table.size());
    DeviceBuffer<int32_t> dtok(tokens.size());
    DeviceBuffer<float> dx(tokens.size() * E);
    ASSERT_TRUE(dt.upload(table) && dtok.upload(tokens));
    CUDA_OK(cuda::launch_embedding(dt.get(), E, dtok.get(), uint32_t(tokens.size()), dx.get(),
                                   nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<float> x = dx.download(tokens.size() * E);
    for (size_t t = 0; t < tokens.size(); ++t) {
        for (uint32_t e = 0; e < E; ++e)
            EXPECT_EQ(x[t * E + e], fp16_to_fp32(table[size_t(tokens[t]) * E + e]));
    }
}

// ---- paged attention -------------------------------------------------------------------------

struct AttnCase {
    llmkv_kv_dtype k, v;
    bool rotate_k, rotate_v;
    uint32_t head_dim, block_tokens, residual, n_heads, n_kv_heads;
};

std::string attn_name(const ::testing::TestParamInfo<AttnCase> &info) {
    const AttnCase &c = info.param;
    return std::string(codec_name(c.k)) + (c.rotate_k ? "r" : "") + "_" + codec_name(c.v) +
           (c.rotate_v ? "r" : "") + "_D" + std::to_string(c.head_dim) + "_B" +
           std::to_string(c.block_tokens) + "_R" + std::to_string(c.residual) + "_H" +
           std::to_string(c.n_heads) + "x" + std::to_string(c.n_kv_heads);
}

// The window kernels directly (kv_window.cu): load the tail rows of a layer, append the new
// K/V rows (f32 -> fp16, round to nearest even), store the rows that stay unsealed back to
// the tail slot; every byte against a host statement of the layout (step.cuh, kv_layout.h),
// for spans with and without tail rows, one that seals a block mid-span and one with
// residual rows, on a layer other than 0 (other layers' tail bytes untouched); with the KV
// sink, the span with pos0 == 0 also writes position 0 to its heads' sink rows (the others'
// stay as they were).
void check_window_kernels(bool sink) {
    SCOPED_TRACE(sink ? "with the KV sink" : "without the KV sink");
    KvGeometry g;
    g.sink = sink;
    g.n_layers = 3;
    g.n_kv_heads = 2;
    g.head_dim = 24;
    g.block_tokens = 8;
    g.residual_tokens = 3;
    const uint32_t H = g.n_kv_heads, D = g.head_dim, KVD = H * D, layer = 1;
    struct SpanSpec {
        uint32_t pos0, n;
    };
    const std::vector<SpanSpec> specs = {{0, 5}, {13, 1}, {6, 20}, {30, 2}};
    std::vector<cuda::StepSpan> steps;
    std::vector<uint32_t> row_span;
    uint64_t win = 0;
    uint32_t row = 0;
    for (uint32_t i = 0; i < specs.size(); ++i) {
        const uint32_t ws = g.sealed_blocks(specs[i].pos0) * g.block_tokens;
        const uint32_t cap = specs[i].pos0 - ws + specs[i].n;
        steps.push_back(cuda::StepSpan{specs[i].pos0, specs[i].n, row, i, ws, cap, win, 0, 0});
        for (uint32_t t = 0; t < specs[i].n; ++t) row_span.push_back(i);
        win += 2ull * KVD * cap;
        row += specs[i].n;
    }
    const uint32_t n_rows = row;
    const size_t tb = g.tail_block_bytes();
    std::mt19937 rng(5);
    std::vector<uint8_t> tails(specs.size() * tb);
    for (auto &b : tails) b = uint8_t(rng() >> 24);
    for (size_t i = 1; i < tails.size(); i += 2) tails[i] &= 0x7b;  // finite fp16 everywhere
    const std::vector<float> k = random_f32(size_t(n_rows) * KVD, 6),
                             v = random_f32(size_t(n_rows) * KVD, 7);

    DeviceBuffer<uint8_t> d_tails(tails.size());
    DeviceBuffer<cuda::StepSpan> d_steps(steps.size());
    DeviceBuffer<uint32_t> d_row_span(row_span.size());
    DeviceBuffer<uint16_t> d_window(win);
    DeviceBuffer<float> d_k(k.size()), d_v(v.size());
    ASSERT_TRUE(d_tails.upload(tails) && d_steps.upload(steps) && d_row_span.upload(row_span) &&
                d_k.upload(k) && d_v.upload(v));
    const uint32_t ns = uint32_t(steps.size());
    CUDA_OK(cuda::launch_window_load_tail(g, layer, d_tails.get(), d_steps.get(), ns,
                                          d_window.get(), nullptr));
    CUDA_OK(cuda::launch_window_append(g, d_k.get(), KVD, d_v.get(), KVD, d_row_span.get(), n_rows,
                                       d_steps.get(), d_window.get(), nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<uint16_t> window = d_window.download(win);
    CUDA_OK(cuda::launch_window_store_tail(g, layer, d_window.get(), d_steps.get(), ns,
                                           d_tails.get(), nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<uint8_t> tails_after = d_tails.download(tails.size());

    auto tail_row = [&](const std::vector<uint8_t> &t, uint32_t slot, bool is_v, uint32_t h,
                        uint32_t r) {
        const size_t off = slot * tb +
                           (is_v ? g.tail_v_offset(layer, h) : g.tail_k_offset(layer, h)) +
                           size_t(r) * D * 2;
        return reinterpret_cast<const uint16_t *>(t.data() + off);
    };
    std::vector<uint8_t> want_tails = tails;
    size_t bad = 0;
    for (uint32_t i = 0; i < ns; ++i) {
        const cuda::StepSpan &st = steps[i];
        const uint32_t from_tail = st.pos0 - st.win_start;
        for (int is_v = 0; is_v < 2; ++is_v) {
            for (uint32_t h = 0; h < H; ++h) {
                const uint16_t *w =
                    window.data() + st.win_offset + (size_t(is_v) * H + h) * st.win_cap * D;
                for (uint32_t r = 0; r < st.win_cap; ++r) {
                    for (uint32_t d = 0; d < D; ++d) {
                        uint16_t want;
                        if (r < from_tail) {
                            want = tail_row(tails, i, is_v, h, r)[d];
                        } else {
                            const std::vector<float> &src = is_v ? v : k;
                            want = fp32_to_fp16(
                                src[size_t(st.row0 + r - from_tail) * KVD + h * D + d]);
                        }
                        if (w[size_t(r) * D + d] != want && ++bad <= 8)
                            ADD_FAILURE() << "span " << i << (is_v ? " V" : " K") << " head " << h
                                          << " window row " << r << " dim " << d;
                    }
                }
                if (sink && st.pos0 == 0) {  // the sink row: position 0
                    const size_t at = i * tb + (is_v ? g.tail_sink_v_offset(layer, h)
                                                     : g.tail_sink_k_offset(layer, h));
                    std::memcpy(want_tails.data() + at, w, D * 2);
                }
                // Expected tail after store: rows [0, end - tail_start) from the window.
                const uint32_t end = st.pos0 + st.n;
                const uint32_t tail_start = g.sealed_blocks(end) * g.block_tokens;
                for (uint32_t r = 0; r < end - tail_start; ++r) {
                    uint16_t *dst = const_cast<uint16_t *>(tail_row(want_tails, i, is_v, h, r));
                    std::memcpy(dst, w + size_t(tail_start - st.win_start + r) * D, D * 2);
                }
            }
        }
    }
    EXPECT_EQ(bad, 0u);
    EXPECT_EQ(0, std::memcmp(tails_after.data(), want_tails.data(), tails.size()))
        << "tail slots after store (other layers untouched)";
}

TEST(KernelParity, WindowLoadAppendStoreMoveEveryRow) {
    LLMKV_REQUIRE_DEVICE();
    check_window_kernels(false);
    check_window_kernels(true);
}

class AttentionParity : public ::testing::TestWithParam<AttnCase> {};

struct SpanSpec {
    uint32_t pos0, n;
};

// What else a launch may read: the KV sink's tail rows, a sliding window, layer groups
// (six layers, windows {0, W, W, 0, W, W}: three groups of two layers; `layer` 5 is local,
// 3 global), the local blocks no query sees released.
struct AttnLayout {
    bool sink = false;
    uint32_t window = 0;
    bool grouped = false;
    uint32_t layer = 1;
    bool learned_sinks = false;  // gpt-oss: one logit per query head joins each softmax
};

// The spans `specs` in one launch, every block filled with valid random codec bytes,
// compared with cpu::paged_attention_reference (decode to f32, double softmax), then three
// statements of independence, each bitwise: the launch again with the smallest workspace
// that holds one row at the longest context (the rows split over several launches); the
// first row alone (a row's result does not depend on the rest of the batch, whose rows
// may have far more or fewer partitions); and the launch repeated. Last, the fp16 output
// path gives those values rounded with fp32_to_fp16.
void check_attention(const AttnCase &c, const std::vector<SpanSpec> &specs,
                     const AttnLayout &x = {}) {
    KvGeometry g;
    g.n_layers = x.grouped ? 6 : 2;
    g.n_kv_heads = c.n_kv_heads;
    g.head_dim = c.head_dim;
    g.block_tokens = c.block_tokens;
    g.residual_tokens = c.residual;
    g.dtype_k = c.k;
    g.dtype_v = c.v;
    g.rotate_k = c.rotate_k;
    g.rotate_v = c.rotate_v;
    g.sink = x.sink;
    if (x.grouped) {
        set_layer_groups(g, {0, x.window, x.window, 0, x.window, x.window});
        ASSERT_EQ(g.n_groups, 3u);
    }
    // The layer's sliding window (none for a global layer of a grouped model).
    const uint32_t sliding = x.grouped && !g.layer_local(x.layer) ? 0 : x.window;
    const uint32_t D = g.head_dim, H = g.n_kv_heads, B = g.block_tokens, NG = g.n_groups;
    uint32_t total_blocks = 0;
    for (const SpanSpec &s : specs) total_blocks += g.sealed_blocks(s.pos0 + s.n) * NG;
    KvCache cache(g, total_blocks + 3, uint32_t(specs.size()));
    // Tail slots (the sink rows): random finite fp16.
    for (uint32_t slot = 0; slot < specs.size(); ++slot) {
        const std::vector<uint16_t> t = random_fp16(g.tail_block_bytes() / 2, 500 + slot);
        std::memcpy(cache.tail_data(slot), t.data(), g.tail_block_bytes());
    }

    // Fill every block of the pool (all layers, heads) with encodings of random rows.
    const CodecSpec ck = codec_spec_k(g), cv = codec_spec_v(g);
    std::vector<uint16_t> rows = random_fp16(size_t(B) * D, 1);
    std::mt19937 rng(77);
    for (uint32_t id = 0; id < total_blocks + 3; ++id) {
        for (uint32_t l = 0; l < g.n_layers; ++l) {
            for (uint32_t h = 0; h < H; ++h) {
                rows = random_fp16(size_t(B) * D, rng());
                codec_encode_head(ck, KvRole::K, rows.data(), B, D,
                                  cache.sealed_data(id) + g.sealed_k_offset(l, h));
                rows = random_fp16(size_t(B) * D, rng());
                codec_encode_head(cv, KvRole::V, rows.data(), B, D,
                                  cache.sealed_data(id) + g.sealed_v_offset(l, h));
            }
        }
    }
    // Block tables use shuffled ids; windows and queries are random.
    std::vector<uint32_t> ids(total_blocks);
    std::iota(ids.begin(), ids.end(), 2u);
    std::shuffle(ids.begin(), ids.end(), rng);
    const uint32_t QD = c.n_heads * D;
    std::vector<SessionKv> kvs(specs.size());
    std::vector<cpu::AttentionSpan> spans(specs.size());
    std::vector<cuda::StepSpan> steps(specs.size());
    std::vector<uint16_t> window;
    std::vector<uint32_t> row_span;
    std::vector<int32_t> positions;
    uint32_t n_rows = 0, next_id = 0;
    for (const SpanSpec &s : specs) n_rows += s.n;
    std::vector<float> q = random_f32(size_t(n_rows) * QD, 99);
    std::vector<float> want(size_t(n_rows) * QD), fast(size_t(n_rows) * QD);
    std::vector<size_t> win_offsets;
    std::vector<uint32_t> table;  // the device block table: per token block, each group's id
    uint32_t row = 0;
    for (size_t i = 0; i < specs.size(); ++i) {
        const SpanSpec &s = specs[i];
        const uint32_t need = g.sealed_blocks(s.pos0 + s.n);
        kvs[i].blocks.assign(ids.begin() + next_id, ids.begin() + next_id + need);
        kvs[i].local.assign(ids.begin() + next_id + need, ids.begin() + next_id + need * NG);
        kvs[i].n_tokens = s.pos0;
        // Released: the local blocks before the window of the span's first query.
        const uint32_t live_from = std::min(g.local_live_from(s.pos0), g.sealed_blocks(s.pos0));
        for (size_t e = 0; e < size_t(live_from) * (NG - 1); ++e)
            kvs[i].local[e] = SessionKv::kReleased;
        const uint32_t table_offset = uint32_t(table.size());
        for (uint32_t j = 0; j < need; ++j) {
            table.push_back(kvs[i].blocks[j]);
            for (uint32_t k = 1; k < NG; ++k) {
                const uint32_t id = kvs[i].local[size_t(j) * (NG - 1) + k - 1];
                table.push_back(id == SessionKv::kReleased ? LLMKV_CUDA_RELEASED_BLOCK : id);
            }
        }
        const uint32_t ws = g.sealed_blocks(s.pos0) * B, cap = s.pos0 - ws + s.n;
        const size_t off = window.size();
        std::vector<uint16_t> w = random_fp16(size_t(2) * H * cap * D, 1000 + uint32_t(i));
        window.insert(window.end(), w.begin(), w.end());
        win_offsets.push_back(off);
        cuda::StepSpan &st = steps[i];
        st.pos0 = s.pos0;
        st.n = s.n;
        st.row0 = row;
        st.tail_slot = uint32_t(i);
        st.win_start = ws;
        st.win_cap = cap;
        st.win_offset = off;
        st.blocks_offset = table_offset;
        st.n_blocks = need;
        for (uint32_t t = 0; t < s.n; ++t) {
            row_span.push_back(uint32_t(i));
            positions.push_back(int32_t(s.pos0 + t));
        }
        next_id += need * NG;
        row += s.n;
    }
    for (size_t i = 0; i < specs.size(); ++i) {
        cpu::AttentionSpan &a = spans[i];
        a.kv = &kvs[i];
        a.window_k = window.data() + win_offsets[i];
        a.window_v = a.window_k + size_t(H) * steps[i].win_cap * D;
        a.window_start = steps[i].win_start;
        a.window_capacity = steps[i].win_cap;
        a.pos0 = specs[i].pos0;
        a.n = specs[i].n;
        a.q = q.data() + size_t(steps[i].row0) * QD;
        a.sink = g.sink ? cache.tail_data(uint32_t(i)) : nullptr;
    }
    cpu::AttentionParams ap{};
    ap.layer = x.layer;
    ap.window = sliding;
    ap.n_heads = c.n_heads;
    ap.scale = 1.0f / std::sqrt(float(D));
    ap.q_stride = QD;
    ap.out_stride = QD;
    std::vector<float> sinks;
    if (x.learned_sinks) {
        for (uint32_t h = 0; h < c.n_heads; ++h) sinks.push_back(-3.0f + 0.9f * float(h));
        ap.sinks = sinks.data();
    }
    for (size_t i = 0; i < specs.size(); ++i)
        spans[i].out = want.data() + size_t(steps[i].row0) * QD;
    cpu::paged_attention_reference(cache, ap, spans.data(), spans.size());
    ThreadPool pool(2);
    cpu::AttentionScratch scratch;
    for (size_t i = 0; i < specs.size(); ++i)
        spans[i].out = fast.data() + size_t(steps[i].row0) * QD;
    cpu::paged_attention(cache, ap, spans.data(), spans.size(), pool, scratch);

    // GPU.
    const size_t pool_bytes = size_t(total_blocks + 3) * g.sealed_block_bytes();
    DeviceBuffer<uint8_t> d_pool(pool_bytes);
    DeviceBuffer<uint32_t> d_ids(std::max<size_t>(table.size(), 1)), d_row_span(row_span.size());
    const size_t tail_bytes = specs.size() * g.tail_block_bytes();
    DeviceBuffer<uint8_t> d_tails(tail_bytes);
    DeviceBuffer<uint16_t> d_window(window.size());
    DeviceBuffer<cuda::StepSpan> d_steps(steps.size());
    DeviceBuffer<float> d_q(q.size()), d_out(q.size());
    size_t ws_bytes = 4 << 20;
    uint32_t max_ctx = 0;
    for (const SpanSpec &s : specs) max_ctx = std::max(max_ctx, s.pos0 + s.n);
    const size_t min_ws = cuda::attention_min_workspace(c.n_heads, D, max_ctx);
    ws_bytes = std::max(ws_bytes, 2 * min_ws);
    DeviceBuffer<uint8_t> d_ws(ws_bytes);
    DeviceBuffer<float> d_sinks(std::max<size_t>(sinks.size(), 1));
    ASSERT_TRUE(sinks.empty() || d_sinks.upload(sinks));
    ASSERT_TRUE(d_pool.upload(cache.sealed_data(0), pool_bytes));
    ASSERT_TRUE(table.empty() || d_ids.upload(table));
    ASSERT_TRUE(d_tails.upload(cache.tail_data(0), tail_bytes));
    ASSERT_TRUE(d_row_span.upload(row_span) && d_window.upload(window) && d_steps.upload(steps) &&
                d_q.upload(q));
    cuda::AttentionArgs a;
    a.g = g;  // the kernels take the one KV layout description as it is
    a.layer = x.layer;
    a.sliding_window = sliding;
    a.tails = d_tails.get();
    a.n_heads = c.n_heads;
    a.scale = ap.scale;
    a.q = d_q.get();
    a.q_stride = QD;
    a.pool = d_pool.get();
    a.block_ids = d_ids.get();
    a.window = d_window.get();
    a.spans = d_steps.get();
    a.row_span = d_row_span.get();
    a.n_rows = n_rows;
    std::vector<uint32_t> parts(n_rows + 1);
    ASSERT_TRUE(cuda::attention_partition_plan(positions.data(), n_rows, parts.data()));
    DeviceBuffer<uint32_t> d_parts(parts.size()), d_item_row(parts.back());
    ASSERT_TRUE(d_parts.upload(parts));
    CUDA_OK(cuda::launch_attention_item_rows(d_parts.get(), n_rows, d_item_row.get(), nullptr));
    a.row_parts_host = parts.data();
    a.row_parts = d_parts.get();
    a.item_row = d_item_row.get();
    a.out_f32 = d_out.get();
    a.out_stride = QD;
    a.workspace = reinterpret_cast<float *>(d_ws.get());
    a.workspace_bytes = ws_bytes;
    a.sinks = sinks.empty() ? nullptr : d_sinks.get();
    CUDA_OK(cuda::launch_paged_attention(a, nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<float> got = d_out.download(q.size());
    ASSERT_EQ(got.size(), want.size());
    double max_err = 0, max_err_cpu = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        max_err = std::max(max_err, std::fabs(double(got[i]) - want[i]));
        max_err_cpu = std::max(max_err_cpu, std::fabs(double(fast[i]) - want[i]));
    }
    // Outputs are O(1) (averages of N(0,1)-ish values); f32 accumulation in another order
    // than the CPU's, and the rotated domains evaluated in f32: ~1e-6 typical.
    EXPECT_LE(max_err, 2e-4) << "CPU fast kernel error for comparison: " << max_err_cpu;

    auto relaunch = [&](uint32_t n, size_t workspace) {
        DeviceBuffer<float> d_other(q.size());
        cuda::AttentionArgs b = a;
        b.n_rows = n;
        b.workspace_bytes = workspace;
        b.out_f32 = d_other.get();
        EXPECT_EQ(cuda::launch_paged_attention(b, nullptr), cudaSuccess);
        EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        return d_other.download(size_t(n) * QD);
    };
    const std::vector<float> small_ws = relaunch(n_rows, min_ws);
    EXPECT_EQ(0, std::memcmp(small_ws.data(), got.data(), got.size() * 4))
        << "split over launches by a " << min_ws << "-byte workspace";
    const std::vector<float> first_alone = relaunch(1, ws_bytes);
    EXPECT_EQ(0, std::memcmp(first_alone.data(), got.data(), size_t(QD) * 4))
        << "the first row alone";
    const std::vector<float> again = relaunch(n_rows, ws_bytes);
    EXPECT_EQ(0, std::memcmp(again.data(), got.data(), got.size() * 4)) << "repeated";

    // The fp16 output path (out_f16): the same values, rounded by the ported fp32_to_fp16.
    DeviceBuffer<uint16_t> d_half(q.size());
    cuda::AttentionArgs h = a;
    h.out_f32 = nullptr;
    h.out_f16 = d_half.get();
    CUDA_OK(cuda::launch_paged_attention(h, nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<uint16_t> half = d_half.download(q.size());
    ASSERT_EQ(half.size(), got.size());
    size_t half_mismatch = 0;
    for (size_t i = 0; i < got.size(); ++i) half_mismatch += half[i] != fp32_to_fp16(got[i]);
    EXPECT_EQ(half_mismatch, 0u);
}

// Several spans in one launch: a long decode, a prefill chunk that seals blocks, a fresh
// prompt, a decode past a partition boundary.
TEST_P(AttentionParity, MatchesTheCpuReferenceForDecodeAndPrefillChunks) {
    LLMKV_REQUIRE_DEVICE();
    const AttnCase c = GetParam();
    check_attention(c, {{700, 1}, {37, 29}, {0, 13}, {255, 2}, {c.block_tokens * 3 + 1, 1}});
}

// Long contexts, hundreds of partitions per row, batched with short rows: a 128k decode first
// (512 partitions, batched with rows of 1 partition; alone it must give the same bits), a 32k
// decode, a prefill chunk at 4k. int8 K / int4 V, head_dim 64 (the pool stays ~90 MB).
TEST(AttentionLongContext, MatchesTheCpuReferenceAndIsIndependentOfTheBatch) {
    LLMKV_REQUIRE_DEVICE();
    check_attention(AttnCase{LLMKV_KV_INT8, LLMKV_KV_INT4, false, true, 64, 16, 0, 8, 2},
                    {{131071, 1}, {0, 5}, {32767, 1}, {4000, 3}, {255, 1}});
}

// head_dim 256 (Gemma 3) with a 16k context, and 128 with 8 query heads per KV head.
TEST(AttentionLongContext, WideHeadsAtLongContext) {
    LLMKV_REQUIRE_DEVICE();
    check_attention(AttnCase{LLMKV_KV_F16, LLMKV_KV_F16, false, false, 256, 16, 0, 4, 1},
                    {{16383, 1}, {700, 4}, {0, 2}});
    check_attention(AttnCase{LLMKV_KV_FP8_E4M3, LLMKV_KV_INT8, true, true, 128, 16, 0, 32, 4},
                    {{9000, 1}, {1, 7}, {511, 1}});
}

// The KV sink (a sealed position 0 read from the tail's fp16 sink row, with rotated and
// plain codecs, with residual rows), sliding windows (blocks kept, queries before and past
// the window's start), learned attention sinks (gpt-oss) and layer groups (a local layer reading
// its group's blocks, the local blocks outside every window released; a global layer of the same
// model), each against the CPU reference with the CPU's own layouts.
TEST(AttentionLayouts, SinkWindowsAndLayerGroupsMatchTheCpuReference) {
    LLMKV_REQUIRE_DEVICE();
    const std::vector<SpanSpec> specs = {{700, 1}, {37, 29}, {0, 13}, {49, 1}, {255, 2}};
    const AttnCase rot{LLMKV_KV_INT4, LLMKV_KV_INT4, true, true, 64, 16, 0, 8, 2};
    const AttnCase plain{LLMKV_KV_INT8, LLMKV_KV_FP8_E4M3, false, false, 32, 8, 5, 6, 3};
    for (const AttnCase &c : {rot, plain}) {
        SCOPED_TRACE(codec_name(c.k));
        {
            SCOPED_TRACE("sink");
            check_attention(c, specs, {true, 0, false, 1});
        }
        {
            SCOPED_TRACE("sliding window 100, blocks kept");
            check_attention(c, specs, {false, 100, false, 1});
        }
        {
            SCOPED_TRACE("sink and sliding window 100");
            check_attention(c, specs, {true, 100, false, 1});
        }
        {
            SCOPED_TRACE("learned sinks");
            check_attention(c, specs, {false, 0, false, 1, true});
        }
        {
            SCOPED_TRACE("learned sinks, the KV sink and sliding window 100");
            check_attention(c, specs, {true, 100, false, 1, true});
        }
        {
            SCOPED_TRACE("layer groups, local layer 5");
            check_attention(c, specs, {true, 100, true, 5});
        }
        {
            SCOPED_TRACE("layer groups, global layer 3");
            check_attention(c, specs, {true, 100, true, 3});
        }
    }
}

INSTANTIATE_TEST_SUITE_P(
    CodecPairs, AttentionParity,
    ::testing::Values(AttnCase{LLMKV_KV_F16, LLMKV_KV_F16, false, false, 64, 16, 0, 9, 3},
                      AttnCase{LLMKV_KV_BF16, LLMKV_KV_BF16, false, false, 64, 16, 0, 9, 3},
                      AttnCase{LLMKV_KV_FP8_E4M3, LLMKV_KV_FP8_E4M3, false, false, 128, 16, 0, 32,
                               8},
                      AttnCase{LLMKV_KV_INT8, LLMKV_KV_INT8, false, false, 64, 16, 0, 9, 3},
                      AttnCase{LLMKV_KV_INT8, LLMKV_KV_INT8, true, true, 128, 16, 0, 32, 8},
                      AttnCase{LLMKV_KV_INT8, LLMKV_KV_INT4, false, true, 64, 16, 0, 9, 3},
                      AttnCase{LLMKV_KV_INT4, LLMKV_KV_INT4, true, true, 64, 16, 0, 9, 3},
                      AttnCase{LLMKV_KV_INT4, LLMKV_KV_INT4, false, false, 48, 16, 0, 4, 2},
                      AttnCase{LLMKV_KV_F16, LLMKV_KV_INT8, false, false, 16, 4, 0, 4, 2},
                      AttnCase{LLMKV_KV_INT8, LLMKV_KV_FP8_E4M3, false, false, 40, 5, 3, 6, 2},
                      AttnCase{LLMKV_KV_INT4, LLMKV_KV_INT8, true, false, 64, 16, 32, 16, 1},
                      AttnCase{LLMKV_KV_BF16, LLMKV_KV_INT4, false, false, 128, 32, 8, 64, 8}),
    attn_name);

}  // namespace
}  // namespace llmkv
