// The engine's reports: llmkv_engine_info (what it was set up as) and llmkv_stats (its
// pools, sessions and counters now), read from the parts without changing anything.
#include <algorithm>
#include <cstring>

#include "engine/engine.h"

namespace llmkv {

namespace {

void copy_string(char *dst, size_t cap, const std::string &src) {
    size_t n = std::min(cap - 1, src.size());
    std::memcpy(dst, src.data(), n);
    dst[n] = '\0';
}

}  // namespace

void Engine::get_info(llmkv_engine_info &out) const {
    const LlamaConfig &c = model_->config();
    const KvGeometry &g = kv_->geometry();
    uint32_t size = out.struct_size;
    std::memset(&out, 0, sizeof(out));
    out.struct_size = size;
    copy_string(out.model_name, sizeof(out.model_name), c.name);
    copy_string(out.architecture, sizeof(out.architecture), c.architecture);
    copy_string(out.backend_name, sizeof(out.backend_name), backend_->name());
    out.backend = backend_->kind();
    out.n_vocab = c.n_vocab;
    out.n_ctx_train = c.n_ctx_train;
    out.max_context = max_context_;
    out.n_layers = c.n_layers;
    out.n_embd = c.n_embd;
    out.n_heads = c.n_heads;
    out.n_kv_heads = c.n_kv_heads;
    out.head_dim = c.head_dim;
    out.n_threads = params_.n_threads;
    out.kv_block_tokens = g.block_tokens;
    out.kv_dtype_k = g.dtype_k;
    out.kv_dtype_v = g.dtype_v;
    out.tp_size = tp_size_;
    out.n_params = model_->n_params();
    out.weight_bytes = model_->weight_bytes();
    out.kv_bytes_per_token_device = g.sealed_block_bytes() * g.n_groups / g.block_tokens;
    out.kv_window = window_;
    out.kv_layer_groups = g.n_groups;
    out.kv_bytes_per_token_global = g.sealed_block_bytes() / g.block_tokens;
    out.kv_bytes_per_token_tail =
        g.tail_block_bytes() / (g.tail_capacity() + (g.sink ? 1 : 0));  // a row
    const KvGeometry &rg = tp_ ? tp_->rank_kv_geometry() : g;
    out.kv_bytes_per_token_rank = rg.sealed_block_bytes() * rg.n_groups / rg.block_tokens;
    out.weight_bytes_rank = tp_ ? tp_->shard().weight_bytes() : out.weight_bytes;
    out.n_expert = c.moe.routing.n_expert;
    out.n_expert_used = c.moe.routing.n_expert ? c.moe.routing.n_used : 0;
    out.n_params_active = model_->n_active_params();
    out.weight_bytes_active = model_->active_weight_bytes();
    out.kv_device_bytes = kv_device_bytes_;
    out.kv_blocks_total = kv_->cache().sealed_pool().n_total();
    out.kv_tail_blocks_total = kv_->cache().tail_pool().n_total();
    out.kv_residual_tokens = g.residual_tokens;
    out.kv_rotate_k = g.rotate_k;
    out.kv_rotate_v = g.rotate_v;
    out.bos_token = tokenizer_->bos();
    out.eos_token = tokenizer_->eos();
    out.eot_token = tokenizer_->eot();
}

void Engine::get_stats(llmkv_stats &out) const {
    uint32_t size = out.struct_size;
    std::memset(&out, 0, sizeof(out));
    out.struct_size = size;
    const BlockPool &sealed = kv_->cache().sealed_pool();
    const BlockPool &tails = kv_->cache().tail_pool();
    out.blocks_total = sealed.n_total();
    out.blocks_free = sealed.n_free();
    out.blocks_cached = kv_->cached_blocks();
    out.blocks_used = sealed.n_used() - out.blocks_cached;
    out.tail_blocks_total = tails.n_total();
    out.tail_blocks_used = tails.n_used();
    out.sessions_total = uint32_t(sessions_.size());
    for (const Request *s : sessions_) {
        switch (s->state) {
            case LLMKV_SESSION_IDLE:
                ++out.sessions_idle;
                break;
            case LLMKV_SESSION_QUEUED:
                ++out.sessions_queued;
                break;
            case LLMKV_SESSION_PREFILLING:
                ++out.sessions_prefilling;
                break;
            case LLMKV_SESSION_GENERATING:
                ++out.sessions_generating;
                break;
            case LLMKV_SESSION_PARKED:
                ++out.sessions_parked;
                break;
            case LLMKV_SESSION_FINISHED:
                ++out.sessions_finished;
                break;
        }
        out.tokens_stored += s->seq.n_tokens();
    }
    out.kv_bytes_used = uint64_t(out.blocks_used) * sealed.block_bytes() +
                        uint64_t(tails.n_used()) * tails.block_bytes();
    if (tp_) {
        const KvGeometry &rg = tp_->rank_kv_geometry();
        out.kv_bytes_used_rank = uint64_t(out.blocks_used) * rg.sealed_block_bytes() +
                                 uint64_t(tails.n_used()) * rg.tail_block_bytes();
        out.tp_reduce_ns = tp_comm_->reduce_ns();
        out.tp_reduces = tp_comm_->reduces();
    } else {
        out.kv_bytes_used_rank = out.kv_bytes_used;
    }
    out.prefix_hit_tokens = kv_->prefix_hit_tokens();
    out.prefix_miss_tokens = kv_->prefix_miss_tokens();
    out.tokens_prefilled = tokens_prefilled_;
    out.tokens_generated = tokens_generated_;
    out.steps = steps_;
    const SchedCounters &sc = scheduler_->counters();
    const KvCounters &kc = kv_->counters();
    out.preemptions = sc.preemptions;
    out.bytes_to_host = kc.bytes_to_host;
    out.bytes_to_device = kc.bytes_to_device;
    out.parks = parks_ + sc.parks;
    out.swaps = sc.swaps;
    out.resumes = kc.resumes;
    out.demotions = kc.demotions;
    out.promotions = kc.promotions;
    out.sample_ns = sample_ns_;
    out.grammar_mask_ns = constraint_counters_.mask_ns;
    out.grammar_masks = constraint_counters_.masks;
    out.grammar_mask_cache_hits = constraint_counters_.mask_cache_hits;
    if (kv_->has_host_tier()) {
        out.host_bytes_total = kv_->host_bytes_total();
        out.host_bytes_used = kv_->host_bytes_used();
        out.host_blocks = kv_->host_blocks();
        out.copy_ns = kv_->copy_ns();
    }
}

}  // namespace llmkv
