// On-disk snapshot of a prefix handle: the computed KV of a run of tokens, saved so a later
// launch loads it instead of recomputing. Standalone module; the engine wires it in.
//
// File layout (all integers little-endian):
//   [0, 16)        preamble: magic "LLMKVSNP", u32 format version (1), u32 flatbuffer length L
//   [16, 16+L)     flatbuffer metadata (schema src/kv/snapshot.fbs, table llmkv.fb.Snapshot)
//   [M, M+8)       u64 XXH3-64 of bytes [0, 16+L), where M = 16 + round_up(L, 8)
//   [M+8, P)       zero padding; P = payload_offset, a multiple of 4096
//   [P, ...)       n_blocks sealed block payloads back to back (block_bytes each), then
//                  the tail payload (tail_bytes); the file ends exactly there.
// Each block and the tail carry an XXH3-64 checksum in the metadata.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kv/kv_layout.h"

namespace llmkv {

inline constexpr uint32_t kSnapshotFormatVersion = 1;
inline constexpr size_t kSnapshotPreambleBytes = 16;
inline constexpr uint64_t kSnapshotPayloadAlign = 4096;
inline constexpr uint32_t kSnapshotMaxTokens = 1u << 24;  // sanity cap on the stored token list

struct SnapshotMeta {
    std::string model_fingerprint;
    std::string codec;  // e.g. "k=int8 v=int8 rot_k=0 rot_v=0" (see snapshot_codec_string)
    uint32_t block_tokens = 0;
    uint32_t n_layers = 0;
    uint32_t n_kv_heads = 0;
    uint32_t head_dim = 0;
    uint32_t dtype_k = 0;  // llmkv_kv_dtype
    uint32_t dtype_v = 0;
    bool rotate_k = false;
    bool rotate_v = false;
    uint32_t residual_tokens = 0;
    uint64_t block_bytes = 0;  // bytes of one sealed block
    uint64_t tail_bytes = 0;   // bytes of the tail payload (0: no tail)
    uint32_t n_cached = 0;     // tokens whose KV is stored
    uint32_t n_groups = 1;     // layer groups (KvGeometry::n_groups)
    uint32_t window = 0;       // local layers' window (KvGeometry::window)
    std::vector<int32_t> tokens;
    // Only in the `expected` meta of read_snapshot: accept a file of another kernel variant
    // (the codec strings may differ in their " kernels=" part; LLMKV_PREFIX_LOAD_ANY_KERNEL).
    bool any_kernel = false;

    // Sealed blocks stored for n_cached tokens (as KvGeometry::sealed_blocks); 0 when
    // block_tokens is 0.
    uint32_t sealed_blocks() const {
        if (block_tokens == 0 || n_cached <= residual_tokens) return 0;
        return (n_cached - residual_tokens) / block_tokens;
    }
    // Blocks stored: the sealed (group-0) blocks, then with layer groups the local blocks
    // still live at n_cached (KvGeometry::live_local_blocks).
    uint64_t stored_blocks() const {
        const uint64_t sealed = sealed_blocks();
        if (n_groups <= 1) return sealed;
        const uint64_t from =
            uint64_t(n_cached) + 1 > window ? (uint64_t(n_cached) + 1 - window) / block_tokens : 0;
        return sealed + (sealed > from ? (sealed - from) * (n_groups - 1) : 0);
    }
};

// The layout fields of a snapshot of pools with this geometry (the one conversion between
// the shared layout description and the snapshot's metadata).
SnapshotMeta snapshot_meta_for(const KvGeometry &g);

// The canonical codec description, e.g. "k=int8 v=int8 rot_k=0 rot_v=0".
std::string snapshot_codec_string(uint32_t dtype_k, uint32_t dtype_v, bool rotate_k, bool rotate_v);

// Writes atomically (temp file in the same directory, fsync, rename). blocks: exactly
// meta.sealed_blocks() pointers to block_bytes each; tail: tail_bytes (may be null when
// tail_bytes == 0). Inconsistent arguments -> Error(LLMKV_ERR_INVALID_ARGUMENT); any IO
// failure -> Error(LLMKV_ERR_IO) and no file at path is created or replaced.
void write_snapshot(const std::string &path, const SnapshotMeta &meta,
                    const std::vector<const uint8_t *> &blocks, const uint8_t *tail);

// A verified snapshot file, mapped read-only. Move-only; pointers stay valid while it lives.
class LoadedSnapshot {
public:
    LoadedSnapshot() = default;
    LoadedSnapshot(LoadedSnapshot &&other) noexcept;
    LoadedSnapshot &operator=(LoadedSnapshot &&other) noexcept;
    LoadedSnapshot(const LoadedSnapshot &) = delete;
    LoadedSnapshot &operator=(const LoadedSnapshot &) = delete;
    ~LoadedSnapshot();

    const SnapshotMeta &meta() const { return meta_; }
    size_t n_blocks() const { return n_blocks_; }
    // Block i's block_bytes bytes; i >= n_blocks() -> Error(LLMKV_ERR_INVALID_ARGUMENT).
    const uint8_t *block(size_t i) const;
    // The tail's tail_bytes bytes; nullptr when tail_bytes == 0.
    const uint8_t *tail() const;

private:
    friend LoadedSnapshot read_snapshot(const std::string &path, const SnapshotMeta &expected);
    void reset() noexcept;

    SnapshotMeta meta_;
    void *map_ = nullptr;
    size_t map_bytes_ = 0;
    void *map_handle_ = nullptr;  // os::FileMap::handle
    uint64_t payload_offset_ = 0;
    size_t n_blocks_ = 0;
};

// Reads and fully verifies a file against what the engine expects: every field of expected
// except tokens and n_cached must match (fingerprint, codec, geometry, dtypes, rotations,
// residual_tokens, block_bytes, tail_bytes). Any problem with the contents ->
// Error(LLMKV_ERR_SNAPSHOT_FORMAT) with a message naming the file and what is wrong; a
// missing or unreadable file -> Error(LLMKV_ERR_IO).
LoadedSnapshot read_snapshot(const std::string &path, const SnapshotMeta &expected);

}  // namespace llmkv
