// create_backend: CPU always, CUDA through the run-time loaded module.
#include "backend/factory.h"

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "common/error.h"
#include "common/log.h"

namespace llmkv {

std::unique_ptr<Backend> create_backend(const BackendRequest &r) {
    if (r.kind != LLMKV_BACKEND_CPU) {
        std::string why;
        const int n_devices = cuda_device_count(&why);
        if (n_devices > 0 && r.device >= 0 && r.device < n_devices) {
            CudaBackendOptions o;
            o.device = r.device;
            o.max_batch_tokens = r.max_batch_tokens;
            o.max_spans = r.max_spans;
            o.n_sealed_blocks = r.cache->sealed_pool().n_total();
            o.n_tail_slots = r.cache->tail_pool().n_total();
            o.fp16_weights = r.cuda_fp16_weights;
            o.batch_invariant = r.cuda_batch_invariant;
            if (r.kind == LLMKV_BACKEND_CUDA) return make_cuda_backend(r.cache->geometry(), o);
            // AUTO: a configuration the CUDA module does not implement (say, a KV codec it
            // lacks) runs on the CPU instead of failing.
            try {
                return make_cuda_backend(r.cache->geometry(), o);
            } catch (const Error &e) {
                if (e.status() != LLMKV_ERR_UNSUPPORTED) throw;
                why = e.what();
            }
        } else if (r.kind == LLMKV_BACKEND_CUDA) {
            if (n_devices > 0)
                why = strprintf("device %d does not exist (%d devices)", r.device, n_devices);
            fail(LLMKV_ERR_UNSUPPORTED, "the CUDA backend is not available: %s", why.c_str());
        }
        LLMKV_LOG_INFO_F("backend AUTO: using the CPU (CUDA: %s)", why.c_str());
    }
    return std::make_unique<CpuBackend>(*r.cache, *r.pool);
}

BackendCapabilities backend_capabilities(llmkv_backend kind, int device) {
    BackendCapabilities c;
    if (kind != LLMKV_BACKEND_CPU) {
        std::string why;
        const int n_devices = cuda_device_count(&why);
        if (n_devices > 0 && (device < 0 || device >= n_devices)) {
            why = strprintf("device %d does not exist (%d devices)", device, n_devices);
        }
        if (n_devices > 0 && device >= 0 && device < n_devices) {
            // The CUDA attention reads the KV sink's rows and layer-group block tables.
            c.kind = LLMKV_BACKEND_CUDA;
            c.reads_host_blocks = true;
            c.device_collectives = true;
            return c;
        }
        if (kind == LLMKV_BACKEND_CUDA) {
            c.kind = LLMKV_BACKEND_CUDA;
            c.available = false;
            c.why = why;
            return c;
        }
        LLMKV_LOG_INFO_F("backend AUTO: using the CPU (CUDA: %s)", why.c_str());
    }
    return c;
}

int gpu_device_count(std::string *why) {
    return cuda_device_count(why);
}

bool make_device_comm_id(DeviceCommId &id, std::string *why) {
    return cuda_comm_unique_id(id, why);
}

}  // namespace llmkv
