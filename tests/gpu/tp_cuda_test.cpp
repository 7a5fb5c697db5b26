// Tensor parallelism on CUDA devices (docs/PARALLELISM.md):
//  - the module's collectives: a one-rank NCCL communicator on any machine with a GPU (the
//    all-gather and the rank-ordered sum run, and give x back bit for bit), and with two or
//    more devices every device as a rank, each holding the same sum added in rank order;
//  - the engine with its ranks on CUDA devices, through the C API: ranks sharing one device
//    (their all-reduces through host memory) on any machine with a GPU, one rank per device
//    over NCCL with two or more. A tiny model (4 heads, 2 KV heads) in batch-invariant mode:
//    batched sessions equal solo runs, runs repeat bit for bit, prefix-cache hits, snapshots
//    saved and loaded with two ranks, parked sessions continue; every KV codec batched and
//    parked on two ranks; SmolLM2 (3 KV heads) on three ranks gives one rank's greedy tokens.
// Skipped, with the reason printed, without a device (or with fewer devices than a test needs).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "gpu_test_util.h"
#include "host_tier_skip.h"
#include "llmkv.h"
#include "module_test_util.h"
#include "session_helpers.h"
#include "tiny_model.h"

namespace llmkv {
namespace {

using gputest::ScopedEnv;
using testing::byte_tokens;
using testing::sampling;
using testing::solo;
using testing::start;
using testing::stats;
using testing::tokens_of;

#define REQUIRE_DEVICES(n)                                                                        \
    do {                                                                                          \
        const int have_ = cuda_device_count(nullptr);                                             \
        if (have_ < (n)) {                                                                        \
            std::printf("[ SKIP REASON ] %d CUDA device(s), the test needs %d\n", have_, int(n)); \
            GTEST_SKIP() << "needs " << (n) << " CUDA devices";                                   \
        }                                                                                         \
    } while (0)

// A new communicator id; skips (with the reason) where NCCL cannot be loaded.
#define REQUIRE_NCCL_ID(id)                                                                    \
    do {                                                                                       \
        char why_[1024] = {0};                                                                 \
        const llmkv_cuda_status st_ = api->comm_unique_id(id, why_, sizeof why_);              \
        if (st_ == LLMKV_CUDA_ERR_NO_DEVICE) {                                                 \
            std::printf("[ SKIP REASON ] %s (LLMKV_NCCL_LIBRARY names libnccl.so.2)\n", why_); \
            GTEST_SKIP() << "no NCCL: " << why_;                                               \
        }                                                                                      \
        ASSERT_EQ(st_, LLMKV_CUDA_OK) << why_;                                                 \
    } while (0)

KvGeometry small_geometry() {
    KvGeometry g;
    g.n_layers = 1;
    g.n_kv_heads = 1;
    g.head_dim = 64;
    g.block_tokens = 16;
    return g;
}

std::vector<float> random_rows(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 3.0f);
    std::vector<float> v(n);
    for (float &x : v) x = d(rng);
    return v;
}

TEST(TpCudaModule, OneRankNcclCommunicatorGivesTheRowsBackBitForBit) {
    LLMKV_REQUIRE_MODULE_DEVICE();
    const llmkv_cuda_api *api = CudaModule::get().api();
    std::string err;
    gputest::ContextPtr ctx =
        gputest::create_context(api, small_geometry(), 4, 2, 16, nullptr, &err);
    ASSERT_TRUE(ctx) << err;
    llmkv_cuda_tensor x{};
    ASSERT_EQ(api->alloc_activation(ctx.get(), 16, 64, &x), LLMKV_CUDA_OK);
    const std::vector<float> v = random_rows(16 * 64, 1);
    ASSERT_EQ(api->write_activation(ctx.get(), x, v.data()), LLMKV_CUDA_OK)
        << api->last_error(ctx.get());
    // Not joined yet: refused, and the context stays usable.
    EXPECT_EQ(api->all_reduce_sum(ctx.get(), x), LLMKV_CUDA_ERR_INVALID);
    EXPECT_NE(std::string(api->last_error(ctx.get())).find("comm_init"), std::string::npos);

    uint8_t id[LLMKV_CUDA_COMM_ID_BYTES] = {0};
    REQUIRE_NCCL_ID(id);
    EXPECT_EQ(api->comm_init(ctx.get(), id, 1, 0), LLMKV_CUDA_ERR_INVALID) << "not prepared";
    // A chunk smaller than the rows: the all-reduce runs in 7 chunks (the last one short).
    ASSERT_EQ(api->comm_prepare(ctx.get(), 1, 150), LLMKV_CUDA_OK) << api->last_error(ctx.get());
    EXPECT_EQ(api->comm_init(ctx.get(), id, 2, 0), LLMKV_CUDA_ERR_INVALID)
        << "prepared for one rank";
    ASSERT_EQ(api->comm_init(ctx.get(), id, 1, 0), LLMKV_CUDA_OK) << api->last_error(ctx.get());
    EXPECT_EQ(api->comm_init(ctx.get(), id, 1, 0), LLMKV_CUDA_ERR_INVALID)
        << "a context joins once";
    ASSERT_EQ(api->all_reduce_sum(ctx.get(), x), LLMKV_CUDA_OK) << api->last_error(ctx.get());
    std::vector<float> got(v.size());
    ASSERT_EQ(api->read_activation(ctx.get(), x, got.data()), LLMKV_CUDA_OK)
        << api->last_error(ctx.get());
    EXPECT_EQ(std::memcmp(got.data(), v.data(), v.size() * sizeof(float)), 0);
    // Host pointers are not activations: refused, not a device error.
    EXPECT_EQ(api->all_reduce_sum(ctx.get(), llmkv_cuda_tensor{got.data(), 1, 64}),
              LLMKV_CUDA_ERR_INVALID);
    EXPECT_EQ(api->sticky_error(ctx.get()), LLMKV_CUDA_OK);
}

TEST(TpCudaModule, EveryDeviceAsARankHoldsTheRankOrderedSum) {
    REQUIRE_DEVICES(2);
    const llmkv_cuda_api *api = CudaModule::get().api();
    const uint32_t n = uint32_t(std::min(cuda_device_count(nullptr), 8));
    const size_t elems = 32 * 64;
    std::vector<std::vector<float>> in(n), out(n, std::vector<float>(elems));
    for (uint32_t r = 0; r < n; ++r) in[r] = random_rows(elems, 10 + r);
    std::vector<float> want = in[0];  // rank order: ((x0 + x1) + x2) + ...
    for (uint32_t r = 1; r < n; ++r) {
        for (size_t i = 0; i < elems; ++i) want[i] += in[r][i];
    }
    uint8_t id[LLMKV_CUDA_COMM_ID_BYTES] = {0};
    REQUIRE_NCCL_ID(id);
    // Everything that can fail on one rank alone first (here, on this thread): a rank that
    // failed would leave the others waiting in comm_init.
    std::vector<gputest::ContextPtr> ctx;
    std::vector<llmkv_cuda_tensor> x(n);
    for (uint32_t r = 0; r < n; ++r) {
        std::string err;
        ctx.push_back(
            gputest::create_context(api, small_geometry(), 4, 2, 32, nullptr, &err, int(r)));
        ASSERT_TRUE(ctx[r]) << "device " << r << ": " << err;
        ASSERT_EQ(api->alloc_activation(ctx[r].get(), 32, 64, &x[r]), LLMKV_CUDA_OK);
        ASSERT_EQ(api->write_activation(ctx[r].get(), x[r], in[r].data()), LLMKV_CUDA_OK);
        ASSERT_EQ(api->comm_prepare(ctx[r].get(), n, elems), LLMKV_CUDA_OK)
            << api->last_error(ctx[r].get());
    }
    std::vector<std::string> errors(n);
    std::vector<std::thread> ranks;
    for (uint32_t r = 0; r < n; ++r) {
        ranks.emplace_back([&, r] {
            llmkv_cuda_context *c = ctx[r].get();
            if (api->comm_init(c, id, n, r) != LLMKV_CUDA_OK ||
                api->all_reduce_sum(c, x[r]) != LLMKV_CUDA_OK ||
                api->read_activation(c, x[r], out[r].data()) != LLMKV_CUDA_OK) {
                errors[r] = api->last_error(c);
            }
        });
    }
    for (std::thread &t : ranks) t.join();
    for (uint32_t r = 0; r < n; ++r) {
        EXPECT_EQ(errors[r], "") << "rank " << r;
        EXPECT_EQ(std::memcmp(out[r].data(), want.data(), elems * sizeof(float)), 0)
            << "rank " << r;
    }
}

// Engines on CUDA ranks. GetParam(): false = two ranks sharing device 0 (host collectives),
// true = one rank on each of devices 0 and 1 (NCCL).
class TpCudaEngine : public ::testing::TestWithParam<bool> {
protected:
    static void SetUpTestSuite() {
        testing::TinyModelSpec spec;  // 4 heads, 2 KV heads: 2 and 1 per rank
        spec.weight_type = TensorType::Q8_0;
        spec.embd_type = TensorType::Q8_0;
        spec.n_embd = 128;
        spec.n_ff = 128;
        spec.n_ctx = 512;
        path_ = new std::string(testing::temp_path("tp_cuda_tiny.gguf"));
        testing::write_tiny_model(spec, *path_);
    }
    static void TearDownTestSuite() {
        std::remove(path_->c_str());
        delete path_;
    }
    void SetUp() override {
        LLMKV_REQUIRE_MODULE_DEVICE();
        if (GetParam()) REQUIRE_DEVICES(2);
    }

    llmkv_engine_params params(uint32_t tp, uint64_t host_bytes = 0) const {
        llmkv_engine_params p;
        llmkv_engine_params_init(&p);
        p.model_path = path_->c_str();
        p.backend = LLMKV_BACKEND_CUDA;
        p.kv_block_tokens = 4;
        p.kv_host_bytes = host_bytes;
        p.max_batch_tokens = 64;
        if (tp > 1) {
            p.devices = GetParam() ? kTwoDevices : kDeviceZero;
            p.n_devices = GetParam() ? 2 : 1;
            p.tp_size = tp;
        }
        return p;
    }
    static llmkv_engine *make(const llmkv_engine_params &p) {
        llmkv_engine *e = nullptr;
        EXPECT_EQ(llmkv_engine_create(&p, &e), LLMKV_OK) << llmkv_last_error();
        return e;
    }
    static constexpr int32_t kDeviceZero[1] = {0};
    static constexpr int32_t kTwoDevices[2] = {0, 1};
    static std::string *path_;
    ScopedEnv batch_invariant_{"LLMKV_CUDA_BATCH_INVARIANT", "1"};
};
std::string *TpCudaEngine::path_ = nullptr;

TEST_P(TpCudaEngine, InfoBatchedSessionsAndRepeatedRunsAreBitwiseEqual) {
    llmkv_engine *e = make(params(2));
    ASSERT_NE(e, nullptr);
    llmkv_engine_info info;
    info.struct_size = sizeof info;
    ASSERT_EQ(llmkv_engine_get_info(e, &info), LLMKV_OK);
    EXPECT_EQ(info.tp_size, 2u);
    EXPECT_EQ(info.backend, LLMKV_BACKEND_CUDA);
    EXPECT_EQ(info.kv_bytes_per_token_rank * 2, info.kv_bytes_per_token_device);
    std::vector<std::vector<int32_t>> prompts, expected;
    for (int i = 0; i < 4; ++i) {
        prompts.push_back(byte_tokens(5 + 11 * i, 300 + i));
        expected.push_back(solo(e, sampling(i % 2 ? 0.8f : 0.0f, 70 + i), prompts.back(), 10));
    }
    std::vector<llmkv_session *> s;
    for (int i = 0; i < 4; ++i)
        s.push_back(start(e, sampling(i % 2 ? 0.8f : 0.0f, 70 + i), prompts[i], 10));
    ASSERT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK) << llmkv_last_error();
    for (int i = 0; i < 4; ++i) EXPECT_EQ(tokens_of(s[i]), expected[i]) << "session " << i;
    for (auto *x : s) llmkv_session_destroy(x);
    EXPECT_GT(stats(e).tp_reduces, 0u);
    EXPECT_EQ(llmkv_engine_validate(e), LLMKV_OK) << llmkv_last_error();
    llmkv_engine_destroy(e);
    llmkv_engine *again = make(params(2));
    for (int i = 0; i < 4; ++i)
        EXPECT_EQ(solo(again, sampling(i % 2 ? 0.8f : 0.0f, 70 + i), prompts[i], 10), expected[i]);
    llmkv_engine_destroy(again);
}

TEST_P(TpCudaEngine, PrefixCacheSnapshotsAndParkingKeepTheTokens) {
    SKIP_WITHOUT_MIMALLOC();  // the host tier (parking)
    const std::vector<int32_t> system = byte_tokens(41, 21), suffix = byte_tokens(7, 22);
    std::vector<int32_t> full = system;
    full.insert(full.end(), suffix.begin(), suffix.end());
    const std::string path = testing::temp_path("tp_cuda.llmkvsnap");
    llmkv_engine *e = make(params(2, 8ull << 20));
    ASSERT_NE(e, nullptr);
    const std::vector<int32_t> expected = solo(e, sampling(0.7f, 5), full, 9);
    const uint64_t hits = stats(e).prefix_hit_tokens;
    EXPECT_EQ(solo(e, sampling(0.7f, 5), full, 9), expected);
    EXPECT_GE(stats(e).prefix_hit_tokens - hits, 40u);
    llmkv_prefix *prefix = nullptr;
    ASSERT_EQ(llmkv_prefix_create(e, system.data(), system.size(), &prefix), LLMKV_OK)
        << llmkv_last_error();
    ASSERT_EQ(llmkv_prefix_save(prefix, path.c_str()), LLMKV_OK) << llmkv_last_error();
    llmkv_prefix_release(prefix);
    // Parked between two turns (its KV to host memory through every rank) and resumed: the
    // tokens of the same turns without the park.
    const std::vector<int32_t> a = byte_tokens(33, 61), b = byte_tokens(6, 62);
    auto two_turns = [&](bool park) {
        llmkv_session *s = start(e, sampling(0.9f, 3), a, 6);
        EXPECT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK) << llmkv_last_error();
        if (park) {
            EXPECT_EQ(llmkv_session_park(s), LLMKV_OK) << llmkv_last_error();
        }
        EXPECT_EQ(llmkv_session_append(s, b.data(), b.size()), LLMKV_OK);
        EXPECT_EQ(llmkv_session_generate(s, 6), LLMKV_OK);
        EXPECT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK) << llmkv_last_error();
        std::vector<int32_t> t = tokens_of(s);
        llmkv_session_destroy(s);
        return t;
    };
    const std::vector<int32_t> unparked = two_turns(false);
    EXPECT_EQ(two_turns(true), unparked);
    EXPECT_EQ(stats(e).parks, 1u);
    EXPECT_EQ(stats(e).resumes, 1u);
    EXPECT_EQ(llmkv_engine_validate(e), LLMKV_OK) << llmkv_last_error();
    llmkv_engine_destroy(e);

    llmkv_engine *fresh = make(params(2));
    llmkv_prefix *loaded = nullptr;
    ASSERT_EQ(llmkv_prefix_load(fresh, path.c_str(), &loaded), LLMKV_OK) << llmkv_last_error();
    const uint64_t before = stats(fresh).tokens_prefilled;
    llmkv_session_params sp = sampling(0.7f, 5);
    sp.prefix = loaded;
    llmkv_session *s = start(fresh, sp, suffix, 9);
    ASSERT_EQ(llmkv_run(fresh, nullptr, nullptr), LLMKV_OK) << llmkv_last_error();
    EXPECT_EQ(tokens_of(s), expected);
    EXPECT_EQ(stats(fresh).tokens_prefilled - before, suffix.size() + 1)
        << "only the suffix was computed";
    llmkv_session_destroy(s);
    llmkv_prefix_release(loaded);
    llmkv_engine_destroy(fresh);
    std::remove(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(Ranks, TpCudaEngine, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool> &i) {
                             return std::string(i.param ? "OneDeviceEachOverNccl"
                                                        : "SharingDeviceZero");
                         });

// Every KV codec on two ranks sharing device 0 (each rank's pool holds its KV head in the
// codec, scales computed per shard): batched sessions give solo runs' tokens, and blocks moved
// out and back through the host tier (a park) keep them.
// Engine parameters of two CUDA ranks sharing device 0 (host collectives) for the model at
// `path`, K and V in `dtype`, blocks of `block_tokens`.
llmkv_engine_params two_ranks_on_device_zero(const std::string &path, llmkv_kv_dtype dtype,
                                             uint32_t block_tokens) {
    static const int32_t device0[1] = {0};
    llmkv_engine_params p;
    llmkv_engine_params_init(&p);
    p.model_path = path.c_str();
    p.backend = LLMKV_BACKEND_CUDA;
    p.devices = device0;
    p.n_devices = 1;
    p.tp_size = 2;
    p.kv_dtype_k = p.kv_dtype_v = dtype;
    p.kv_block_tokens = block_tokens;
    return p;
}

class TpCudaCodec : public ::testing::TestWithParam<llmkv_kv_dtype> {};

TEST_P(TpCudaCodec, TwoRanksBatchAndParkBitwise) {
    LLMKV_REQUIRE_MODULE_DEVICE();
    SKIP_WITHOUT_MIMALLOC();
    testing::TinyModelSpec spec;
    spec.weight_type = TensorType::Q8_0;
    spec.embd_type = TensorType::Q8_0;
    spec.n_embd = 128;
    spec.n_ff = 128;
    spec.n_ctx = 512;
    const std::string path = testing::temp_path("tp_cuda_codec.gguf");
    testing::write_tiny_model(spec, path);
    ScopedEnv invariant("LLMKV_CUDA_BATCH_INVARIANT", "1");
    llmkv_engine_params p = two_ranks_on_device_zero(path, GetParam(), 16);
    p.kv_host_bytes = 8ull << 20;
    p.max_batch_tokens = 64;
    llmkv_engine *e = nullptr;
    ASSERT_EQ(llmkv_engine_create(&p, &e), LLMKV_OK) << llmkv_last_error();
    std::vector<std::vector<int32_t>> prompts, expected;
    for (int i = 0; i < 3; ++i) {
        prompts.push_back(byte_tokens(20 + 17 * i, 900 + i));
        expected.push_back(solo(e, sampling(0.0f, 1), prompts.back(), 12));
    }
    std::vector<llmkv_session *> s;
    for (int i = 0; i < 3; ++i) s.push_back(start(e, sampling(0.0f, 1), prompts[i], 6));
    ASSERT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK) << llmkv_last_error();
    for (llmkv_session *x : s) ASSERT_EQ(llmkv_session_park(x), LLMKV_OK) << llmkv_last_error();
    for (llmkv_session *x : s) ASSERT_EQ(llmkv_session_generate(x, 6), LLMKV_OK);
    ASSERT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK) << llmkv_last_error();
    for (int i = 0; i < 3; ++i) EXPECT_EQ(tokens_of(s[i]), expected[i]) << "session " << i;
    for (llmkv_session *x : s) llmkv_session_destroy(x);
    EXPECT_EQ(stats(e).parks, 3u);
    EXPECT_EQ(llmkv_engine_validate(e), LLMKV_OK) << llmkv_last_error();
    llmkv_engine_destroy(e);
    std::remove(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(Codecs, TpCudaCodec,
                         ::testing::Values(LLMKV_KV_F16, LLMKV_KV_BF16, LLMKV_KV_FP8_E4M3,
                                           LLMKV_KV_INT8, LLMKV_KV_INT4));

// Sliding-window layers on two CUDA ranks sharing device 0 (a tiny Gemma 3 layout, window 12,
// 4-token blocks, one KV head per rank): the ranks release the local layers' blocks outside
// the window (three layer groups) and give bitwise the tokens of ranks that keep every block,
// batched and alone; int4 KV, so the KV sink is on too.
TEST(TpCudaWindow, RanksReleasingWindowBlocksGiveTheKeptTokens) {
    LLMKV_REQUIRE_MODULE_DEVICE();
    testing::TinyModelSpec spec;
    spec.arch = "gemma3";
    spec.n_layers = 6;  // pattern 3: layers 2 and 5 global
    spec.n_heads = 4;
    spec.n_kv_heads = 2;
    spec.n_ff = 128;  // 64 per rank: whole Q8_0 blocks
    spec.n_ctx = 512;
    spec.sliding_window = 12;
    spec.window_pattern = 3;
    spec.weight_type = TensorType::Q8_0;
    spec.embd_type = TensorType::Q8_0;
    spec.embd_scale = 0.05f;  // tokens follow what the local layers read (engine_window_test)
    const std::string path = testing::temp_path("tp_cuda_window.gguf");
    testing::write_tiny_model(spec, path);
    ScopedEnv invariant("LLMKV_CUDA_BATCH_INVARIANT", "1");
    auto make = [&](uint32_t flags) {
        llmkv_engine_params p = two_ranks_on_device_zero(path, LLMKV_KV_INT4, 4);
        p.max_batch_tokens = 16;
        p.flags = flags;
        llmkv_engine *e = nullptr;
        EXPECT_EQ(llmkv_engine_create(&p, &e), LLMKV_OK) << llmkv_last_error();
        return e;
    };
    llmkv_engine *released = make(0), *kept = make(LLMKV_ENGINE_KEEP_WINDOW_BLOCKS);
    ASSERT_TRUE(released && kept);
    llmkv_engine_info info;
    info.struct_size = sizeof info;
    ASSERT_EQ(llmkv_engine_get_info(released, &info), LLMKV_OK);
    EXPECT_EQ(info.tp_size, 2u);
    EXPECT_EQ(info.kv_layer_groups, 3u);
    std::vector<std::vector<int32_t>> prompts, expected;
    for (int i = 0; i < 3; ++i) {
        prompts.push_back(byte_tokens(30 + 9 * i, 700 + i));
        expected.push_back(solo(kept, sampling(i % 2 ? 0.8f : 0.0f, 40 + i), prompts.back(), 24));
        EXPECT_EQ(solo(released, sampling(i % 2 ? 0.8f : 0.0f, 40 + i), prompts.back(), 24),
                  expected.back())
            << "session " << i << " alone";
    }
    std::vector<llmkv_session *> s;
    for (int i = 0; i < 3; ++i)
        s.push_back(start(released, sampling(i % 2 ? 0.8f : 0.0f, 40 + i), prompts[i], 24));
    ASSERT_EQ(llmkv_run(released, nullptr, nullptr), LLMKV_OK) << llmkv_last_error();
    for (int i = 0; i < 3; ++i) EXPECT_EQ(tokens_of(s[i]), expected[i]) << "session " << i;
    for (llmkv_session *x : s) llmkv_session_destroy(x);
    EXPECT_EQ(llmkv_engine_validate(released), LLMKV_OK) << llmkv_last_error();
    llmkv_engine_destroy(released);
    llmkv_engine_destroy(kept);
    std::remove(path.c_str());
}

// Ranks sharing a device cannot use NCCL: asking for it is refused with the reason.
TEST(TpCudaEngineErrors, NcclForRanksSharingADeviceIsRefused) {
    LLMKV_REQUIRE_MODULE_DEVICE();
    const char *model = std::getenv("LLMKV_MODEL");
    if (!model || !*model) {
        std::printf("[ SKIP REASON ] LLMKV_MODEL is not set\n");
        GTEST_SKIP() << "LLMKV_MODEL is not set";
    }
    ScopedEnv nccl("LLMKV_TP_COLLECTIVES", "nccl");
    const int32_t devices[1] = {0};
    llmkv_engine_params p;
    llmkv_engine_params_init(&p);
    p.model_path = model;
    p.backend = LLMKV_BACKEND_CUDA;
    p.devices = devices;
    p.n_devices = 1;
    p.tp_size = 3;
    llmkv_engine *e = nullptr;
    EXPECT_EQ(llmkv_engine_create(&p, &e), LLMKV_ERR_UNSUPPORTED);
    EXPECT_NE(std::string(llmkv_last_error()).find("share a device"), std::string::npos)
        << llmkv_last_error();
    EXPECT_EQ(e, nullptr);
}

// SmolLM2 (9 heads, 3 KV heads) on three CUDA ranks: one rank's greedy tokens. Three devices
// when there are three (NCCL), else all on device 0.
TEST(TpCudaRealModel, SmolLM2OnThreeRanksGivesOneRanksGreedyTokens) {
    LLMKV_REQUIRE_MODULE_DEVICE();
    LLMKV_SKIP_REAL_MODEL_UNDER_EMULATION();
    const char *model = std::getenv("LLMKV_MODEL");
    if (!model || !*model) {
        std::printf("[ SKIP REASON ] LLMKV_MODEL is not set\n");
        GTEST_SKIP() << "LLMKV_MODEL is not set";
    }
    const bool three = cuda_device_count(nullptr) >= 3;
    const int32_t devices[3] = {0, 1, 2};
    auto run = [&](uint32_t tp) {
        llmkv_engine_params p;
        llmkv_engine_params_init(&p);
        p.model_path = model;
        p.backend = LLMKV_BACKEND_CUDA;
        if (tp > 1) {
            p.devices = devices;
            p.n_devices = three ? 3 : 1;
            p.tp_size = tp;
        }
        llmkv_engine *e = nullptr;
        EXPECT_EQ(llmkv_engine_create(&p, &e), LLMKV_OK) << llmkv_last_error();
        if (!e) return std::string();
        llmkv_session_params sp;
        llmkv_session_params_init(&sp);
        sp.sampling.temperature = 0.0f;
        llmkv_session *s = nullptr;
        EXPECT_EQ(llmkv_session_create(e, &sp, &s), LLMKV_OK);
        const char *prompt =
            "The capital of France is Paris. The capital of Germany is Berlin. The capital of "
            "Italy is";
        EXPECT_EQ(llmkv_session_append_text(s, prompt, std::strlen(prompt)), LLMKV_OK)
            << llmkv_last_error();
        EXPECT_EQ(llmkv_session_generate(s, 8), LLMKV_OK);
        EXPECT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK) << llmkv_last_error();
        std::vector<int32_t> t = tokens_of(s);
        char text[4096] = {0};
        size_t len = 0;
        EXPECT_EQ(llmkv_detokenize(e, t.data(), t.size(), text, sizeof text - 1, &len), LLMKV_OK);
        llmkv_session_destroy(s);
        llmkv_engine_destroy(e);
        return std::string(text, len);
    };
    const std::string one = run(1), many = run(3), again = run(3);
    std::printf("SmolLM2 tp=1: %s\nSmolLM2 tp=3 (%s): %s\n", one.c_str(),
                three ? "3 devices, NCCL" : "device 0", many.c_str());
    EXPECT_NE(one.find(" Rome"), std::string::npos) << one;
    EXPECT_EQ(many, one);
    EXPECT_EQ(again, many) << "runs repeat";
}

}  // namespace
}  // namespace llmkv
