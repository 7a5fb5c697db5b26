// The batch check every backend runs first.
#include "backend/backend.h"

#include <cstring>

#include "common/communicator.h"
#include "common/error.h"

namespace llmkv {

BatchShape validate_batch(const std::vector<ForwardSpan> &spans, const KvGeometry &g,
                          uint32_t n_vocab, uint32_t max_tokens) {
    uint64_t T = 0, n_logits = 0;
    for (const ForwardSpan &s : spans) {
        if (s.n == 0) fail(LLMKV_ERR_INTERNAL, "forward: empty span");
        if (s.kv->tail < 0) fail(LLMKV_ERR_INTERNAL, "forward: span without a tail slot");
        if (s.kv->blocks.size() < g.sealed_blocks(s.kv->n_tokens + s.n)) {
            fail(LLMKV_ERR_INTERNAL, "forward: span blocks not reserved");
        }
        if (s.kv->local.size() != s.kv->blocks.size() * (g.n_groups - 1)) {
            fail(LLMKV_ERR_INTERNAL, "forward: span local blocks not reserved");
        }
        for (uint32_t i = 0; i < s.n; ++i) {
            if (s.tokens[i] < 0 || uint32_t(s.tokens[i]) >= n_vocab) {
                fail(LLMKV_ERR_INVALID_ARGUMENT, "token id %d outside the vocabulary (%u)",
                     s.tokens[i], n_vocab);
            }
        }
        T += s.n;
        n_logits += s.want_logits ? (s.all_logits ? s.n : 1) : 0;
    }
    if (T > max_tokens) {
        fail(LLMKV_ERR_INTERNAL, "forward: %llu tokens exceed the batch limit %u",
             (unsigned long long)T, max_tokens);
    }
    return {uint32_t(T), uint32_t(n_logits)};
}

void Backend::route_experts(Tensor, const ExpertRouting &, Tensor) {
    fail(LLMKV_ERR_UNSUPPORTED, "the %s backend does not run mixture-of-experts layers", name());
}

void Backend::matmul_experts(const WeightMatrix *, uint32_t, Tensor, Tensor, uint32_t, Tensor) {
    fail(LLMKV_ERR_UNSUPPORTED, "the %s backend does not run mixture-of-experts layers", name());
}

void Backend::combine_experts(Tensor, Tensor, uint32_t, Tensor) {
    fail(LLMKV_ERR_UNSUPPORTED, "the %s backend does not run mixture-of-experts layers", name());
}

void Backend::mul_sigmoid(Tensor, Tensor) {
    fail(LLMKV_ERR_UNSUPPORTED, "the %s backend does not run mixture-of-experts layers", name());
}

void Backend::add_expert_bias(Tensor, Tensor, uint32_t, const float *const *, uint32_t) {
    fail(LLMKV_ERR_UNSUPPORTED, "the %s backend does not run mixture-of-experts layers", name());
}

void Backend::attention_sinks(uint32_t, Tensor, uint32_t, float, uint32_t, const float *, Tensor) {
    fail(LLMKV_ERR_UNSUPPORTED, "the %s backend has no attention sinks", name());
}

void Backend::swiglu_oai(Tensor, Tensor, float, float) {
    fail(LLMKV_ERR_UNSUPPORTED, "the %s backend has no clamped SwiGLU", name());
}

void Backend::all_reduce(Tensor) {
    fail(LLMKV_ERR_UNSUPPORTED, "the %s backend does not run tensor-parallel ranks", name());
}

void Backend::gather_logits(const float *, uint32_t, uint32_t, uint32_t, uint32_t, float *) {
    fail(LLMKV_ERR_UNSUPPORTED, "the %s backend does not run tensor-parallel ranks", name());
}

void Backend::set_communicator(Communicator *) {
    fail(LLMKV_ERR_UNSUPPORTED, "the %s backend does not run tensor-parallel ranks", name());
}

void Backend::prepare_device_ranks(uint32_t, uint64_t) {
    fail(LLMKV_ERR_UNSUPPORTED, "the %s backend has no device collectives", name());
}

void Backend::connect_device_ranks(const DeviceCommId &, uint32_t, uint32_t) {
    fail(LLMKV_ERR_UNSUPPORTED, "the %s backend has no device collectives", name());
}

void gather_logits_over(Communicator *comm, const float *local, uint32_t rows, uint32_t local_cols,
                        uint32_t stride, uint32_t n_vocab, float *host) {
    if (comm) {
        comm->gather_columns(local, rows, local_cols, stride, n_vocab, host);
        return;
    }
    if (local_cols != n_vocab)
        fail(LLMKV_ERR_INTERNAL, "gather_logits: %u of %u columns on one rank", local_cols,
             n_vocab);
    std::memcpy(host, local, size_t(rows) * n_vocab * sizeof(float));
}

}  // namespace llmkv
