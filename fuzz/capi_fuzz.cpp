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
//
// Constraint mode (byte 1 bit 7; inputs without it decode as before): session create also
// takes stop strings (NUL bytes through stop_string_lengths, or NUL-terminated), logit
// biases (a few, or -INFINITY bans of a run of tokens), min_new_tokens and a grammar from a
// fixed list (valid and invalid GBNF and JSON Schemas), sometimes invalid on purpose; two
// more operations: llmkv_session_set_grammar and a full read of the text. Extra properties:
//  - create and set_grammar answer INVALID_ARGUMENT exactly for the invalid parameters
//    (KV_CAPACITY / STATE aside);
//  - the text read with llmkv_session_read_text during one generate() never contains one of
//    the session's stop strings (a match that may start in up to 3 bytes of an incomplete
//    UTF-8 character left by the previous generation is not counted);
//  - for a session with a grammar and no stop strings whose generation ended with
//    LLMKV_FINISH_STOP, the text read since the grammar last started (create, set_grammar,
//    an append that added tokens, a generation that ended with STOP or CONSTRAINT) is a
//    complete sentence: TokenMasker::advance(start, text) is live and accepting. Text
//    after a fork or a generation that ended with an error is not checked until the
//    grammar starts again.
#include <algorithm>
#include <cmath>
#include <memory>

#include "fuzz_common.h"
#include "grammar/grammar.h"
#include "model/tokenizer.h"
#include "tiny_model.h"

using llmkv::fuzz::status_in;

namespace {

constexpr size_t kMaxOps = 40;
constexpr size_t kSlots = 4;
constexpr uint32_t kMaxContext = 40;
constexpr int32_t kVocab = llmkv::testing::TinyVocab::kSize;

std::string *g_model = nullptr;

struct GrammarSpec {
    llmkv_grammar_kind kind;
    const char *text;
    const char *root;  // NULL: "root"
    bool valid;
};
// The grammars sessions draw from. Every valid one starts with an ASCII character (see the
// UTF-8 remark in Track).
const GrammarSpec kGrammars[] = {
    {LLMKV_GRAMMAR_GBNF, "root ::= [a-z ]{1,12} \".\"\n", nullptr, true},
    {LLMKV_GRAMMAR_GBNF, "root ::= (\"yes\" | \"no\") \"!\"?\n", nullptr, true},
    {LLMKV_GRAMMAR_GBNF, "answer ::= [0-9]+ (\",\" [0-9]+)*\n", "answer", true},
    {LLMKV_GRAMMAR_GBNF, "root ::= \"<\" [^<>]{0,6} \">\"\n", nullptr, true},
    {LLMKV_GRAMMAR_JSON_SCHEMA,
     R"({"type":"object","properties":{"n":{"type":"integer"},"ok":{"type":"boolean"}},"required":["n"]})",
     nullptr, true},
    {LLMKV_GRAMMAR_JSON_SCHEMA, R"({"type":"array","items":{"enum":["x","y"]},"maxItems":3})",
     nullptr, true},
    {LLMKV_GRAMMAR_JSON_SCHEMA, R"({"type":"string","maxLength":5})", nullptr, true},
    {LLMKV_GRAMMAR_JSON_SCHEMA, R"({"anyOf":[{"type":"number"},{"type":"null"}]})", nullptr, true},
    {LLMKV_GRAMMAR_GBNF, "root ::= (\"a\"\n", nullptr, false},
    {LLMKV_GRAMMAR_GBNF, "root ::= x\n", nullptr, false},
    {LLMKV_GRAMMAR_GBNF, "root ::= \"a\"\n", "missing", false},
    {LLMKV_GRAMMAR_GBNF, "", nullptr, false},
    {LLMKV_GRAMMAR_JSON_SCHEMA, R"({"type":"string","pattern":"^a$"})", nullptr, false},
    {LLMKV_GRAMMAR_JSON_SCHEMA, R"({"type":"object",)", nullptr, false},
};
constexpr size_t kNumGrammars = sizeof(kGrammars) / sizeof(kGrammars[0]);
// A matcher per valid grammar over the 256 single bytes, to check read text.
std::unique_ptr<llmkv::TokenMasker> *g_check = nullptr;

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
    std::vector<std::string> bytes;
    for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, char(b)));
    auto vocab =
        std::make_shared<const llmkv::GrammarVocab>(std::move(bytes), std::vector<uint8_t>());
    g_check = new std::unique_ptr<llmkv::TokenMasker>[kNumGrammars];
    for (size_t i = 0; i < kNumGrammars; ++i) {
        if (!kGrammars[i].valid) continue;
        auto g = kGrammars[i].kind == LLMKV_GRAMMAR_GBNF
                     ? llmkv::Grammar::from_gbnf(kGrammars[i].text,
                                                 kGrammars[i].root ? kGrammars[i].root : "root")
                     : llmkv::Grammar::from_json_schema(kGrammars[i].text);
        g_check[i] = std::make_unique<llmkv::TokenMasker>(g, vocab);
    }
}

std::string show(std::string_view s) {
    std::string out;
    for (unsigned char c : s.substr(0, 120)) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), c >= 0x20 && c < 0x7f && c != '\\' ? "%c" : "\\x%02x", c);
        out += buf;
    }
    return out;
}

// What the target knows about a session's generated text (constraint mode).
struct Track {
    std::vector<std::string> stops;  // the session's stop strings
    std::string seg;                 // text read since the current generate() began
    int grammar = -1;                // index into kGrammars, -1 none
    bool g_clean = false;            // gtext holds all the text since the grammar started
    std::string gtext;               // text read since the grammar started
    bool gen_pending = false;        // a generate() was accepted and not yet accounted for

    void restart_grammar() {
        gtext.clear();
        g_clean = true;
    }
};

const char *name(llmkv_status s) {
    return llmkv_status_string(s);
}

struct Run {
    llmkv_engine *e = nullptr;
    llmkv_session *sessions[kSlots] = {};
    llmkv_prefix *prefixes[kSlots] = {};
    std::string paths[kSlots];  // snapshot file of each prefix slot, once saved
    bool saved[kSlots] = {};
    size_t op = 0;
    uint8_t opcode = 0;
    Track track[kSlots];

    // Text read: an incomplete UTF-8 character left by the previous generation can lead the
    // segment (up to 3 bytes >= 0x80); a match that may start in them is not the session's.
    void check_stops(size_t slot) {
        const Track &t = track[slot];
        for (const std::string &x : t.stops) {
            for (size_t pos = t.seg.find(x); pos != std::string::npos;
                 pos = t.seg.find(x, pos + 1)) {
                const bool carried = pos < 3 && uint8_t(t.seg[0]) >= 0x80;
                FUZZ_CHECK(
                    carried,
                    "op %zu: text read in one generation contains the stop string '%s': '%s'", op,
                    show(x).c_str(), show(t.seg).c_str());
            }
        }
    }
    void read_into(size_t slot, size_t cap) {
        char buf[256];
        size_t got = 99;
        cap = std::min(cap, sizeof(buf));
        expect(llmkv_session_read_text(sessions[slot], cap ? buf : nullptr, cap, &got), {LLMKV_OK},
               "read_text");
        FUZZ_CHECK(got <= cap, "read_text gave %zu bytes for capacity %zu", got, cap);
        track[slot].seg.append(buf, got);
        track[slot].gtext.append(buf, got);
        check_stops(slot);
    }
    void drain(size_t slot) {
        for (int i = 0; i < 64; ++i) {
            const size_t before = track[slot].seg.size();
            read_into(slot, 256);
            if (track[slot].seg.size() == before) break;
        }
    }
    // After a call that succeeds only when the session is not generating: the previous
    // generation (if any) is over, with the finish reason `before` had.
    void boundary(size_t slot, const llmkv_session_info &before) {
        drain(slot);
        Track &t = track[slot];
        if (t.gen_pending) {
            const uint32_t reason = before.finish_reason;
            if (t.grammar >= 0 && t.g_clean && t.stops.empty() && reason == LLMKV_FINISH_STOP &&
                (t.gtext.empty() || uint8_t(t.gtext[0]) < 0x80)) {
                llmkv::TokenMasker &m = *g_check[t.grammar];
                const llmkv::TokenMasker::State st = m.advance(m.start(), t.gtext);
                FUZZ_CHECK(st != llmkv::TokenMasker::kDead && m.accepting(st),
                           "op %zu: generation ended with STOP but the text '%s' is not a sentence "
                           "of grammar %d "
                           "(%s)",
                           op, show(t.gtext).c_str(), t.grammar,
                           st == llmkv::TokenMasker::kDead ? "dead" : "incomplete");
            }
            if (reason == LLMKV_FINISH_STOP || reason == LLMKV_FINISH_CONSTRAINT) {
                t.restart_grammar();
            } else if (reason == LLMKV_FINISH_NONE) {
                t.g_clean = false;  // ended by an error: not followed further
            }
            t.gen_pending = false;
        }
        t.seg.clear();
    }
    llmkv_session_info info_of(size_t slot) {
        llmkv_session_info info;
        info.struct_size = sizeof(info);
        expect(llmkv_session_get_info(sessions[slot], &info), {LLMKV_OK}, "session_get_info");
        return info;
    }
    void destroy(size_t slot) {
        if (sessions[slot]) drain(slot);
        llmkv_session_destroy(sessions[slot]);
        sessions[slot] = nullptr;
        track[slot] = Track();
    }

    void validate() {
        llmkv_status st = llmkv_engine_validate(e);
        FUZZ_CHECK(st == LLMKV_OK, "invariants after op %zu (opcode %u): %s", op, opcode,
                   llmkv_last_error());
    }
    void expect(llmkv_status st, std::initializer_list<llmkv_status> ok, const char *call) {
        FUZZ_CHECK(status_in(st, ok), "op %zu: %s returned %s (%s)", op, call, name(st),
                   llmkv_last_error());
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
                    FUZZ_CHECK(ev[i].finish_reason >= LLMKV_FINISH_STOP &&
                                   ev[i].finish_reason <= LLMKV_FINISH_CONSTRAINT,
                               "finish reason %u", ev[i].finish_reason);
                    break;
                case LLMKV_EVENT_ERROR:
                    FUZZ_CHECK(ev[i].status == LLMKV_ERR_KV_CAPACITY, "error event %d",
                               ev[i].status);
                    break;
                default:
                    FUZZ_CHECK(false, "event kind %u", ev[i].kind);
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

void event_callback(const llmkv_event *ev, void *user) {
    static_cast<Run *>(user)->check_events(ev, 1);
}

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
    static const llmkv_kv_dtype dtypes[] = {LLMKV_KV_F16, LLMKV_KV_INT8, LLMKV_KV_FP8_E4M3,
                                            LLMKV_KV_INT4};
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
    for (size_t i = 0; i < kSlots; ++i)
        r.paths[i] = llmkv::fuzz::scratch_path("capi_prefix_" + std::to_string(i));

    int32_t stop_token = 97;  // 'a'
    const bool constraints = sess_cfg & 0x80;
    for (r.op = 0; r.op < kMaxOps && !in.empty(); ++r.op) {
        r.opcode = in.u8() % (constraints ? 22 : 20);
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
                bool bad = false;
                Track t;
                std::vector<std::string> stop_text;
                std::vector<const char *> stop_ptrs;
                std::vector<size_t> stop_lens;
                std::vector<llmkv_logit_bias> bias;
                if (constraints && (b & 64)) {
                    const uint8_t c = in.u8();
                    const uint32_t stop_mode = c & 3;
                    if (stop_mode == 1 ||
                        stop_mode == 2) {  // with lengths (NUL bytes) / NUL-terminated
                        const size_t n = 1 + in.below(3);
                        for (size_t i = 0; i < n; ++i) {
                            std::string x(1 + in.below(3), '\0');
                            for (char &ch : x) ch = char(in.u8());
                            if (stop_mode == 2) {
                                for (char &ch : x) ch = ch ? ch : ' ';
                            }
                            stop_text.push_back(x);
                        }
                    } else if (stop_mode == 3) {  // invalid: an empty string, 257 bytes, 65 strings
                        const uint32_t what = in.below(3);
                        stop_text.push_back(what == 0 ? std::string()
                                                      : std::string(what == 1 ? 257 : 1, 'x'));
                        if (what == 2) stop_text.resize(65, "y");
                        bad = true;
                    }
                    for (const std::string &x : stop_text) {
                        stop_ptrs.push_back(x.c_str());
                        stop_lens.push_back(x.size());
                    }
                    if (!stop_text.empty()) {
                        sp.stop_strings = stop_ptrs.data();
                        sp.stop_string_lengths = stop_mode == 2 ? nullptr : stop_lens.data();
                        sp.n_stop_strings = uint32_t(stop_text.size());
                        if (!bad) t.stops = stop_text;
                    }
                    const uint32_t bias_mode = (c >> 2) & 3;
                    if (bias_mode == 1) {  // a few biases
                        static const float kBias[] = {-5.0f, -1.0f, 2.0f, 10.0f, -INFINITY};
                        const size_t n = 1 + in.below(6);
                        for (size_t i = 0; i < n; ++i)
                            bias.push_back({int32_t(in.below(kVocab)), kBias[in.below(5)]});
                    } else if (bias_mode == 2) {  // ban a run of tokens (up to all of them)
                        const int32_t lo = int32_t(in.u8());
                        const int32_t len = int32_t(in.below(kVocab + 1));
                        for (int32_t tok = lo; tok < std::min(kVocab, lo + len); ++tok)
                            bias.push_back({tok, -INFINITY});
                        if (len > 200 && bias.size() < size_t(kVocab))
                            bias.push_back({lo, -INFINITY});  // twice
                    } else if (bias_mode == 3) {  // invalid: outside the vocabulary, NaN, +inf
                        const uint32_t what = in.below(3);
                        bias.push_back({what == 0 ? kVocab + int32_t(in.u8()) : 5, what == 1 ? NAN
                                                                                   : what == 2
                                                                                       ? INFINITY
                                                                                       : 1.0f});
                        bad = true;
                    }
                    sp.logit_bias = bias.empty() ? nullptr : bias.data();
                    sp.n_logit_bias = uint32_t(bias.size());
                    if (c & 16) sp.min_new_tokens = in.below(8);
                }
                if (constraints && (b & 128)) {
                    const size_t gi = in.below(kNumGrammars);
                    sp.grammar_kind = kGrammars[gi].kind;
                    sp.grammar = kGrammars[gi].text;
                    sp.grammar_len = std::strlen(kGrammars[gi].text);
                    sp.grammar_root = kGrammars[gi].root;
                    if (kGrammars[gi].valid) {
                        t.grammar = int(gi);
                        t.g_clean = true;
                    } else {
                        bad = true;
                    }
                }
                st = llmkv_session_create(r.e, &sp, &r.sessions[slot]);
                if (bad) {
                    r.expect(st, {LLMKV_ERR_INVALID_ARGUMENT, LLMKV_ERR_KV_CAPACITY},
                             "session_create (invalid params)");
                } else {
                    r.expect(st, {LLMKV_OK, LLMKV_ERR_KV_CAPACITY}, "session_create");
                }
                FUZZ_CHECK((st == LLMKV_OK) == (r.sessions[slot] != nullptr), "handle vs status");
                if (st == LLMKV_OK) r.track[slot] = t;
                break;
            }
            case 1:
            case 2: {  // append tokens
                if (!s) break;
                const size_t n = in.below(9);
                int32_t toks[8];
                for (size_t i = 0; i < n; ++i) {
                    const uint8_t t = in.u8();
                    toks[i] =
                        t == 0xFF ? kVocab + int32_t(in.u8()) : int32_t(t) + (t < 8 ? 255 : 0);
                }
                const llmkv_session_info before = r.info_of(si);
                st = llmkv_session_append(s, n ? toks : nullptr, n);
                r.expect(
                    st,
                    {LLMKV_OK, LLMKV_ERR_INVALID_ARGUMENT, LLMKV_ERR_STATE, LLMKV_ERR_KV_CAPACITY},
                    "append");
                if (st == LLMKV_OK) {
                    r.boundary(si, before);
                    if (n > 0) r.track[si].restart_grammar();
                }
                break;
            }
            case 3: {  // append text
                if (!s) break;
                const std::string text = in.bytes(16);
                const llmkv_session_info before = r.info_of(si);
                st = llmkv_session_append_text(s, text.data(), text.size());
                r.expect(
                    st,
                    {LLMKV_OK, LLMKV_ERR_INVALID_ARGUMENT, LLMKV_ERR_STATE, LLMKV_ERR_KV_CAPACITY},
                    "append_text");
                if (st == LLMKV_OK) {
                    r.boundary(si, before);
                    if (r.info_of(si).n_tokens > before.n_tokens) r.track[si].restart_grammar();
                }
                break;
            }
            case 4:
            case 5: {  // generate
                if (!s) break;
                const llmkv_session_info before = r.info_of(si);
                st = llmkv_session_generate(s, in.below(7));
                r.expect(st, {LLMKV_OK, LLMKV_ERR_STATE, LLMKV_ERR_KV_CAPACITY}, "generate");
                if (st == LLMKV_OK) {
                    r.boundary(si, before);  // bytes the last generation held are read here
                    r.track[si].gen_pending = true;
                }
                break;
            }
            case 6:
            case 7:
            case 8: {  // step with a tiny event capacity
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
                r.expect(llmkv_session_park(s),
                         {LLMKV_OK, LLMKV_ERR_UNSUPPORTED, LLMKV_ERR_STATE, LLMKV_ERR_KV_CAPACITY},
                         "park");
                break;
            case 12: {  // fork
                size_t slot = r.free_slot(r.sessions);
                if (!s || slot == kSlots) break;
                st = llmkv_session_fork(s, &r.sessions[slot]);
                r.expect(st,
                         {LLMKV_OK, LLMKV_ERR_STATE, LLMKV_ERR_KV_CAPACITY, LLMKV_ERR_UNSUPPORTED},
                         "fork");
                if (st == LLMKV_OK) {
                    Track t;
                    t.stops = r.track[si].stops;
                    t.grammar =
                        r.track[si].grammar;  // mid-sentence: not checked until it starts again
                    r.track[slot] = t;
                }
                break;
            }
            case 13: {  // to_prefix
                size_t slot = r.free_slot(r.prefixes);
                if (!s || slot == kSlots) break;
                st = llmkv_session_to_prefix(s, &r.prefixes[slot]);
                r.expect(st,
                         {LLMKV_OK, LLMKV_ERR_STATE, LLMKV_ERR_KV_CAPACITY, LLMKV_ERR_UNSUPPORTED},
                         "to_prefix");
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
                r.expect(st, {LLMKV_OK, LLMKV_ERR_INVALID_ARGUMENT, LLMKV_ERR_KV_CAPACITY},
                         "prefix_create");
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
                    const char *path =
                        r.saved[from] ? r.paths[from].c_str() : "/nonexistent/llmkv.snap";
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
                r.destroy(si);
                break;
            case 18: {  // engine queries and prefix tokens
                llmkv_engine_info info;
                info.struct_size = sizeof(info);
                r.expect(llmkv_engine_get_info(r.e, &info), {LLMKV_OK}, "get_info");
                FUZZ_CHECK(info.n_vocab == uint32_t(kVocab) && info.max_context == kMaxContext,
                           "engine info");
                llmkv_stats stats;
                stats.struct_size = sizeof(stats);
                r.expect(llmkv_engine_get_stats(r.e, &stats), {LLMKV_OK}, "get_stats");
                FUZZ_CHECK(stats.blocks_free + stats.blocks_used + stats.blocks_cached ==
                               stats.blocks_total,
                           "blocks: %u free + %u used + %u cached != %u", stats.blocks_free,
                           stats.blocks_used, stats.blocks_cached, stats.blocks_total);
                FUZZ_CHECK(stats.host_bytes_used <= p.kv_host_bytes, "host bytes used %llu",
                           (unsigned long long)stats.host_bytes_used);
                const size_t pi = in.below(kSlots);
                if (r.prefixes[pi]) {
                    int32_t toks[5];
                    size_t cap = in.below(6), n = 0;
                    r.expect(llmkv_prefix_get_tokens(r.prefixes[pi], cap ? toks : nullptr, cap, &n),
                             {LLMKV_OK}, "prefix_get_tokens");
                    FUZZ_CHECK(n == llmkv_prefix_n_tokens(r.prefixes[pi]) && n > 0,
                               "prefix token count");
                    for (size_t i = 0; i < std::min(cap, n); ++i)
                        FUZZ_CHECK(toks[i] >= 0 && toks[i] < kVocab, "token");
                }
                (void)llmkv_pending_events(r.e);
                break;
            }
            case 19: {  // session queries
                if (!s) break;
                llmkv_session_info si_info;
                si_info.struct_size = sizeof(si_info);
                r.expect(llmkv_session_get_info(s, &si_info), {LLMKV_OK}, "session_get_info");
                FUZZ_CHECK(
                    si_info.state <= LLMKV_SESSION_FINISHED && si_info.tier <= LLMKV_TIER_MIXED,
                    "state/tier");
                FUZZ_CHECK(si_info.n_cached <= si_info.n_tokens && si_info.n_tokens <= kMaxContext,
                           "n_cached %u n_tokens %u", si_info.n_cached, si_info.n_tokens);
                std::vector<int32_t> toks(kMaxContext + 1);
                size_t cap = in.below(6), n = 0;
                r.expect(llmkv_session_get_tokens(s, cap ? toks.data() : nullptr, cap, &n),
                         {LLMKV_OK}, "get_tokens");
                FUZZ_CHECK(n == si_info.n_tokens, "get_tokens count %zu vs info %u", n,
                           si_info.n_tokens);
                r.expect(llmkv_session_get_tokens(s, toks.data(), toks.size(), &n), {LLMKV_OK},
                         "get_tokens");
                for (size_t i = 0; i < n; ++i)
                    FUZZ_CHECK(toks[i] >= 0 && toks[i] < kVocab, "token %d", toks[i]);
                r.read_into(si, in.below(6));
                FUZZ_CHECK(si_info.has_grammar == (r.track[si].grammar >= 0) || !constraints,
                           "has_grammar %u", si_info.has_grammar);
                break;
            }
            case 20: {  // set_grammar: a listed grammar, NONE, or a kind that does not exist
                if (!s) break;
                const size_t gi = in.below(kNumGrammars + 2);
                const llmkv_session_info before = r.info_of(si);
                if (gi < kNumGrammars) {
                    const GrammarSpec &g = kGrammars[gi];
                    st = llmkv_session_set_grammar(s, g.kind, g.text, std::strlen(g.text), g.root);
                    if (g.valid) {
                        r.expect(st, {LLMKV_OK, LLMKV_ERR_STATE}, "set_grammar");
                    } else {
                        r.expect(st, {LLMKV_ERR_INVALID_ARGUMENT, LLMKV_ERR_STATE},
                                 "set_grammar (invalid)");
                    }
                } else {
                    const bool none = gi == kNumGrammars;
                    st = llmkv_session_set_grammar(
                        s, none ? LLMKV_GRAMMAR_NONE : llmkv_grammar_kind(7), "x", 1, nullptr);
                    if (none) {
                        r.expect(st, {LLMKV_OK, LLMKV_ERR_STATE}, "set_grammar (none)");
                    } else {
                        r.expect(st, {LLMKV_ERR_INVALID_ARGUMENT, LLMKV_ERR_STATE},
                                 "set_grammar (bad kind)");
                    }
                }
                if (st == LLMKV_OK) {
                    r.boundary(si, before);
                    r.track[si].grammar = gi < kNumGrammars ? int(gi) : -1;
                    r.track[si].restart_grammar();
                }
                break;
            }
            case 21:  // read all the text there is
                if (!s) break;
                r.drain(si);
                break;
        }
        r.validate();
    }
    for (size_t i = 0; i < kSlots; ++i) r.destroy(i);
    for (llmkv_prefix *x : r.prefixes) llmkv_prefix_release(x);
    r.validate();
    llmkv_stats stats;
    stats.struct_size = sizeof(stats);
    FUZZ_CHECK(llmkv_engine_get_stats(r.e, &stats) == LLMKV_OK, "stats");
    FUZZ_CHECK(stats.blocks_used == 0 && stats.tail_blocks_used == 0,
               "blocks in use with no handle: %u + %u tails", stats.blocks_used,
               stats.tail_blocks_used);
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
    s.push_back({"generate",
                 ops(0x01, 0x03,
                     {0, 0, 0x00, 1, 0, 8, 't', 'h', 'e', ' ', 'a', 'n', 'd', '.', 4, 0,  3, 6,
                      0, 3, 6,    0, 3, 6, 0,   3,   6,   0,   3,   19,  0,   5,   5, 18, 0, 0})});
    // two sessions, a prefix made, saved, loaded, a session from it, run, park, fork.
    s.push_back({"prefix-roundtrip",
                 ops(0x03, 0x02, {14, 0,  10, 1,  2, 3,  4, 5, 6, 7,    8, 9,  10, 15, 0, 0,
                                  16, 0,  0,  15, 0, 0,  0, 0, 0, 0x04, 0, 4,  0,  2,  9, 0,
                                  1,  11, 0,  12, 0, 19, 1, 5, 5, 17,   0, 18, 0,  0})});
    // park under pressure with a small host tier, cancel, append text, to_prefix.
    s.push_back(
        {"pressure",
         ops(0x40, 0x05,
             {0,   0,   0x01, 0,   1, 0x00, 3,  0,   12,  'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o',
              'r', 'l', 'd',  '!', 3, 1,    12, 'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i', 'j',
              'k', 'l', 4,    0,   6, 4,    1,  6,   6,   0,   1,   10,  0,   6,   0,   3,   11,
              1,   7,   0,    2,   9, 0,    1,  13,  0,   13,  1,   19,  0,   3,   3})});
    // int4/int8 codecs, residual tokens, an out-of-vocabulary token, sampling and stop token.
    s.push_back({"codecs", ops(0x9F, 0x06, {0, 0, 0x38, 3, 2, 1, 8,   1,   2,   3,   0xFF, 9,
                                            4, 5, 6,    1, 0, 6, 'x', 'y', 'z', 'q', 'r',  's',
                                            4, 0, 0,    9, 0, 1, 19,  0,   4,   4})});
    // Constraint mode (byte 1 bit 7). A session under a JSON Schema generating until it
    // stops, then a string schema, an append, GBNF, invalid grammars, NONE, a bad kind.
    s.push_back({"constraint-grammar",
                 ops(0x01, 0x80, {0,   0,   0x80, 4, 3, 0, 4, 'h', 'i', '!', ' ', 4,  0, 0,  9, 0,
                                  1,   21,  0,    4, 0, 0, 9, 0,   1,   20,  0,   6,  3, 0,  2, 'o',
                                  'k', 4,   0,    0, 9, 0, 1, 1,   0,   1,   'x', 20, 0, 1,  3, 0,
                                  1,   'q', 4,    0, 0, 9, 0, 1,   21,  0,   20,  0,  8, 20, 0, 14,
                                  20,  0,   15,   4, 0, 0, 9, 0,   1,   17,  0})});
    // Stop strings (one with a NUL byte), a ban of 50 tokens, min_new_tokens 3; generate in
    // pieces with small reads; a second session with NUL-terminated stop strings and a few
    // biases.
    s.push_back(
        {"constraint-stops",
         ops(0x00, 0x84,
             {0, 0, 0x40, 0x19, 1,    0,   ' ', 1,   'e', 0,   100, 50,  0,   0,   0,   3, 3,
              0, 5, 't',  'h',  'e',  ' ', 'a', 4,   0,   0,   6,   0,   3,   19,  0,   3, 3,
              6, 0, 3,    19,   0,    1,   1,   9,   0,   1,   21,  0,   4,   0,   0,   9, 0,
              1, 0, 1,    0x46, 0x06, 2,   0,   'e', 1,   'o', ' ', 2,   't', 'h', 'e', 3, 1,
              1, 5, 4,    2,    7,    3,   3,   0,   4,   'a', 'b', 'c', 'd', 4,   1,   3, 9,
              0, 1, 21,   1,    12,   1,   4,   0,   0,   9,   0,   1,   21,  0})});
    // Invalid parameters: stop strings (empty, 257 bytes, 65 strings), biases (outside the
    // vocabulary, NaN, +inf), invalid grammars; then a ban of every token under a grammar.
    s.push_back({"constraint-invalid",
                 ops(0x01, 0x80,
                     {0,    0,    0x40, 0x03, 0, 0, 0, 0x40, 0x03, 1,    0, 0,    0x40, 0x03, 2,
                      0,    0,    0x40, 0x0C, 0, 9, 0, 0,    0x40, 0x0C, 1, 0,    0,    0x40, 0x0C,
                      2,    0,    0,    0x80, 8, 0, 0, 0x80, 12,   0,    0, 0x80, 13,   0,    0,
                      0xC0, 0x08, 0,    7,    1, 0, 0, 1,    2,    0,    3, 0,    3,    'a',  'b',
                      'c',  4,    0,    0,    9, 0, 1, 19,   0,    5,    5, 21,   0,    17,   0})});
    // Grammar sessions forked mid-sentence, GBNF with a custom root, a number-or-null
    // schema, min_new_tokens with a grammar.
    s.push_back(
        {"constraint-fork",
         ops(0x03, 0x83, {0,    0, 0x80, 2, 3, 0, 3,   '1', '2', '3', 4,  0, 2,  9, 0,  1, 12,
                          0,    4, 1,    0, 4, 0, 0,   9,   0,   1,   21, 0, 21, 1, 0,  2, 0xC0,
                          0x10, 5, 7,    3, 2, 2, 'x', 'y', 4,   2,   0,  9, 0,  1, 21, 2, 20,
                          2,    3, 4,    2, 0, 9, 0,   1,   19,  2,   5,  5, 17, 1, 17, 0})});
    return s;
}

}  // namespace llmkv::fuzz
