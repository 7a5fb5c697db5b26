// The set-up stage, step 3: the memory geometry, decided once from the resolved
// configuration and the capabilities of the backend that will read it, and the pool sizes
// the KV manager is built with. "Will it fit" estimates use the same functions.
#pragma once

#include <cstdint>
#include <string>

#include "backend/factory.h"
#include "kv/kv_manager.h"
#include "setup/engine_config.h"

namespace llmkv {

// The KV geometry for a backend with capabilities `caps`: the KV sink where it is asked for
// and read (LLMKV_ENGINE_KV_SINK where it cannot be: UNSUPPORTED, or, when auto_backend,
// caps becomes the CPU's), layer groups for sliding-window layers where the backend reads
// their tables, unless the blocks are to be kept.
KvGeometry plan_kv_geometry(const EngineConfig &config, BackendCapabilities &caps,
                            bool auto_backend);

// The KV manager's configuration for geometry g: sealed blocks from the device budget
// (automatic: room for four full-length sessions, capped at 1 GiB), a tail slot per session,
// the host tier, the prefix cache with its salt. *device_bytes: the pool's bytes.
KvManagerConfig plan_kv_pools(const EngineConfig &config, const KvGeometry &g,
                              const std::string &model_fingerprint, uint64_t *device_bytes);

}  // namespace llmkv
