// The wire format of rank 0's commands (wire.h): status messages and their exchange, the
// command header, and batches encoded to and decoded from bytes.
#include "parallel/wire.h"

#include <cstdio>

namespace llmkv::wire {

Status status_of(llmkv_status s, const std::string &message) {
    Status st;
    st.status = s;
    std::snprintf(st.message, sizeof(st.message), "%s", message.c_str());
    return st;
}

void exchange_status(Communicator &comm, const Status &mine) {
    std::vector<Status> all(comm.size());
    comm.all_gather(&mine, all.data(), sizeof(Status));
    for (uint32_t r = 0; r < comm.size(); ++r) {
        if (all[r].status != LLMKV_OK) {
            all[r].message[sizeof(all[r].message) - 1] = 0;
            fail(llmkv_status(all[r].status), "tensor-parallel rank %u of %u: %s", r, comm.size(),
                 all[r].message);
        }
    }
}

void send_command(Communicator &comm, uint32_t op, const void *payload, size_t bytes) {
    Header h;
    h.op = op;
    h.bytes = bytes;
    comm.broadcast(&h, sizeof(h), 0);
    if (bytes) comm.broadcast(const_cast<void *>(payload), bytes, 0);
}

void encode_batch(const std::vector<ForwardSpan> &spans, std::vector<uint8_t> &out) {
    out.clear();
    Writer w{out};
    w.put(uint32_t(spans.size()));
    for (const ForwardSpan &s : spans) {
        w.put(s.n);
        w.put(uint32_t(s.want_logits) | uint32_t(s.all_logits) << 1);
        w.put(s.kv->n_tokens);
        w.put(s.kv->tail);
        w.put(uint32_t(s.kv->blocks.size()));
        w.put(uint32_t(s.kv->local.size()));
        w.put_array(s.tokens, s.n);
        w.put_array(s.kv->blocks.data(), s.kv->blocks.size());
        w.put_array(s.kv->local.data(), s.kv->local.size());
    }
}

void decode_batch(const std::vector<uint8_t> &in, DecodedBatch &b) {
    Reader r{in.data(), in.data() + in.size()};
    const uint32_t n = r.get<uint32_t>();
    b.kv.assign(n, SessionKv());
    b.tokens.assign(n, {});
    b.spans.assign(n, ForwardSpan());
    for (uint32_t i = 0; i < n; ++i) {
        ForwardSpan &s = b.spans[i];
        SessionKv &kv = b.kv[i];
        s.n = r.get<uint32_t>();
        const uint32_t flags = r.get<uint32_t>();
        s.want_logits = flags & 1;
        s.all_logits = (flags >> 1) & 1;
        kv.n_tokens = r.get<uint32_t>();
        kv.tail = r.get<int64_t>();
        kv.blocks.resize(r.get<uint32_t>());
        kv.local.resize(r.get<uint32_t>());
        b.tokens[i].resize(s.n);
        r.take(b.tokens[i].data(), s.n * sizeof(int32_t));
        r.take(kv.blocks.data(), kv.blocks.size() * sizeof(uint32_t));
        r.take(kv.local.data(), kv.local.size() * sizeof(uint32_t));
        s.tokens = b.tokens[i].data();
        s.kv = &kv;
    }
}

}  // namespace llmkv::wire
