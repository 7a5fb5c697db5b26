// Run-time loading of NCCL for the module (nccl_loader.h).
#include "nccl_loader.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <vector>

namespace llmkv::cuda {

namespace {

struct Loaded {
    NcclApi api{};
    bool ok = false;
    std::string why;
};

template <class F>
bool bind(void *h, const char *name, F &out, std::string &why) {
    void *p = dlsym(h, name);
    if (!p) {
        why = std::string("no symbol ") + name;
        return false;
    }
    out = reinterpret_cast<F>(p);
    return true;
}

bool try_load(const std::string &path, Loaded &l, std::string &why) {
    void *h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        why = path + ": " + (e ? e : "dlopen failed");
        return false;
    }
    NcclApi a{};
    ncclResult_t (*get_version)(int *) = nullptr;
    std::string missing;
    if (!bind(h, "ncclGetUniqueId", a.get_unique_id, missing) ||
        !bind(h, "ncclCommInitRank", a.comm_init_rank, missing) ||
        !bind(h, "ncclAllGather", a.all_gather, missing) ||
        !bind(h, "ncclCommDestroy", a.comm_destroy, missing) ||
        !bind(h, "ncclCommAbort", a.comm_abort, missing) ||
        !bind(h, "ncclGetErrorString", a.error_string, missing) ||
        !bind(h, "ncclGetVersion", get_version, missing)) {
        why = path + ": " + missing;
        dlclose(h);
        return false;
    }
    if (get_version(&a.version) != ncclSuccess) a.version = 0;
    l.api = a;  // the handle stays open for the life of the process
    l.ok = true;
    return true;
}

Loaded load() {
    Loaded l;
    std::vector<std::string> paths;
    if (const char *env = std::getenv("LLMKV_NCCL_LIBRARY"); env && *env) paths.push_back(env);
#ifndef LLMKV_CUDA_EMU  // an emulated module takes the emulator's stand-in, never a real NCCL
    paths.push_back("libnccl.so.2");
#endif
#ifdef LLMKV_NCCL_BUILD_PATH
    paths.push_back(LLMKV_NCCL_BUILD_PATH);
#endif
    std::string tried;
    for (const std::string &p : paths) {
        std::string why;
        if (try_load(p, l, why)) return l;
        tried += " [" + why + "]";
    }
    l.why = "NCCL could not be loaded:" + tried;
    return l;
}

}  // namespace

const NcclApi *nccl_api(std::string *why) {
    static const Loaded loaded = load();
    if (!loaded.ok) {
        if (why) *why = loaded.why;
        return nullptr;
    }
    return &loaded.api;
}

}  // namespace llmkv::cuda
