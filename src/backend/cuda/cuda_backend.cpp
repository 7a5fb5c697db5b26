// CudaModule (dlopen of libllmkv-cuda.so, ABI check) and CudaBackend (weights to fp16, the
// device context, Forward::run's contract over the module's C ABI). Compiled into libllmkv
// on every machine: no CUDA header or library is involved, only dlopen.
#include "backend/cuda_backend.h"

#include <dlfcn.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "common/error.h"
#include "common/half.h"

namespace llmkv {

// ---- CudaModule -------------------------------------------------------------------------

namespace {

std::string directory_of(const std::string &path) {
    const size_t slash = path.rfind('/');
    return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

std::string libllmkv_directory() {
    Dl_info info{};
    if (dladdr(reinterpret_cast<const void *>(&CudaModule::get), &info) == 0 || !info.dli_fname)
        return {};
    return directory_of(info.dli_fname);
}

}  // namespace

const CudaModule &CudaModule::get() {
    static const CudaModule module;
    return module;
}

CudaModule::CudaModule() {
    std::vector<std::string> tried;
    if (const char *env = std::getenv("LLMKV_CUDA_MODULE"); env && *env) {
        if (try_load(env)) return;
        tried.push_back(error_);
    }
    const std::string dir = libllmkv_directory();
    if (!dir.empty()) {
        if (try_load(dir + "/" + LLMKV_CUDA_MODULE_NAME)) return;
        tried.push_back(error_);
    }
    if (try_load(LLMKV_CUDA_MODULE_NAME)) return;
    tried.push_back(error_);
    error_ = "the CUDA module could not be loaded:";
    for (const std::string &t : tried) error_ += " [" + t + "]";
}

bool CudaModule::try_load(const std::string &path) {
    dlerror();
    void *h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        error_ = e ? std::string(e) : path + ": dlopen failed";  // dlerror names the file
        return false;
    }
    auto get_api = reinterpret_cast<llmkv_cuda_get_api_fn>(dlsym(h, LLMKV_CUDA_GET_API_SYMBOL));
    if (!get_api) {
        error_ = strprintf("%s: no symbol %s", path.c_str(), LLMKV_CUDA_GET_API_SYMBOL);
        dlclose(h);
        return false;
    }
    const llmkv_cuda_api *api = get_api(LLMKV_CUDA_ABI_VERSION);
    if (!api || api->abi_version != LLMKV_CUDA_ABI_VERSION ||
        api->struct_size < sizeof(llmkv_cuda_api)) {
        error_ = strprintf("%s: CUDA module ABI mismatch (libllmkv wants version %u)", path.c_str(),
                           LLMKV_CUDA_ABI_VERSION);
        dlclose(h);
        return false;
    }
    handle_ = h;  // never closed: kernels and cuBLAS state live as long as the process
    api_ = api;
    path_ = path;
    error_.clear();
    return true;
}

int CudaModule::device_count(std::string *why) const {
    if (!api_) {
        if (why) *why = error_;
        return 0;
    }
    int32_t n = 0;
    char err[512] = {0};
    if (api_->device_count(&n, err, sizeof err) != LLMKV_CUDA_OK) {
        if (why) *why = err;
        return 0;
    }
    return n;
}

// ---- CudaBackend ------------------------------------------------------------------------

namespace {

llmkv_status status_of(llmkv_cuda_status s) {
    switch (s) {
        case LLMKV_CUDA_ERR_OUT_OF_MEMORY:
            return LLMKV_ERR_OUT_OF_MEMORY;
        case LLMKV_CUDA_ERR_INVALID:
            return LLMKV_ERR_INVALID_ARGUMENT;
        case LLMKV_CUDA_ERR_UNSUPPORTED:
            return LLMKV_ERR_UNSUPPORTED;
        default:
            return LLMKV_ERR_BACKEND;
    }
}

// A weight matrix (rows x cols in its GGUF type) as fp16 [rows][cols].
std::vector<uint16_t> to_fp16(const cpu::WeightMatrix &w, const char *name) {
    std::vector<uint16_t> out(size_t(w.rows) * size_t(w.cols));
    std::vector<float> row(size_t(w.cols));
    const uint8_t *base = static_cast<const uint8_t *>(w.data);
    for (int64_t r = 0; r < w.rows; ++r) {
        cpu::dequantize_row(w.type, base + size_t(r) * w.row_bytes, row.data(), w.cols);
        uint16_t *dst = out.data() + size_t(r) * size_t(w.cols);
        for (int64_t c = 0; c < w.cols; ++c) {
            const float f = row[size_t(c)];
            const uint16_t h = fp32_to_fp16(f);
            if ((h & 0x7c00u) == 0x7c00u && std::isfinite(f)) {
                fail(LLMKV_ERR_UNSUPPORTED,
                     "tensor %s: value %g at row %lld is beyond the fp16 range (the CUDA backend "
                     "keeps weights "
                     "in fp16)",
                     name, double(f), (long long)r);
            }
            dst[c] = h;
        }
    }
    return out;
}

}  // namespace

void CudaBackend::raise(llmkv_cuda_status status, const char *what) const {
    const char *msg = (api_ && ctx_) ? api_->last_error(ctx_) : "";
    fail(status_of(status), "CUDA backend: %s: %s", what, msg && *msg ? msg : "failed");
}

CudaBackend::CudaBackend(const LlamaModel &model, const KvGeometry &geometry,
                         const CudaBackendOptions &options)
    : cfg_(model.config()), geometry_(geometry), options_(options) {
    const CudaModule &module = CudaModule::get();
    std::string why;
    if (module.device_count(&why) == 0)
        fail(LLMKV_ERR_BACKEND, "CUDA backend unavailable: %s", why.c_str());
    api_ = module.api();
    if (options_.max_batch_tokens == 0)
        fail(LLMKV_ERR_INVALID_ARGUMENT, "CUDA backend: max_batch_tokens is 0");

    char err[1024] = {0};
    uint64_t free_b = 0, total_b = 0;
    char name[256] = {0};
    if (api_->device_info(options_.device, name, sizeof name, &free_b, &total_b, err, sizeof err) !=
        LLMKV_CUDA_OK) {
        fail(LLMKV_ERR_BACKEND, "CUDA device %d: %s", options_.device, err);
    }
    device_name_ = name;

    // Rotary frequencies exactly as Forward computes them.
    std::vector<float> inv_freq(cfg_.rope_dim / 2);
    const float *factors = model.rope_freq_factors();
    for (uint32_t i = 0; i < cfg_.rope_dim / 2; ++i) {
        double f = 1.0 / std::pow(double(cfg_.rope_freq_base), double(2 * i) / cfg_.rope_dim);
        if (factors) f /= factors[i];
        inv_freq[i] = float(f);
    }
    std::vector<uint16_t> embd = to_fp16(model.token_embedding(), "token_embd.weight");
    const bool tied = model.output().data == model.token_embedding().data;
    std::vector<uint16_t> output;
    if (!tied) output = to_fp16(model.output(), "output.weight");

    llmkv_cuda_model_desc md{};
    md.struct_size = sizeof md;
    md.n_layers = cfg_.n_layers;
    md.n_embd = cfg_.n_embd;
    md.n_heads = cfg_.n_heads;
    md.n_kv_heads = cfg_.n_kv_heads;
    md.head_dim = cfg_.head_dim;
    md.n_ff = cfg_.n_ff;
    md.n_vocab = cfg_.n_vocab;
    md.rope_dim = cfg_.rope_dim;
    md.rms_eps = cfg_.rms_eps;
    md.rope_freq_scale = cfg_.rope_freq_scale;
    md.inv_freq = inv_freq.data();
    md.token_embd = embd.data();
    md.output = tied ? embd.data() : output.data();
    md.output_norm = model.output_norm();
    md.layers = nullptr;  // uploaded one at a time below

    llmkv_cuda_kv_desc kd{};
    kd.struct_size = sizeof kd;
    kd.n_layers = geometry.n_layers;
    kd.n_kv_heads = geometry.n_kv_heads;
    kd.head_dim = geometry.head_dim;
    kd.block_tokens = geometry.block_tokens;
    kd.residual_tokens = geometry.residual_tokens;
    kd.dtype_k = uint32_t(geometry.dtype_k);
    kd.dtype_v = uint32_t(geometry.dtype_v);
    kd.rotate_k = geometry.rotate_k ? 1 : 0;
    kd.rotate_v = geometry.rotate_v ? 1 : 0;
    kd.n_sealed_blocks = options.n_sealed_blocks;
    kd.n_tail_slots = options.n_tail_slots;
    kd.sealed_block_bytes = geometry.sealed_block_bytes();
    kd.tail_block_bytes = geometry.tail_block_bytes();

    llmkv_cuda_context_params cp{};
    cp.struct_size = sizeof cp;
    cp.device = options.device;
    cp.max_batch_tokens = options.max_batch_tokens;
    cp.max_spans = options.max_spans;
    cp.attention_workspace_bytes = options.attention_workspace_bytes;

    const llmkv_cuda_status s = api_->create(&md, &kd, &cp, &ctx_, err, sizeof err);
    if (s != LLMKV_CUDA_OK) {
        ctx_ = nullptr;
        fail(status_of(s), "CUDA backend on %s: %s", device_name_.c_str(), err);
    }
    try {
        embd.clear();
        embd.shrink_to_fit();
        output.clear();
        output.shrink_to_fit();
        for (uint32_t l = 0; l < cfg_.n_layers; ++l) {
            const LlamaLayer &L = model.layers()[l];
            const std::string p = "blk." + std::to_string(l) + ".";
            std::vector<uint16_t> wq = to_fp16(L.wq, (p + "attn_q.weight").c_str());
            std::vector<uint16_t> wk = to_fp16(L.wk, (p + "attn_k.weight").c_str());
            std::vector<uint16_t> wv = to_fp16(L.wv, (p + "attn_v.weight").c_str());
            std::vector<uint16_t> wo = to_fp16(L.wo, (p + "attn_output.weight").c_str());
            std::vector<uint16_t> wg = to_fp16(L.w_gate, (p + "ffn_gate.weight").c_str());
            std::vector<uint16_t> wu = to_fp16(L.w_up, (p + "ffn_up.weight").c_str());
            std::vector<uint16_t> wd = to_fp16(L.w_down, (p + "ffn_down.weight").c_str());
            llmkv_cuda_layer_weights lw{};
            lw.wq = wq.data();
            lw.wk = wk.data();
            lw.wv = wv.data();
            lw.wo = wo.data();
            lw.w_gate = wg.data();
            lw.w_up = wu.data();
            lw.w_down = wd.data();
            lw.attn_norm = L.attn_norm;
            lw.ffn_norm = L.ffn_norm;
            check(api_->upload_layer(ctx_, l, &lw), "uploading weights");
        }
    } catch (...) {
        api_->destroy(ctx_);
        ctx_ = nullptr;
        throw;
    }
}

CudaBackend::~CudaBackend() {
    if (api_ && ctx_) api_->destroy(ctx_);
}

void CudaBackend::run(const std::vector<ForwardSpan> &spans, std::vector<float> &logits) {
    const KvGeometry &g = geometry_;
    // The same checks as Forward::run: nothing runs on a bad batch.
    const size_t n_logits = validate_batch(spans, g, cfg_.n_vocab, options_.max_batch_tokens).logit_rows;
    spans_.resize(spans.size());
    for (size_t i = 0; i < spans.size(); ++i) {
        const ForwardSpan &s = spans[i];
        llmkv_cuda_span &c = spans_[i];
        c.blocks = s.kv->blocks.data();
        c.n_blocks = uint32_t(s.kv->blocks.size());
        c.tail_slot = uint32_t(s.kv->tail);
        c.pos0 = s.kv->n_tokens;
        c.tokens = s.tokens;
        c.n = s.n;
        c.want_logits = s.want_logits ? 1 : 0;
        c.all_logits = s.all_logits ? 1 : 0;
    }
    logits.resize(n_logits * cfg_.n_vocab);
    check(api_->forward(ctx_, spans_.data(), uint32_t(spans_.size()),
                        n_logits ? logits.data() : nullptr),
          "forward");
    for (const ForwardSpan &s : spans) s.kv->n_tokens += s.n;
}

void CudaBackend::read_block(uint32_t id, void *host) {
    check(api_->read_block(ctx_, id, host), "read_block");
}
void CudaBackend::write_block(uint32_t id, const void *host) {
    check(api_->write_block(ctx_, id, host), "write_block");
}
void CudaBackend::read_tail(int64_t slot, void *host) {
    if (slot < 0) fail(LLMKV_ERR_INTERNAL, "read_tail: no tail slot");
    check(api_->read_tail(ctx_, uint32_t(slot), host), "read_tail");
}
void CudaBackend::write_tail(int64_t slot, const void *host) {
    if (slot < 0) fail(LLMKV_ERR_INTERNAL, "write_tail: no tail slot");
    check(api_->write_tail(ctx_, uint32_t(slot), host), "write_tail");
}
void CudaBackend::copy_tail(int64_t from, int64_t to) {
    if (from < 0 || to < 0) fail(LLMKV_ERR_INTERNAL, "copy_tail: no tail slot");
    check(api_->copy_tail(ctx_, uint32_t(from), uint32_t(to)), "copy_tail");
}

uint64_t CudaBackend::read_blocks_async(const uint32_t *ids, size_t n, void *const *host) {
    uint64_t ticket = 0;
    check(api_->read_blocks_async(ctx_, ids, uint32_t(n), host, &ticket), "read_blocks_async");
    return ticket;
}
uint64_t CudaBackend::write_blocks_async(const uint32_t *ids, size_t n, const void *const *host) {
    uint64_t ticket = 0;
    check(api_->write_blocks_async(ctx_, ids, uint32_t(n), host, &ticket), "write_blocks_async");
    return ticket;
}
bool CudaBackend::copy_done(uint64_t ticket) {
    const llmkv_cuda_status s = api_->copy_query(ctx_, ticket);
    if (s == LLMKV_CUDA_NOT_READY) return false;
    check(s, "copy_query");
    return true;
}
void CudaBackend::copy_wait(uint64_t ticket) {
    check(api_->copy_wait(ctx_, ticket), "copy_wait");
}

void *CudaBackend::host_alloc(size_t bytes) {
    void *p = nullptr;
    check(api_->host_alloc(ctx_, bytes, &p), "host_alloc");
    return p;
}
void CudaBackend::host_free(void *p) {
    api_->host_free(ctx_, p);
}

CudaBackend::MemoryUsage CudaBackend::memory_usage() const {
    MemoryUsage u;
    api_->memory_usage(ctx_, &u.weights, &u.kv, &u.other);
    return u;
}

}  // namespace llmkv
