// Google Benchmark of CPU paged attention for one decode step (1 query) of SmolLM2-135M's
// shape (30 layers, 9 q heads, 3 kv heads, head_dim 64, 16-token blocks) at contexts
// 512 / 2048 / 8192, per K/V codec pair: time per step and GB/s of KV bytes read.
#include <benchmark/benchmark.h>

#include <map>
#include <memory>
#include <random>
#include <vector>

#include "backend/cpu/attention.h"
#include "common/half.h"
#include "kv/codec.h"

namespace {

using llmkv::CodecSpec;
using llmkv::KvCache;
using llmkv::KvGeometry;
using llmkv::KvRole;
using llmkv::SessionKv;
using llmkv::ThreadPool;

constexpr uint32_t kLayers = 30, kKvHeads = 3, kHeads = 9, kHeadDim = 64, kBlock = 16;

struct Pair {
    const char *name;
    CodecSpec k, v;
};
const Pair kPairs[] = {
    {"f16/f16", {LLMKV_KV_F16, false}, {LLMKV_KV_F16, false}},
    {"bf16/bf16", {LLMKV_KV_BF16, false}, {LLMKV_KV_BF16, false}},
    {"fp8/fp8", {LLMKV_KV_FP8_E4M3, false}, {LLMKV_KV_FP8_E4M3, false}},
    {"int8/int8", {LLMKV_KV_INT8, false}, {LLMKV_KV_INT8, false}},
    {"int8/int4", {LLMKV_KV_INT8, false}, {LLMKV_KV_INT4, false}},
    {"int4/int4", {LLMKV_KV_INT4, false}, {LLMKV_KV_INT4, false}},
    {"int8r/int8r", {LLMKV_KV_INT8, true}, {LLMKV_KV_INT8, true}},
    {"int4/int4r", {LLMKV_KV_INT4, false}, {LLMKV_KV_INT4, true}},
    {"int4c/int4c", {LLMKV_KV_INT4_COMPACT, false}, {LLMKV_KV_INT4_COMPACT, false}},
};

ThreadPool &pool_for(int n) {
    static std::map<int, std::unique_ptr<ThreadPool>> pools;
    auto &p = pools[n];
    if (!p) p = std::make_unique<ThreadPool>(unsigned(n));
    return *p;
}

// One session of `context` tokens whose sealed blocks hold encoded random K/V in every
// layer, and the fp16 window (the partial last block) of the decode step's query.
struct Fixture {
    std::unique_ptr<KvCache> cache;
    SessionKv kv;
    std::vector<uint16_t> window_k, window_v;  // fp16 [kKvHeads][cap][kHeadDim]
    std::vector<float> q, out;                 // f32 [kHeads * kHeadDim]
    uint32_t pos = 0, window_start = 0, cap = 0;
    double bytes_per_step = 0;  // sealed + window KV bytes one step reads (all layers)
};

Fixture &fixture(int pair, uint32_t context) {
    static std::map<std::pair<int, uint32_t>, std::unique_ptr<Fixture>> cache;
    auto &slot = cache[{pair, context}];
    if (slot) return *slot;
    slot = std::make_unique<Fixture>();
    Fixture &f = *slot;
    const Pair &p = kPairs[pair];
    KvGeometry g;
    g.n_layers = kLayers;
    g.n_kv_heads = kKvHeads;
    g.head_dim = kHeadDim;
    g.block_tokens = kBlock;
    g.dtype_k = p.k.dtype;
    g.dtype_v = p.v.dtype;
    f.pos = context - 1;  // the decode step's query position
    const uint32_t n_sealed = g.sealed_blocks(f.pos);
    f.cache = std::make_unique<KvCache>(g, n_sealed + 1, 1);
    f.cache->reserve(f.kv, context);
    std::mt19937 rng(uint32_t(pair) * 7919u + context);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<uint16_t> rows(size_t(kBlock) * kHeadDim);
    auto fill = [&](std::vector<uint16_t> &v) {
        for (auto &x : v) x = llmkv::fp32_to_fp16(dist(rng));
    };
    for (uint32_t b = 0; b < n_sealed; ++b) {
        uint8_t *blk = f.cache->sealed_data(f.kv.blocks[b]);
        for (uint32_t l = 0; l < kLayers; ++l) {
            for (uint32_t h = 0; h < kKvHeads; ++h) {
                fill(rows);
                llmkv::codec_encode_head(p.k, KvRole::K, rows.data(), kBlock, kHeadDim,
                                         blk + g.sealed_k_offset(l, h));
                fill(rows);
                llmkv::codec_encode_head(p.v, KvRole::V, rows.data(), kBlock, kHeadDim,
                                         blk + g.sealed_v_offset(l, h));
            }
        }
    }
    f.window_start = n_sealed * kBlock;
    f.cap = f.pos - f.window_start + 1;
    f.window_k.resize(size_t(kKvHeads) * f.cap * kHeadDim);
    f.window_v.resize(f.window_k.size());
    fill(f.window_k);
    fill(f.window_v);
    f.q.resize(size_t(kHeads) * kHeadDim);
    for (auto &x : f.q) x = dist(rng);
    f.out.resize(f.q.size());
    // Bytes of the heads actually read (role-exact sizes; the geometry may pad int4 slots).
    const double sealed = double(n_sealed) * kLayers * kKvHeads *
                          double(llmkv::codec_head_bytes(p.k.dtype, KvRole::K, kBlock, kHeadDim) +
                                 llmkv::codec_head_bytes(p.v.dtype, KvRole::V, kBlock, kHeadDim));
    const double window = double(f.cap) * kLayers * kKvHeads * kHeadDim * 2 * 2;
    f.bytes_per_step = sealed + window;
    return f;
}

// Args: pair index, context, threads. One iteration = attention of all 30 layers.
void BM_DecodeAttention(benchmark::State &state) {
    const int pair = int(state.range(0));
    const uint32_t context = uint32_t(state.range(1));
    ThreadPool &pool = pool_for(int(state.range(2)));
    Fixture &f = fixture(pair, context);
    llmkv::cpu::AttentionScratch scratch;
    const llmkv::cpu::AttentionCodecs codecs{kPairs[pair].k, kPairs[pair].v};
    llmkv::cpu::AttentionSpan span{
        &f.kv, f.window_k.data(), f.window_v.data(), f.window_start, f.cap, f.pos,
        1,     f.q.data(),        f.out.data()};
    llmkv::cpu::AttentionParams params{0, kHeads, 0.125f, kHeads * kHeadDim, kHeads * kHeadDim};
    for (auto _ : state) {
        for (uint32_t l = 0; l < kLayers; ++l) {
            params.layer = l;
            llmkv::cpu::paged_attention(*f.cache, codecs, params, &span, 1, pool, scratch);
        }
        benchmark::DoNotOptimize(f.out.data());
    }
    state.SetLabel(kPairs[pair].name);
    state.counters["MB/step"] = f.bytes_per_step * 1e-6;
    state.counters["GB/s"] = benchmark::Counter(
        f.bytes_per_step * 1e-9 * double(state.iterations()), benchmark::Counter::kIsRate);
}

void decode_args(benchmark::internal::Benchmark *b) {
    for (int threads : {1, 2}) {
        for (int ctx : {512, 2048, 8192}) {
            for (int pair = 0; pair < int(std::size(kPairs)); ++pair) b->Args({pair, ctx, threads});
        }
    }
}
BENCHMARK(BM_DecodeAttention)
    ->ArgNames({"pair", "ctx", "threads"})
    ->Apply(decode_args)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
