// Backend: what a model's forward pass is made of, and where the KV pools' bytes live. The
// CPU backend (backend/cpu/cpu_backend.h) and the CUDA backend (backend/cuda/cuda_backend.h)
// implement it as peers; an architecture's forward pass (model/arch/) is written once
// against it, and the engine holds one Backend without knowing which.
//
// Tensors are plain buffers the backend allocated (host memory on the CPU, device memory on
// CUDA) with a shape; there is no graph framework. Every op works on the rows of the batch
// begun by begin_batch(): activations have one row per token of the batch, in span order.
// Ops run in the order they are called (a device backend may queue them; results reach
// the host only through logits()).
//
// Contract shared by every backend (tests/unit/forward_test.cpp checks it on the CPU, the
// gpu tests on CUDA):
//   - A batch is validated (validate_batch) before anything is written: bad input throws
//     llmkv::Error and leaves every KV byte untouched.
//   - write_kv() writes the layer's K/V of the batch into the spans' tail slots and seals
//     each block that a span completes into the geometry's codecs, byte for byte as
//     kv/codec.h defines them, so blocks move between backends, tiers and snapshots.
//   - attention() reads the sealed blocks in their codecs in place and the fp16 window of
//     recent rows; row r's result depends only on its own span (batch invariance).
//   - KV bytes between the pools and host memory go through the transfer queue the
//     backend creates (make_transfer_queue); the KV manager owns it.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kv/host_tier.h"
#include "kv/kv_cache.h"
#include "kv/transfer.h"
#include "tensor/weights.h"

namespace llmkv {

class Communicator;

// The id of a device communicator (NCCL's ncclUniqueId): made by rank 0, sent to every rank.
using DeviceCommId = std::array<uint8_t, 128>;

// The logits of a rank's vocabulary columns gathered into host (rows x n_vocab) over comm
// (Backend::gather_logits of the backends whose logits are in host memory); comm null: one
// rank, local_cols must be n_vocab.
void gather_logits_over(Communicator *comm, const float *local, uint32_t rows, uint32_t local_cols,
                        uint32_t stride, uint32_t n_vocab, float *host);

// One span of a batch: consecutive tokens of one session.
struct ForwardSpan {
    SessionKv *kv;          // positions start at kv->n_tokens; blocks must be reserved
    const int32_t *tokens;  // n token ids
    uint32_t n;
    bool want_logits;         // produce logits for the span's last token
    bool all_logits = false;  // with want_logits: logits for every token of the span
    // Optional address of every sealed block, for sessions whose older blocks live in the
    // host tier (entries SessionKv::kHostBlock); only for backends with
    // reads_host_blocks(). Null: every block is a pool block, found through kv->blocks.
    const uint8_t *const *block_data = nullptr;
};

// Checks a batch before anything runs (every backend calls this first): non-empty spans,
// tail slots and sealed blocks reserved, token ids inside the vocabulary, at most
// max_tokens tokens in all. Throws llmkv::Error; returns the batch's token count and how
// many logit rows it asks for.
struct BatchShape {
    uint32_t tokens = 0;
    uint32_t logit_rows = 0;
};
BatchShape validate_batch(const std::vector<ForwardSpan> &spans, const KvGeometry &g,
                          uint32_t n_vocab, uint32_t max_tokens);

// A buffer of the backend's: rows x cols f32 values as the forward pass sees them (a backend
// may keep another precision inside its ops). `data` belongs to the backend.
struct Tensor {
    void *data = nullptr;
    uint32_t rows = 0;
    uint32_t cols = 0;
    // The same buffer seen as its first n rows.
    Tensor first_rows(uint32_t n) const { return Tensor{data, n, cols}; }
    // The same values seen as one row per head: (rows * cols / head_dim, head_dim), for the
    // row-wise ops (rms_norm: per-head RMSNorm of q and k). cols % head_dim == 0.
    Tensor heads(uint32_t head_dim) const {
        return Tensor{data, rows * (cols / head_dim), head_dim};
    }
};

// Rotary embedding of one architecture: pairs rotate by pos * freq_scale * inv_freq[i].
struct RopeParams {
    enum class Style : uint8_t {
        kAdjacent,  // pairs (v[2i], v[2i+1]) as GGUF stores Llama's q/k
        kHalves,    // pairs (v[i], v[i + rope_dim/2]) (NeoX style)
    };
    Style style = Style::kAdjacent;
    uint32_t rope_dim = 0;            // rotated dims per head (even, <= head_dim)
    float freq_scale = 1.0f;          // linear scaling: positions are multiplied by this
    const float *inv_freq = nullptr;  // host, rope_dim / 2 values (frequency factors applied)
};

// The model's weights, for backends that keep their own copy (a device): every matrix and
// vector (norms, biases) the forward pass will name. The pointers stay valid for the backend's
// life.
struct WeightSet {
    std::vector<const WeightMatrix *> matrices;
    struct Vector {
        const float *data;
        uint32_t n;
    };
    std::vector<Vector> vectors;
    // Optional: a backend calls it for the bytes of a matrix it has copied into its own layout
    // and will not read in place again, so that the model file's pages can leave the resident
    // set (GgufFile::release_pages). Null: nothing to release.
    std::function<void(const void *data, size_t bytes)> release;
};

class Backend {
public:
    virtual ~Backend() = default;

    // "cpu", "cuda".
    virtual const char *name() const = 0;
    // The device, or the CPU kernel family, for logs.
    virtual std::string device_name() const = 0;
    // What a snapshot must agree on besides the layout: kernels that round differently
    // produce different sealed bytes ("cpu-avx2", "cuda", ...).
    virtual std::string kernel_id() const = 0;
    virtual llmkv_backend kind() const = 0;

    // ---- set-up (engine creation; never during a step) -------------------------------
    // Makes the weights available to the ops (a device uploads them; the CPU reads them in
    // place). Throws LLMKV_ERR_OUT_OF_MEMORY / UNSUPPORTED / BACKEND.
    virtual void load_weights(const WeightSet &weights) = 0;
    // An activation buffer of rows x cols, zeroed.
    virtual Tensor alloc(uint32_t rows, uint32_t cols) = 0;
    // The layout of the KV pools the backend reads and writes.
    virtual const KvGeometry &kv_geometry() const = 0;

    // ---- one batch --------------------------------------------------------------------
    // Takes a validated batch: its tokens, positions, block tables and tail slots, read now
    // (the forward pass advances each span's n_tokens once the layers have written the KV,
    // before the logits). The spans stay valid until end_batch.
    virtual void begin_batch(const std::vector<ForwardSpan> &spans, const BatchShape &shape) = 0;
    // out (T, n_embd) = rows of the embedding table for the batch's tokens.
    virtual void embed(const WeightMatrix &table, Tensor out) = 0;
    // out[t] = x[t] * weight / sqrt(mean(x[t]^2) + eps), for each of x.rows rows (weight has
    // x.cols values; out may be x). Row-wise: a Tensor::heads view normalizes each head.
    virtual void rms_norm(Tensor x, const float *weight, float eps, Tensor out) = 0;
    // y (x.rows, w.rows) = x * w^T.
    virtual void matmul(const WeightMatrix &w, Tensor x, Tensor y) = 0;
    // Rotates each batch row's heads at the row's position.
    virtual void rope(Tensor x, uint32_t n_heads, uint32_t head_dim, const RopeParams &rope) = 0;
    // Writes layer `layer`'s K and V rows (T, n_kv_heads * head_dim) into the KV store:
    // the fp16 window of each span, the blocks it completes sealed, the rest to its tail.
    virtual void write_kv(uint32_t layer, Tensor k, Tensor v) = 0;
    // Causal attention of q (T, n_heads * head_dim) over each span's KV of this layer:
    // softmax(scale * q.k) v. window 0: the query at position p sees every position <= p;
    // window W > 0 (sliding window): it sees positions j with p - W < j <= p, and no sealed
    // block whose positions all lie before p - W + 1 is read (their storage may be gone).
    virtual void attention(uint32_t layer, Tensor q, uint32_t n_heads, float scale, uint32_t window,
                           Tensor out) = 0;
    // x += y (elementwise, x.rows rows).
    virtual void add(Tensor x, Tensor y) = 0;
    // x[t] += bias for each of x.rows rows (bias: x.cols values).
    virtual void add_bias(Tensor x, const float *bias) = 0;
    // x *= s (elementwise, x.rows rows).
    virtual void scale(Tensor x, float s) = 0;
    // gate = silu(gate) * up (elementwise, gate.rows rows).
    virtual void swiglu(Tensor gate, Tensor up) = 0;
    // gate = gelu_tanh(gate) * up (elementwise, gate.rows rows), where gelu_tanh(g) =
    // 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) (Gemma's GeGLU).
    virtual void geglu(Tensor gate, Tensor up) = 0;

    // ---- mixture of experts (BackendCapabilities::moe; others: UNSUPPORTED) -------------
    // routes (T, 2 * r.n_used) = for each row t of logits (T, r.n_expert, a token's router
    // logits): the ids of the token's r.n_used experts as ExpertRouting picks them (integers
    // held exactly as floats), best first, then their weights in the same order.
    virtual void route_experts(Tensor logits, const ExpertRouting &r, Tensor routes);
    // For each token t of routes (T rows, n_used experts each) and its i-th expert
    // e = routes[t][i]: row t * n_used + i of y (T * n_used, experts[e].rows) =
    // x_row * experts[e]^T, where x_row is x[t] when x.rows == T (a token's experts read its
    // one row) and x[t * n_used + i] when x.rows == T * n_used. Only the chosen experts'
    // matrices are read; a row's result depends only on its expert and its x row. An empty
    // matrix (data null: the expert lives on another tensor-parallel rank) gives zero rows.
    virtual void matmul_experts(const WeightMatrix *experts, uint32_t n_expert, Tensor x,
                                Tensor routes, uint32_t n_used, Tensor y);
    // out[t] (T = routes.rows) = sum over i = 0 .. n_used - 1, in that order, of token t's
    // weight i (routes[t][n_used + i]) times y[t * n_used + i].
    virtual void combine_experts(Tensor y, Tensor routes, uint32_t n_used, Tensor out);
    // x[t] *= sigmoid(g[t][0]) for each row t (g: x.rows x 1; qwen2moe's shared-expert gate).
    virtual void mul_sigmoid(Tensor x, Tensor g);
    // For each token t of routes and its i-th expert e: row t * n_used + i of y += bias[e]
    // (y.cols values; a null entry adds nothing: gpt-oss's expert biases, or another rank's).
    virtual void add_expert_bias(Tensor y, Tensor routes, uint32_t n_used, const float *const *bias,
                                 uint32_t n_expert);

    // ---- gpt-oss (others: UNSUPPORTED) --------------------------------------------------
    // attention() with learned sinks: sinks (n_heads values, among the weights' vectors)
    // joins head h's softmax as one more logit, unscaled, that weighs no value:
    // out = sum_j e^(scale q.k_j) v_j / (sum_j e^(scale q.k_j) + e^sinks[h]).
    virtual void attention_sinks(uint32_t layer, Tensor q, uint32_t n_heads, float scale,
                                 uint32_t window, const float *sinks, Tensor out);
    // gate = g sigmoid(alpha g) (u + 1) with g = min(gate, limit), u = clamp(up, -limit,
    // limit) (elementwise, gate.rows rows; gpt-oss's clamped SwiGLU).
    virtual void swiglu_oai(Tensor gate, Tensor up, float alpha, float limit);

    // out's first shape.logit_rows rows = the rows of x whose logits the batch wants, in
    // span order (every row of an all_logits span).
    virtual void gather_logit_rows(Tensor x, Tensor out) = 0;
    // logits (x.rows, w.rows) = x * w^T, into host memory; synchronous.
    virtual void logits(const WeightMatrix &w, Tensor x, float *host) = 0;
    // Ends the batch (after its last op).
    virtual void end_batch() = 0;

    // ---- tensor parallelism (a rank's backend: model/shard.h, parallel/) ---------------
    // x = the sum of x over the ranks of the backend's communicator (set_communicator),
    // added in rank order so that every rank holds the same bits. Without a communicator:
    // nothing (one rank). Backends without one: UNSUPPORTED.
    virtual void all_reduce(Tensor x);
    // Logits split by vocabulary: this rank's rows x local_cols values (columns
    // [rank * stride, rank * stride + local_cols) of the rows x n_vocab logits) gathered into
    // host (rows x n_vocab) on every rank. Backends without a communicator: UNSUPPORTED.
    virtual void gather_logits(const float *local, uint32_t rows, uint32_t local_cols,
                               uint32_t stride, uint32_t n_vocab, float *host);
    // The ranks this backend's collectives run over (not owned; null: none).
    virtual void set_communicator(Communicator *comm);
    // Moves all_reduce onto the device's own collectives (CUDA: NCCL), in two steps every
    // rank takes together, agreeing in between: prepare (what can fail on one rank alone:
    // loading NCCL, the buffer for all-reduces of up to max_elements floats), then connect
    // (every rank at the same time, with the id rank 0 made: make_device_comm_id in
    // backend/factory.h). Without them a device backend's all_reduce goes through host memory
    // and the communicator. Backends without device collectives: UNSUPPORTED.
    virtual void prepare_device_ranks(uint32_t n_ranks, uint64_t max_elements);
    virtual void connect_device_ranks(const DeviceCommId &id, uint32_t n_ranks, uint32_t rank);

    // ---- KV storage and tiers -----------------------------------------------------------
    // The queue that moves KV blocks and tail slots between the pools and host memory.
    // async: with a copy thread / stream (a host tier exists); otherwise copies may run at
    // once. The KV manager owns it.
    virtual std::unique_ptr<KvTransferQueue> make_transfer_queue(bool async) = 0;
    // Where the host tier's region comes from (CUDA: page-locked cudaHostAlloc memory).
    virtual HostAllocator host_allocator() = 0;
    // Copies a whole tail slot inside the pool (fork, sessions from a prefix handle).
    virtual void copy_tail(int64_t from, int64_t to) = 0;
    // Whether attention can read sealed blocks in host memory in place (ForwardSpan::
    // block_data): sessions longer than the device pool (long context) need it.
    virtual bool reads_host_blocks() const = 0;

    struct MemoryUsage {
        uint64_t weights = 0, kv = 0, other = 0;
    };
    virtual MemoryUsage memory_usage() const = 0;
};

}  // namespace llmkv
