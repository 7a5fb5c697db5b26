// Fuzz target `capi`: the C API as a sequence of operations decoded from the input, on the
// tiny model with a small device pool (a few 4-token blocks), a host tier, and up to four
// sessions and four prefix handles (max_sessions 6, so KV_CAPACITY for handles happens too).
//
// Input: byte 0 configures the engine (prefix cache, KV codecs, host tier size), byte 1 the
// session defaults; then up to kMaxOps operations, each an opcode byte and its arguments:
// session create (optionally from a prefix), append tokens (sometimes an id outside the
// vocabulary), append text, generate, step with an event capacity of 0..3, run, cancel,
// park, fork, to_prefix, prefix create/save/load/release, session destroy, and the
// queries (engine info and stats, session info and tokens, read_text and prefix tokens
// with capacities of 0..5).
// Properties, after every operation: llmkv_engine_validate is LLMKV_OK; the status is one
// the header documents for that call; events are TOKEN/DONE/ERROR of live sessions with a
// token inside the vocabulary, a known finish reason, or KV_CAPACITY; queries are
// consistent (n_cached <= n_tokens <= max_context, a known state and tier, token ids inside
// the vocabulary, read_text never returns more than its capacity).
#include <algorithm>

#include "fuzz_common.h"
#include "model/tokenizer.h"
#include "tiny_model.h"

using llmkv::fuzz::status_in;

namespace {

constexpr size_t kMaxOps = 40;
constexpr size_t kSlots = 4;
constexpr uint32_t kMaxContext = 40;
constexpr int32_t kVocab = llmkv::testing::TinyVocab::kSize;

std::string *g_model = nullptr;

void setup() {
    if (g_model) return;
    llmkv::fuzz::quiet_logs();
    llmkv::testing::TinyModelSpec spec;
    spec.n_layers = 1;
    spec.n_embd = 32;
    spec.n_ff = 32;
    spec.n_heads = 2;
    spec.n_kv_heads = 1;
    spec.n_ctx = 64;
    spec.weight_type = llmkv::TensorType::Q8_0;
    g_model = new std::string(llmkv::fuzz::scratch_path("capi_tiny.model"));
    llmkv::testing::write_tiny_model(spec, *g_model);
}

const char *name(llmkv_status s) { return llmkv_status_string(s); }

struct Run {
    llmkv_engine *e = nullptr;
    llmkv_session *sessions[kSlots] = {};
    llmkv_prefix *prefixes[kSlots] = {};
    std::string paths[kSlots];  // snapshot file of each prefix slot, once saved
    bool saved[kSlots] = {};
    size_t op = 0;
    uint8_t opcode = 0;

    void validate() {
        llmkv_status st = llmkv_engine_validate(e);
        FUZZ_CHECK(st == LLMKV_OK, "invariants after op %zu (opcode %u): %s", op, opcode, llmkv_last_error());
    }
    void expect(llmkv_status st, std::initializer_list<llmkv_status> ok, const char *call) {
        FUZZ_CHECK(status_in(st, ok), "op %zu: %s returned %s (%s)", op, call, name(st), llmkv_last_error());
    }
    bool live(const llmkv_session *s) const {
        for (llmkv_session *x : sessions) {
            if (x && x == s) return true;
        }
        return false;
    }
    void check_events(const llmkv_event *ev, size_t n) {
        for (size_t i = 0; i < n; ++i) {
            FUZZ_CHECK(live(ev[i].session), "event for a session that is not live");
            switch (ev[i].kind) {
                case LLMKV_EVENT_TOKEN:
                    FUZZ_CHECK(ev[i].token >= 0 && ev[i].token < kVocab, "token %d", ev[i].token);
                    break;
                case LLMKV_EVENT_DONE:
                    FUZZ_CHECK(ev[i].finish_reason >= LLMKV_FINISH_STOP && ev[i].finish_reason <= LLMKV_FINISH_CONTEXT,
                               "finish reason %u", ev[i].finish_reason);
                    break;
                case LLMKV_EVENT_ERROR:
                    FUZZ_CHECK(ev[i].status == LLMKV_ERR_KV_CAPACITY, "error event %d", ev[i].status);
                    break;
                default: FUZZ_CHECK(false, "event kind %u", ev[i].kind);
            }
        }
    }
    size_t free_slot(llmkv_session *const *arr) const {
        for (size_t i = 0; i < kSlots; ++i) {
            if (!arr[i]) return i;
        }
        return kSlots;
    }
    size_t free_slot(llmkv_prefix *const *arr) const {
        for (size_t i = 0; i < kSlots; ++i) {
            if (!arr[i]) return i;
        }
        return kSlots;
    }
};

void event_callback(const llmkv_event *ev, void *user) { static_cast<Run *>(user)->check_events(ev, 1); }

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    setup();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    setup();
    llmkv::fuzz::Input in(data, size);
    const uint8_t cfg = in.u8();
    const uint8_t sess_cfg = in.u8();

    llmkv_engine_params p;
    llmkv_engine_params_init(&p);
    p.model_path = g_model->c_str();
    p.backend = LLMKV_BACKEND_CPU;
    p.n_threads = 1;
    p.kv_block_tokens = 4;
    static const llmkv_kv_dtype dtypes[] = {LLMKV_KV_F16, LLMKV_KV_INT8, LLMKV_KV_FP8_E4M3, LLMKV_KV_INT4};
    p.kv_dtype_k = dtypes[(cfg >> 1) & 3];
    p.kv_dtype_v = dtypes[(cfg >> 3) & 3];
    p.kv_device_bytes = 6 * 4 * 16 * 2 * 2;  // six f16 blocks (more for smaller codecs)
    p.kv_host_bytes = (cfg & 0x20) ? 0 : (cfg & 0x40) ? 2048 : 64 << 10;
    p.max_batch_tokens = 12;
    p.max_context = kMaxContext;
    p.max_sessions = 6;
    p.flags = (cfg & 1) ? LLMKV_ENGINE_PREFIX_CACHE : 0;
    p.kv_residual_tokens = (cfg & 0x80) ? 2 : 0;

    Run r;
    llmkv_status st = llmkv_engine_create(&p, &r.e);
    FUZZ_CHECK(st == LLMKV_OK, "engine_create: %s", llmkv_last_error());
    for (size_t i = 0; i < kSlots; ++i) r.paths[i] = llmkv::fuzz::scratch_path("capi_prefix_" + std::to_string(i));

    int32_t stop_token = 97;  // 'a'
    for (r.op = 0; r.op < kMaxOps && !in.empty(); ++r.op) {
        r.opcode = in.u8() % 20;
        const size_t si = in.below(kSlots);
        llmkv_session *s = r.sessions[si];
        switch (r.opcode) {
            case 0: {  // session create, sometimes from a prefix
                size_t slot = r.free_slot(r.sessions);
                if (slot == kSlots) break;
                llmkv_session_params sp;
                llmkv_session_params_init(&sp);
                const uint8_t b = in.u8();
                sp.priority = int32_t(b & 3) - 1;
                sp.max_new_tokens = (sess_cfg & 7);
                if (b & 4) sp.prefix = r.prefixes[in.below(kSlots)];
                if (b & 8) {
                    sp.sampling.temperature = 0.8f;
                    sp.sampling.top_k = int32_t(in.below(8));
                    sp.sampling.top_p = 0.9f;
                    sp.sampling.seed = in.u8();
                }
                if (b & 16) {
                    sp.stop_tokens = &stop_token;
                    sp.n_stop_tokens = 1;
                }
                if (b & 32) sp.sampling.repeat_penalty = 1.3f;
                st = llmkv_session_create(r.e, &sp, &r.sessions[slot]);
                r.expect(st, {LLMKV_OK, LLMKV_ERR_KV_CAPACITY}, "session_create");
                FUZZ_CHECK((st == LLMKV_OK) == (r.sessions[slot] != nullptr), "handle vs status");
                break;
            }
            case 1: case 2: {  // append tokens
                if (!s) break;
                const size_t n = in.below(9);
                int32_t toks[8];
                for (size_t i = 0; i < n; ++i) {
                    const uint8_t t = in.u8();
                    toks[i] = t == 0xFF ? kVocab + int32_t(in.u8()) : int32_t(t) + (t < 8 ? 255 : 0);
                }
                st = llmkv_session_append(s, n ? toks : nullptr, n);
                r.expect(st, {LLMKV_OK, LLMKV_ERR_INVALID_ARGUMENT, LLMKV_ERR_STATE, LLMKV_ERR_KV_CAPACITY}, "append");
                break;
            }
            case 3: {  // append text
                if (!s) break;
                const std::string text = in.bytes(16);
                st = llmkv_session_append_text(s, text.data(), text.size());
                r.expect(st, {LLMKV_OK, LLMKV_ERR_INVALID_ARGUMENT, LLMKV_ERR_STATE, LLMKV_ERR_KV_CAPACITY},
                         "append_text");
                break;
            }
            case 4: case 5: {  // generate
                if (!s) break;
                st = llmkv_session_generate(s, in.below(7));
                r.expect(st, {LLMKV_OK, LLMKV_ERR_STATE, LLMKV_ERR_KV_CAPACITY}, "generate");
                break;
            }
            case 6: case 7: case 8: {  // step with a tiny event capacity
                const size_t cap = in.below(4);
                llmkv_event ev[3];
                size_t n = 99;
                st = llmkv_step(r.e, cap ? ev : nullptr, cap, &n);
                r.expect(st, {LLMKV_OK}, "step");
                FUZZ_CHECK(n <= cap, "step returned %zu events for capacity %zu", n, cap);
                r.check_events(ev, n);
                break;
            }
            case 9: {  // run to completion (bounded: max_context and max_new_tokens)
                if (!(in.u8() & 1)) break;
                st = llmkv_run(r.e, event_callback, &r);
                r.expect(st, {LLMKV_OK}, "run");
                break;
            }
            case 10:
                if (!s) break;
                r.expect(llmkv_session_cancel(s), {LLMKV_OK, LLMKV_ERR_STATE}, "cancel");
                break;
            case 11:
                if (!s) break;
                r.expect(llmkv_session_park(s), {LLMKV_OK, LLMKV_ERR_UNSUPPORTED, LLMKV_ERR_STATE, LLMKV_ERR_KV_CAPACITY},
                         "park");
                break;
            case 12: {  // fork
                size_t slot = r.free_slot(r.sessions);
                if (!s || slot == kSlots) break;
                st = llmkv_session_fork(s, &r.sessions[slot]);
                r.expect(st, {LLMKV_OK, LLMKV_ERR_STATE, LLMKV_ERR_KV_CAPACITY, LLMKV_ERR_UNSUPPORTED}, "fork");
                break;
            }
            case 13: {  // to_prefix
                size_t slot = r.free_slot(r.prefixes);
                if (!s || slot == kSlots) break;
                st = llmkv_session_to_prefix(s, &r.prefixes[slot]);
                r.expect(st, {LLMKV_OK, LLMKV_ERR_STATE, LLMKV_ERR_KV_CAPACITY, LLMKV_ERR_UNSUPPORTED}, "to_prefix");
                r.saved[slot] = false;
                break;
            }
            case 14: {  // prefix create
                size_t slot = r.free_slot(r.prefixes);
                if (slot == kSlots) break;
                const size_t n = in.below(24);
                std::vector<int32_t> toks(n);
                for (auto &t : toks) t = int32_t(in.u8());
                st = llmkv_prefix_create(r.e, n ? toks.data() : nullptr, n, &r.prefixes[slot]);
                r.expect(st, {LLMKV_OK, LLMKV_ERR_INVALID_ARGUMENT, LLMKV_ERR_KV_CAPACITY}, "prefix_create");
                r.saved[slot] = false;
                break;
            }
            case 15: {  // prefix save / load
                const size_t pi = in.below(kSlots);
                if (r.prefixes[pi]) {
                    st = llmkv_prefix_save(r.prefixes[pi], r.paths[pi].c_str());
                    r.expect(st, {LLMKV_OK}, "prefix_save");
                    r.saved[pi] = true;
                } else {
                    size_t from = in.below(kSlots);
                    const char *path = r.saved[from] ? r.paths[from].c_str() : "/nonexistent/llmkv.snap";
                    st = llmkv_prefix_load(r.e, path, &r.prefixes[pi]);
                    r.expect(st, {LLMKV_OK, LLMKV_ERR_IO, LLMKV_ERR_KV_CAPACITY}, "prefix_load");
                }
                break;
            }
            case 16: {  // prefix release
                const size_t pi = in.below(kSlots);
                llmkv_prefix_release(r.prefixes[pi]);
                r.prefixes[pi] = nullptr;
                break;
            }
            case 17:  // session destroy
                llmkv_session_destroy(s);
                r.sessions[si] = nullptr;
                break;
            case 18: {  // engine queries and prefix tokens
                llmkv_engine_info info;
                info.struct_size = sizeof(info);
                r.expect(llmkv_engine_get_info(r.e, &info), {LLMKV_OK}, "get_info");
                FUZZ_CHECK(info.n_vocab == uint32_t(kVocab) && info.max_context == kMaxContext, "engine info");
                llmkv_stats stats;
                stats.struct_size = sizeof(stats);
                r.expect(llmkv_engine_get_stats(r.e, &stats), {LLMKV_OK}, "get_stats");
                FUZZ_CHECK(stats.blocks_free + stats.blocks_used + stats.blocks_cached == stats.blocks_total,
                           "blocks: %u free + %u used + %u cached != %u", stats.blocks_free, stats.blocks_used,
                           stats.blocks_cached, stats.blocks_total);
                FUZZ_CHECK(stats.host_bytes_used <= p.kv_host_bytes, "host bytes used %llu",
                           (unsigned long long)stats.host_bytes_used);
                const size_t pi = in.below(kSlots);
                if (r.prefixes[pi]) {
                    int32_t toks[5];
                    size_t cap = in.below(6), n = 0;
                    r.expect(llmkv_prefix_get_tokens(r.prefixes[pi], cap ? toks : nullptr, cap, &n), {LLMKV_OK},
                             "prefix_get_tokens");
                    FUZZ_CHECK(n == llmkv_prefix_n_tokens(r.prefixes[pi]) && n > 0, "prefix token count");
                    for (size_t i = 0; i < std::min(cap, n); ++i) FUZZ_CHECK(toks[i] >= 0 && toks[i] < kVocab, "token");
                }
                (void)llmkv_pending_events(r.e);
                break;
            }
            case 19: {  // session queries
                if (!s) break;
                llmkv_session_info si_info;
                si_info.struct_size = sizeof(si_info);
                r.expect(llmkv_session_get_info(s, &si_info), {LLMKV_OK}, "session_get_info");
                FUZZ_CHECK(si_info.state <= LLMKV_SESSION_FINISHED && si_info.tier <= LLMKV_TIER_MIXED, "state/tier");
                FUZZ_CHECK(si_info.n_cached <= si_info.n_tokens && si_info.n_tokens <= kMaxContext,
                           "n_cached %u n_tokens %u", si_info.n_cached, si_info.n_tokens);
                std::vector<int32_t> toks(kMaxContext + 1);
                size_t cap = in.below(6), n = 0;
                r.expect(llmkv_session_get_tokens(s, cap ? toks.data() : nullptr, cap, &n), {LLMKV_OK}, "get_tokens");
                FUZZ_CHECK(n == si_info.n_tokens, "get_tokens count %zu vs info %u", n, si_info.n_tokens);
                r.expect(llmkv_session_get_tokens(s, toks.data(), toks.size(), &n), {LLMKV_OK}, "get_tokens");
                for (size_t i = 0; i < n; ++i) FUZZ_CHECK(toks[i] >= 0 && toks[i] < kVocab, "token %d", toks[i]);
                char text[5];
                size_t tcap = in.below(6), got = 99;
                r.expect(llmkv_session_read_text(s, tcap ? text : nullptr, tcap, &got), {LLMKV_OK}, "read_text");
                FUZZ_CHECK(got <= tcap, "read_text gave %zu bytes for capacity %zu", got, tcap);
                break;
            }
        }
        r.validate();
    }
    for (llmkv_session *s : r.sessions) llmkv_session_destroy(s);
    for (llmkv_prefix *x : r.prefixes) llmkv_prefix_release(x);
    r.validate();
    llmkv_stats stats;
    stats.struct_size = sizeof(stats);
    FUZZ_CHECK(llmkv_engine_get_stats(r.e, &stats) == LLMKV_OK, "stats");
    FUZZ_CHECK(stats.blocks_used == 0 && stats.tail_blocks_used == 0, "blocks in use with no handle: %u + %u tails",
               stats.blocks_used, stats.tail_blocks_used);
    llmkv_engine_destroy(r.e);
    for (size_t i = 0; i < kSlots; ++i) {
        if (r.saved[i]) std::remove(r.paths[i].c_str());
    }
    return 0;
}

namespace llmkv::fuzz {

Seeds seeds() {
    // cfg, session cfg, then ops: opcode, slot, args.
    auto ops = [](uint8_t cfg, uint8_t scfg, std::vector<uint8_t> body) {
        std::vector<uint8_t> b(2 + body.size());
        b[0] = cfg;
        b[1] = scfg;
        std::copy(body.begin(), body.end(), b.begin() + 2);
        return b;
    };
    Seeds s;
    // create, append 8 tokens, generate 3, step x4, read text, info.
    s.push_back({"generate", ops(0x01, 0x03, {0, 0, 0x00, 1, 0, 8, 't', 'h', 'e', ' ', 'a', 'n', 'd', '.', 4, 0, 3,
                                              6, 0, 3, 6, 0, 3, 6, 0, 3, 6, 0, 3, 19, 0, 5, 5, 18, 0, 0})});
    // two sessions, a prefix made, saved, loaded, a session from it, run, park, fork.
    s.push_back({"prefix-roundtrip", ops(0x03, 0x02, {14, 0, 10, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 15, 0, 0, 16, 0, 0,
                                                      15, 0, 0, 0, 0, 0, 0x04, 0, 4, 0, 2, 9, 0, 1, 11, 0, 12, 0,
                                                      19, 1, 5, 5, 17, 0, 18, 0, 0})});
    // park under pressure with a small host tier, cancel, append text, to_prefix.
    s.push_back({"pressure", ops(0x40, 0x05, {0, 0, 0x01, 0, 1, 0x00, 3, 0, 12, 'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o',
                                             'r', 'l', 'd', '!', 3, 1, 12, 'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i',
                                             'j', 'k', 'l', 4, 0, 6, 4, 1, 6, 6, 0, 1, 10, 0, 6, 0, 3, 11, 1, 7, 0,
                                             2, 9, 0, 1, 13, 0, 13, 1, 19, 0, 3, 3})});
    // int4/int8 codecs, residual tokens, an out-of-vocabulary token, sampling and stop token.
    s.push_back({"codecs", ops(0x9F, 0x06, {0, 0, 0x38, 3, 2, 1, 8, 1, 2, 3, 0xFF, 9, 4, 5, 6, 1, 0, 6, 'x', 'y',
                                           'z', 'q', 'r', 's', 4, 0, 0, 9, 0, 1, 19, 0, 4, 4})});
    return s;
}

}  // namespace llmkv::fuzz
