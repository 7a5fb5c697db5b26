// GPU benchmark (numbers, no assertions): device copy bandwidth, decode paged-attention
// bandwidth per KV codec at 4k and 32k context, 8-bit vs fp16 attention speed, and decode
// tokens/s at batch 1/32/128 for one synthetic Llama-3-8B-shaped layer and for SmolLM2
// (when $LLMKV_MODEL or models/SmolLM2-135M-Instruct.Q4_1.gguf exists); packed weights:
// device dequantization to fp16 and the packed matrix-vector kernel against a cuBLAS fp16 GEMV.
// Prints a table and "RESULT <key> <value>" lines (tools/gpu-check.sh collects them).
// Usage: llmkv_gpu_bench [--quick]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "common/error.h"
#include "dequant.cuh"
#include "dequant_test_util.h"
#include "gemm.cuh"
#include "kv/kv_cache.h"
#include "matvec_q.cuh"
#include "model/arch/forward.h"
#include "model/gguf.h"
#include "model/llama_model.h"
#include "paged_attention.cuh"

namespace {

using namespace llmkv;

bool g_quick = false;

#define BENCH_CUDA(expr)                                                                    \
    do {                                                                                    \
        const cudaError_t e_ = (expr);                                                      \
        if (e_ != cudaSuccess) {                                                            \
            std::fprintf(stderr, "CUDA error %s at %s:%d: %s\n", #expr, __FILE__, __LINE__, \
                         cudaGetErrorString(e_));                                           \
            std::exit(1);                                                                   \
        }                                                                                   \
    } while (0)

template <class T>
cudaError_t device_alloc(T **p, size_t bytes) {
    return cudaMalloc(reinterpret_cast<void **>(p), bytes);
}

void result(const std::string &key, double value) {
    std::printf("RESULT %s %.4g\n", key.c_str(), value);
}

// Seconds per call of f, averaged over iters after one warm-up, timed with events.
template <class F>
double time_calls(F &&f, int iters) {
    f();
    BENCH_CUDA(cudaDeviceSynchronize());
    cudaEvent_t a, b;
    BENCH_CUDA(cudaEventCreate(&a));
    BENCH_CUDA(cudaEventCreate(&b));
    BENCH_CUDA(cudaEventRecord(a));
    for (int i = 0; i < iters; ++i) f();
    BENCH_CUDA(cudaEventRecord(b));
    BENCH_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, a, b));
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return ms / 1000.0 / iters;
}

// ---- copy bandwidth -------------------------------------------------------------------------

double copy_bandwidth() {
    const size_t bytes = size_t(1) << 30;
    void *src = nullptr, *dst = nullptr;
    BENCH_CUDA(cudaMalloc(&src, bytes));
    BENCH_CUDA(cudaMalloc(&dst, bytes));
    BENCH_CUDA(cudaMemset(src, 1, bytes));
    const double t = time_calls(
        [&] { BENCH_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice)); }, 10);
    cudaFree(src);
    cudaFree(dst);
    const double bw = 2.0 * bytes / t;  // read + write
    std::printf("\n== device copy (cudaMemcpy D2D, 1 GiB) ==\n  %.1f GB/s (read + write)\n",
                bw / 1e9);
    result("copy_GBps", bw / 1e9);
    return bw;
}

// ---- decode attention -------------------------------------------------------------------------

struct AttnResult {
    double seconds, bytes;
};

// One decode step of `batch` sessions at `context` tokens, Llama-3-8B attention shape
// (32 query heads, 8 KV heads, head_dim 128, 16-token blocks), one layer. host: the sealed
// blocks live in mapped pinned host memory (the host tier of a session beyond the device
// pool), read in place by the kernel.
AttnResult decode_attention(uint32_t codec, bool rotate, uint32_t context, uint32_t batch,
                            bool host = false) {
    KvGeometry g;
    g.n_layers = 1;
    g.n_kv_heads = 8;
    g.head_dim = 128;
    g.block_tokens = 16;
    g.residual_tokens = 0;
    g.dtype_k = g.dtype_v = llmkv_kv_dtype(codec);
    g.rotate_k = g.rotate_v = rotate;
    const uint32_t n_heads = 32;
    const uint32_t pos = context - 1;
    const uint32_t n_sealed = g.sealed_blocks(pos);
    const uint32_t ws = n_sealed * g.block_tokens, cap = pos - ws + 1;
    const size_t pool_bytes = size_t(batch) * n_sealed * g.sealed_block_bytes();
    uint8_t *pool = nullptr;
    if (host) {
        BENCH_CUDA(cudaHostAlloc(reinterpret_cast<void **>(&pool),
                                 std::max<size_t>(pool_bytes, 256),
                                 cudaHostAllocPortable | cudaHostAllocMapped));
        std::memset(pool, 0x11, pool_bytes);
    } else {
        BENCH_CUDA(device_alloc(&pool, std::max<size_t>(pool_bytes, 256)));
        BENCH_CUDA(cudaMemset(pool, 0x11, pool_bytes));  // finite values in every codec
    }
    std::vector<uint32_t> ids(size_t(batch) * n_sealed);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = uint32_t(i);
    // Host blocks: every id names host_blocks[id] (n_pool_blocks = 0).
    std::vector<const uint8_t *> host_ptrs;
    const uint8_t **d_host_ptrs = nullptr;
    if (host) {
        for (size_t i = 0; i < ids.size(); ++i)
            host_ptrs.push_back(pool + i * g.sealed_block_bytes());
        BENCH_CUDA(
            device_alloc(&d_host_ptrs, std::max<size_t>(host_ptrs.size(), 1) * sizeof(void *)));
        BENCH_CUDA(cudaMemcpy(d_host_ptrs, host_ptrs.data(), host_ptrs.size() * sizeof(void *),
                              cudaMemcpyHostToDevice));
    }
    std::vector<cuda::StepSpan> spans(batch);
    std::vector<uint32_t> row_span(batch);
    const std::vector<int32_t> positions(batch, int32_t(pos));
    std::vector<uint32_t> parts(batch + 1);
    cuda::attention_partition_plan(positions.data(), batch, parts.data());
    const size_t win_elems = size_t(2) * g.n_kv_heads * cap * g.head_dim;
    for (uint32_t s = 0; s < batch; ++s) {
        spans[s] = cuda::StepSpan{pos, 1, s, s, ws, cap, s * win_elems, s * n_sealed, n_sealed};
        row_span[s] = s;
    }
    uint32_t *d_ids = nullptr, *d_row_span = nullptr, *d_parts = nullptr, *d_item_row = nullptr;
    cuda::StepSpan *d_spans = nullptr;
    uint16_t *window = nullptr;
    float *q = nullptr, *out = nullptr, *ws_buf = nullptr;
    const size_t ws_bytes = std::max<size_t>(
        cuda::attention_min_workspace(n_heads, g.head_dim, context) * batch, 1 << 20);
    BENCH_CUDA(device_alloc(&d_ids, std::max<size_t>(ids.size(), 1) * 4));
    BENCH_CUDA(device_alloc(&d_row_span, batch * 4));
    BENCH_CUDA(device_alloc(&d_parts, (batch + 1) * 4));
    BENCH_CUDA(cudaMemcpy(d_parts, parts.data(), (batch + 1) * 4, cudaMemcpyHostToDevice));
    BENCH_CUDA(device_alloc(&d_item_row, size_t(parts[batch]) * 4));
    BENCH_CUDA(cuda::launch_attention_item_rows(d_parts, batch, d_item_row, nullptr));
    BENCH_CUDA(device_alloc(&d_spans, batch * sizeof(cuda::StepSpan)));
    BENCH_CUDA(device_alloc(&window, win_elems * batch * 2));
    BENCH_CUDA(device_alloc(&q, size_t(batch) * n_heads * g.head_dim * 4));
    BENCH_CUDA(device_alloc(&out, size_t(batch) * n_heads * g.head_dim * 4));
    BENCH_CUDA(device_alloc(&ws_buf, ws_bytes));
    BENCH_CUDA(cudaMemcpy(d_ids, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
    BENCH_CUDA(cudaMemcpy(d_row_span, row_span.data(), batch * 4, cudaMemcpyHostToDevice));
    BENCH_CUDA(
        cudaMemcpy(d_spans, spans.data(), batch * sizeof(cuda::StepSpan), cudaMemcpyHostToDevice));
    BENCH_CUDA(cudaMemset(window, 0x11, win_elems * batch * 2));
    BENCH_CUDA(cudaMemset(q, 0, size_t(batch) * n_heads * g.head_dim * 4));
    cuda::AttentionArgs a;
    a.g = g;
    a.n_heads = n_heads;
    a.scale = 1.0f / std::sqrt(128.0f);
    a.q = q;
    a.q_stride = n_heads * g.head_dim;
    a.pool = pool;
    a.block_ids = d_ids;
    a.window = window;
    a.spans = d_spans;
    a.row_span = d_row_span;
    a.n_rows = batch;
    a.row_parts_host = parts.data();
    a.row_parts = d_parts;
    a.item_row = d_item_row;
    if (host) {
        a.n_pool_blocks = 0;
        a.host_blocks = d_host_ptrs;
    }
    a.out_f32 = out;
    a.out_stride = n_heads * g.head_dim;
    a.workspace = ws_buf;
    a.workspace_bytes = ws_bytes;
    const double t =
        time_calls([&] { BENCH_CUDA(cuda::launch_paged_attention(a, nullptr)); }, g_quick ? 5 : 20);
    const double bytes =
        double(pool_bytes) + double(batch) * cap * 2 * g.n_kv_heads * g.head_dim * 2;
    if (host) {
        cudaFreeHost(pool);
        cudaFree(d_host_ptrs);
    } else {
        cudaFree(pool);
    }
    cudaFree(d_ids);
    cudaFree(d_row_span);
    cudaFree(d_parts);
    cudaFree(d_item_row);
    cudaFree(d_spans);
    cudaFree(window);
    cudaFree(q);
    cudaFree(out);
    cudaFree(ws_buf);
    return {t, bytes};
}

void attention_bench(double copy_bw) {
    std::printf(
        "\n== decode paged attention, Llama-3-8B layer shape (32 q heads, 8 kv heads, D 128, B 16) "
        "==\n");
    std::printf("  %-10s %7s %6s %10s %10s %8s\n", "codec", "context", "batch", "time us",
                "KV GB/s", "% copy");
    struct Codec {
        const char *name;
        uint32_t codec;
        bool rotate;
    };
    const Codec codecs[] = {{"f16", cuda::kF16, false},   {"bf16", cuda::kBF16, false},
                            {"fp8", cuda::kFP8, false},   {"int8", cuda::kINT8, false},
                            {"int4", cuda::kINT4, false}, {"int4+rot", cuda::kINT4, true}};
    double f16_32k = 0;
    for (uint32_t context : {4096u, 32768u, 131072u}) {
        const uint32_t batch = context == 4096 ? 32 : context == 32768 ? 8 : 1;
        for (const Codec &c : codecs) {
            const AttnResult r = decode_attention(c.codec, c.rotate, context, batch);
            const double bw = r.bytes / r.seconds;
            std::printf("  %-10s %7u %6u %10.1f %10.1f %7.1f%%\n", c.name, context, batch,
                        r.seconds * 1e6, bw / 1e9, 100.0 * bw / copy_bw);
            const std::string key =
                std::string("attn_") + c.name + "_" + std::to_string(context / 1024) + "k";
            result(key + "_us", r.seconds * 1e6);
            result(key + "_pct_copy", 100.0 * bw / copy_bw);
            if (context == 32768) {
                if (c.codec == cuda::kF16) f16_32k = r.seconds;
                if ((c.codec == cuda::kFP8 || c.codec == cuda::kINT8) && f16_32k > 0) {
                    std::printf("  %-10s speed vs f16 at 32k: %.2fx\n", c.name,
                                f16_32k / r.seconds);
                    result(std::string("attn_") + c.name + "_32k_speedup_vs_f16",
                           f16_32k / r.seconds);
                }
            }
        }
    }
    // Blocks of the host tier read in place (long context beyond the device pool): the
    // bus, not HBM, bounds this; GB/s of KV bytes read.
    for (uint32_t context : {32768u, 131072u}) {
        const uint32_t batch = context == 32768 ? 8 : 1;
        for (const Codec &c : {codecs[0], codecs[3]}) {
            const AttnResult r = decode_attention(c.codec, c.rotate, context, batch, true);
            const double bw = r.bytes / r.seconds;
            std::printf("  %-10s %7u %6u %10.1f %10.1f  (host blocks)\n", c.name, context, batch,
                        r.seconds * 1e6, bw / 1e9);
            const std::string key =
                std::string("attn_host_") + c.name + "_" + std::to_string(context / 1024) + "k";
            result(key + "_us", r.seconds * 1e6);
            result(key + "_GBps", bw / 1e9);
        }
    }
}

// ---- synthetic Llama-3-8B layer
// ------------------------------------------------------------------

// Random small fp16 values (|x| < 0.03), fast.
void fill_fp16(std::vector<uint16_t> &v, uint32_t seed) {
    uint32_t x = seed * 2654435761u + 1;
    for (auto &h : v) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        // sign | exponent 2^-7 .. 2^-6 | random mantissa
        h = uint16_t(((x >> 16) & 0x8000u) | (uint16_t(8 + (x & 1)) << 10) | (x >> 20 & 0x3ffu));
    }
}

void synthetic_layer_bench() {
    const CudaModule &m = CudaModule::get();
    if (!m.loaded()) {
        std::printf("\n(synthetic layer skipped: %s)\n", m.error().c_str());
        return;
    }
    const llmkv_cuda_api *api = m.api();
    const uint32_t E = 4096, NH = 32, NKV = 8, D = 128, FF = 14336, V = 32000;
    std::printf(
        "\n== one synthetic Llama-3-8B layer (E 4096, 32/8 heads, FF 14336), fp16 weights, f16 KV "
        "==\n");
    std::vector<uint16_t> embd(size_t(V) * E), wq(size_t(NH) * D * E), wk(size_t(NKV) * D * E),
        wv(wk.size()), wo(size_t(E) * NH * D), wg(size_t(FF) * E), wu(wg.size()),
        wd(size_t(E) * FF);
    fill_fp16(embd, 1);
    fill_fp16(wq, 2);
    fill_fp16(wk, 3);
    fill_fp16(wv, 4);
    fill_fp16(wo, 5);
    fill_fp16(wg, 6);
    fill_fp16(wu, 7);
    fill_fp16(wd, 8);
    std::vector<float> norm(E, 1.0f), inv_freq(D / 2);
    for (uint32_t i = 0; i < D / 2; ++i)
        inv_freq[i] = float(1.0 / std::pow(500000.0, double(2 * i) / D));
    KvGeometry g;
    g.n_layers = 1;
    g.n_kv_heads = NKV;
    g.head_dim = D;
    g.block_tokens = 16;
    const uint32_t context = g_quick ? 256 : 512, max_batch = 128, T = 2048;
    const uint32_t blocks_per_session = (context + 64) / 16 + 1;
    llmkv_cuda_kv_desc kd{};
    kd.struct_size = sizeof kd;
    kd.n_layers = 1;
    kd.n_kv_heads = NKV;
    kd.head_dim = D;
    kd.block_tokens = 16;
    kd.n_sealed_blocks = max_batch * blocks_per_session;
    kd.n_tail_slots = max_batch;
    kd.sealed_block_bytes = g.sealed_block_bytes();
    kd.tail_block_bytes = g.tail_block_bytes();
    llmkv_cuda_context_params cp{};
    cp.struct_size = sizeof cp;
    cp.max_batch_tokens = T;
    cp.max_spans = max_batch;
    llmkv_cuda_context *ctx = nullptr;
    char err[1024] = {0};
    if (api->create(&kd, &cp, &ctx, err, sizeof err) != LLMKV_CUDA_OK) {
        std::printf("  create failed: %s\n", err);
        return;
    }
    // Weights and activations of one layer, then the layer's ops as the Llama forward pass
    // (src/model/arch/) issues them through the Backend.
    llmkv_cuda_weight h_embd = 0, h_wq = 0, h_wk = 0, h_wv = 0, h_wo = 0, h_wg = 0, h_wu = 0,
                      h_wd = 0, h_norm = 0, h_freq = 0;
    llmkv_cuda_tensor x{}, xn{}, q{}, k{}, v{}, attn{}, tmp{}, gate{}, up{};
    const uint32_t QD = NH * D, KVD = NKV * D;
    bool ok = api->upload_matrix(ctx, embd.data(), V, E, &h_embd) == LLMKV_CUDA_OK &&
              api->upload_matrix(ctx, wq.data(), QD, E, &h_wq) == LLMKV_CUDA_OK &&
              api->upload_matrix(ctx, wk.data(), KVD, E, &h_wk) == LLMKV_CUDA_OK &&
              api->upload_matrix(ctx, wv.data(), KVD, E, &h_wv) == LLMKV_CUDA_OK &&
              api->upload_matrix(ctx, wo.data(), E, QD, &h_wo) == LLMKV_CUDA_OK &&
              api->upload_matrix(ctx, wg.data(), FF, E, &h_wg) == LLMKV_CUDA_OK &&
              api->upload_matrix(ctx, wu.data(), FF, E, &h_wu) == LLMKV_CUDA_OK &&
              api->upload_matrix(ctx, wd.data(), E, FF, &h_wd) == LLMKV_CUDA_OK &&
              api->upload_vector(ctx, norm.data(), E, &h_norm) == LLMKV_CUDA_OK &&
              api->upload_vector(ctx, inv_freq.data(), D / 2, &h_freq) == LLMKV_CUDA_OK &&
              api->alloc_activation(ctx, T, E, &x) == LLMKV_CUDA_OK &&
              api->alloc_activation(ctx, T, E, &xn) == LLMKV_CUDA_OK &&
              api->alloc_activation(ctx, T, QD, &q) == LLMKV_CUDA_OK &&
              api->alloc_activation(ctx, T, KVD, &k) == LLMKV_CUDA_OK &&
              api->alloc_activation(ctx, T, KVD, &v) == LLMKV_CUDA_OK &&
              api->alloc_activation(ctx, T, QD, &attn) == LLMKV_CUDA_OK &&
              api->alloc_activation(ctx, T, E, &tmp) == LLMKV_CUDA_OK &&
              api->alloc_activation(ctx, T, FF, &gate) == LLMKV_CUDA_OK &&
              api->alloc_activation(ctx, T, FF, &up) == LLMKV_CUDA_OK;
    if (!ok) {
        std::printf("  set-up failed: %s\n", api->last_error(ctx));
        api->destroy(ctx);
        return;
    }
    auto rows = [](llmkv_cuda_tensor t, uint32_t n) {
        return llmkv_cuda_tensor{t.data, n, t.cols};
    };
    // One layer over a batch, synchronized at the end (the module shares the process's
    // primary context, so cudaDeviceSynchronize waits for its streams).
    auto layer = [&](const std::vector<llmkv_cuda_span> &sp) {
        uint32_t n = 0;
        const float eps = 1e-5f;
        bool good =
            api->begin_batch(ctx, sp.data(), uint32_t(sp.size()), &n, nullptr) == LLMKV_CUDA_OK &&
            api->embed(ctx, h_embd, rows(x, n)) == LLMKV_CUDA_OK &&
            api->rms_norm(ctx, rows(x, n), h_norm, eps, rows(xn, n)) == LLMKV_CUDA_OK &&
            api->matmul(ctx, h_wq, rows(xn, n), rows(q, n)) == LLMKV_CUDA_OK &&
            api->matmul(ctx, h_wk, rows(xn, n), rows(k, n)) == LLMKV_CUDA_OK &&
            api->matmul(ctx, h_wv, rows(xn, n), rows(v, n)) == LLMKV_CUDA_OK &&
            api->rope(ctx, rows(q, n), NH, D, D, LLMKV_CUDA_ROPE_ADJACENT, 1.0f, h_freq) ==
                LLMKV_CUDA_OK &&
            api->rope(ctx, rows(k, n), NKV, D, D, LLMKV_CUDA_ROPE_ADJACENT, 1.0f, h_freq) ==
                LLMKV_CUDA_OK &&
            api->write_kv(ctx, 0, rows(k, n), rows(v, n)) == LLMKV_CUDA_OK &&
            api->attention(ctx, 0, rows(q, n), NH, 1.0f / std::sqrt(float(D)), 0, rows(attn, n)) ==
                LLMKV_CUDA_OK &&
            api->matmul(ctx, h_wo, rows(attn, n), rows(tmp, n)) == LLMKV_CUDA_OK &&
            api->add(ctx, rows(x, n), rows(tmp, n)) == LLMKV_CUDA_OK &&
            api->rms_norm(ctx, rows(x, n), h_norm, eps, rows(xn, n)) == LLMKV_CUDA_OK &&
            api->matmul(ctx, h_wg, rows(xn, n), rows(gate, n)) == LLMKV_CUDA_OK &&
            api->matmul(ctx, h_wu, rows(xn, n), rows(up, n)) == LLMKV_CUDA_OK &&
            api->swiglu(ctx, rows(gate, n), rows(up, n)) == LLMKV_CUDA_OK &&
            api->matmul(ctx, h_wd, rows(gate, n), rows(tmp, n)) == LLMKV_CUDA_OK &&
            api->add(ctx, rows(x, n), rows(tmp, n)) == LLMKV_CUDA_OK &&
            api->end_batch(ctx) == LLMKV_CUDA_OK && cudaDeviceSynchronize() == cudaSuccess;
        if (!good) std::printf("  layer failed: %s\n", api->last_error(ctx));
        return good;
    };
    std::printf("  %6s %14s %16s %22s\n", "batch", "layer ms/step", "layer tok/s",
                "x32 layers tok/s (est.)");
    for (uint32_t batch : {1u, 32u, 128u}) {
        std::vector<std::vector<uint32_t>> blocks(batch);
        std::vector<uint32_t> pos(batch, 0);
        for (uint32_t s = 0; s < batch; ++s) {
            for (uint32_t b = 0; b < blocks_per_session; ++b)
                blocks[s].push_back(s * blocks_per_session + b);
        }
        std::vector<int32_t> tokens(T);
        for (uint32_t i = 0; i < T; ++i) tokens[i] = int32_t((i * 7919u) % V);
        // Prefill every session to `context` tokens, spans of at most T tokens per call.
        std::vector<llmkv_cuda_span> spans;
        auto run = [&](std::vector<llmkv_cuda_span> &sp) { return layer(sp); };
        for (uint32_t s = 0; s < batch;) {
            spans.clear();
            uint32_t used = 0;
            while (s < batch && pos[s] < context && used < T) {
                const uint32_t n = std::min(context - pos[s], T - used);
                spans.push_back(llmkv_cuda_span{blocks[s].data(), blocks_per_session, s, pos[s],
                                                tokens.data(), n, 0, 0, nullptr, nullptr});
                pos[s] += n;
                used += n;
                if (pos[s] == context) ++s;
            }
            if (!run(spans)) goto done;
        }
        {
            const int steps = g_quick ? 8 : 32;
            spans.assign(batch, llmkv_cuda_span{});
            for (uint32_t s = 0; s < batch; ++s)
                spans[s] = llmkv_cuda_span{blocks[s].data(),
                                           blocks_per_session,
                                           s,
                                           pos[s],
                                           tokens.data(),
                                           1,
                                           0,
                                           0,
                                           nullptr,
                                           nullptr};
            const auto t0 = std::chrono::steady_clock::now();
            for (int i = 0; i < steps; ++i) {
                for (uint32_t s = 0; s < batch; ++s) spans[s].pos0 = pos[s] + uint32_t(i);
                if (!run(spans)) goto done;
            }
            const double sec =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                steps;
            std::printf("  %6u %14.3f %16.0f %22.0f\n", batch, sec * 1e3, batch / sec,
                        batch / (32 * sec));
            result("llama8b_layer_b" + std::to_string(batch) + "_ms", sec * 1e3);
            result("llama8b_x32_b" + std::to_string(batch) + "_tok_s_est", batch / (32 * sec));
        }
    }
    {  // prefill throughput of one full T-token step
        std::vector<uint32_t> blk(T / 16 + 1);
        for (size_t i = 0; i < blk.size(); ++i) blk[i] = uint32_t(i);
        std::vector<int32_t> tokens(T, 1);
        llmkv_cuda_span sp{blk.data(), uint32_t(blk.size()), 0, 0, tokens.data(), T, 0, 0, nullptr,
                           nullptr};
        const auto t0 = std::chrono::steady_clock::now();
        if (layer({sp})) {
            const double sec =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            std::printf(
                "  prefill %u tokens (one session): %.2f ms per layer, %.0f tok/s per layer\n", T,
                sec * 1e3, T / sec);
            result("llama8b_layer_prefill2048_ms", sec * 1e3);
        }
    }
done:
    api->destroy(ctx);
}

// ---- SmolLM2
// ---------------------------------------------------------------------------------------

void smollm2_bench() {
    std::string path;
    if (const char *env = std::getenv("LLMKV_MODEL"); env && *env)
        path = env;
    else
        path = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (!std::ifstream(path).good()) {
        std::printf("\n(SmolLM2 skipped: no model at %s; set LLMKV_MODEL)\n", path.c_str());
        return;
    }
    std::printf("\n== SmolLM2-135M (%s), decode after a 128-token prompt ==\n", path.c_str());
    auto file = std::shared_ptr<GgufFile>(GgufFile::open(path));
    auto model = LlamaModel::load(file);
    const LlamaConfig &c = model->config();
    // Weights kept in their GGUF encoding (the default) and as fp16 copies, f16 and int8 KV.
    for (int mode = 0; mode < 3; ++mode) {
        const bool fp16_weights = mode == 2;
        const llmkv_kv_dtype dt = mode == 1 ? LLMKV_KV_INT8 : LLMKV_KV_F16;
        const std::string wname = fp16_weights ? "fp16w" : "qw";
        KvGeometry g;
        g.n_layers = c.n_layers;
        g.n_kv_heads = c.n_kv_heads;
        g.head_dim = c.head_dim;
        g.dtype_k = g.dtype_v = dt;
        const uint32_t max_batch = 128, prompt = 128, steps = g_quick ? 16 : 64;
        KvCache cache(g, max_batch * ((prompt + steps) / 16 + 2), max_batch);
        CudaBackendOptions o;
        o.max_batch_tokens = 4096;
        o.max_spans = max_batch;
        o.n_sealed_blocks = cache.sealed_pool().n_total();
        o.n_tail_slots = max_batch;
        o.fp16_weights = fp16_weights;
        std::unique_ptr<Backend> gpu = make_cuda_backend(g, o);
        std::unique_ptr<Forward> forward = Forward::create(*model, *gpu, o.max_batch_tokens);
        const Backend::MemoryUsage mu = gpu->memory_usage();
        std::printf("  weights %s (%.1f MiB on the device), KV %s\n  %6s %12s %12s\n",
                    fp16_weights ? "fp16" : "quantized", mu.weights / 1048576.0, codec_name(dt),
                    "batch", "ms/step", "tok/s");
        result("smollm2_" + wname + "_weight_MiB", mu.weights / 1048576.0);
        for (uint32_t batch : {1u, 32u, 128u}) {
            std::vector<SessionKv> kvs(batch);
            std::vector<int32_t> tokens(prompt);
            for (uint32_t i = 0; i < prompt; ++i) tokens[i] = int32_t((i * 31 + 7) % c.n_vocab);
            std::vector<float> logits;
            for (uint32_t s0 = 0; s0 < batch; s0 += 32) {
                std::vector<ForwardSpan> spans;
                for (uint32_t s = s0; s < std::min(batch, s0 + 32); ++s) {
                    cache.reserve(kvs[s], prompt);
                    spans.push_back({&kvs[s], tokens.data(), prompt, true});
                }
                forward->run(spans, logits);
            }
            std::vector<int32_t> next(batch, 1);
            std::vector<ForwardSpan> spans(batch);
            const auto t0 = std::chrono::steady_clock::now();
            for (uint32_t i = 0; i < steps; ++i) {
                for (uint32_t s = 0; s < batch; ++s) {
                    cache.reserve(kvs[s], kvs[s].n_tokens + 1);
                    spans[s] = {&kvs[s], &next[s], 1, true};
                }
                forward->run(spans, logits);
                for (uint32_t s = 0; s < batch; ++s) {
                    next[s] = int32_t(std::max_element(logits.begin() + size_t(s) * c.n_vocab,
                                                       logits.begin() + size_t(s + 1) * c.n_vocab) -
                                      (logits.begin() + size_t(s) * c.n_vocab));
                }
            }
            const double sec =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                steps;
            std::printf("  %6u %12.3f %12.0f\n", batch, sec * 1e3, batch / sec);
            result(
                "smollm2_" + wname + "_" + codec_name(dt) + "_b" + std::to_string(batch) + "_tok_s",
                batch / sec);
            for (auto &kv : kvs) cache.release(kv);
        }
    }
}

// ---- packed weights ----------------------------------------------------------------------------

// One Llama-3-8B FFN down matrix (4096 x 14336) per packed type: load-time dequantization to
// fp16 (GB/s of packed bytes read + fp16 written) and decode matrix-vector products for 1 and
// 8 token rows (GB/s of packed weights read), against cuBLAS reading the fp16 matrix (n = 1).
void packed_weights_bench() {
    const uint32_t rows = 4096, cols = 14336;
    std::printf("\n== packed weights, %u x %u (FFN down of Llama-3-8B) ==\n", rows, cols);
    std::printf("  %-6s %14s %14s %14s %14s\n", "type", "dequant GB/s", "matvec t1 GB/s",
                "matvec t8 GB/s", "cuBLAS f16 t1");
    uint16_t *w16 = nullptr;
    float *x = nullptr, *y = nullptr;
    uint16_t *x16 = nullptr;
    BENCH_CUDA(device_alloc(&w16, size_t(rows) * cols * 2));
    BENCH_CUDA(device_alloc(&x, size_t(cuda::kMatvecMaxTokens) * cols * 4));
    BENCH_CUDA(device_alloc(&x16, size_t(cols) * 2));
    BENCH_CUDA(device_alloc(&y, size_t(cuda::kMatvecMaxTokens) * rows * 4));
    BENCH_CUDA(cudaMemset(x, 0, size_t(cuda::kMatvecMaxTokens) * cols * 4));
    BENCH_CUDA(cudaMemset(x16, 0, size_t(cols) * 2));
    cublasHandle_t cublas = nullptr;
    if (cublasCreate(&cublas) != CUBLAS_STATUS_SUCCESS) fail(LLMKV_ERR_BACKEND, "cublasCreate");
    const int iters = g_quick ? 5 : 20;
    const TensorType types[] = {TensorType::Q4_K, TensorType::Q6_K, TensorType::Q5_0,
                                TensorType::Q8_0};
    for (TensorType t : types) {
        const std::vector<uint8_t> host = dqtest::random_rows(t, rows, cols, 9, true);
        const size_t rb = host.size() / rows;
        uint8_t *packed = nullptr;
        BENCH_CUDA(device_alloc(&packed, host.size()));
        BENCH_CUDA(cudaMemcpy(packed, host.data(), host.size(), cudaMemcpyHostToDevice));
        const double t_dq = time_calls(
            [&] {
                BENCH_CUDA(cuda::launch_dequant_f16(uint32_t(t), packed, rb, rows, cols, w16,
                                                    nullptr, 0, nullptr));
            },
            iters);
        double t_mv[2];
        const uint32_t ns[2] = {1, cuda::kMatvecMaxTokens};
        for (int k = 0; k < 2; ++k) {
            t_mv[k] = time_calls(
                [&] {
                    BENCH_CUDA(cuda::launch_matvec_q(uint32_t(t), packed, rb, rows, cols, x, cols,
                                                     ns[k], y, rows, nullptr));
                },
                iters);
        }
        const double t_blas = time_calls(
            [&] {
                if (cuda::gemm_f16_f32(cublas, w16, rows, cols, x16, cols, 1, y, rows, 0.0f) !=
                    CUBLAS_STATUS_SUCCESS)
                    fail(LLMKV_ERR_BACKEND, "cuBLAS GEMV");
            },
            iters);
        const double pb = double(host.size()), fb = double(rows) * cols * 2;
        std::printf("  %-6s %14.1f %14.1f %14.1f %14.1f\n", tensor_type_name(t),
                    (pb + fb) / t_dq / 1e9, pb / t_mv[0] / 1e9, pb / t_mv[1] / 1e9,
                    fb / t_blas / 1e9);
        const std::string name = tensor_type_name(t);
        result("dequant_" + name + "_GBps", (pb + fb) / t_dq / 1e9);
        result("matvec_" + name + "_t1_us", t_mv[0] * 1e6);
        result("matvec_" + name + "_t8_us", t_mv[1] * 1e6);
        result("matvec_" + name + "_t1_GBps", pb / t_mv[0] / 1e9);
        result("cublas_f16_gemv_" + name + "_us", t_blas * 1e6);
        cudaFree(packed);
        if (g_quick) break;
    }
    cublasDestroy(cublas);
    cudaFree(w16);
    cudaFree(x);
    cudaFree(x16);
    cudaFree(y);
}

}  // namespace

int main(int argc, char **argv) {
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--quick") == 0) g_quick = true;
    }
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        std::printf("llmkv_gpu_bench: no CUDA device, nothing to measure\n");
        return 0;
    }
    cudaDeviceProp prop;
    BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
    std::printf("device: %s (sm_%d%d, %d SMs, %.1f GiB)\n", prop.name, prop.major, prop.minor,
                prop.multiProcessorCount, prop.totalGlobalMem / 1073741824.0);
    try {
        const double bw = copy_bandwidth();
        attention_bench(bw);
        synthetic_layer_bench();
        smollm2_bench();
        packed_weights_bench();
    } catch (const std::exception &e) {
        std::printf("benchmark failed: %s\n", e.what());
        return 1;
    }
    return 0;
}
