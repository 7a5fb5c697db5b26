// Writes the tests' tiny random-weight Llama model (tests/support/tiny_model.h) to a file, for
// running the soak (scripts/soak.sh) where the real model is not present.
//   llmkv_write_tiny_model PATH [N_CTX]
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "tiny_model.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: llmkv_write_tiny_model PATH [N_CTX (2048)]\n");
        return 2;
    }
    llmkv::testing::TinyModelSpec spec;
    spec.n_ctx = argc > 2 ? uint32_t(std::strtoul(argv[2], nullptr, 10)) : 2048;
    spec.weight_type = llmkv::TensorType::Q4_1;
    spec.embd_type = llmkv::TensorType::Q8_0;
    try {
        llmkv::testing::write_tiny_model(spec, argv[1]);
    } catch (const std::exception &e) {
        std::fprintf(stderr, "llmkv_write_tiny_model: %s\n", e.what());
        return 1;
    }
    return 0;
}
