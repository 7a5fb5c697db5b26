// The CPU backend: the reference implementation of Backend and a product path for machines
// without a GPU. Activations are f32 host buffers; matmuls read the quantized weights in
// place (backend/cpu/matmul.h); the KV pools are the KvCache's host slabs; attention reads
// sealed blocks in their codecs in place (backend/cpu/attention.h). Every op is threaded
// over the engine's pool and bitwise independent of batch composition and thread count.
#pragma once

#include <memory>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/attention.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/matmul_packed.h"
#include "common/thread_pool.h"

namespace llmkv {

class CpuBackend final : public Backend {
public:
    CpuBackend(KvCache &cache, ThreadPool &pool);

    const char *name() const override { return "cpu"; }
    std::string device_name() const override { return cpu::matmul_kernel_name(); }
    std::string kernel_id() const override { return cpu::matmul_kernel_id(kernel_revision_); }
    llmkv_backend kind() const override { return LLMKV_BACKEND_CPU; }

    void load_weights(const WeightSet &weights) override;
    Tensor alloc(uint32_t rows, uint32_t cols) override;
    const KvGeometry &kv_geometry() const override { return cache_.geometry(); }

    void begin_batch(const std::vector<ForwardSpan> &spans, const BatchShape &shape) override;
    void embed(const WeightMatrix &table, Tensor out) override;
    void rms_norm(Tensor x, const float *weight, float eps, Tensor out) override;
    void matmul(const WeightMatrix &w, Tensor x, Tensor y) override;
    void rope(Tensor x, uint32_t n_heads, uint32_t head_dim, const RopeParams &rope) override;
    void write_kv(uint32_t layer, Tensor k, Tensor v) override;
    void attention(uint32_t layer, Tensor q, uint32_t n_heads, float scale, uint32_t window,
                   Tensor out) override;
    void add(Tensor x, Tensor y) override;
    void add_bias(Tensor x, const float *bias) override;
    void scale(Tensor x, float s) override;
    void swiglu(Tensor gate, Tensor up) override;
    void geglu(Tensor gate, Tensor up) override;
    void route_experts(Tensor logits, const ExpertRouting &r, Tensor routes) override;
    void matmul_experts(const WeightMatrix *experts, uint32_t n_expert, Tensor x, Tensor routes,
                        uint32_t n_used, Tensor y) override;
    void combine_experts(Tensor y, Tensor routes, uint32_t n_used, Tensor out) override;
    void mul_sigmoid(Tensor x, Tensor g) override;
    void add_expert_bias(Tensor y, Tensor routes, uint32_t n_used, const float *const *bias,
                         uint32_t n_expert) override;
    void attention_sinks(uint32_t layer, Tensor q, uint32_t n_heads, float scale, uint32_t window,
                         const float *sinks, Tensor out) override;
    void swiglu_oai(Tensor gate, Tensor up, float alpha, float limit) override;
    void gather_logit_rows(Tensor x, Tensor out) override;
    void logits(const WeightMatrix &w, Tensor x, float *host) override;
    void end_batch() override { spans_ = nullptr; }
    void all_reduce(Tensor x) override;
    void gather_logits(const float *local, uint32_t rows, uint32_t local_cols, uint32_t stride,
                       uint32_t n_vocab, float *host) override;
    void set_communicator(Communicator *comm) override { comm_ = comm; }

    std::unique_ptr<KvTransferQueue> make_transfer_queue(bool async) override;
    HostAllocator host_allocator() override { return mmap_host_allocator(); }
    void copy_tail(int64_t from, int64_t to) override;
    bool reads_host_blocks() const override { return true; }
    MemoryUsage memory_usage() const override;

private:
    // w with its packed copy when load_weights made one.
    WeightMatrix with_packed(const WeightMatrix &w) const;
    void write_span_kv(uint32_t layer, size_t span, const float *k, const float *v,
                       uint32_t kv_dim);

    KvCache &cache_;
    ThreadPool &pool_;
    Communicator *comm_ = nullptr;
    std::vector<std::unique_ptr<float[]>> buffers_;  // alloc()
    uint64_t buffer_bytes_ = 0;
    cpu::MatmulScratch matmul_scratch_;
    // matmul_experts: each expert's rows gathered, its results, and the rows in expert order.
    std::vector<float> expert_x_, expert_y_;
    std::vector<uint32_t> expert_rows_, expert_count_;
    std::vector<float> route_p_;  // route_experts: a token's probabilities and choices
    std::vector<uint8_t> route_taken_;
    // Packed copies of the matrices of packed types (load_weights), by data pointer and rows.
    struct PackedKey {
        const void *data;
        int64_t rows;
        bool operator==(const PackedKey &o) const { return data == o.data && rows == o.rows; }
    };
    struct PackedKeyHash {
        size_t operator()(const PackedKey &k) const {
            return std::hash<const void *>()(k.data) ^ (size_t(k.rows) * 0x9e3779b97f4a7c15ull);
        }
    };
    std::unordered_map<PackedKey, cpu::PackedWeights, PackedKeyHash> packed_;
    uint64_t packed_bytes_ = 0;
    int kernel_revision_ = 2;  // the highest cpu::matmul_revision of the loaded matrices
    cpu::AttentionScratch attention_scratch_;
    // The batch.
    const std::vector<ForwardSpan> *spans_ = nullptr;
    BatchShape shape_;
    std::vector<uint16_t> window_;         // per-span fp16 K/V windows of the current layer
    std::vector<cpu::AttentionSpan> att_;  // per-span attention descriptors (reused every batch)
    std::vector<uint32_t> row0_;           // first activation row of each span
};

// gelu with the tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), in f32
// in this order: the reference tests compare with (the backend's GeGLU is activation.h's).
float gelu_tanh(float x);

// Llama's RMSNorm and rotary embedding on one row (shared with tests).
void rms_norm(const float *x, const float *weight, uint32_t n, float eps, float *out);
void rope_rotate(float *v, uint32_t n_heads, uint32_t head_dim, uint32_t rope_dim, uint32_t pos,
                 float freq_scale, const float *inv_freq);

}  // namespace llmkv
