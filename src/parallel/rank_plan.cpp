// Rank and device planning: GPU ranks' devices and collectives, rank backends' capabilities.
#include "parallel/rank_plan.h"

#include <string>

#include "common/error.h"
#include "common/log.h"

namespace llmkv {

void plan_gpu_ranks(TpSetup &setup, uint32_t tp_size, const std::vector<int32_t> &devices,
                    bool in_process, Collectives collectives) {
    setup.backend = LLMKV_BACKEND_CUDA;
    std::string why;
    const int n_visible = gpu_device_count(&why);
    if (n_visible <= 0)
        fail(LLMKV_ERR_UNSUPPORTED,
             "GPU tensor-parallel ranks: the CUDA backend is not available: %s", why.c_str());
    // devices: one each; one: every rank on that device; none: rank r on device r (modulo
    // the devices the rank's process sees).
    const size_t n_devices = devices.size();
    for (uint32_t r = 0; r < tp_size; ++r) {
        setup.devices[r] = n_devices == tp_size ? devices[r] : n_devices == 1 ? devices[0] : -1;
    }
    if (in_process) {
        for (uint32_t r = 0; r < tp_size; ++r) {
            if (setup.devices[r] < 0) setup.devices[r] = int32_t(r % uint32_t(n_visible));
            if (setup.devices[r] >= n_visible) {
                fail(LLMKV_ERR_INVALID_ARGUMENT,
                     "GPU tensor-parallel rank %u: device %d does not exist (%d devices)", r,
                     setup.devices[r], n_visible);
            }
        }
    }
    bool distinct = true;
    for (uint32_t r = 0; in_process && r < tp_size; ++r) {
        for (uint32_t q = 0; q < r; ++q)
            distinct = distinct && setup.devices[q] != setup.devices[r];
    }
    if (collectives == Collectives::kHost) return;
    std::string no_nccl;
    if (!distinct) {
        no_nccl = "ranks share a device";
    } else if (make_device_comm_id(setup.comm_id, &no_nccl)) {
        setup.device_collectives = 1;
        return;
    }
    if (collectives == Collectives::kNccl)
        fail(LLMKV_ERR_UNSUPPORTED, "LLMKV_TP_COLLECTIVES=nccl: %s", no_nccl.c_str());
    LLMKV_LOG_INFO_F("GPU tensor-parallel ranks: all-reduces through host memory (%s)",
                     no_nccl.c_str());
}

BackendCapabilities rank_capabilities(llmkv_backend rank_backend) {
    BackendCapabilities c;
    if (rank_backend == LLMKV_BACKEND_CUDA) {
        // What the CUDA kernels read, as with one GPU (plan_gpu_ranks checks the devices):
        // the KV sink and layer groups too.
        c.kind = LLMKV_BACKEND_CUDA;
        c.device_collectives = true;
    }
    c.reads_host_blocks = false;
    return c;
}

}  // namespace llmkv
