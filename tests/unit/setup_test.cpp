// The set-up stage: parameters resolved once, capabilities asked before anything is built,
// the KV geometry decided from them (src/setup/, backend/factory.h, parallel/rank_plan.h).
#include <gtest/gtest.h>

#include <string>

#include "backend/factory.h"
#include "common/error.h"
#include "parallel/rank_plan.h"
#include "setup/engine_config.h"
#include "setup/kv_plan.h"

namespace llmkv {
namespace {

// A Gemma-3-like shape: 6 layers, every layer but each third one local (window 32).
LlamaConfig windowed_config() {
    LlamaConfig c;
    c.n_ctx_train = 1024;
    c.n_layers = 6;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.head_dim = 64;
    c.layer_window = {32, 32, 0, 32, 32, 0};
    return c;
}

llmkv_engine_params params() {
    llmkv_engine_params p;
    llmkv_engine_params_init(&p);
    p.model_path = "unused.gguf";
    return p;
}

// A backend that reads neither the KV sink nor layer groups (the CUDA one before module ABI 6):
// what the set-up stage does for it.
BackendCapabilities cuda_like() {
    BackendCapabilities c;
    c.kind = LLMKV_BACKEND_CUDA;
    c.kv_sink = false;
    c.layer_groups = false;
    return c;
}

TEST(EngineSetup, ResolvesDefaultsOnceFromTheParametersAndTheModel) {
    llmkv_engine_params p = params();
    p.max_context = 100000;  // beyond the trained context: clamped, with a warning
    const EngineConfig cfg = resolve_engine_config(p, windowed_config());
    EXPECT_EQ(cfg.max_context, 1024u);
    EXPECT_EQ(cfg.kv_geometry.block_tokens, kDefaultBlockTokens);
    EXPECT_EQ(cfg.max_sessions, kDefaultMaxSessions);
    EXPECT_EQ(cfg.max_batch_tokens, kDefaultMaxBatchTokens);
    EXPECT_EQ(cfg.params.kv_block_tokens, kDefaultBlockTokens);
    EXPECT_EQ(cfg.window, 32u);
    EXPECT_EQ(cfg.layer_windows.size(), 6u);
    EXPECT_EQ(cfg.params.model_path, nullptr);  // borrowed pointers are not kept
    EXPECT_GE(cfg.n_threads, 1u);
    EXPECT_EQ(cfg.tp_size, 1u);
    EXPECT_FALSE(cfg.kv_geometry.sink);  // f16 KV: no sink unless asked
}

TEST(EngineSetup, BadParametersAreRefusedBeforeTheModelIsRead) {
    llmkv_engine_params p = params();
    p.kv_rotation = llmkv_kv_rotation(99);
    try {
        check_engine_params(p);
        FAIL() << "accepted";
    } catch (const Error &e) {
        EXPECT_EQ(e.status(), LLMKV_ERR_INVALID_ARGUMENT);
        EXPECT_NE(std::string(e.what()).find("kv_rotation"), std::string::npos) << e.what();
    }
    p = params();
    p.model_path = nullptr;
    EXPECT_THROW(check_engine_params(p), Error);
}

TEST(EngineSetup, TheCpuCanDoEverythingAndCudaWithoutADeviceIsUnavailableWithTheReason) {
    const BackendCapabilities cpu = backend_capabilities(LLMKV_BACKEND_CPU, 0);
    EXPECT_EQ(cpu.kind, LLMKV_BACKEND_CPU);
    EXPECT_TRUE(cpu.available && cpu.kv_sink && cpu.layer_groups && cpu.reads_host_blocks);
    EXPECT_TRUE(cpu.layer_kinds & kLayerPagedAttention);
    if (gpu_device_count(nullptr) > 0)
        GTEST_SKIP() << "a CUDA device is visible: the unavailable case cannot be shown";
    const BackendCapabilities cuda = backend_capabilities(LLMKV_BACKEND_CUDA, 0);
    EXPECT_EQ(cuda.kind, LLMKV_BACKEND_CUDA);
    EXPECT_FALSE(cuda.available);
    EXPECT_FALSE(cuda.why.empty());
    EXPECT_EQ(backend_capabilities(LLMKV_BACKEND_AUTO, 0).kind, LLMKV_BACKEND_CPU);
}

TEST(EngineSetup, GeometryKeepsTheSinkAndLayerGroupsOnlyWhereTheBackendReadsThem) {
    llmkv_engine_params p = params();
    p.kv_dtype_k = p.kv_dtype_v = LLMKV_KV_INT4;  // the sink by default
    const EngineConfig cfg = resolve_engine_config(p, windowed_config());
    ASSERT_TRUE(cfg.kv_geometry.sink);
    BackendCapabilities cpu = backend_capabilities(LLMKV_BACKEND_CPU, 0);
    const KvGeometry on_cpu = plan_kv_geometry(cfg, cpu, false);
    EXPECT_TRUE(on_cpu.sink);
    // Groups of 2 layers (the 2 global ones): 1 global group and 2 groups of the 4 local ones.
    EXPECT_EQ(on_cpu.n_groups, 3u);
    EXPECT_EQ(on_cpu.group_layers, 2u);
    BackendCapabilities cuda = cuda_like();
    const KvGeometry on_cuda = plan_kv_geometry(cfg, cuda, false);
    EXPECT_FALSE(on_cuda.sink);
    EXPECT_EQ(on_cuda.n_groups, 1u);
    EXPECT_EQ(cuda.kind, LLMKV_BACKEND_CUDA);
    // Kept blocks: no groups even where they could be read.
    p.flags = LLMKV_ENGINE_KEEP_WINDOW_BLOCKS;
    BackendCapabilities cpu2 = backend_capabilities(LLMKV_BACKEND_CPU, 0);
    EXPECT_EQ(plan_kv_geometry(resolve_engine_config(p, windowed_config()), cpu2, false).n_groups,
              1u);
}

TEST(EngineSetup, ARequiredSinkIsRefusedOnABackendThatCannotReadItOrTakesTheCpuForAuto) {
    llmkv_engine_params p = params();
    p.flags = LLMKV_ENGINE_KV_SINK;
    p.kv_dtype_k = p.kv_dtype_v = LLMKV_KV_INT8;
    const EngineConfig cfg = resolve_engine_config(p, windowed_config());
    BackendCapabilities cuda = cuda_like();
    try {
        plan_kv_geometry(cfg, cuda, /*auto_backend=*/false);
        FAIL() << "accepted";
    } catch (const Error &e) {
        EXPECT_EQ(e.status(), LLMKV_ERR_UNSUPPORTED);
        EXPECT_NE(std::string(e.what()).find("KV sink"), std::string::npos) << e.what();
    }
    BackendCapabilities auto_cuda = cuda_like();
    const KvGeometry g = plan_kv_geometry(cfg, auto_cuda, /*auto_backend=*/true);
    EXPECT_EQ(auto_cuda.kind, LLMKV_BACKEND_CPU);
    EXPECT_TRUE(g.sink);
    EXPECT_EQ(g.n_groups, 3u);
    // One-token blocks: position 0 is sealed at once, so no sink (refused when required).
    p.kv_block_tokens = 1;
    BackendCapabilities cpu = backend_capabilities(LLMKV_BACKEND_CPU, 0);
    EXPECT_THROW(plan_kv_geometry(resolve_engine_config(p, windowed_config()), cpu, false), Error);
}

TEST(EngineSetup, PoolsAreSizedFromTheBudgetWithTheSameRulesAsBefore) {
    llmkv_engine_params p = params();
    p.kv_device_bytes = 0;
    p.flags = LLMKV_ENGINE_PREFIX_CACHE;
    EngineConfig cfg = resolve_engine_config(p, windowed_config());
    BackendCapabilities cpu = backend_capabilities(LLMKV_BACKEND_CPU, 0);
    const KvGeometry g = plan_kv_geometry(cfg, cpu, false);
    uint64_t bytes = 0;
    KvManagerConfig kc = plan_kv_pools(cfg, g, "model-fp", &bytes);
    // Automatic: four full-length sessions (64 blocks each, plus the window's local blocks).
    const uint64_t per_session = 1024 / 16 + 1 + (g.n_groups - 1) * (g.window / 16 + 2);
    EXPECT_EQ(kc.n_sealed_blocks, 4 * per_session);
    EXPECT_EQ(bytes, kc.n_sealed_blocks * g.sealed_block_bytes());
    EXPECT_EQ(kc.n_tail_slots, kDefaultMaxSessions);
    EXPECT_TRUE(kc.prefix_cache);
    EXPECT_NE(kc.prefix_salt.find("model-fp"), std::string::npos);
    cfg.kv_device_bytes = g.sealed_block_bytes() - 1;
    EXPECT_THROW(plan_kv_pools(cfg, g, "model-fp", nullptr), Error);
}

TEST(EngineSetup, RankBackendsNeverReadHostBlocksAndReadTheSinkAndGroups) {
    const BackendCapabilities cpu = rank_capabilities(LLMKV_BACKEND_CPU);
    EXPECT_TRUE(cpu.kv_sink && cpu.layer_groups);
    EXPECT_FALSE(cpu.reads_host_blocks);
    const BackendCapabilities cuda = rank_capabilities(LLMKV_BACKEND_CUDA);
    EXPECT_TRUE(cuda.kv_sink && cuda.layer_groups);
    EXPECT_FALSE(cuda.reads_host_blocks);
    EXPECT_TRUE(cuda.device_collectives);
}

}  // namespace
}  // namespace llmkv
