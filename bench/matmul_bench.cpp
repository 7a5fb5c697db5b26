// Google Benchmark microbenchmarks of the CPU matmul kernels: weight streaming rate (GB/s of
// weight bytes) per type from DRAM, the full SmolLM2-135M weight set for decode (n_tokens = 1)
// and prefill (n_tokens = 64), and the per-call cost of small matrices.
#include <benchmark/benchmark.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/cpu/matmul_packed.h"
#include "common/half.h"

namespace {

using llmkv::TensorType;
using llmkv::ThreadPool;
using llmkv::cpu::MatmulKernel;
using llmkv::cpu::MatmulScratch;
using llmkv::cpu::WeightMatrix;

ThreadPool &pool_for(int n) {
    static std::map<int, std::unique_ptr<ThreadPool>> pools;
    auto &p = pools[n];
    if (!p) p = std::make_unique<ThreadPool>(unsigned(n));
    return *p;
}

uint64_t g_rng = 0x9e3779b97f4a7c15ull;
inline uint64_t next_u64() {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

// A weight matrix with random payload and small, finite fp16 scales (no NaN/Inf/denormals).
// The packed types (matmul_packed.h) carry their packed copy, as the engine's weights do
// (CpuBackend).
struct OwnedMatrix {
    std::vector<uint8_t> bytes;
    WeightMatrix w;
    std::shared_ptr<llmkv::cpu::PackedWeights> packed;
    void repoint() {
        w.data = bytes.data();
        w.packed = nullptr;
        packed.reset();
        if (llmkv::cpu::is_packed_type(w.type)) {
            packed = std::make_shared<llmkv::cpu::PackedWeights>(w);
            w.packed = packed->data();
        }
    }
};

// Byte offsets of the fp16 factors inside a block of the lane formats.
std::vector<size_t> f16_offsets(TensorType t) {
    switch (t) {
        case TensorType::Q5_0:
        case TensorType::IQ4_NL:
            return {0};
        case TensorType::Q5_1:
        case TensorType::Q4_K:
        case TensorType::Q5_K:
            return {0, 2};
        case TensorType::Q2_K:
            return {80, 82};
        case TensorType::Q3_K:
            return {108};
        case TensorType::Q6_K:
            return {208};
        default:
            return {};
    }
}

OwnedMatrix make_matrix(TensorType t, int64_t rows, int64_t cols) {
    OwnedMatrix m;
    const int64_t blk = llmkv::tensor_type_block_elements(t);
    const size_t row_bytes = size_t(cols / blk) * llmkv::tensor_type_block_bytes(t);
    m.bytes.resize(row_bytes * size_t(rows));
    for (size_t i = 0; i + 8 <= m.bytes.size(); i += 8) {
        const uint64_t v = next_u64();
        std::memcpy(&m.bytes[i], &v, 8);
    }
    const uint16_t scale = llmkv::fp32_to_fp16(0.01f), minv = llmkv::fp32_to_fp16(-0.05f);
    const size_t n_units = m.bytes.size() / llmkv::tensor_type_block_bytes(t);
    for (size_t b = 0; b < n_units; ++b) {
        uint8_t *p = &m.bytes[b * llmkv::tensor_type_block_bytes(t)];
        switch (t) {
            case TensorType::F32: {
                const float v = float(int(next_u64() % 2001) - 1000) * 1e-3f;
                std::memcpy(p, &v, 4);
                break;
            }
            case TensorType::F16: {
                const uint16_t h =
                    llmkv::fp32_to_fp16(float(int(next_u64() % 2001) - 1000) * 1e-3f);
                std::memcpy(p, &h, 2);
                break;
            }
            case TensorType::BF16: {
                const uint16_t h =
                    llmkv::fp32_to_bf16(float(int(next_u64() % 2001) - 1000) * 1e-3f);
                std::memcpy(p, &h, 2);
                break;
            }
            case TensorType::Q4_1:
                std::memcpy(p + 2, &minv, 2);
                [[fallthrough]];
            case TensorType::Q4_0:
            case TensorType::Q8_0:
                std::memcpy(p, &scale, 2);
                break;
            case TensorType::MXFP4:
                p[0] = 121;  // the E8M0 scale 2^-7 (no subnormal or infinite products)
                break;
            default:
                // The other block types: every fp16 factor small and finite.
                for (size_t off : f16_offsets(t)) {
                    std::memcpy(p + off, off == 2 && t == TensorType::Q5_1 ? &minv : &scale, 2);
                }
                break;
        }
    }
    m.w = WeightMatrix{t, m.bytes.data(), rows, cols, row_bytes};
    m.repoint();
    return m;
}

std::vector<float> make_x(int64_t n, int64_t cols) {
    std::vector<float> x(size_t(n * cols));
    for (float &v : x) v = float(int(next_u64() % 2001) - 1000) * 1e-3f;
    return x;
}

// Selects the kernel family for one benchmark; arg 1 = portable, 0 = auto (AVX2 if present).
bool select_family(benchmark::State &state, int64_t portable) {
    if (!llmkv::cpu::set_matmul_kernel(portable ? MatmulKernel::kPortable : MatmulKernel::kAuto)) {
        state.SkipWithError("kernel family not available");
        return false;
    }
    state.SetLabel(llmkv::cpu::matmul_kernel_name());
    return true;
}

void set_rate(benchmark::State &state, double weight_bytes_per_iter) {
    state.counters["GB/s"] = benchmark::Counter(
        weight_bytes_per_iter * 1e-9 * double(state.iterations()), benchmark::Counter::kIsRate);
}

// ---- reference point: plain streaming read of 96 MB with the same pool ------------------
// Args: threads. What "memory bandwidth" means on this machine right now.
void BM_ReadBandwidth(benchmark::State &state) {
    const int threads = int(state.range(0));
    static std::vector<uint64_t> buf((96u << 20) / 8, 1);
    ThreadPool &pool = pool_for(threads);
    std::vector<uint64_t> partial(size_t(threads) * 8);
    for (auto _ : state) {
        pool.run([&](unsigned t, unsigned nt) {
            const size_t per = (buf.size() + nt - 1) / nt;
            const size_t b = std::min(buf.size(), size_t(t) * per);
            const size_t e = std::min(buf.size(), b + per);
            uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
            for (size_t i = b; i + 4 <= e; i += 4) {
                a0 += buf[i];
                a1 += buf[i + 1];
                a2 += buf[i + 2];
                a3 += buf[i + 3];
            }
            partial[size_t(t) * 8] = a0 + a1 + a2 + a3;
        });
        benchmark::DoNotOptimize(partial.data());
    }
    set_rate(state, double(buf.size()) * 8.0);
}
BENCHMARK(BM_ReadBandwidth)
    ->ArgNames({"threads"})
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// ---- one type, ~96 MB of weights (well beyond L3): DRAM streaming rate ---------------------
// Args: type id, threads, n_tokens.
void BM_StreamType(benchmark::State &state) {
    const TensorType t = TensorType(state.range(0));
    const int threads = int(state.range(1));
    const int64_t n = state.range(2);
    if (!select_family(state, 0)) return;
    const int64_t cols = 576;
    const size_t row_bytes =
        size_t(cols / llmkv::tensor_type_block_elements(t)) * llmkv::tensor_type_block_bytes(t);
    const int64_t rows = int64_t((96u << 20) / row_bytes);
    static std::map<uint32_t, OwnedMatrix> cache;  // built once per type
    auto it = cache.find(uint32_t(t));
    if (it == cache.end()) it = cache.emplace(uint32_t(t), make_matrix(t, rows, cols)).first;
    const WeightMatrix &w = it->second.w;
    std::vector<float> x = make_x(n, cols), y(size_t(n * rows));
    MatmulScratch scratch;
    ThreadPool &pool = pool_for(threads);
    for (auto _ : state) {
        llmkv::cpu::matmul(w, x.data(), cols, n, y.data(), rows, pool, scratch);
        benchmark::DoNotOptimize(y.data());
    }
    set_rate(state, double(w.row_bytes) * double(w.rows));
    state.counters["MB"] = double(w.row_bytes) * double(w.rows) * 1e-6;
}

void stream_args(benchmark::internal::Benchmark *b) {
    for (int t : {0, 1, 30, 8, 2, 3}) {
        for (int threads : {1, 2}) b->Args({t, threads, 1});
    }
    for (int t : {8, 3}) {
        for (int n : {4, 64}) {
            for (int threads : {1, 2}) b->Args({t, threads, n});
        }
    }
}
BENCHMARK(BM_StreamType)
    ->Apply(stream_args)
    ->ArgNames({"type", "threads", "n_tokens"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// ---- every quantized format on model-sized shapes: decode and prefill -----------------------
// Copies of the matrix cycle through >= 128 MB so the weights come from DRAM as in real decode
// (prefill reads each weight once per call as well). GB/s counts weight bytes; tok/s the
// tokens of the call. Args: type id, rows, cols, n_tokens, threads.
void BM_Format(benchmark::State &state) {
    const TensorType t = TensorType(state.range(0));
    const int64_t rows = state.range(1), cols = state.range(2), n = state.range(3);
    const int threads = int(state.range(4));
    if (!select_family(state, 0)) return;
    state.SetLabel(std::string(llmkv::tensor_type_name(t)) + " " +
                   llmkv::cpu::matmul_kernel_name());
    std::vector<OwnedMatrix> copies;
    copies.push_back(make_matrix(t, rows, cols));
    while (double(copies.size()) * double(copies[0].bytes.size()) < 128e6) {
        copies.push_back(copies[0]);
        copies.back().repoint();
    }
    std::vector<float> x = make_x(n, cols), y(size_t(n * rows));
    MatmulScratch scratch;
    ThreadPool &pool = pool_for(threads);
    size_t i = 0;
    for (auto _ : state) {
        llmkv::cpu::matmul(copies[i].w, x.data(), cols, n, y.data(), rows, pool, scratch);
        benchmark::DoNotOptimize(y.data());
        if (++i == copies.size()) i = 0;
    }
    set_rate(state, double(copies[0].bytes.size()));
    state.counters["tok/s"] =
        benchmark::Counter(double(n) * double(state.iterations()), benchmark::Counter::kIsRate);
}
void format_args(benchmark::internal::Benchmark *b) {
    const TensorType types[] = {TensorType::Q8_0, TensorType::Q4_1,   TensorType::Q5_0,
                                TensorType::Q5_1, TensorType::IQ4_NL, TensorType::MXFP4,
                                TensorType::Q2_K, TensorType::Q3_K,   TensorType::Q4_K,
                                TensorType::Q5_K, TensorType::Q6_K};
    for (auto [rows, cols] : {std::pair{2048, 640}, {640, 2048}, {4096, 4096}}) {
        for (TensorType t : types) {
            // k-quant rows are whole super-blocks of 256: 768 stands in for 640 there.
            const int c = llmkv::tensor_type_is_k_quant(t) && cols % 256 ? 768 : cols;
            for (int n : {1, 64}) {
                for (int threads : {1, 2}) b->Args({int64_t(t), rows, c, n, threads});
            }
        }
    }
}
BENCHMARK(BM_Format)
    ->ArgNames({"type", "rows", "cols", "n_tokens", "threads"})
    ->Apply(format_args)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// ---- the SmolLM2-135M weight set: 30 layers of Q4_1 + the tied Q8_0 output head ----------
struct SmolLM2 {
    std::vector<OwnedMatrix> mats;
    double bytes = 0;
    double macs = 0;  // multiply-adds per token
    SmolLM2() {
        const int64_t E = 576, KV = 192, FF = 1536;
        for (int l = 0; l < 30; ++l) {
            for (auto [r, c] :
                 {std::pair{E, E}, {KV, E}, {KV, E}, {E, E}, {FF, E}, {FF, E}, {E, FF}}) {
                mats.push_back(make_matrix(TensorType::Q4_1, r, c));
            }
        }
        mats.push_back(make_matrix(TensorType::Q8_0, 49152, E));
        for (const auto &m : mats) {
            bytes += double(m.bytes.size());
            macs += double(m.w.rows) * double(m.w.cols);
        }
    }
};

SmolLM2 &smollm2() {
    static SmolLM2 model;
    return model;
}

// Args: threads, n_tokens, portable.
void BM_SmolLM2(benchmark::State &state) {
    const int threads = int(state.range(0));
    const int64_t n = state.range(1);
    if (!select_family(state, state.range(2))) return;
    SmolLM2 &m = smollm2();
    std::vector<float> x = make_x(n, 1536), y(size_t(n) * 49152);
    MatmulScratch scratch;
    ThreadPool &pool = pool_for(threads);
    for (auto _ : state) {
        for (const auto &om : m.mats) {
            llmkv::cpu::matmul(om.w, x.data(), om.w.cols, n, y.data(), om.w.rows, pool, scratch);
        }
        benchmark::DoNotOptimize(y.data());
    }
    set_rate(state, m.bytes);
    state.counters["MB"] = m.bytes * 1e-6;
    state.counters["GMAC/s"] = benchmark::Counter(
        double(state.iterations()) * double(n) * m.macs * 1e-9, benchmark::Counter::kIsRate);
    state.counters["ms/token"] =
        benchmark::Counter(double(state.iterations()) * double(n) * 1e-3,
                           benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
    llmkv::cpu::set_matmul_kernel(MatmulKernel::kAuto);
}
BENCHMARK(BM_SmolLM2)
    ->ArgNames({"threads", "n_tokens", "portable"})
    ->Args({1, 1, 0})
    ->Args({2, 1, 0})
    ->Args({1, 4, 0})
    ->Args({2, 4, 0})
    ->Args({1, 8, 0})
    ->Args({2, 8, 0})
    ->Args({1, 32, 0})
    ->Args({2, 32, 0})
    ->Args({1, 64, 0})
    ->Args({2, 64, 0})
    ->Args({2, 1, 1})
    ->Args({2, 64, 1})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// ---- per-call cost of one decode-sized matrix --------------------------------------------
// hot: the same matrix every call (L2-resident: pure call + kernel cost). cold: a different
// copy each call, cycling through > 64 MB, so the weights come from DRAM as in real decode.
// Args: rows, cols, type, threads, cold.
void BM_SmallCall(benchmark::State &state) {
    const int64_t rows = state.range(0), cols = state.range(1);
    const TensorType t = TensorType(state.range(2));
    const int threads = int(state.range(3));
    const bool cold = state.range(4) != 0;
    if (!select_family(state, 0)) return;
    std::vector<OwnedMatrix> copies;
    copies.push_back(make_matrix(t, rows, cols));
    if (cold) {
        while (double(copies.size()) * double(copies[0].bytes.size()) < 64e6) {
            copies.push_back(make_matrix(t, rows, cols));
        }
    }
    std::vector<float> x = make_x(1, cols), y(static_cast<size_t>(rows));
    MatmulScratch scratch;
    ThreadPool &pool = pool_for(threads);
    size_t i = 0;
    for (auto _ : state) {
        llmkv::cpu::matmul(copies[i].w, x.data(), cols, 1, y.data(), rows, pool, scratch);
        benchmark::DoNotOptimize(y.data());
        if (++i == copies.size()) i = 0;
    }
    set_rate(state, double(copies[0].bytes.size()));
}
void small_call_args(benchmark::internal::Benchmark *b) {
    const std::pair<int, int> shapes[] = {{192, 576}, {576, 576}, {1536, 576}, {576, 1536}};
    for (int cold : {0, 1}) {
        for (auto [rows, cols] : shapes) {
            for (int threads : {1, 2}) b->Args({rows, cols, 3, threads, cold});
        }
    }
}
BENCHMARK(BM_SmallCall)
    ->ArgNames({"rows", "cols", "type", "threads", "cold"})
    ->Apply(small_call_args)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// ---- the CPU's int8 peak: independent vpdpbusd chains, nothing else --------------------------
// Reports GMAC/s (int8 multiply-adds per second, 64 per 512-bit vpdpbusd) of one thread, the
// ceiling against which the prefill kernels' rate is stated (docs/PERFORMANCE.md).
#if defined(__x86_64__)
__attribute__((target("avx512f,avx512bw,avx512vnni"), noinline)) uint64_t dpbusd_loop(
    int64_t iters) {
    // Twelve independent accumulators in named registers; the instruction is written out so that
    // the compiler can neither fold the chains nor keep them in memory.
    __m512i c0 = _mm512_set1_epi32(0), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0,
            c7 = c0, c8 = c0, c9 = c0, c10 = c0, c11 = c0;
    const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
#define LLMKV_DPBUSD(c) asm volatile("vpdpbusd %2, %1, %0" : "+v"(c) : "v"(a), "v"(b))
    for (int64_t n = 0; n < iters; ++n) {
        LLMKV_DPBUSD(c0);
        LLMKV_DPBUSD(c1);
        LLMKV_DPBUSD(c2);
        LLMKV_DPBUSD(c3);
        LLMKV_DPBUSD(c4);
        LLMKV_DPBUSD(c5);
        LLMKV_DPBUSD(c6);
        LLMKV_DPBUSD(c7);
        LLMKV_DPBUSD(c8);
        LLMKV_DPBUSD(c9);
        LLMKV_DPBUSD(c10);
        LLMKV_DPBUSD(c11);
    }
#undef LLMKV_DPBUSD
    __m512i s =
        _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(c0, c1), _mm512_add_epi32(c2, c3)),
                         _mm512_add_epi32(_mm512_add_epi32(c4, c5), _mm512_add_epi32(c6, c7)));
    s = _mm512_add_epi32(s, _mm512_add_epi32(_mm512_add_epi32(c8, c9), _mm512_add_epi32(c10, c11)));
    alignas(64) int32_t out[16];
    _mm512_store_si512(out, s);
    return uint64_t(uint32_t(out[0]) + uint32_t(out[15]));
}

void BM_Int8Peak(benchmark::State &state) {
    if (!llmkv::cpu::set_matmul_kernel(MatmulKernel::kAvx512)) {
        state.SkipWithError("no AVX-512 VNNI");
        return;
    }
    llmkv::cpu::set_matmul_kernel(MatmulKernel::kAuto);
    const int64_t iters = 1 << 20;
    for (auto _ : state) benchmark::DoNotOptimize(dpbusd_loop(iters));
    state.counters["GMAC/s"] = benchmark::Counter(
        double(state.iterations()) * double(iters) * 12 * 64 * 1e-9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Int8Peak)->UseRealTime()->Unit(benchmark::kMillisecond);
#endif

}  // namespace

// The benchmark binary is built from every bench/*.cpp; main is weak so that any one file may
// provide it (or replace it) without a duplicate-symbol error.
__attribute__((weak)) int main(int argc, char **argv) {
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
