// Writes the tests' tiny random-weight Llama model (tests/support/tiny_model.h) to a file, for
// running the soak (scripts/soak.sh) where the real model is not present, or with "moe" its
// Qwen3-MoE-style mixture of experts (8 experts of 64 columns, 2 per token; for
// scripts/check_tp_mpi.sh).
//   llmkv_write_tiny_model PATH [N_CTX [moe]]
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "tiny_model.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: llmkv_write_tiny_model PATH [N_CTX (2048) [moe]]\n");
        return 2;
    }
    llmkv::testing::TinyModelSpec spec;
    spec.n_ctx = argc > 2 ? uint32_t(std::strtoul(argv[2], nullptr, 10)) : 2048;
    spec.weight_type = llmkv::TensorType::Q4_1;
    spec.embd_type = llmkv::TensorType::Q8_0;
    if (argc > 3 && std::string(argv[3]) == "moe") {
        spec.arch = "qwen3moe";
        spec.head_dim = 32;
        spec.n_expert = 8;
        spec.n_ff_expert = 64;
        spec.embd_scale = 0.05f;
    } else if (argc > 3) {
        std::fprintf(stderr, "llmkv_write_tiny_model: unknown kind '%s' (moe)\n", argv[3]);
        return 2;
    }
    try {
        llmkv::testing::write_tiny_model(spec, argv[1]);
    } catch (const std::exception &e) {
        std::fprintf(stderr, "llmkv_write_tiny_model: %s\n", e.what());
        return 1;
    }
    return 0;
}
