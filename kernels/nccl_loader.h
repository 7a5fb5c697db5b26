// NCCL as the module uses it: loaded at run time (dlopen) on the first communicator call, so
// that the module itself loads on an install without NCCL (one GPU needs none). nccl.h
// supplies the types only; the functions come from the library found here.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

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
