// Shared by the fuzz targets: an input reader, a failing check that aborts (libFuzzer keeps
// the input as a crash; the replay program exits non-zero), scratch files, the status sets
// the C API documents, and the seed registry used by `replay --write-seeds`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "llmkv.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

namespace llmkv::fuzz {

// Aborts with a message when a property of the target does not hold.
#define FUZZ_CHECK(cond, ...)                                                                      \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            std::fprintf(stderr, "FUZZ_CHECK failed at %s:%d: %s\n  ", __FILE__, __LINE__, #cond); \
            std::fprintf(stderr, __VA_ARGS__);                                                     \
            std::fprintf(stderr, "\n  last error: %s\n", llmkv_last_error());                      \
            std::abort();                                                                          \
        }                                                                                          \
    } while (0)

// Reads little pieces of the input front to back; past the end every read gives 0.
class Input {
public:
    Input(const uint8_t *data, size_t size) : p_(data), n_(size) {}
    bool empty() const { return pos_ >= n_; }
    size_t remaining() const { return pos_ < n_ ? n_ - pos_ : 0; }
    uint8_t u8() { return pos_ < n_ ? p_[pos_++] : 0; }
    uint16_t u16() { return uint16_t(u8() | (uint16_t(u8()) << 8)); }
    uint32_t u32() { return uint32_t(u16()) | (uint32_t(u16()) << 16); }
    // A value in [0, n) (n > 0).
    uint32_t below(uint32_t n) { return n <= 256 ? u8() % n : u32() % n; }
    // Up to max_len bytes, the length taken from the input first.
    std::string bytes(size_t max_len) {
        size_t len = below(uint32_t(max_len + 1));
        len = std::min(len, remaining());
        std::string s(reinterpret_cast<const char *>(p_ + pos_), len);
        pos_ += len;
        return s;
    }
    std::string rest() {
        std::string s(reinterpret_cast<const char *>(p_ + pos_), remaining());
        pos_ = n_;
        return s;
    }

private:
    const uint8_t *p_;
    size_t n_;
    size_t pos_ = 0;
};

// A directory for scratch files, /dev/shm when present (no disk writes per input).
inline std::string scratch_dir() {
    static const std::string dir = [] {
        const char *env = std::getenv("LLMKV_FUZZ_TMPDIR");
        if (env && *env) return std::string(env);
        if (FILE *f = std::fopen("/dev/shm/.llmkv_fuzz_probe", "wb")) {
            std::fclose(f);
            std::remove("/dev/shm/.llmkv_fuzz_probe");
            return std::string("/dev/shm");
        }
        const char *tmp = std::getenv("TMPDIR");
        return std::string(tmp && *tmp ? tmp : "/tmp");
    }();
    return dir;
}

// A path in the scratch directory unique to this process.
std::string scratch_path(const std::string &name);

bool write_file(const std::string &path, const void *data, size_t size);
bool read_file(const std::string &path, std::vector<uint8_t> &out);

// Every status code llmkv.h defines.
inline bool is_known_status(llmkv_status s) {
    return s == LLMKV_OK || s == LLMKV_ERR_INVALID_ARGUMENT || s == LLMKV_ERR_OUT_OF_MEMORY ||
           s == LLMKV_ERR_KV_CAPACITY || s == LLMKV_ERR_IO || s == LLMKV_ERR_MODEL_FORMAT ||
           s == LLMKV_ERR_UNSUPPORTED || s == LLMKV_ERR_BACKEND || s == LLMKV_ERR_STATE ||
           s == LLMKV_ERR_SNAPSHOT_FORMAT || s == LLMKV_ERR_CANCELLED || s == LLMKV_ERR_INTERNAL;
}

// True when s is one of the listed statuses.
inline bool status_in(llmkv_status s, std::initializer_list<llmkv_status> allowed) {
    for (llmkv_status a : allowed) {
        if (s == a) return true;
    }
    return false;
}

// Seed inputs of a target (name, bytes), written by `replay --write-seeds DIR`.
using Seeds = std::vector<std::pair<std::string, std::vector<uint8_t>>>;
Seeds seeds();

// Silences the library's WARN messages (hostile inputs produce many).
void quiet_logs();

}  // namespace llmkv::fuzz
