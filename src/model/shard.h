// ModelShard: one rank's part of a model under tensor parallelism (Megatron style), as a
// forward pass reads it. Views into the model's own weights where a split is a row range
// (no copy), owned copies where it is a column range:
//   wq, wk, wv, w_gate, w_up   split by output rows: rank r's heads / feed-forward columns
//   wo, w_down                 split by input columns (their partial products are summed
//                              over the ranks: an all-reduce after each)
//   output head                split by vocabulary rows (the logits are gathered)
//   token embedding, norms     replicated
// A mixture of experts splits its experts one of two ways (ExpertSplit), and the shared expert
// always like the dense FFN; the router and the shared expert's gate are replicated, so every
// rank picks the same experts for every token and its partial sum is added in the all-reduce:
//   kColumns  every expert split like the dense FFN: gate and up rows, down columns
//   kWhole    expert parallelism: rank r holds experts [r N / size, (r + 1) N / size) whole and
//             computes only the tokens routed to them (every rank has every token's
//             activations: they are replicated between the layers); the others' rows are
//             zero in its partial sum
// KV heads are split with the query heads; when there are fewer KV heads than ranks each KV
// head is held by size / n_kv_heads ranks (replicated), and every rank's query heads use
// the one it holds.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/llama_model.h"

namespace llmkv {

// Which heads, columns and vocabulary rows a rank holds.
struct ShardRanges {
    uint32_t q_head0 = 0, n_q_heads = 0;    // query heads [q_head0, q_head0 + n_q_heads)
    uint32_t kv_head0 = 0, n_kv_heads = 0;  // KV heads it holds
    uint32_t kv_replicas = 1;               // ranks holding each of its KV heads
    bool kv_primary = true;                 // the lowest rank holding these KV heads
    uint32_t ff0 = 0, n_ff = 0;             // feed-forward columns (a mixture: the shared expert's)
    uint32_t ff_expert0 = 0, n_ff_expert = 0;  // each expert's feed-forward columns
    uint32_t expert0 = 0, n_experts = 0;       // the experts it holds (kWhole: a part)
    uint32_t vocab0 = 0, n_vocab = 0;          // output-head rows
    uint32_t vocab_stride = 0;                 // rank r's rows start at r * vocab_stride
};

// How a mixture of experts' experts are divided over the ranks (see above).
enum class ExpertSplit : uint8_t {
    kColumns = 0,  // every expert's feed-forward columns (Megatron style)
    kWhole = 1,    // whole experts per rank (expert parallelism)
};

// Whether the model splits over `size` ranks: "" when it does, else why not (query heads,
// KV heads, feed-forward columns or a quantized format's block size do not divide).
std::string shard_unsupported_reason(const LlamaModel &model, uint32_t size,
                                     ExpertSplit experts = ExpertSplit::kColumns);
// Rank `rank`'s ranges (the model must split: shard_unsupported_reason is "").
ShardRanges shard_ranges(const LlamaConfig &c, uint32_t rank, uint32_t size,
                         ExpertSplit experts = ExpertSplit::kColumns);

// Bytes of weights the rank with these ranges reads: its slices of the attention and MLP
// matrices, its rows of a separate output head, and the embedding every rank holds whole
// (norms and biases, a few KiB, are not counted).
uint64_t shard_weight_bytes(const LlamaModel &model, const ShardRanges &r);

// The same for a model known only by its hyperparameters (capacity planning): matrix
// elements the rank holds, the embedding (and a separate output head's rows) included.
uint64_t shard_weight_elements(const LlamaConfig &c, const ShardRanges &r, bool tied_output);

class ModelShard {
public:
    // Throws LLMKV_ERR_UNSUPPORTED with shard_unsupported_reason when the model does not
    // split over `size` ranks; LLMKV_ERR_OUT_OF_MEMORY when the copies cannot be made.
    static std::unique_ptr<ModelShard> make(const LlamaModel &model, uint32_t rank, uint32_t size,
                                            ExpertSplit experts = ExpertSplit::kColumns);

    uint32_t rank() const { return rank_; }
    uint32_t size() const { return size_; }
    const ShardRanges &ranges() const { return ranges_; }
    // The model's config with this rank's head, KV head and feed-forward counts (n_vocab
    // stays the whole vocabulary: the logits are gathered).
    const LlamaConfig &config() const { return config_; }
    // A layer's experts the rank does not hold (ExpertSplit::kWhole) are empty matrices.
    const std::vector<LlamaLayer> &layers() const { return layers_; }
    const WeightMatrix &output() const { return output_; }  // vocabulary rows of this rank
    // Bytes of weights this rank reads: its slices, the replicated embedding and norms.
    uint64_t weight_bytes() const { return weight_bytes_; }

private:
    ModelShard() = default;
    WeightMatrix rows(const WeightMatrix &w, int64_t row0, int64_t n);
    WeightMatrix columns(const WeightMatrix &w, int64_t col0, int64_t n);

    uint32_t rank_ = 0, size_ = 1;
    ShardRanges ranges_;
    LlamaConfig config_;
    std::vector<LlamaLayer> layers_;
    WeightMatrix output_{};
    std::vector<std::unique_ptr<uint8_t[]>> owned_;  // column slices
    uint64_t weight_bytes_ = 0;
};

}  // namespace llmkv
