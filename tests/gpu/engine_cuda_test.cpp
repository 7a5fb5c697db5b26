// The engine on the CUDA backend, through the C API (tiny synthetic model with Q8_0 weights,
// kept encoded on the device; every KV codec): in batch-invariant mode
// (LLMKV_CUDA_BATCH_INVARIANT=1) sessions batched together, preempted, recomputed or moved
// through the host tier give exactly the tokens each gives alone; a prefix snapshot saved by
// a CUDA engine loads into a fresh one; AUTO picks CUDA; the KV sink's sessions from cached
// blocks give the uncached tokens (engine_cuda_window_test.cpp: the sliding-window layers). The
// comparison with the CPU backend is not here: on random tiny weights the logits are too flat for
// greedy tokens to be a fair test of arithmetic that differs by rounding; backend_test.cpp
// (TinyModelParity) compares the logits step by step with a tolerance, and the SmolLM2 tests the
// greedy tokens where the CPU's choice has a margin. Skipped (with the reason) without a device.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "llmkv.h"
#include "session_helpers.h"
#include "tiny_model.h"

namespace llmkv {
namespace {

using gputest::ScopedEnv;

class EngineCuda : public ::testing::TestWithParam<llmkv_kv_dtype> {
protected:
    static void SetUpTestSuite() {
        testing::TinyModelSpec spec;
        spec.weight_type = TensorType::Q8_0;
        spec.embd_type = TensorType::Q8_0;
        spec.n_embd = 128;
        spec.n_heads = 4;
        spec.n_kv_heads = 2;
        spec.n_ctx = 1024;
        path_ = new std::string(testing::temp_path("engine_cuda_tiny.gguf"));
        testing::write_tiny_model(spec, *path_);
    }
    static void TearDownTestSuite() {
        std::remove(path_->c_str());
        delete path_;
    }

    static llmkv_engine *make(llmkv_backend backend, llmkv_kv_dtype dtype, uint64_t kv_bytes = 0,
                              uint64_t host_bytes = 0) {
        llmkv_engine_params p;
        llmkv_engine_params_init(&p);
        p.model_path = path_->c_str();
        p.backend = backend;
        p.kv_dtype_k = dtype;
        p.kv_dtype_v = dtype;
        p.kv_device_bytes = kv_bytes;
        p.kv_host_bytes = host_bytes;
        p.max_batch_tokens = 128;
        llmkv_engine *e = nullptr;
        EXPECT_EQ(llmkv_engine_create(&p, &e), LLMKV_OK) << llmkv_last_error();
        return e;
    }

    static std::vector<std::vector<int32_t>> run_sessions(llmkv_engine *e, int n, uint32_t gen) {
        std::vector<llmkv_session *> s;
        for (int i = 0; i < n; ++i) {
            llmkv_session_params sp;
            llmkv_session_params_init(&sp);
            llmkv_session *x = nullptr;
            EXPECT_EQ(llmkv_session_create(e, &sp, &x), LLMKV_OK);
            std::mt19937 rng(100 + i);
            std::vector<int32_t> prompt(20 + gputest::on_gpu_or_emulated(37, 11) * i);
            for (auto &t : prompt) t = int32_t(rng() % 256);
            EXPECT_EQ(llmkv_session_append(x, prompt.data(), prompt.size()), LLMKV_OK);
            EXPECT_EQ(llmkv_session_generate(x, gen), LLMKV_OK);
            s.push_back(x);
        }
        EXPECT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK) << llmkv_last_error();
        EXPECT_EQ(llmkv_engine_validate(e), LLMKV_OK) << llmkv_last_error();
        std::vector<std::vector<int32_t>> out;
        for (auto *x : s) {
            std::vector<int32_t> t(2048);
            size_t count = 0;
            llmkv_session_get_tokens(x, t.data(), t.size(), &count);
            t.resize(count);
            out.push_back(t);
            llmkv_session_destroy(x);
        }
        return out;
    }

    static std::string *path_;
};
std::string *EngineCuda::path_ = nullptr;

// Batch-invariant mode: six sessions batched together (prompts of 20-205 tokens, 20-75 under
// the emulator, prefilled in shared 128-token batches, then decoded together) give exactly
// the tokens each session gives alone.
TEST_P(EngineCuda, BatchedSessionsEqualEachSessionAlone) {
    LLMKV_REQUIRE_DEVICE();
    ScopedEnv invariant("LLMKV_CUDA_BATCH_INVARIANT", "1");
    llmkv_engine *gpu = make(LLMKV_BACKEND_CUDA, GetParam());
    ASSERT_NE(gpu, nullptr);
    llmkv_engine_info info;
    info.struct_size = sizeof(info);
    ASSERT_EQ(llmkv_engine_get_info(gpu, &info), LLMKV_OK);
    EXPECT_EQ(info.backend, uint32_t(LLMKV_BACKEND_CUDA));
    EXPECT_STREQ(info.backend_name, "cuda");
    const uint32_t gen = gputest::on_gpu_or_emulated(12u, 6u);
    const auto together = run_sessions(gpu, 6, gen);
    llmkv_engine_destroy(gpu);
    for (int i = 0; i < 6; ++i) {
        llmkv_engine *alone = make(LLMKV_BACKEND_CUDA, GetParam());
        // run_sessions(e, i + 1, ...) runs sessions 0..i with their own prompts: the last one
        // is session i, batched with fewer others.
        const auto fewer = run_sessions(alone, i + 1, gen);
        EXPECT_EQ(fewer.back(), together[size_t(i)]) << "session " << i;
        llmkv_engine_destroy(alone);
    }
}

TEST_P(EngineCuda, PreemptionAndTheHostTierKeepTokensAndInvariants) {
    LLMKV_REQUIRE_DEVICE();
    // Preemption recomputes a session's KV in other batch shapes: batch-invariant mode makes
    // the tokens exactly those of the roomy run.
    ScopedEnv invariant("LLMKV_CUDA_BATCH_INVARIANT", "1");
    llmkv_engine *roomy = make(LLMKV_BACKEND_CUDA, GetParam());
    const uint32_t gen = gputest::on_gpu_or_emulated(24u, 12u);
    auto reference = run_sessions(roomy, 8, gen);
    llmkv_engine_info info;
    info.struct_size = sizeof(info);
    ASSERT_EQ(llmkv_engine_get_info(roomy, &info), LLMKV_OK);
    const uint64_t block = info.kv_bytes_per_token_device * info.kv_block_tokens;
    llmkv_engine_destroy(roomy);
    for (uint64_t host : {uint64_t(0), uint64_t(64) << 20}) {
        llmkv_engine *tight = make(LLMKV_BACKEND_CUDA, GetParam(), 24 * block, host);
        EXPECT_EQ(run_sessions(tight, 8, gen), reference) << "host tier bytes " << host;
        llmkv_engine_destroy(tight);
    }
}

TEST_P(EngineCuda, PrefixSnapshotRoundTripsThroughTheDevice) {
    LLMKV_REQUIRE_DEVICE();
    llmkv_engine *a = make(LLMKV_BACKEND_CUDA, GetParam());
    std::vector<int32_t> prompt(200);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 7) % 256);
    llmkv_prefix *p = nullptr;
    ASSERT_EQ(llmkv_prefix_create(a, prompt.data(), prompt.size(), &p), LLMKV_OK)
        << llmkv_last_error();
    const std::string file = testing::temp_path("engine_cuda_prefix.snap");
    ASSERT_EQ(llmkv_prefix_save(p, file.c_str()), LLMKV_OK) << llmkv_last_error();
    llmkv_engine *b = make(LLMKV_BACKEND_CUDA, GetParam());
    llmkv_prefix *q = nullptr;
    ASSERT_EQ(llmkv_prefix_load(b, file.c_str(), &q), LLMKV_OK) << llmkv_last_error();
    auto continue_from = [](llmkv_engine *e, llmkv_prefix *from) {
        llmkv_session_params sp;
        llmkv_session_params_init(&sp);
        sp.prefix = from;
        llmkv_session *s = nullptr;
        EXPECT_EQ(llmkv_session_create(e, &sp, &s), LLMKV_OK);
        EXPECT_EQ(llmkv_session_generate(s, 16), LLMKV_OK);
        EXPECT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK);
        std::vector<int32_t> t(512);
        size_t n = 0;
        llmkv_session_get_tokens(s, t.data(), t.size(), &n);
        t.resize(n);
        llmkv_session_destroy(s);
        return t;
    };
    EXPECT_EQ(continue_from(a, p), continue_from(b, q));
    llmkv_prefix_release(p);
    llmkv_prefix_release(q);
    std::remove(file.c_str());
    llmkv_engine_destroy(a);
    llmkv_engine_destroy(b);
}

// Long context beyond the device pool: 16 device blocks (256 tokens) and a host tier run a
// 900-token prompt plus 100 generated tokens (under the emulator 400 plus 20); the older
// blocks go to pinned host memory and the attention kernels read them there in place.
// Batch-invariant mode: exactly the tokens of a roomy engine.
TEST_P(EngineCuda, SessionBeyondTheDevicePoolReadsHostBlocksInPlace) {
    LLMKV_REQUIRE_DEVICE();
    ScopedEnv invariant("LLMKV_CUDA_BATCH_INVARIANT", "1");
    std::vector<int32_t> prompt(gputest::on_gpu_or_emulated(900, 400));
    const uint32_t gen = gputest::on_gpu_or_emulated(100u, 20u);
    std::mt19937 rng(4242);
    for (auto &t : prompt) t = int32_t(rng() % 256);
    auto run = [&](uint64_t device_blocks, uint64_t host_bytes, llmkv_stats *st,
                   llmkv_status *status) {
        llmkv_engine *probe = make(LLMKV_BACKEND_CUDA, GetParam());
        llmkv_engine_info info;
        info.struct_size = sizeof(info);
        EXPECT_EQ(llmkv_engine_get_info(probe, &info), LLMKV_OK);
        const uint64_t block = info.kv_bytes_per_token_device * info.kv_block_tokens;
        llmkv_engine_destroy(probe);
        llmkv_engine *e = make(LLMKV_BACKEND_CUDA, GetParam(), device_blocks * block, host_bytes);
        llmkv_session_params sp;
        llmkv_session_params_init(&sp);
        llmkv_session *x = nullptr;
        EXPECT_EQ(llmkv_session_create(e, &sp, &x), LLMKV_OK);
        EXPECT_EQ(llmkv_session_append(x, prompt.data(), prompt.size()), LLMKV_OK);
        EXPECT_EQ(llmkv_session_generate(x, gen), LLMKV_OK);
        *status = llmkv_run(e, nullptr, nullptr);
        std::vector<int32_t> t(2048);
        size_t count = 0;
        llmkv_session_get_tokens(x, t.data(), t.size(), &count);
        t.resize(count);
        if (st) {
            st->struct_size = sizeof *st;
            EXPECT_EQ(llmkv_engine_get_stats(e, st), LLMKV_OK);
        }
        EXPECT_EQ(llmkv_engine_validate(e), LLMKV_OK) << llmkv_last_error();
        llmkv_session_destroy(x);
        llmkv_engine_destroy(e);
        return t;
    };
    llmkv_status status = LLMKV_OK;
    const std::vector<int32_t> reference = run(4096, 0, nullptr, &status);
    ASSERT_EQ(status, LLMKV_OK);
    ASSERT_EQ(reference.size(), prompt.size() + gen);
    llmkv_stats st{};
    EXPECT_EQ(run(16, 64ull << 20, &st, &status), reference);
    EXPECT_EQ(status, LLMKV_OK);
    EXPECT_GT(st.bytes_to_host, 0u);
}

INSTANTIATE_TEST_SUITE_P(Codecs, EngineCuda,
                         ::testing::Values(LLMKV_KV_F16, LLMKV_KV_BF16, LLMKV_KV_FP8_E4M3,
                                           LLMKV_KV_INT8, LLMKV_KV_INT4));

TEST(EngineCudaAuto, AutoPicksCudaWhenADeviceExists) {
    LLMKV_REQUIRE_DEVICE();
    testing::TinyModelSpec spec;
    const std::string path = testing::temp_path("engine_cuda_auto.gguf");
    testing::write_tiny_model(spec, path);
    llmkv_engine_params p;
    llmkv_engine_params_init(&p);
    p.model_path = path.c_str();
    llmkv_engine *e = nullptr;
    ASSERT_EQ(llmkv_engine_create(&p, &e), LLMKV_OK) << llmkv_last_error();
    llmkv_engine_info info;
    info.struct_size = sizeof(info);
    ASSERT_EQ(llmkv_engine_get_info(e, &info), LLMKV_OK);
    EXPECT_EQ(info.backend, uint32_t(LLMKV_BACKEND_CUDA));
    llmkv_engine_destroy(e);
    std::remove(path.c_str());
}

// The KV sink on CUDA (the CPU's EngineTest.KvSinkSessionsFromCachedBlocksGiveTheUncachedTokens
// with int4, the CUDA codec the sink is on by default for): the tail slot has one row more;
// a session that takes block 0 from the prefix cache, a prefix handle made over cached blocks
// (and its snapshot, loaded in a fresh engine) and a handle made from such a session compute
// position 0 alone, and must then give the tokens of an engine without the prefix cache, bit
// for bit in batch-invariant mode (a sink row left unwritten, or not read, would change what
// every later position attends to); and the sink changes tokens on some prompt, so the test
// can fail.
TEST(EngineCudaSink, SessionsFromCachedBlocksGiveTheUncachedTokens) {
    LLMKV_REQUIRE_DEVICE();
    ScopedEnv invariant("LLMKV_CUDA_BATCH_INVARIANT", "1");
    testing::TinyModelSpec spec;  // 2 layers x 2 KV heads x head_dim 16
    spec.weight_type = TensorType::Q8_0;
    spec.embd_type = TensorType::Q8_0;
    spec.n_ctx = 128;
    const std::string path = testing::temp_path("engine_cuda_sink.gguf");
    testing::write_tiny_model(spec, path);
    auto make = [&](uint32_t flags) {
        llmkv_engine_params p;
        llmkv_engine_params_init(&p);
        p.model_path = path.c_str();
        p.backend = LLMKV_BACKEND_CUDA;
        p.kv_block_tokens = 4;
        p.kv_dtype_k = p.kv_dtype_v = LLMKV_KV_INT4;
        p.flags = flags;
        llmkv_engine *e = nullptr;
        EXPECT_EQ(llmkv_engine_create(&p, &e), LLMKV_OK) << llmkv_last_error();
        return e;
    };
    using testing::solo;
    for (uint32_t sink_flag : {0u, LLMKV_ENGINE_NO_KV_SINK}) {
        llmkv_engine *e = make(LLMKV_ENGINE_PREFIX_CACHE | sink_flag);
        ASSERT_NE(e, nullptr);
        llmkv_engine_info info;
        info.struct_size = sizeof(info);
        ASSERT_EQ(llmkv_engine_get_info(e, &info), LLMKV_OK);
        EXPECT_EQ(info.backend, uint32_t(LLMKV_BACKEND_CUDA));
        EXPECT_EQ(info.kv_bytes_per_token_tail, 256u);  // 2 layers x 2 heads x K,V x 16 fp16
        // One session of 3 tokens in 4-token blocks: one tail slot, 4 rows (5 with the sink).
        llmkv_session *s =
            testing::start(e, testing::sampling(0, 1), testing::byte_tokens(3, 5), 1);
        ASSERT_EQ(llmkv_run(e, nullptr, nullptr), LLMKV_OK) << llmkv_last_error();
        EXPECT_EQ(testing::stats(e).kv_bytes_used, (sink_flag ? 4u : 5u) * 256u);
        llmkv_session_destroy(s);
        llmkv_engine_destroy(e);
    }
    const uint32_t n_seeds = gputest::on_gpu_or_emulated(8u, 3u);
    int sink_changes_tokens = 0;
    for (uint32_t seed = 0; seed < n_seeds; ++seed) {
        const std::vector<int32_t> shared = testing::byte_tokens(42, 200 + seed),
                                   suffix = testing::byte_tokens(7, 400 + seed);
        std::vector<int32_t> second = shared;
        second.insert(second.end(), suffix.begin(), suffix.end());
        const llmkv_session_params sp = testing::sampling(seed % 2 ? 0.9f : 0.0f, seed);
        llmkv_engine *plain = make(0);
        const auto want_shared = solo(plain, sp, shared, 12);
        const auto want_second = solo(plain, sp, second, 12);
        llmkv_engine_destroy(plain);
        llmkv_engine *without = make(LLMKV_ENGINE_NO_KV_SINK);
        sink_changes_tokens += solo(without, sp, second, 12) != want_second;
        llmkv_engine_destroy(without);
        llmkv_engine *cached = make(LLMKV_ENGINE_PREFIX_CACHE);
        // Tail slots are reused: a session that starts with another token leaves its own
        // position 0 in the slot's sink rows before each use of the cached blocks.
        std::vector<int32_t> other = testing::byte_tokens(9, 300 + seed);
        other[0] = shared[0] == 1 ? 2 : 1;
        auto scrub = [&] { solo(cached, sp, other, 2); };
        auto from_prefix = [&](llmkv_engine *e, llmkv_prefix *prefix) {
            llmkv_session_params with = sp;
            with.prefix = prefix;
            return solo(e, with, suffix, 12);
        };
        EXPECT_EQ(solo(cached, sp, shared, 12), want_shared);
        scrub();
        const uint64_t hits0 = testing::stats(cached).prefix_hit_tokens;
        EXPECT_EQ(solo(cached, sp, second, 12), want_second);  // blocks 0..9 from the cache
        EXPECT_EQ(testing::stats(cached).prefix_hit_tokens - hits0, 40u);
        scrub();
        llmkv_prefix *prefix = nullptr;
        ASSERT_EQ(llmkv_prefix_create(cached, shared.data(), shared.size(), &prefix), LLMKV_OK)
            << llmkv_last_error();
        EXPECT_EQ(from_prefix(cached, prefix), want_second);
        const std::string snap = testing::temp_path("engine_cuda_sink.llmkvsnap");
        ASSERT_EQ(llmkv_prefix_save(prefix, snap.c_str()), LLMKV_OK) << llmkv_last_error();
        llmkv_prefix_release(prefix);
        llmkv_engine *fresh = make(LLMKV_ENGINE_PREFIX_CACHE);
        llmkv_prefix *loaded = nullptr;
        ASSERT_EQ(llmkv_prefix_load(fresh, snap.c_str(), &loaded), LLMKV_OK) << llmkv_last_error();
        EXPECT_EQ(from_prefix(fresh, loaded), want_second);
        llmkv_prefix_release(loaded);
        llmkv_engine_destroy(fresh);
        std::remove(snap.c_str());
        scrub();
        llmkv_session *s = nullptr;
        ASSERT_EQ(llmkv_session_create(cached, &sp, &s), LLMKV_OK);
        ASSERT_EQ(llmkv_session_append(s, shared.data(), shared.size()), LLMKV_OK);
        llmkv_prefix *from_session = nullptr;
        ASSERT_EQ(llmkv_session_to_prefix(s, &from_session), LLMKV_OK) << llmkv_last_error();
        llmkv_session_destroy(s);
        EXPECT_EQ(from_prefix(cached, from_session), want_second);
        llmkv_prefix_release(from_session);
        EXPECT_EQ(llmkv_engine_validate(cached), LLMKV_OK) << llmkv_last_error();
        llmkv_engine_destroy(cached);
    }
    EXPECT_GT(sink_changes_tokens, 0) << "no prompt where position 0's rows matter";
    std::remove(path.c_str());
}

}  // namespace
}  // namespace llmkv
