// The batch check every backend runs first.
#include "backend/backend.h"

#include "common/error.h"

namespace llmkv {

BatchShape validate_batch(const std::vector<ForwardSpan> &spans, const KvGeometry &g, uint32_t n_vocab,
                          uint32_t max_tokens) {
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
                fail(LLMKV_ERR_INVALID_ARGUMENT, "token id %d outside the vocabulary (%u)", s.tokens[i], n_vocab);
            }
        }
        T += s.n;
        n_logits += s.want_logits ? (s.all_logits ? s.n : 1) : 0;
    }
    if (T > max_tokens) {
        fail(LLMKV_ERR_INTERNAL, "forward: %llu tokens exceed the batch limit %u", (unsigned long long)T, max_tokens);
    }
    return {uint32_t(T), uint32_t(n_logits)};
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

}  // namespace llmkv
