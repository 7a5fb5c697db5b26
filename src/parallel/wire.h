// The wire format of rank 0's commands to the other ranks: a Header broadcast before each
// command's payload, the setup and status messages, batches and transfer lists encoded as
// bytes, and the status exchange through which every rank agrees on each step's outcome.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/backend.h"
#include "common/communicator.h"
#include "common/error.h"
#include "kv/kv_layout.h"
#include "llmkv.h"
#include "parallel/tensor_parallel.h"

namespace llmkv::wire {

constexpr uint32_t kMagic = 0x31507446;  // "FtP1"
enum Op : uint32_t { kSetup = 1, kAbort, kForward, kTransfer, kCopyTail, kShutdown };

struct Header {
    uint32_t magic = kMagic;
    uint32_t op = 0;
    uint64_t bytes = 0;  // of the payload broadcast next
};

struct SetupMessage {
    TpSetup setup;
    char fingerprint[64] = {};
};

struct Status {
    int32_t status = LLMKV_OK;
    char message[252] = {};
};

struct TransferItem {
    uint32_t kind;
    int64_t id;
};

// Every struct below is sent as its raw bytes (broadcast, all_gather, Writer/Reader): a member
// with a pointer, a virtual or a non-trivial copy would cross the wire as garbage.
static_assert(std::is_trivially_copyable_v<KvGeometry>,
              "KvGeometry crosses the wire as bytes (in TpSetup)");
static_assert(std::is_trivially_copyable_v<DeviceCommId>,
              "DeviceCommId crosses the wire as bytes (in TpSetup)");
static_assert(std::is_trivially_copyable_v<TpSetup>, "TpSetup crosses the wire as bytes");
static_assert(std::is_trivially_copyable_v<SetupMessage>, "SetupMessage crosses the wire as bytes");
static_assert(std::is_trivially_copyable_v<Header>, "Header crosses the wire as bytes");
static_assert(std::is_trivially_copyable_v<Status>, "Status crosses the wire as bytes");
static_assert(std::is_trivially_copyable_v<TransferItem>, "TransferItem crosses the wire as bytes");

Status status_of(llmkv_status s, const std::string &message);

// Every rank's setup status; throws the first failure on every rank.
void exchange_status(Communicator &comm, const Status &mine);

// Runs step on this rank and agrees on every rank's outcome (throws the first failure).
template <class Step>
void agree(Communicator &comm, Step step) {
    Status st;
    try {
        step();
    } catch (const Error &e) {
        st = status_of(e.status(), e.what());
    } catch (const std::bad_alloc &) {
        st = status_of(LLMKV_ERR_OUT_OF_MEMORY, "out of memory");
    }
    exchange_status(comm, st);
}

// Broadcasts a Header (op, payload size) and then the payload from rank 0.
void send_command(Communicator &comm, uint32_t op, const void *payload, size_t bytes);

// ---- command payloads ---------------------------------------------------------------------

struct Writer {
    std::vector<uint8_t> &out;
    template <typename T>
    void put(const T &v) {
        static_assert(std::is_trivially_copyable_v<T>,
                      "only trivially copyable values go on the wire");
        const size_t n = out.size();
        out.resize(n + sizeof(T));
        std::memcpy(out.data() + n, &v, sizeof(T));
    }
    template <typename T>
    void put_array(const T *p, size_t n) {
        static_assert(std::is_trivially_copyable_v<T>,
                      "only trivially copyable values go on the wire");
        const size_t at = out.size();
        out.resize(at + n * sizeof(T));
        if (n) std::memcpy(out.data() + at, p, n * sizeof(T));
    }
};

struct Reader {
    const uint8_t *p, *end;
    template <typename T>
    T get() {
        static_assert(std::is_trivially_copyable_v<T>,
                      "only trivially copyable values come off the wire");
        T v;
        take(&v, sizeof(T));
        return v;
    }
    void take(void *dst, size_t n) {
        if (size_t(end - p) < n)
            fail(LLMKV_ERR_INTERNAL, "tensor parallelism: a command is shorter than its contents");
        if (n) std::memcpy(dst, p, n);
        p += n;
    }
};

// A batch's spans: tokens, block tables, tail slots and positions.
void encode_batch(const std::vector<ForwardSpan> &spans, std::vector<uint8_t> &out);

// A decoded batch: the spans point into kv and tokens.
struct DecodedBatch {
    std::vector<SessionKv> kv;
    std::vector<std::vector<int32_t>> tokens;
    std::vector<ForwardSpan> spans;
};

void decode_batch(const std::vector<uint8_t> &in, DecodedBatch &b);

}  // namespace llmkv::wire
