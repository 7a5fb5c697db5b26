// The backend seam: an architecture's forward pass runs on any Backend. A recording backend
// that forwards every op to the CPU backend sees the documented op sequence, gives bitwise the
// CPU backend's logits and KV, and is never reached by a batch that fails validation.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "common/error.h"
#include "model/arch/forward.h"
#include "model/gguf.h"
#include "model/llama_model.h"
#include "tiny_model.h"

namespace llmkv {
namespace {

// Every op goes to the wrapped backend; its name is recorded.
class RecordingBackend final : public Backend {
public:
    explicit RecordingBackend(Backend &inner) : in_(inner) {}
    std::vector<std::string> ops;
    size_t weights_loaded = 0;

    const char *name() const override { return "recording"; }
    std::string device_name() const override { return in_.device_name(); }
    std::string kernel_id() const override { return in_.kernel_id(); }
    llmkv_backend kind() const override { return in_.kind(); }
    void load_weights(const WeightSet &w) override {
        weights_loaded = w.matrices.size() + w.vectors.size();
        in_.load_weights(w);
    }
    Tensor alloc(uint32_t rows, uint32_t cols) override { return in_.alloc(rows, cols); }
    const KvGeometry &kv_geometry() const override { return in_.kv_geometry(); }
    void begin_batch(const std::vector<ForwardSpan> &spans, const BatchShape &shape) override {
        rec("begin_batch");
        in_.begin_batch(spans, shape);
    }
    void embed(const WeightMatrix &t, Tensor out) override {
        rec("embed");
        in_.embed(t, out);
    }
    void rms_norm(Tensor x, const float *w, float eps, Tensor out) override {
        rec("rms_norm");
        in_.rms_norm(x, w, eps, out);
    }
    void matmul(const WeightMatrix &w, Tensor x, Tensor y) override {
        rec("matmul");
        in_.matmul(w, x, y);
    }
    void rope(Tensor x, uint32_t h, uint32_t d, const RopeParams &r) override {
        rec("rope");
        in_.rope(x, h, d, r);
    }
    void write_kv(uint32_t l, Tensor k, Tensor v) override {
        rec("write_kv");
        in_.write_kv(l, k, v);
    }
    void attention(uint32_t l, Tensor q, uint32_t h, float s, uint32_t w, Tensor out) override {
        rec("attention");
        in_.attention(l, q, h, s, w, out);
    }
    void add(Tensor x, Tensor y) override {
        rec("add");
        in_.add(x, y);
    }
    void add_bias(Tensor x, const float *b) override {
        rec("add_bias");
        in_.add_bias(x, b);
    }
    void scale(Tensor x, float s) override {
        rec("scale");
        in_.scale(x, s);
    }
    void swiglu(Tensor g, Tensor u) override {
        rec("swiglu");
        in_.swiglu(g, u);
    }
    void geglu(Tensor g, Tensor u) override {
        rec("geglu");
        in_.geglu(g, u);
    }
    void gather_logit_rows(Tensor x, Tensor out) override {
        rec("gather_logit_rows");
        in_.gather_logit_rows(x, out);
    }
    void logits(const WeightMatrix &w, Tensor x, float *host) override {
        rec("logits");
        in_.logits(w, x, host);
    }
    void end_batch() override {
        rec("end_batch");
        in_.end_batch();
    }
    std::unique_ptr<KvTransferQueue> make_transfer_queue(bool async) override {
        return in_.make_transfer_queue(async);
    }
    HostAllocator host_allocator() override { return in_.host_allocator(); }
    void copy_tail(int64_t from, int64_t to) override { in_.copy_tail(from, to); }
    bool reads_host_blocks() const override { return in_.reads_host_blocks(); }
    MemoryUsage memory_usage() const override { return in_.memory_usage(); }

private:
    void rec(const char *op) { ops.emplace_back(op); }
    Backend &in_;
};

struct TinyQ8Model {
    std::vector<uint8_t> bytes;
    std::shared_ptr<GgufFile> file;
    std::unique_ptr<LlamaModel> model;
    KvGeometry g;

    TinyQ8Model() {
        testing::TinyModelSpec spec;
        spec.weight_type = TensorType::Q8_0;
        bytes = testing::build_tiny_model(spec);
        file = std::shared_ptr<GgufFile>(GgufFile::from_memory(bytes.data(), bytes.size()));
        model = LlamaModel::load(file);
        const LlamaConfig &c = model->config();
        g.n_layers = c.n_layers;
        g.n_kv_heads = c.n_kv_heads;
        g.head_dim = c.head_dim;
        g.block_tokens = 4;
        g.dtype_k = LLMKV_KV_INT8;
        g.dtype_v = LLMKV_KV_INT8;
    }
};

std::vector<int32_t> tokens_of(size_t n) {
    std::vector<int32_t> t(n);
    for (size_t i = 0; i < n; ++i) t[i] = int32_t((i * 37 + 11) % testing::TinyVocab::kSize);
    return t;
}

TEST(BackendSeam, AForwardPassRunsTheDocumentedOpsOnAnyBackendWithIdenticalResults) {
    TinyQ8Model s;
    ThreadPool pool(2);
    KvCache direct_cache(s.g, 32, 2), wrapped_cache(s.g, 32, 2);
    CpuBackend direct(direct_cache, pool), inner(wrapped_cache, pool);
    RecordingBackend recording(inner);
    std::unique_ptr<Forward> f_direct = Forward::create(*s.model, direct, 64);
    std::unique_ptr<Forward> f_rec = Forward::create(*s.model, recording, 64);
    const uint32_t L = s.model->config().n_layers;
    // Every matrix (tied output head once) and norm vector is offered to the backend.
    EXPECT_EQ(recording.weights_loaded, size_t(1 + 7 * L) + size_t(1 + 2 * L));

    const std::vector<int32_t> toks = tokens_of(11);
    SessionKv kv_a, kv_b;
    std::vector<float> la, lb;
    for (uint32_t pos = 0; pos < toks.size(); pos += 5) {  // chunks of 5, 5, 1: blocks get sealed
        const uint32_t n = std::min<uint32_t>(5, uint32_t(toks.size()) - pos);
        ASSERT_TRUE(direct_cache.reserve(kv_a, pos + n));
        ASSERT_TRUE(wrapped_cache.reserve(kv_b, pos + n));
        recording.ops.clear();
        f_direct->run({{&kv_a, toks.data() + pos, n, true}}, la);
        f_rec->run({{&kv_b, toks.data() + pos, n, true}}, lb);
        ASSERT_EQ(la.size(), lb.size());
        EXPECT_EQ(std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)), 0);
        EXPECT_EQ(kv_b.n_tokens, pos + n);

        std::vector<std::string> want = {"begin_batch", "embed"};
        for (uint32_t l = 0; l < L; ++l) {
            for (const char *op :
                 {"rms_norm", "matmul", "matmul", "matmul", "rope", "rope", "write_kv", "attention",
                  "matmul", "add", "rms_norm", "matmul", "matmul", "swiglu", "matmul", "add"}) {
                want.emplace_back(op);
            }
        }
        for (const char *op : {"gather_logit_rows", "rms_norm", "logits", "end_batch"})
            want.emplace_back(op);
        EXPECT_EQ(recording.ops, want);
    }
    // The KV bytes are the same too: every sealed block and the tail.
    ASSERT_EQ(kv_a.blocks.size(), 2u);
    for (size_t i = 0; i < kv_a.blocks.size(); ++i) {
        EXPECT_EQ(std::memcmp(direct_cache.sealed_data(kv_a.blocks[i]),
                              wrapped_cache.sealed_data(kv_b.blocks[i]), s.g.sealed_block_bytes()),
                  0);
    }
    EXPECT_EQ(std::memcmp(direct_cache.tail_data(kv_a.tail), wrapped_cache.tail_data(kv_b.tail),
                          s.g.tail_block_bytes()),
              0);
}

TEST(BackendSeam, ABatchThatFailsValidationNeverReachesTheBackend) {
    TinyQ8Model s;
    ThreadPool pool(1);
    KvCache cache(s.g, 16, 2);
    CpuBackend inner(cache, pool);
    RecordingBackend recording(inner);
    std::unique_ptr<Forward> f = Forward::create(*s.model, recording, 16);
    SessionKv kv;
    ASSERT_TRUE(cache.reserve(kv, 3));
    const std::vector<int32_t> bad = {1, int32_t(testing::TinyVocab::kSize), 2};
    std::vector<float> logits;
    EXPECT_THROW(f->run({{&kv, bad.data(), 3, true}}, logits), Error);
    EXPECT_TRUE(recording.ops.empty());
    EXPECT_EQ(kv.n_tokens, 0u);
    // Too many tokens for the pass's activations: refused the same way.
    std::vector<int32_t> many = tokens_of(17);
    SessionKv kv2;
    ASSERT_TRUE(cache.reserve(kv2, 17));
    EXPECT_THROW(f->run({{&kv2, many.data(), 17, true}}, logits), Error);
    EXPECT_TRUE(recording.ops.empty());
}

}  // namespace
}  // namespace llmkv

namespace llmkv {
namespace {

// Snapshots record the CPU kernels' revision for the model's weight types: a model without
// the types revision 3 changed (Q5_0, Q4_K, Q5_K, Q6_K) keeps revision 2, whose snapshots
// still load; one with any of them says revision 3, one with Q3_K (packed in revision 4) says 4
// and one with Q2_K or IQ4_NL (packed in revision 5) says 5.
TEST(BackendSeam, KernelIdCarriesTheRevisionOfTheLoadedWeightTypes) {
    TinyQ8Model s;
    ThreadPool pool(1);
    KvCache cache(s.g, 8, 1);
    CpuBackend backend(cache, pool);
    const std::string family = cpu::matmul_kernel_name();
    EXPECT_EQ(backend.kernel_id(), family + "-r2");
    std::vector<uint8_t> q41(20 * 32, 0), q4k(144 * 2, 0), q3k(110 * 2, 0), q2k(84 * 2, 0),
        iq4(18 * 8 * 2, 0);
    const WeightMatrix a{TensorType::Q4_1, q41.data(), 2, 320, 200};
    const WeightMatrix b{TensorType::Q4_K, q4k.data(), 2, 256, 144};
    const WeightMatrix c{TensorType::Q3_K, q3k.data(), 2, 256, 110};
    const WeightMatrix d{TensorType::Q2_K, q2k.data(), 2, 256, 84};
    const WeightMatrix e{TensorType::IQ4_NL, iq4.data(), 2, 256, 144};
    WeightSet set;
    set.matrices = {&a};
    backend.load_weights(set);
    EXPECT_EQ(backend.kernel_id(), family + "-r2");
    set.matrices = {&a, &b};
    backend.load_weights(set);
    EXPECT_EQ(backend.kernel_id(), family + "-r3");
    set.matrices = {&c, &a};
    backend.load_weights(set);
    EXPECT_EQ(backend.kernel_id(), family + "-r4");
    set.matrices = {&b, &d, &c};
    backend.load_weights(set);
    EXPECT_EQ(backend.kernel_id(), family + "-r5");
    set.matrices = {&a, &e};
    backend.load_weights(set);
    EXPECT_EQ(backend.kernel_id(), family + "-r5");
}

}  // namespace
}  // namespace llmkv
