// NCCL as the module uses it: loaded at run time (dlopen) on the first communicator call, so
// that the module itself loads on an install without NCCL (one GPU needs none). The types
// come from the toolkit's nccl.h where the build found it (LLMKV_HAVE_NCCL_H), else from the
// few declarations below (NCCL 2's ABI: a 128-byte id, an opaque communicator, int results,
// float32 = 7), which the build checks against nccl.h when it has it.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#ifdef LLMKV_HAVE_NCCL_H
#include <nccl.h>
static_assert(sizeof(ncclUniqueId) == 128 && ncclFloat32 == 7 && ncclSuccess == 0,
              "NCCL 2's ABI as nccl_loader.h declares it without nccl.h");
#else
typedef struct {
    char internal[128];
} ncclUniqueId;
typedef struct ncclComm *ncclComm_t;
typedef int ncclResult_t;
typedef int ncclDataType_t;
constexpr ncclResult_t ncclSuccess = 0;
constexpr ncclDataType_t ncclFloat32 = 7;
#endif

namespace llmkv::cuda {

struct NcclApi {
    ncclResult_t (*get_unique_id)(ncclUniqueId *id);
    ncclResult_t (*comm_init_rank)(ncclComm_t *comm, int n_ranks, ncclUniqueId id, int rank);
    ncclResult_t (*all_gather)(const void *send, void *recv, size_t count, ncclDataType_t type,
                               ncclComm_t comm, cudaStream_t stream);
    ncclResult_t (*comm_destroy)(ncclComm_t comm);
    ncclResult_t (*comm_abort)(ncclComm_t comm);
    const char *(*error_string)(ncclResult_t result);
    int version;  // ncclGetVersion's, e.g. 22805
};

// The process-wide NCCL, loaded once (thread-safe). Search order: $LLMKV_NCCL_LIBRARY (a file
// path), libnccl.so.2 on the loader's path, then the library the module was built against
// (LLMKV_NCCL_BUILD_PATH). nullptr, with every place tried and why in *why, when none loads.
const NcclApi *nccl_api(std::string *why);

}  // namespace llmkv::cuda
