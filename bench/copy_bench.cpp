// Google Benchmark microbenchmarks of block copies between tiers: plain memcpy on the
// calling thread versus CopyEngine (one submission of all blocks, or one ticket per
// block), into ordinary heap memory and into locked HostTier blocks. 1000 blocks of one
// sealed SmolLM2-135M int8 block each: 30 layers x 3 kv heads x (K,V) x 16 tokens x 64
// dims = 184,320 bytes (180 KiB), 176 MiB per pass. Bytes/s is the payload copied.
#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <vector>

#include "kv/copy_engine.h"
#include "kv/host_tier.h"

namespace {

using llmkv::CopyEngine;
using llmkv::CopyOp;
using llmkv::HostTier;

constexpr size_t kBlockBytes = 30 * 3 * 2 * 16 * 64;
constexpr size_t kBlocks = 1000;

// Source "device" blocks (one slab, as a device tier is) and destinations: either one
// plain heap slab or blocks carved from a HostTier. Built once, reused by every bench.
struct Buffers {
    std::vector<unsigned char> device;
    std::vector<unsigned char> plain;
    std::unique_ptr<HostTier> tier;
    std::vector<void *> host_blocks;

    Buffers() : device(kBlocks * kBlockBytes), plain(kBlocks * kBlockBytes) {
        for (size_t i = 0; i < device.size(); ++i) device[i] = static_cast<unsigned char>(i * 131u);
        std::memset(plain.data(), 0, plain.size());
        if (HostTier::available()) {
            // 192 KiB per block after mimalloc's 64 KiB page rounding, plus segment headers.
            tier = std::make_unique<HostTier>(uint64_t(kBlocks) * 200 * 1024);
            if (!tier->allocate_blocks(kBlockBytes, kBlocks, host_blocks)) host_blocks.clear();
            for (void *b : host_blocks) std::memset(b, 0, kBlockBytes);  // fault in
        }
    }
    void *dst(bool host, size_t i) {
        return host ? host_blocks[i] : static_cast<void *>(plain.data() + i * kBlockBytes);
    }
};

Buffers &buffers() {
    static Buffers b;
    return b;
}

bool skip_without_tier(benchmark::State &state, bool host) {
    if (host && buffers().host_blocks.size() != kBlocks) {
        state.SkipWithError("host tier unavailable");
        return true;
    }
    return false;
}

// arg 0: destination is plain heap memory; 1: HostTier blocks.
void BM_CopyBlocks_Memcpy(benchmark::State &state) {
    const bool host = state.range(0) != 0;
    if (skip_without_tier(state, host)) return;
    Buffers &b = buffers();
    for (auto _ : state) {
        for (size_t i = 0; i < kBlocks; ++i)
            std::memcpy(b.dst(host, i), b.device.data() + i * kBlockBytes, kBlockBytes);
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(kBlocks * kBlockBytes));
}
BENCHMARK(BM_CopyBlocks_Memcpy)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

// All 1000 blocks in one submission, then wait: the copy thread's throughput.
void BM_CopyBlocks_CopyEngineOneTicket(benchmark::State &state) {
    const bool host = state.range(0) != 0;
    if (skip_without_tier(state, host)) return;
    Buffers &b = buffers();
    CopyEngine engine;
    for (auto _ : state) {
        std::vector<CopyOp> ops;
        ops.reserve(kBlocks);
        for (size_t i = 0; i < kBlocks; ++i)
            ops.push_back(CopyOp{b.device.data() + i * kBlockBytes, b.dst(host, i), kBlockBytes});
        engine.wait(engine.submit(std::move(ops)));
    }
    state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(kBlocks * kBlockBytes));
    const llmkv::CopyStats s = engine.stats();
    state.counters["engine_GB/s"] = s.copy_ns ? double(s.bytes_copied) / double(s.copy_ns) : 0.0;
}
BENCHMARK(BM_CopyBlocks_CopyEngineOneTicket)
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// One ticket per block, all submitted before one wait_all: adds per-ticket overhead.
void BM_CopyBlocks_CopyEngineTicketPerBlock(benchmark::State &state) {
    const bool host = state.range(0) != 0;
    if (skip_without_tier(state, host)) return;
    Buffers &b = buffers();
    CopyEngine engine;
    for (auto _ : state) {
        for (size_t i = 0; i < kBlocks; ++i) {
            engine.submit({CopyOp{b.device.data() + i * kBlockBytes, b.dst(host, i), kBlockBytes}});
        }
        engine.wait_all();
    }
    state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(kBlocks * kBlockBytes));
}
BENCHMARK(BM_CopyBlocks_CopyEngineTicketPerBlock)
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
