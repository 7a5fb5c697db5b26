// llmkv's CUDA emulator: an in-process stand-in for libnccl.so.2 with the seven functions the
// module loads (kernels/nccl_loader.cpp). Ranks are host threads of one process (one per
// emulated device); a communicator is found by its unique id; ncclAllGather runs in its
// stream's order and meets the other ranks' calls of the same round. Real NCCL (its
// transports, its ordering across processes) is not emulated.
#include <cuda_runtime_api.h>

#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "emu_internal.h"

typedef struct {
    char internal[128];
} ncclUniqueId;
typedef int ncclResult_t;
typedef int ncclDataType_t;

namespace {

constexpr ncclResult_t kSuccess = 0, kInvalidArgument = 4, kInvalidUsage = 5, kSystemError = 2;

struct Group {
    int n = 0;
    std::mutex m;
    std::condition_variable cv;
    int joined = 0;
    // One all-gather round at a time: every rank deposits, then every rank copies out.
    int arrived = 0;
    bool draining = false;
    bool aborted = false;
    std::vector<unsigned char> buf;
};

struct Registry {
    std::mutex m;
    std::map<std::string, std::shared_ptr<Group>> groups;
    uint64_t next_id = 1;
};
Registry &registry() {
    static Registry *r = new Registry();
    return *r;
}

size_t type_size(ncclDataType_t t) {
    switch (t) {
        case 0:
        case 1:
            return 1;  // int8, uint8
        case 2:
        case 3:
        case 7:
            return 4;  // int32, uint32, float32
        case 4:
        case 5:
        case 8:
            return 8;  // int64, uint64, float64
        case 6:
        case 9:
            return 2;  // float16, bfloat16
        default:
            return 0;
    }
}

}  // namespace

struct ncclComm {
    std::shared_ptr<Group> group;
    int rank = 0;
};
typedef ncclComm *ncclComm_t;

extern "C" {

CUDAEMU_API ncclResult_t ncclGetVersion(int *version) {
    if (!version) return kInvalidArgument;
    *version = 22800;
    return kSuccess;
}

CUDAEMU_API ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    if (!id) return kInvalidArgument;
    std::memset(id, 0, sizeof *id);
    Registry &r = registry();
    std::lock_guard<std::mutex> lk(r.m);
    std::snprintf(id->internal, sizeof id->internal, "llmkv-emu-nccl-%llu",
                  static_cast<unsigned long long>(r.next_id++));
    return kSuccess;
}

CUDAEMU_API ncclResult_t ncclCommInitRank(ncclComm_t *comm, int n_ranks, ncclUniqueId id,
                                          int rank) {
    if (!comm || n_ranks < 1 || rank < 0 || rank >= n_ranks) return kInvalidArgument;
    const std::string key(id.internal, strnlen(id.internal, sizeof id.internal));
    std::shared_ptr<Group> g;
    {
        Registry &r = registry();
        std::lock_guard<std::mutex> lk(r.m);
        auto &slot = r.groups[key];
        if (!slot) {
            slot = std::make_shared<Group>();
            slot->n = n_ranks;
        }
        g = slot;
    }
    if (g->n != n_ranks) return kInvalidUsage;
    // As NCCL does, initialisation returns once every rank has joined.
    std::unique_lock<std::mutex> lk(g->m);
    if (++g->joined == g->n) {
        g->cv.notify_all();
        Registry &r = registry();
        std::lock_guard<std::mutex> rl(r.m);
        r.groups.erase(key);
    } else {
        g->cv.wait(lk, [&] { return g->joined >= g->n || g->aborted; });
    }
    if (g->aborted) return kSystemError;
    *comm = new ncclComm{g, rank};
    return kSuccess;
}

CUDAEMU_API ncclResult_t ncclAllGather(const void *send, void *recv, size_t count,
                                       ncclDataType_t type, ncclComm_t comm, cudaStream_t stream) {
    const size_t es = type_size(type);
    if (!comm || es == 0 || (count > 0 && (!send || !recv))) return kInvalidArgument;
    const size_t bytes = count * es;
    std::shared_ptr<Group> g = comm->group;
    const int rank = comm->rank;
    const cudaError_t e = cudaemu::enqueue(stream, [g, rank, send, recv, bytes] {
        std::unique_lock<std::mutex> lk(g->m);
        g->cv.wait(lk, [&] { return !g->draining || g->aborted; });
        if (g->aborted) return;
        if (g->arrived == 0) g->buf.assign(size_t(g->n) * bytes, 0);
        std::memcpy(g->buf.data() + size_t(rank) * bytes, send, bytes);
        if (++g->arrived == g->n) {
            g->draining = true;
            g->cv.notify_all();
        } else {
            g->cv.wait(lk, [&] { return g->draining || g->aborted; });
            if (g->aborted) return;
        }
        std::memcpy(recv, g->buf.data(), size_t(g->n) * bytes);
        if (--g->arrived == 0) {
            g->draining = false;
            g->cv.notify_all();
        }
    });
    return e == cudaSuccess ? kSuccess : kSystemError;
}

CUDAEMU_API ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    delete comm;
    return kSuccess;
}

CUDAEMU_API ncclResult_t ncclCommAbort(ncclComm_t comm) {
    if (comm) {
        std::lock_guard<std::mutex> lk(comm->group->m);
        comm->group->aborted = true;
        comm->group->cv.notify_all();
    }
    delete comm;
    return kSuccess;
}

CUDAEMU_API const char *ncclGetErrorString(ncclResult_t r) {
    switch (r) {
        case 0:
            return "no error";
        case 2:
            return "unhandled system error (llmkv's emulated NCCL: a rank aborted)";
        case 4:
            return "invalid argument";
        case 5:
            return "invalid usage";
        default:
            return "unknown NCCL error";
    }
}

}  // extern "C"
