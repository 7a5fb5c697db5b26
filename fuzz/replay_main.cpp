// main() for the fuzz targets built without libFuzzer: runs every file of the given corpus
// directories (and files) through LLVMFuzzerTestOneInput once, so an ordinary build replays
// the committed seeds and regression inputs. A failing property aborts the program.
//
//   fuzz_replay_<target> DIR_OR_FILE...      replay (fails when no input was found)
//   fuzz_replay_<target> --write-seeds DIR   write the target's generated seed inputs
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "fuzz_common.h"

extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv);

namespace fs = std::filesystem;

int main(int argc, char **argv) {
    if (argc == 3 && std::string(argv[1]) == "--write-seeds") {
        fs::create_directories(argv[2]);
        if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
        size_t n = 0;
        for (const auto &[name, bytes] : llmkv::fuzz::seeds()) {
            std::string path = std::string(argv[2]) + "/" + name;
            if (!llmkv::fuzz::write_file(path, bytes.data(), bytes.size())) {
                std::fprintf(stderr, "cannot write %s\n", path.c_str());
                return 1;
            }
            ++n;
        }
        std::printf("%zu seeds written to %s\n", n, argv[2]);
        return 0;
    }
    if (argc < 2) {
        std::fprintf(stderr, "usage: %s DIR_OR_FILE... | --write-seeds DIR\n", argv[0]);
        return 2;
    }
    std::vector<std::string> files;
    for (int i = 1; i < argc; ++i) {
        std::error_code ec;
        if (fs::is_directory(argv[i], ec)) {
            for (const auto &entry : fs::recursive_directory_iterator(argv[i])) {
                if (entry.is_regular_file()) files.push_back(entry.path().string());
            }
        } else if (fs::is_regular_file(argv[i], ec)) {
            files.push_back(argv[i]);
        } else {
            std::fprintf(stderr, "%s: no such file or directory\n", argv[i]);
            return 2;
        }
    }
    std::sort(files.begin(), files.end());
    if (files.empty()) {
        std::fprintf(stderr, "no inputs found\n");
        return 2;
    }
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    auto t0 = std::chrono::steady_clock::now();
    for (const std::string &f : files) {
        std::vector<uint8_t> bytes;
        if (!llmkv::fuzz::read_file(f, bytes)) {
            std::fprintf(stderr, "cannot read %s\n", f.c_str());
            return 2;
        }
        std::fprintf(stderr, "replay %s (%zu bytes)\n", f.c_str(), bytes.size());
        // A copy of exactly the input's size, as libFuzzer hands it over.
        std::vector<uint8_t> exact(bytes);
        LLVMFuzzerTestOneInput(exact.empty() ? nullptr : exact.data(), exact.size());
    }
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%zu inputs replayed in %.0f ms\n", files.size(), ms);
    return 0;
}
