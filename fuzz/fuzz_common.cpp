// Helpers of fuzz_common.h.
#include "fuzz_common.h"

#include <unistd.h>

namespace llmkv::fuzz {

std::string scratch_path(const std::string &name) {
    return scratch_dir() + "/llmkv_fuzz_" + std::to_string(::getpid()) + "_" + name;
}

bool write_file(const std::string &path, const void *data, size_t size) {
    FILE *f = std::fopen(path.c_str(), "wb");
    if (!f) return false;
    bool ok = size == 0 || std::fwrite(data, 1, size, f) == size;
    ok = std::fclose(f) == 0 && ok;
    return ok;
}

bool read_file(const std::string &path, std::vector<uint8_t> &out) {
    out.clear();
    FILE *f = std::fopen(path.c_str(), "rb");
    if (!f) return false;
    uint8_t buf[65536];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.insert(out.end(), buf, buf + n);
    bool ok = !std::ferror(f);
    std::fclose(f);
    return ok;
}

namespace {
void drop_message(llmkv_log_level, const char *, void *) {}
}  // namespace

void quiet_logs() {
    if (!std::getenv("LLMKV_FUZZ_LOG")) llmkv_log_set(drop_message, nullptr, LLMKV_LOG_ERROR);
}

}  // namespace llmkv::fuzz
