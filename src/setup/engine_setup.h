// The set-up stage: the one path of llmkv_engine_create, each step a function of the one
// before: params + the model file's header -> resolved configuration (engine_config.h) ->
// the capabilities of the chosen backend kind and device (backend/factory.h, asked, never
// learned by building one) -> the KV geometry and pool sizes (kv_plan.h) -> the KV manager
// -> the backend, or the tensor-parallel ranks and their devices (parallel/) -> the forward
// pass. The engine receives the parts and conducts; it does not set itself up.
#pragma once

#include <cstdint>
#include <memory>

#include "backend/backend.h"
#include "common/communicator.h"
#include "common/thread_pool.h"
#include "kv/kv_manager.h"
#include "llmkv.h"
#include "model/arch/forward.h"
#include "model/gguf.h"
#include "model/llama_model.h"
#include "model/tokenizer.h"
#include "parallel/tensor_parallel.h"
#include "setup/engine_config.h"

namespace llmkv {

// What an engine is made of. Declared in the order they must outlive each other: the
// members are destroyed bottom-up, the forward pass and the KV manager (whose host tier may
// be the backend's memory) before the backend, the backend before rank 0's communicator.
struct EngineParts {
    EngineConfig config;
    std::shared_ptr<GgufFile> file;
    std::unique_ptr<LlamaModel> model;
    std::unique_ptr<Tokenizer> tokenizer;
    std::unique_ptr<ThreadPool> pool;
    std::unique_ptr<Communicator> tp_comm;  // tensor parallelism: rank 0's communicator
    std::unique_ptr<Backend> backend;
    TpBackend *tp = nullptr;    // backend as a TpBackend (null with one rank)
    unsigned rank_threads = 0;  // threads of each rank (tensor parallelism)
    std::unique_ptr<KvManager> kv_manager;
    std::unique_ptr<Forward> forward;
    uint64_t kv_device_bytes = 0;  // the device pool's bytes
};

// Sets an engine up from its parameters. With tensor parallelism over a transport, ranks
// waiting in llmkv_tp_serve are told when it fails before they received the setup.
EngineParts set_up_engine(const llmkv_engine_params &params);

// llmkv_tp_serve: rank params.tp_transport->rank >= 1 of a transport takes part in rank 0's
// set-up and serves its passes until rank 0's engine shuts it down.
void serve_engine_rank(const llmkv_engine_params &params);

}  // namespace llmkv
