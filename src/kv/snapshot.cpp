// Snapshot files of prefix handles: atomic writer and a fully verifying, file-mapping reader.
// Layout and API in kv/snapshot.h; metadata schema in kv/snapshot.fbs (flatc-generated).

#include "kv/snapshot.h"

#include <flatbuffers/flatbuffers.h>
#include <xxhash.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include "common/error.h"
#include "common/fault.h"
#include "platform/os.h"
#include "snapshot_generated.h"

namespace llmkv {
namespace {

constexpr char kMagic[8] = {'L', 'L', 'M', 'K', 'V', 'S', 'N', 'P'};
constexpr uint32_t kMaxDtype = 5;  // LLMKV_KV_INT4_COMPACT
constexpr uint32_t kMaxBlockTokens = 1024;
constexpr uint32_t kMaxLayers = 4096;
constexpr uint32_t kMaxKvHeads = 4096;
constexpr uint32_t kMaxHeadDim = 16384;
constexpr uint32_t kMaxResidual = 1u << 20;
constexpr uint32_t kMaxStringBytes = 4096;
constexpr uint64_t kMaxMetaBytes = uint64_t(1) << 30;

uint64_t align_up(uint64_t v, uint64_t a) {
    return (v + a - 1) / a * a;
}

uint64_t hash_bytes(const uint8_t *p, uint64_t n) {
    static const uint8_t empty = 0;
    return XXH3_64bits(n ? p : &empty, size_t(n));
}

void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * i));
}
uint32_t get_u32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t(p[i]) << (8 * i);
    return v;
}
uint64_t get_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t(p[i]) << (8 * i);
    return v;
}

const char *dtype_name(uint32_t d) {
    static const char *const names[] = {"f16", "bf16", "fp8", "int8", "int4", "int4c"};
    return d <= kMaxDtype ? names[d] : "unknown";
}

// Offset of the metadata checksum and the first byte after it, for a flatbuffer of len bytes.
uint64_t meta_checksum_offset(uint64_t fb_len) {
    return kSnapshotPreambleBytes + align_up(fb_len, 8);
}

// Builds the whole header region [0, payload_offset): preamble, flatbuffer, checksum, padding.
std::vector<uint8_t> build_header(const SnapshotMeta &meta, const std::vector<uint64_t> &block_sums,
                                  uint64_t tail_sum) {
    uint64_t payload_offset = kSnapshotPayloadAlign;
    for (int attempt = 0; attempt < 8; ++attempt) {
        flatbuffers::FlatBufferBuilder fbb(1024 + meta.tokens.size() * 4 + block_sums.size() * 8);
        fbb.ForceDefaults(true);  // every field present: a lost field is a detectable change
        auto fp = fbb.CreateString(meta.model_fingerprint);
        auto codec = fbb.CreateString(meta.codec);
        auto tokens = fbb.CreateVector(meta.tokens);
        auto sums = fbb.CreateVector(block_sums);
        fb::SnapshotBuilder b(fbb);
        b.add_format_version(kSnapshotFormatVersion);
        b.add_model_fingerprint(fp);
        b.add_codec(codec);
        b.add_block_tokens(meta.block_tokens);
        b.add_n_layers(meta.n_layers);
        b.add_n_kv_heads(meta.n_kv_heads);
        b.add_head_dim(meta.head_dim);
        b.add_dtype_k(meta.dtype_k);
        b.add_dtype_v(meta.dtype_v);
        b.add_rotate_k(meta.rotate_k);
        b.add_rotate_v(meta.rotate_v);
        b.add_residual_tokens(meta.residual_tokens);
        b.add_block_bytes(meta.block_bytes);
        b.add_tail_bytes(meta.tail_bytes);
        b.add_n_cached(meta.n_cached);
        b.add_n_blocks(uint32_t(block_sums.size()));
        b.add_tokens(tokens);
        b.add_payload_offset(payload_offset);
        b.add_block_checksums(sums);
        b.add_tail_checksum(tail_sum);
        if (meta.n_groups > 1) {
            b.add_n_groups(meta.n_groups);
            b.add_window(meta.window);
        }
        fbb.Finish(b.Finish(), fb::SnapshotIdentifier());

        const uint64_t fb_len = fbb.GetSize();
        const uint64_t sum_at = meta_checksum_offset(fb_len);
        const uint64_t need = align_up(sum_at + 8, kSnapshotPayloadAlign);
        if (need != payload_offset) {  // the offset is inside the metadata: rebuild with it
            payload_offset = need;
            continue;
        }
        if (fb_len > kMaxMetaBytes)
            fail(LLMKV_ERR_INVALID_ARGUMENT, "snapshot metadata too large (%llu bytes)",
                 (unsigned long long)fb_len);
        std::vector<uint8_t> header(payload_offset, 0);
        std::memcpy(header.data(), kMagic, 8);
        put_u32(header.data() + 8, kSnapshotFormatVersion);
        put_u32(header.data() + 12, uint32_t(fb_len));
        std::memcpy(header.data() + kSnapshotPreambleBytes, fbb.GetBufferPointer(), fb_len);
        put_u64(header.data() + sum_at, hash_bytes(header.data(), kSnapshotPreambleBytes + fb_len));
        return header;
    }
    fail(LLMKV_ERR_INTERNAL, "snapshot header size did not converge");
}

// The system calls of the writer, each a fault-injection site (common/fault.h).
int64_t sys_write(int fd, const uint8_t *p, size_t n) {
    if (fault::should_fail(fault::Site::kSnapshotWrite)) {
        errno = ENOSPC;
        return -1;
    }
    if (fault::should_fail(fault::Site::kSnapshotZeroWrite)) return 0;
    if (fault::should_fail(fault::Site::kSnapshotShortWrite) && n > 1) n /= 2;
    return os::write_some(fd, p, n);
}
int sys_fsync(int fd) {
    if (fault::should_fail(fault::Site::kSnapshotFsync)) {
        errno = EIO;
        return -1;
    }
    return os::sync_file(fd);
}
int sys_close(int fd) {
    const int rc = os::close_file(fd);  // the descriptor is released either way
    if (rc == 0 && fault::should_fail(fault::Site::kSnapshotClose)) {
        errno = EIO;
        return -1;
    }
    return rc;
}
int sys_rename(const char *from, const char *to) {
    if (fault::should_fail(fault::Site::kSnapshotRename)) {
        errno = ENOSPC;
        return -1;
    }
    return os::replace_file(from, to);
}
int sys_create(const char *path) {
    if (fault::should_fail(fault::Site::kSnapshotCreate)) {
        errno = EACCES;
        return -1;
    }
    return os::create_exclusive(path);
}

// Writes all n bytes, continuing after partial writes. A write that makes no progress
// (returns 0) is an error, not a reason to spin.
void write_all(int fd, const uint8_t *p, uint64_t n, const std::string &path, uint64_t &offset) {
    while (n > 0) {
        const size_t chunk = size_t(std::min<uint64_t>(n, uint64_t(1) << 30));
        const int64_t w = sys_write(fd, p, chunk);
        if (w < 0) {
            if (errno == EINTR) continue;
            const int err = errno;
            fail(LLMKV_ERR_IO, "snapshot %s: write failed at byte %llu: %s%s; nothing was saved",
                 path.c_str(), (unsigned long long)offset, std::strerror(err),
                 err == ENOSPC ? " (disk full)" : "");
        }
        if (w == 0) {
            fail(LLMKV_ERR_IO,
                 "snapshot %s: write made no progress at byte %llu; nothing was saved",
                 path.c_str(), (unsigned long long)offset);
        }
        p += w;
        n -= uint64_t(w);
        offset += uint64_t(w);
    }
}

// Closes and unlinks the temp file unless released.
struct TempFile {
    int fd = -1;
    std::string path;
    bool keep = false;
    ~TempFile() {
        if (fd >= 0) os::close_file(fd);
        if (!keep && !path.empty()) os::remove_file(path);
    }
};

[[noreturn]] void bad(const std::string &path, const std::string &what) {
    fail(LLMKV_ERR_SNAPSHOT_FORMAT, "snapshot %s: %s", path.c_str(), what.c_str());
}

}  // namespace

SnapshotMeta snapshot_meta_for(const KvGeometry &g) {
    SnapshotMeta m;
    m.block_tokens = g.block_tokens;
    m.n_layers = g.n_layers;
    m.n_kv_heads = g.n_kv_heads;
    m.head_dim = g.head_dim;
    m.dtype_k = g.dtype_k;
    m.dtype_v = g.dtype_v;
    m.rotate_k = g.rotate_k;
    m.rotate_v = g.rotate_v;
    m.residual_tokens = g.residual_tokens;
    m.block_bytes = g.sealed_block_bytes();
    m.tail_bytes = g.tail_block_bytes();
    m.n_groups = g.n_groups;
    m.window = g.grouped() ? g.window : 0;
    return m;
}

std::string snapshot_codec_string(uint32_t dtype_k, uint32_t dtype_v, bool rotate_k,
                                  bool rotate_v) {
    return strprintf("k=%s v=%s rot_k=%d rot_v=%d", dtype_name(dtype_k), dtype_name(dtype_v),
                     rotate_k ? 1 : 0, rotate_v ? 1 : 0);
}

void write_snapshot(const std::string &path, const SnapshotMeta &meta,
                    const std::vector<const uint8_t *> &blocks, const uint8_t *tail) {
    if (meta.block_tokens == 0 || meta.block_tokens > kMaxBlockTokens)
        fail(LLMKV_ERR_INVALID_ARGUMENT, "snapshot %s: block_tokens %u out of range", path.c_str(),
             meta.block_tokens);
    if (meta.tokens.size() < meta.n_cached || meta.tokens.size() > kSnapshotMaxTokens)
        fail(LLMKV_ERR_INVALID_ARGUMENT, "snapshot %s: %zu tokens for n_cached %u", path.c_str(),
             meta.tokens.size(), meta.n_cached);
    if (blocks.size() != meta.stored_blocks())
        fail(LLMKV_ERR_INVALID_ARGUMENT, "snapshot %s: %zu blocks given, n_cached %u needs %llu",
             path.c_str(), blocks.size(), meta.n_cached, (unsigned long long)meta.stored_blocks());
    if (meta.tail_bytes > 0 && tail == nullptr)
        fail(LLMKV_ERR_INVALID_ARGUMENT, "snapshot %s: tail is null with tail_bytes %llu",
             path.c_str(), (unsigned long long)meta.tail_bytes);
    if (meta.model_fingerprint.size() > kMaxStringBytes || meta.codec.size() > kMaxStringBytes)
        fail(LLMKV_ERR_INVALID_ARGUMENT, "snapshot %s: fingerprint or codec string too long",
             path.c_str());
    std::vector<uint64_t> sums;
    sums.reserve(blocks.size());
    for (size_t i = 0; i < blocks.size(); ++i) {
        if (blocks[i] == nullptr && meta.block_bytes > 0)
            fail(LLMKV_ERR_INVALID_ARGUMENT, "snapshot %s: block %zu is null", path.c_str(), i);
        sums.push_back(hash_bytes(blocks[i], meta.block_bytes));
    }
    const std::vector<uint8_t> header = build_header(meta, sums, hash_bytes(tail, meta.tail_bytes));

    static std::atomic<uint64_t> counter{0};
    TempFile tmp;
    tmp.path = strprintf("%s.tmp.%ld.%llu", path.c_str(), os::process_id(),
                         (unsigned long long)counter.fetch_add(1));
    tmp.fd = sys_create(tmp.path.c_str());
    if (tmp.fd < 0) {
        const int err = errno;
        tmp.path.clear();  // nothing to unlink
        fail(LLMKV_ERR_IO, "snapshot %s: cannot create temp file: %s; nothing was saved",
             path.c_str(), std::strerror(err));
    }
    // Every failure below unlinks the temp file (TempFile) and leaves `path` as it was.
    uint64_t offset = 0;
    write_all(tmp.fd, header.data(), header.size(), path, offset);
    for (const uint8_t *blk : blocks) write_all(tmp.fd, blk, meta.block_bytes, path, offset);
    if (meta.tail_bytes > 0) write_all(tmp.fd, tail, meta.tail_bytes, path, offset);
    if (sys_fsync(tmp.fd) != 0) {
        const int err = errno;
        fail(LLMKV_ERR_IO, "snapshot %s: fsync failed: %s; nothing was saved", path.c_str(),
             std::strerror(err));
    }
    const int fd = tmp.fd;
    tmp.fd = -1;
    if (sys_close(fd) != 0) {
        const int err = errno;
        fail(LLMKV_ERR_IO, "snapshot %s: close failed: %s; nothing was saved", path.c_str(),
             std::strerror(err));
    }
    if (sys_rename(tmp.path.c_str(), path.c_str()) != 0) {
        const int err = errno;
        fail(LLMKV_ERR_IO, "snapshot %s: rename from %s failed: %s; nothing was saved",
             path.c_str(), tmp.path.c_str(), std::strerror(err));
    }
    tmp.keep = true;
    // Make the rename durable; a failure here leaves a complete file, so it is not fatal.
    os::sync_parent_directory(path);
}

LoadedSnapshot::LoadedSnapshot(LoadedSnapshot &&other) noexcept {
    *this = std::move(other);
}

LoadedSnapshot &LoadedSnapshot::operator=(LoadedSnapshot &&other) noexcept {
    if (this != &other) {
        reset();
        meta_ = std::move(other.meta_);
        map_ = std::exchange(other.map_, nullptr);
        map_bytes_ = std::exchange(other.map_bytes_, 0);
        map_handle_ = std::exchange(other.map_handle_, nullptr);
        payload_offset_ = std::exchange(other.payload_offset_, 0);
        n_blocks_ = std::exchange(other.n_blocks_, 0);
    }
    return *this;
}

LoadedSnapshot::~LoadedSnapshot() {
    reset();
}

void LoadedSnapshot::reset() noexcept {
    if (map_ != nullptr) {
        os::FileMap m{static_cast<const uint8_t *>(map_), map_bytes_, map_handle_};
        os::unmap_file(m);
    }
    map_ = nullptr;
    map_handle_ = nullptr;
    map_bytes_ = 0;
    n_blocks_ = 0;
    payload_offset_ = 0;
}

const uint8_t *LoadedSnapshot::block(size_t i) const {
    if (i >= n_blocks_)
        fail(LLMKV_ERR_INVALID_ARGUMENT, "snapshot block %zu out of range (%zu blocks)", i,
             n_blocks_);
    return static_cast<const uint8_t *>(map_) + payload_offset_ + i * meta_.block_bytes;
}

const uint8_t *LoadedSnapshot::tail() const {
    if (meta_.tail_bytes == 0 || map_ == nullptr) return nullptr;
    return static_cast<const uint8_t *>(map_) + payload_offset_ + n_blocks_ * meta_.block_bytes;
}

LoadedSnapshot read_snapshot(const std::string &path, const SnapshotMeta &expected) {
    os::FileMap fm;
    switch (os::map_file(path, fm)) {
        case os::MapError::kNone:
            break;
        case os::MapError::kOpen:
            fail(LLMKV_ERR_IO, "snapshot %s: cannot open: %s", path.c_str(), std::strerror(errno));
        case os::MapError::kStat:
            fail(LLMKV_ERR_IO, "snapshot %s: cannot stat: %s", path.c_str(), std::strerror(errno));
        case os::MapError::kNotRegular:
            fail(LLMKV_ERR_IO, "snapshot %s: not a regular file", path.c_str());
        case os::MapError::kMap:
            fail(LLMKV_ERR_IO, "snapshot %s: mmap failed: %s", path.c_str(), std::strerror(errno));
    }
    LoadedSnapshot out;
    out.map_ = const_cast<uint8_t *>(fm.data);
    out.map_bytes_ = fm.size;
    out.map_handle_ = fm.handle;
    const uint64_t size = fm.size;
    if (size < kSnapshotPreambleBytes) {
        bad(path, strprintf("truncated: %llu bytes, shorter than the %zu-byte preamble",
                            (unsigned long long)size, kSnapshotPreambleBytes));
    }
    const uint8_t *map = fm.data;
    const uint8_t *base = map;

    // ---- preamble ----
    if (std::memcmp(base, kMagic, 8) != 0) bad(path, "bad magic (not an llmkv snapshot)");
    const uint32_t version = get_u32(base + 8);
    if (version != kSnapshotFormatVersion)
        bad(path, strprintf("unsupported format version %u (expected %u)", version,
                            kSnapshotFormatVersion));
    const uint64_t fb_len = get_u32(base + 12);
    if (fb_len < 8 || fb_len > kMaxMetaBytes)
        bad(path, strprintf("metadata length %llu out of range", (unsigned long long)fb_len));
    const uint64_t sum_at = meta_checksum_offset(fb_len);
    if (sum_at + 8 > size)
        bad(path, strprintf("truncated: metadata of %llu bytes needs %llu bytes, file has %llu",
                            (unsigned long long)fb_len, (unsigned long long)(sum_at + 8),
                            (unsigned long long)size));
    const uint64_t want_meta_sum = get_u64(base + sum_at);
    if (hash_bytes(base, kSnapshotPreambleBytes + fb_len) != want_meta_sum)
        bad(path, "metadata checksum mismatch");
    for (uint64_t i = kSnapshotPreambleBytes + fb_len; i < sum_at; ++i)
        if (base[i] != 0) bad(path, "nonzero metadata padding");

    // ---- flatbuffer ----
    const uint8_t *fbuf = base + kSnapshotPreambleBytes;
    flatbuffers::Verifier verifier(fbuf, size_t(fb_len), 16, 64);
    if (!fb::VerifySnapshotBuffer(verifier)) bad(path, "flatbuffer verification failed");
    const fb::Snapshot *s = fb::GetSnapshot(fbuf);
    if (s->format_version() != kSnapshotFormatVersion)
        bad(path, strprintf("metadata format version %u (expected %u)", s->format_version(),
                            kSnapshotFormatVersion));
    if (!s->model_fingerprint() || !s->codec() || !s->tokens() || !s->block_checksums())
        bad(path, "metadata lacks a required field");

    SnapshotMeta &m = out.meta_;
    m.model_fingerprint = s->model_fingerprint()->str();
    m.codec = s->codec()->str();
    m.block_tokens = s->block_tokens();
    m.n_layers = s->n_layers();
    m.n_kv_heads = s->n_kv_heads();
    m.head_dim = s->head_dim();
    m.dtype_k = s->dtype_k();
    m.dtype_v = s->dtype_v();
    m.rotate_k = s->rotate_k();
    m.rotate_v = s->rotate_v();
    m.residual_tokens = s->residual_tokens();
    m.block_bytes = s->block_bytes();
    m.tail_bytes = s->tail_bytes();
    m.n_cached = s->n_cached();
    m.n_groups = s->n_groups() > 1 ? s->n_groups() : 1;
    m.window = s->window();

    // ---- value ranges ----
    if (m.model_fingerprint.size() > kMaxStringBytes || m.codec.size() > kMaxStringBytes)
        bad(path, "fingerprint or codec string too long");
    if (m.block_tokens < 1 || m.block_tokens > kMaxBlockTokens)
        bad(path, strprintf("block_tokens %u out of range 1..%u", m.block_tokens, kMaxBlockTokens));
    if (m.n_layers < 1 || m.n_layers > kMaxLayers)
        bad(path, strprintf("n_layers %u out of range", m.n_layers));
    if (m.n_kv_heads < 1 || m.n_kv_heads > kMaxKvHeads)
        bad(path, strprintf("n_kv_heads %u out of range", m.n_kv_heads));
    if (m.head_dim < 1 || m.head_dim > kMaxHeadDim)
        bad(path, strprintf("head_dim %u out of range", m.head_dim));
    if (m.dtype_k > kMaxDtype || m.dtype_v > kMaxDtype)
        bad(path, strprintf("dtype k=%u v=%u out of range", m.dtype_k, m.dtype_v));
    if (m.residual_tokens > kMaxResidual)
        bad(path, strprintf("residual_tokens %u out of range", m.residual_tokens));
    if (m.n_groups > 256 || (m.n_groups > 1 && (m.window < 1 || m.window > kSnapshotMaxTokens)))
        bad(path, strprintf("layer groups %u / window %u out of range", m.n_groups, m.window));

    // ---- against the engine ----
    if (m.model_fingerprint != expected.model_fingerprint)
        bad(path, strprintf("model fingerprint differs (file %s, engine %s)",
                            m.model_fingerprint.c_str(), expected.model_fingerprint.c_str()));
    // The codec string ends with " kernels=<variant>" (KvManager::snapshot_meta).
    auto without_kernel = [](const std::string &codec) {
        return codec.substr(0, codec.find(" kernels="));
    };
    if (expected.any_kernel ? without_kernel(m.codec) != without_kernel(expected.codec)
                            : m.codec != expected.codec)
        bad(path, strprintf("codec differs (file \"%s\", engine \"%s\")", m.codec.c_str(),
                            expected.codec.c_str()));
    auto same = [&](const char *name, uint64_t file_v, uint64_t engine_v) {
        if (file_v != engine_v)
            bad(path, strprintf("%s differs (file %llu, engine %llu)", name,
                                (unsigned long long)file_v, (unsigned long long)engine_v));
    };
    same("block_tokens", m.block_tokens, expected.block_tokens);
    same("n_layers", m.n_layers, expected.n_layers);
    same("n_kv_heads", m.n_kv_heads, expected.n_kv_heads);
    same("head_dim", m.head_dim, expected.head_dim);
    same("dtype_k", m.dtype_k, expected.dtype_k);
    same("dtype_v", m.dtype_v, expected.dtype_v);
    same("rotate_k", m.rotate_k, expected.rotate_k);
    same("rotate_v", m.rotate_v, expected.rotate_v);
    same("residual_tokens", m.residual_tokens, expected.residual_tokens);
    same("block_bytes", m.block_bytes, expected.block_bytes);
    same("tail_bytes", m.tail_bytes, expected.tail_bytes);
    same("n_groups", m.n_groups, expected.n_groups);
    same("window", m.window, expected.window);

    // ---- tokens and block count ----
    const auto *tokens = s->tokens();
    if (tokens->size() > kSnapshotMaxTokens)
        bad(path, strprintf("%u tokens exceed the cap %u", tokens->size(), kSnapshotMaxTokens));
    if (tokens->size() < m.n_cached)
        bad(path, strprintf("%u tokens stored for n_cached %u", tokens->size(), m.n_cached));
    m.tokens.assign(tokens->begin(), tokens->end());
    const uint32_t n_blocks = s->n_blocks();
    if (n_blocks != m.stored_blocks())
        bad(path, strprintf("n_blocks %u, but n_cached %u gives %llu blocks", n_blocks, m.n_cached,
                            (unsigned long long)m.stored_blocks()));
    const auto *sums = s->block_checksums();
    if (sums->size() != n_blocks)
        bad(path, strprintf("%u block checksums for %u blocks", sums->size(), n_blocks));

    // ---- payload placement ----
    const uint64_t payload_offset = s->payload_offset();
    if (payload_offset % kSnapshotPayloadAlign != 0)
        bad(path,
            strprintf("payload offset %llu not %llu-aligned", (unsigned long long)payload_offset,
                      (unsigned long long)kSnapshotPayloadAlign));
    if (payload_offset < sum_at + 8)
        bad(path, strprintf("payload offset %llu overlaps the metadata",
                            (unsigned long long)payload_offset));
    if (payload_offset > size)
        bad(path, strprintf("truncated: payload offset %llu beyond file size %llu",
                            (unsigned long long)payload_offset, (unsigned long long)size));
    uint64_t blocks_bytes = 0, payload_end = 0;
    if (__builtin_mul_overflow(uint64_t(n_blocks), m.block_bytes, &blocks_bytes) ||
        __builtin_add_overflow(payload_offset, blocks_bytes, &payload_end) ||
        __builtin_add_overflow(payload_end, m.tail_bytes, &payload_end))
        bad(path, "payload size overflows");
    if (payload_end > size)
        bad(path, strprintf("truncated: payload needs %llu bytes, file has %llu",
                            (unsigned long long)payload_end, (unsigned long long)size));
    if (payload_end < size)
        bad(path,
            strprintf("%llu unexpected trailing bytes", (unsigned long long)(size - payload_end)));
    for (uint64_t i = sum_at + 8; i < payload_offset; ++i)
        if (base[i] != 0) bad(path, "nonzero padding before the payload");

    // ---- payload checksums ----
    for (uint32_t i = 0; i < n_blocks; ++i) {
        const uint8_t *blk = base + payload_offset + uint64_t(i) * m.block_bytes;
        if (hash_bytes(blk, m.block_bytes) != sums->Get(i))
            bad(path, strprintf("block %u checksum mismatch", i));
    }
    if (hash_bytes(base + payload_offset + blocks_bytes, m.tail_bytes) != s->tail_checksum())
        bad(path, "tail checksum mismatch");

    out.payload_offset_ = payload_offset;
    out.n_blocks_ = n_blocks;
    return out;
}

}  // namespace llmkv
