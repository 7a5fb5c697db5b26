// Forward: an architecture's forward pass, written once against the Backend interface and
// run by whichever backend holds the KV pools. A batch is a list of spans (runs of
// consecutive tokens of one session); all spans go through each weight matrix together,
// attention runs per span over its own block table.
//
// Adding an architecture: describe its layer sequence in a new file here (see decoder.cpp)
// in terms of Backend ops (or give decoder.cpp a new trait), and return it from
// Forward::create for its GGUF architecture name. Backends need no change unless it uses an
// op they do not have yet.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "model/llama_model.h"
#include "model/shard.h"

namespace llmkv {

class Forward {
public:
    // The forward pass of the model's architecture on `backend`, for batches of up to
    // max_tokens tokens. Allocates its activations now (backend.alloc) and gives the
    // backend the weights. Throws LLMKV_ERR_UNSUPPORTED for an architecture without one.
    // With a shard (tensor parallelism): the forward pass of one rank, on its slices of the
    // weights; the backend's communicator sums the attention and MLP outputs over the
    // ranks and gathers the logits, which every rank returns whole.
    static std::unique_ptr<Forward> create(const LlamaModel &model, Backend &backend,
                                           uint32_t max_tokens, const ModelShard *shard = nullptr);
    virtual ~Forward() = default;

    // Runs the batch. On return each span's kv->n_tokens has advanced by n, and logits
    // holds one n_vocab row per span with want_logits (n rows with all_logits), in span
    // order. Throws on bad input (a token id outside the vocabulary) before touching any KV.
    virtual void run(const std::vector<ForwardSpan> &spans, std::vector<float> &logits) = 0;

    virtual uint32_t max_tokens() const = 0;
};

}  // namespace llmkv
