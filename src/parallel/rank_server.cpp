// serve_rank, the loop of ranks 1..: set up from rank 0's setup message, then run its
// commands (forward passes, KV transfers, tail copies) until the shutdown; abort_ranks.
#include <cstdlib>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/log.h"
#include "model/arch/forward.h"
#include "parallel/rank_state.h"
#include "parallel/tensor_parallel.h"
#include "parallel/wire.h"

namespace llmkv {

void abort_ranks(Communicator &comm, const std::string &why) {
    wire::Status st = wire::status_of(LLMKV_ERR_BACKEND, why);
    wire::send_command(comm, wire::kAbort, &st, sizeof(st));
}

void serve_rank(const LlamaModel *model, const std::string &load_error, Communicator &comm,
                const RankThreads &threads) {
    wire::Header h;
    comm.broadcast(&h, sizeof(h), 0);
    if (h.magic != wire::kMagic)
        fail(LLMKV_ERR_BACKEND, "tensor parallelism: rank 0 does not speak this protocol");
    if (h.op == wire::kAbort) {
        wire::Status st;
        comm.broadcast(&st, sizeof(st), 0);
        st.message[sizeof(st.message) - 1] = 0;
        fail(LLMKV_ERR_BACKEND, "rank 0 stopped before setting up: %s", st.message);
    }
    if (h.op != wire::kSetup || h.bytes != sizeof(wire::SetupMessage))
        fail(LLMKV_ERR_BACKEND, "tensor parallelism: no setup from rank 0");
    wire::SetupMessage m;
    comm.broadcast(&m, sizeof(m), 0);
    m.fingerprint[sizeof(m.fingerprint) - 1] = 0;
    wire::Status st;
    std::unique_ptr<RankState> rs;
    if (!load_error.empty()) {
        st = wire::status_of(LLMKV_ERR_MODEL_FORMAT, load_error);
    } else if (!model || model->fingerprint() != m.fingerprint) {
        st = wire::status_of(LLMKV_ERR_INVALID_ARGUMENT,
                             strprintf("its model (fingerprint %s) is not rank 0's (%s)",
                                       model ? model->fingerprint().c_str() : "-", m.fingerprint));
    } else {
        try {
            rs = make_rank(*model, m.setup, comm, threads, true);
            rs->model_config = &model->config();
        } catch (const Error &e) {
            st = wire::status_of(e.status(), e.what());
        } catch (const std::bad_alloc &) {
            st = wire::status_of(LLMKV_ERR_OUT_OF_MEMORY, "out of memory");
        }
    }
    wire::exchange_status(comm, st);
    connect_devices(*rs, comm, m.setup, model->config().n_embd);

    std::vector<uint8_t> payload;
    wire::DecodedBatch batch;
    std::vector<float> logits;
    for (;;) {
        comm.broadcast(&h, sizeof(h), 0);
        if (h.magic != wire::kMagic)
            fail(LLMKV_ERR_BACKEND, "tensor parallelism: a garbled command from rank 0");
        payload.resize(h.bytes);
        if (h.bytes) comm.broadcast(payload.data(), h.bytes, 0);
        if (h.op == wire::kShutdown) return;
        try {
            switch (h.op) {
                case wire::kForward:
                    wire::decode_batch(payload, batch);
                    rs->forward->run(batch.spans, logits);
                    break;
                case wire::kTransfer: {
                    wire::Reader r{payload.data(), payload.data() + payload.size()};
                    const uint32_t n = r.get<uint32_t>();
                    for (uint32_t i = 0; i < n; ++i)
                        run_transfer(*rs, comm, m.setup, r.get<wire::TransferItem>(), nullptr);
                    break;
                }
                case wire::kCopyTail: {
                    wire::Reader r{payload.data(), payload.data() + payload.size()};
                    const int64_t from = r.get<int64_t>(), to = r.get<int64_t>();
                    rs->backend->copy_tail(from, to);
                    break;
                }
                default:
                    fail(LLMKV_ERR_BACKEND, "tensor parallelism: unknown command %u from rank 0",
                         h.op);
            }
        } catch (const std::exception &e) {
            // The other ranks are inside the same collective sequence; one that leaves it
            // midway leaves them waiting forever. Stop loudly instead (as a failed NCCL rank).
            LLMKV_LOG_ERROR_F("tensor-parallel rank %u failed in a command: %s", comm.rank(),
                              e.what());
            std::abort();
        }
    }
}

}  // namespace llmkv
