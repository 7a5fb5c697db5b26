// The mixture-of-experts ops of the CUDA module (ABI 7 and 8) through its C ABI: the experts and
// weights route_experts picks are the CPU's bit for bit (the same routing code on the host),
// matmul_experts multiplies each slot by its expert (zero rows for another rank's expert,
// x read per token or per slot), combine_experts is bitwise the CPU's weighted sum,
// mul_sigmoid within ulps of it; bad routes are refused without a sticky error. Every test
// skips without a device (the emulator provides one).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "common/float_math.h"
#include "common/half.h"
#include "gpu_test_util.h"
#include "llmkv.h"
#include "module_test_util.h"
#include "session_helpers.h"
#include "tensor/expert_routing.h"
#include "tiny_model.h"

namespace llmkv {
namespace {

using gputest::random_f32;

struct MoeContext {
    const llmkv_cuda_api *api = CudaModule::get().api();
    gputest::ContextPtr guard{nullptr, nullptr};
    llmkv_cuda_context *ctx = nullptr;

    MoeContext() {
        KvGeometry g;
        g.n_layers = 1;
        g.n_kv_heads = 1;
        g.head_dim = 16;
        g.block_tokens = 4;
        std::string err;
        guard = gputest::create_context(api, g, 4, 2, 8, nullptr, &err);
        EXPECT_TRUE(guard) << err;
        ctx = guard.get();
    }
    llmkv_cuda_tensor alloc(uint32_t rows, uint32_t cols) {
        llmkv_cuda_tensor t{};
        EXPECT_EQ(api->alloc_activation(ctx, rows, cols, &t), LLMKV_CUDA_OK);
        return t;
    }
    // A (rows x slots * cols) buffer seen as rows * slots rows of cols.
    llmkv_cuda_tensor alloc_slots(uint32_t rows, uint32_t slots, uint32_t cols) {
        llmkv_cuda_tensor t = alloc(rows, slots * cols);
        return llmkv_cuda_tensor{t.data, rows * slots, cols};
    }
    void write(llmkv_cuda_tensor t, const std::vector<float> &v) {
        ASSERT_EQ(v.size(), size_t(t.rows) * t.cols);
        ASSERT_EQ(api->write_activation(ctx, t, v.data()), LLMKV_CUDA_OK);
    }
    std::vector<float> read(llmkv_cuda_tensor t) {
        std::vector<float> v(size_t(t.rows) * t.cols);
        EXPECT_EQ(api->read_activation(ctx, t, v.data()), LLMKV_CUDA_OK);
        return v;
    }
};

constexpr uint32_t kTokens = 7, kExperts = 6, kUsed = 2, kEmbd = 32, kFf = 16;

// Router logits with a tie in row 3 (experts 1 and 4 equal and best: the lower id first).
std::vector<float> router_logits() {
    std::vector<float> z = random_f32(size_t(kTokens) * kExperts, 11, 3.0f);
    z[3 * kExperts + 1] = z[3 * kExperts + 4] = 9.0f;
    return z;
}

std::vector<float> cpu_routes(const std::vector<float> &z, const ExpertRouting &r) {
    std::vector<float> out(size_t(kTokens) * 2 * r.n_used), p(r.n_expert);
    std::vector<uint8_t> taken(r.n_expert);
    for (uint32_t t = 0; t < kTokens; ++t)
        route_token(z.data() + size_t(t) * r.n_expert, r, p.data(), taken.data(),
                    out.data() + size_t(t) * 2 * r.n_used);
    return out;
}

TEST(MoeModule, RoutesAreTheCpusBitwise) {
    LLMKV_REQUIRE_MODULE_DEVICE();
    MoeContext m;
    ASSERT_TRUE(m.ctx);
    const std::vector<float> z = router_logits();
    llmkv_cuda_tensor logits = m.alloc(kTokens, kExperts), routes = m.alloc(kTokens, 2 * kUsed);
    m.write(logits, z);
    // Softmax over all experts, and (gpt-oss, ABI 8) over the chosen experts' logits only.
    for (const bool chosen : {false, true}) {
        for (const bool norm : {false, true}) {
            for (const float scale : {1.0f, 2.5f}) {
                ExpertRouting r;
                r.n_expert = kExperts;
                r.n_used = kUsed;
                r.norm_weights = norm;
                r.weight_scale = scale;
                if (chosen) r.gating = ExpertRouting::Gating::kSoftmaxChosen;
                const uint32_t flags = (norm ? LLMKV_CUDA_MOE_NORM_WEIGHTS : 0u) |
                                       (chosen ? LLMKV_CUDA_MOE_SOFTMAX_CHOSEN : 0u);
                ASSERT_EQ(
                    m.api->route_experts(m.ctx, logits, kExperts, kUsed, flags, scale, routes),
                    LLMKV_CUDA_OK)
                    << m.api->last_error(m.ctx);
                const std::vector<float> got = m.read(routes), want = cpu_routes(z, r);
                EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
                    << "chosen " << chosen << " norm " << norm << " scale " << scale;
                EXPECT_EQ(got[3 * 2 * kUsed], 1.0f);  // the tie: the lower id first
                EXPECT_EQ(got[3 * 2 * kUsed + 1], 4.0f);
            }
        }
    }
}

// add_expert_bias (ABI 8): each routed row gets its expert's bias, none for handle 0; a route
// to an expert that does not exist is INVALID.
TEST(MoeModule, ExpertBiasesFollowTheRoutes) {
    LLMKV_REQUIRE_MODULE_DEVICE();
    MoeContext m;
    ASSERT_TRUE(m.ctx);
    const std::vector<float> z = router_logits();
    llmkv_cuda_tensor logits = m.alloc(kTokens, kExperts), routes = m.alloc(kTokens, 2 * kUsed);
    m.write(logits, z);
    ASSERT_EQ(m.api->route_experts(m.ctx, logits, kExperts, kUsed, 0u, 1.0f, routes),
              LLMKV_CUDA_OK);
    const uint32_t C = 24;
    std::vector<std::vector<float>> biases(kExperts);
    std::vector<llmkv_cuda_weight> handles(kExperts, 0);
    for (uint32_t e = 0; e < kExperts; ++e) {
        if (e == 1) continue;  // no bias: nothing added
        biases[e] = gputest::random_f32(C, 40 + e);
        ASSERT_EQ(m.api->upload_vector(m.ctx, biases[e].data(), C, &handles[e]), LLMKV_CUDA_OK);
    }
    const std::vector<float> yv = gputest::random_f32(size_t(kTokens) * kUsed * C, 9);
    llmkv_cuda_tensor y = m.alloc_slots(kTokens, kUsed, C);
    m.write(y, yv);
    ASSERT_EQ(m.api->add_expert_bias(m.ctx, y, routes, kUsed, handles.data(), kExperts),
              LLMKV_CUDA_OK)
        << m.api->last_error(m.ctx);
    const std::vector<float> got = m.read(y), r = m.read(routes);
    for (uint32_t t = 0; t < kTokens; ++t) {
        for (uint32_t i = 0; i < kUsed; ++i) {
            const uint32_t e = uint32_t(r[t * 2 * kUsed + i]);
            for (uint32_t c = 0; c < C; ++c) {
                const size_t at = (size_t(t) * kUsed + i) * C + c;
                ASSERT_EQ(got[at], handles[e] ? yv[at] + biases[e][c] : yv[at]) << t << " " << i;
            }
        }
    }
    // A bias of the wrong width, and a route to expert kExperts, are refused.
    llmkv_cuda_weight narrow = 0;
    ASSERT_EQ(m.api->upload_vector(m.ctx, biases[0].data(), C - 1, &narrow), LLMKV_CUDA_OK);
    std::vector<llmkv_cuda_weight> bad = handles;
    bad[0] = narrow;
    EXPECT_EQ(m.api->add_expert_bias(m.ctx, y, routes, kUsed, bad.data(), kExperts),
              LLMKV_CUDA_ERR_INVALID);
    std::vector<float> spoiled = r;
    spoiled[0] = float(kExperts);
    m.write(routes, spoiled);
    EXPECT_EQ(m.api->add_expert_bias(m.ctx, y, routes, kUsed, handles.data(), kExperts),
              LLMKV_CUDA_ERR_INVALID);
    EXPECT_NE(std::string(m.api->last_error(m.ctx)).find("expert"), std::string::npos);
}

TEST(MoeModule, ExpertProductsCombineAndTheSharedGate) {
    LLMKV_REQUIRE_MODULE_DEVICE();
    MoeContext m;
    ASSERT_TRUE(m.ctx);
    // Experts 0..5 (kFf x kEmbd, fp16 on the device); expert 2 held by another rank (handle 0).
    std::vector<std::vector<uint16_t>> w16(kExperts);
    std::vector<llmkv_cuda_weight> handles(kExperts, 0);
    for (uint32_t e = 0; e < kExperts; ++e) {
        const std::vector<float> w = random_f32(size_t(kFf) * kEmbd, 100 + e, 0.5f);
        for (float v : w) w16[e].push_back(fp32_to_fp16(v));
        if (e == 2) continue;
        ASSERT_EQ(m.api->upload_matrix(m.ctx, w16[e].data(), kFf, kEmbd, &handles[e]),
                  LLMKV_CUDA_OK);
    }
    const std::vector<float> z = router_logits(), x = random_f32(size_t(kTokens) * kEmbd, 5);
    llmkv_cuda_tensor logits = m.alloc(kTokens, kExperts), routes = m.alloc(kTokens, 2 * kUsed),
                      xt = m.alloc(kTokens, kEmbd), y = m.alloc_slots(kTokens, kUsed, kFf);
    m.write(logits, z);
    m.write(xt, x);
    ASSERT_EQ(m.api->route_experts(m.ctx, logits, kExperts, kUsed, LLMKV_CUDA_MOE_NORM_WEIGHTS,
                                   1.0f, routes),
              LLMKV_CUDA_OK);
    const std::vector<float> rs = m.read(routes);
    // Each token's row through each of its experts (x rounded to fp16 as the GEMM's input).
    ASSERT_EQ(m.api->matmul_experts(m.ctx, handles.data(), kExperts, xt, routes, kUsed, y),
              LLMKV_CUDA_OK)
        << m.api->last_error(m.ctx);
    const std::vector<float> got = m.read(y);
    size_t zero_slots = 0;
    for (uint32_t t = 0; t < kTokens; ++t) {
        for (uint32_t i = 0; i < kUsed; ++i) {
            const uint32_t e = uint32_t(rs[size_t(t) * 2 * kUsed + i]), slot = t * kUsed + i;
            for (uint32_t r = 0; r < kFf; ++r) {
                double want = 0;
                for (uint32_t c = 0; c < kEmbd; ++c)
                    want += double(fp16_to_fp32(w16[e][size_t(r) * kEmbd + c])) *
                            double(fp16_to_fp32(fp32_to_fp16(x[size_t(t) * kEmbd + c])));
                if (e == 2) want = 0;  // another rank's expert
                EXPECT_NEAR(got[size_t(slot) * kFf + r], want, 1e-4 * (1 + std::fabs(want)))
                    << "token " << t << " expert " << e << " row " << r;
            }
            zero_slots += e == 2;
        }
    }
    EXPECT_GT(zero_slots, 0u) << "no token chose expert 2: the zero rows went untested";

    // The weighted sum of each token's slots: bitwise the CPU's order of rounded operations.
    const std::vector<float> ys = random_f32(size_t(kTokens) * kUsed * kEmbd, 9);
    llmkv_cuda_tensor yt = m.alloc_slots(kTokens, kUsed, kEmbd), out = m.alloc(kTokens, kEmbd);
    m.write(yt, ys);
    ASSERT_EQ(m.api->combine_experts(m.ctx, yt, routes, kUsed, out), LLMKV_CUDA_OK);
    const std::vector<float> sum = m.read(out);
    for (uint32_t t = 0; t < kTokens; ++t) {
        for (uint32_t c = 0; c < kEmbd; ++c) {
            float s = 0.0f;
            for (uint32_t i = 0; i < kUsed; ++i)
                s +=
                    rs[size_t(t) * 2 * kUsed + kUsed + i] * ys[(size_t(t) * kUsed + i) * kEmbd + c];
            ASSERT_EQ(sum[size_t(t) * kEmbd + c], s) << t << ", " << c;
        }
    }

    // The shared expert's gate: x *= sigmoid(g) per row (CUDA's expf within 2 ulp).
    llmkv_cuda_tensor g = m.alloc(kTokens, 1);
    const std::vector<float> gv = random_f32(kTokens, 13, 4.0f);
    m.write(g, gv);
    m.write(xt, x);
    ASSERT_EQ(m.api->mul_sigmoid(m.ctx, xt, g), LLMKV_CUDA_OK);
    const std::vector<float> gated = m.read(xt);
    for (uint32_t t = 0; t < kTokens; ++t) {
        const float s = 1.0f / (1.0f + exp_float(-gv[t]));
        for (uint32_t c = 0; c < kEmbd; ++c) {
            const float want = x[size_t(t) * kEmbd + c] * s;
            EXPECT_NEAR(gated[size_t(t) * kEmbd + c], want, 4e-7f * std::fabs(want)) << t;
        }
    }
}

// Each slot's own row (x.rows == T * n_used: the down projection), and routes that were not
// made by route_experts (copied back first).
TEST(MoeModule, PerSlotRowsAndRoutesWrittenByTheHost) {
    LLMKV_REQUIRE_MODULE_DEVICE();
    MoeContext m;
    ASSERT_TRUE(m.ctx);
    std::vector<uint16_t> w16;
    const std::vector<float> w = random_f32(size_t(kFf) * kEmbd, 7, 0.5f);
    for (float v : w) w16.push_back(fp32_to_fp16(v));
    std::vector<llmkv_cuda_weight> handles(kExperts, 0);
    for (uint32_t e = 0; e < kExperts; ++e)
        ASSERT_EQ(m.api->upload_matrix(m.ctx, w16.data(), kFf, kEmbd, &handles[e]), LLMKV_CUDA_OK);
    std::vector<float> rs(size_t(kTokens) * 2 * kUsed, 0.5f);
    for (uint32_t t = 0; t < kTokens; ++t) {
        rs[size_t(t) * 2 * kUsed] = float(t % kExperts);
        rs[size_t(t) * 2 * kUsed + 1] = float((t + 3) % kExperts);
    }
    const std::vector<float> x = random_f32(size_t(kTokens) * kUsed * kEmbd, 21);
    llmkv_cuda_tensor routes = m.alloc(kTokens, 2 * kUsed),
                      xt = m.alloc_slots(kTokens, kUsed, kEmbd),
                      y = m.alloc_slots(kTokens, kUsed, kFf);
    m.write(routes, rs);
    m.write(xt, x);
    ASSERT_EQ(m.api->matmul_experts(m.ctx, handles.data(), kExperts, xt, routes, kUsed, y),
              LLMKV_CUDA_OK)
        << m.api->last_error(m.ctx);
    const std::vector<float> got = m.read(y);
    for (uint32_t s = 0; s < kTokens * kUsed; ++s) {
        for (uint32_t r = 0; r < kFf; ++r) {
            double want = 0;
            for (uint32_t c = 0; c < kEmbd; ++c)
                want += double(fp16_to_fp32(w16[size_t(r) * kEmbd + c])) *
                        double(fp16_to_fp32(fp32_to_fp16(x[size_t(s) * kEmbd + c])));
            EXPECT_NEAR(got[size_t(s) * kFf + r], want, 1e-4 * (1 + std::fabs(want))) << s;
        }
    }
    // An expert id beyond the layer's: INVALID, and the context stays usable.
    rs[5] = float(kExperts);
    m.write(routes, rs);
    EXPECT_EQ(m.api->matmul_experts(m.ctx, handles.data(), kExperts, xt, routes, kUsed, y),
              LLMKV_CUDA_ERR_INVALID);
    EXPECT_NE(std::string(m.api->last_error(m.ctx)).find("expert 6 of 6"), std::string::npos)
        << m.api->last_error(m.ctx);
    EXPECT_EQ(m.api->sticky_error(m.ctx), LLMKV_CUDA_OK);
    rs[5] = 1.0f;
    m.write(routes, rs);
    EXPECT_EQ(m.api->matmul_experts(m.ctx, handles.data(), kExperts, xt, routes, kUsed, y),
              LLMKV_CUDA_OK);
}

// An engine on CUDA running a Qwen3-MoE-style model (Q4_1 experts kept encoded on the
// device), in batch-invariant mode: sessions batched together, prefilled in chunks of the
// token budget, or served from the prefix cache give the tokens each gives alone.
TEST(EngineCudaMoe, BatchedChunkedAndCachedSessionsGiveTheirSoloTokens) {
    LLMKV_REQUIRE_MODULE_DEVICE();
    setenv("LLMKV_CUDA_BATCH_INVARIANT", "1", 1);
    testing::TinyModelSpec spec;
    spec.arch = "qwen3moe";
    spec.n_expert = 8;
    spec.n_ff_expert = 32;
    spec.router_scale = 2.0f;
    spec.embd_scale = 0.05f;  // the layers outweigh the embedding: tokens depend on the KV
    spec.weight_type = TensorType::Q4_1;
    spec.embd_type = TensorType::Q8_0;
    spec.n_ctx = 128;
    const std::string path = testing::temp_path("cuda_moe.gguf");
    testing::write_tiny_model(spec, path);
    auto make = [&](uint32_t budget) {
        llmkv_engine_params p;
        llmkv_engine_params_init(&p);
        p.model_path = path.c_str();
        p.backend = LLMKV_BACKEND_CUDA;
        p.kv_block_tokens = 4;
        p.max_batch_tokens = budget;
        p.flags = LLMKV_ENGINE_PREFIX_CACHE;
        llmkv_engine *e = nullptr;
        EXPECT_EQ(llmkv_engine_create(&p, &e), LLMKV_OK) << llmkv_last_error();
        return e;
    };
    llmkv_engine *e = make(0), *small = make(5);
    ASSERT_TRUE(e && small);
    llmkv_engine_info info;
    info.struct_size = sizeof info;
    ASSERT_EQ(llmkv_engine_get_info(e, &info), LLMKV_OK);
    EXPECT_EQ(info.backend, uint32_t(LLMKV_BACKEND_CUDA));
    const llmkv_session_params sp = testing::sampling(0.0f, 1);
    std::vector<std::vector<int32_t>> prompts, solos;
    for (uint32_t i = 0; i < 3; ++i) {
        prompts.push_back(testing::byte_tokens(9 + 6 * i, 40 + i));
        solos.push_back(testing::solo(e, sp, prompts.back(), 12));
    }
    EXPECT_NE(solos[0], solos[1]);
    std::vector<llmkv_session *> ss;
    for (uint32_t i = 0; i < 3; ++i) ss.push_back(testing::start(e, sp, prompts[i], 12));
    ASSERT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK) << llmkv_last_error();
    for (uint32_t i = 0; i < 3; ++i) {
        EXPECT_EQ(testing::tokens_of(ss[i]), solos[i]) << "batched session " << i;
        llmkv_session_destroy(ss[i]);
    }
    // The prompts again: their full blocks now come from the prefix cache.
    const llmkv_stats before = testing::stats(e);
    EXPECT_EQ(testing::solo(e, sp, prompts[2], 12), solos[2]);
    EXPECT_GT(testing::stats(e).prefix_hit_tokens, before.prefix_hit_tokens);
    for (uint32_t i = 0; i < 3; ++i)
        EXPECT_EQ(testing::solo(small, sp, prompts[i], 12), solos[i]) << "5-token budget " << i;
    llmkv_engine_destroy(small);
    llmkv_engine_destroy(e);
    std::remove(path.c_str());
    unsetenv("LLMKV_CUDA_BATCH_INVARIANT");
}

}  // namespace
}  // namespace llmkv
