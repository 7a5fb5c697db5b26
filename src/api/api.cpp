// The C API: argument checks, locking, and the exception-to-status boundary. No engine
// logic lives here; every entry point catches everything and records the message in the
// thread-local last error.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <new>
#include <string>

#include "common/error.h"
#include "common/log.h"
#include "engine/engine.h"
#include "llmkv.h"

namespace llmkv {
void set_log_sink(llmkv_log_fn fn, void *user_data, llmkv_log_level max_level);
}

using llmkv::Engine;
using llmkv::Session;

namespace {

thread_local std::string t_last_error;

llmkv_status set_error(llmkv_status status, const std::string &message) {
    t_last_error = message;
    return status;
}

template <typename F>
llmkv_status guarded(F &&fn) {
    try {
        fn();
        return LLMKV_OK;
    } catch (const llmkv::Error &e) {
        return set_error(e.status(), e.what());
    } catch (const std::bad_alloc &) {
        return set_error(LLMKV_ERR_OUT_OF_MEMORY, "out of memory");
    } catch (const std::exception &e) {
        return set_error(LLMKV_ERR_INTERNAL, std::string("internal error: ") + e.what());
    } catch (...) {
        return set_error(LLMKV_ERR_INTERNAL, "internal error: unknown exception");
    }
}

using llmkv::Prefix;

Engine *engine_of(llmkv_engine *e) {
    return reinterpret_cast<Engine *>(e);
}
Prefix *prefix_of(llmkv_prefix *p) {
    return reinterpret_cast<Prefix *>(p);
}
const Prefix *prefix_of(const llmkv_prefix *p) {
    return reinterpret_cast<const Prefix *>(p);
}
const Engine *engine_of(const llmkv_engine *e) {
    return reinterpret_cast<const Engine *>(e);
}
Session *session_of(llmkv_session *s) {
    return reinterpret_cast<Session *>(s);
}
const Session *session_of(const llmkv_session *s) {
    return reinterpret_cast<const Session *>(s);
}

#define LLMKV_REQUIRE(cond, ...)                                                                  \
    do {                                                                                          \
        if (!(cond)) return set_error(LLMKV_ERR_INVALID_ARGUMENT, llmkv::strprintf(__VA_ARGS__)); \
    } while (0)

// Output structs: the caller states its size, which must be the size of a version of the
// struct this library knows: the whole struct, or where an earlier version ended (padding
// included), as listed here.
template <typename T>
struct OlderSizes;
template <>
struct OlderSizes<llmkv_stats> {
    // 0.1 (before sample_ns); 0.2 to 0.4 (before the 0.5 rank fields)
    static constexpr size_t v[] = {offsetof(llmkv_stats, sample_ns),
                                   offsetof(llmkv_stats, kv_bytes_used_rank)};
};
template <>
struct OlderSizes<llmkv_engine_info> {
    static constexpr size_t a = alignof(llmkv_engine_info);
    // 0.1; 0.2; 0.3 and 0.4 (before the 0.5 rank fields); 0.5 (before the 0.6 expert fields)
    static constexpr size_t v[] = {offsetof(llmkv_engine_info, n_unrepresentable_bytes),
                                   (offsetof(llmkv_engine_info, kv_window) + a - 1) / a *a,
                                   offsetof(llmkv_engine_info, kv_bytes_per_token_rank),
                                   offsetof(llmkv_engine_info, n_expert)};
};
template <>
struct OlderSizes<llmkv_session_info> {
    static constexpr size_t v[] = {offsetof(llmkv_session_info, stop_string)};  // 0.1
};
static_assert(sizeof(void *) != 8 || offsetof(llmkv_engine_info, n_expert) == 368,
              "the 0.5 engine_info size is part of the ABI");
template <typename T>
bool output_size_ok(const T *out) {
    if (out->struct_size == sizeof(T)) return true;
    for (size_t size : OlderSizes<T>::v) {
        if (out->struct_size == size) return true;
    }
    return false;
}

// engine_params of 0.1 to 0.3 ended at kv_rotation.
constexpr size_t kEngineParamsV3 = offsetof(llmkv_engine_params, spin_us);
static_assert(sizeof(void *) != 8 || kEngineParamsV3 == 96,
              "the 0.3 engine_params size is part of the ABI");
// engine_params of 0.4 ended at thread_priority.
constexpr size_t kEngineParamsV4 = offsetof(llmkv_engine_params, tp_size);
static_assert(sizeof(void *) != 8 || kEngineParamsV4 == 104,
              "the 0.4 engine_params size is part of the ABI");

// session_params of 0.1 ended at user_data.
constexpr size_t kSessionParamsV1 = offsetof(llmkv_session_params, stop_strings);

// The caller's engine_params (any known size) with the fields its version lacks at their
// defaults; false (the error set) for an unknown size.
bool full_engine_params(const llmkv_engine_params *p, llmkv_engine_params &params) {
    if (p->struct_size != sizeof(llmkv_engine_params) && p->struct_size != kEngineParamsV4 &&
        p->struct_size != kEngineParamsV3) {
        set_error(
            LLMKV_ERR_INVALID_ARGUMENT,
            llmkv::strprintf(
                "engine_params.struct_size = %u is not a known size (%zu, %zu or %zu); call "
                "llmkv_engine_params_init",
                p->struct_size, sizeof(llmkv_engine_params), kEngineParamsV4, kEngineParamsV3));
        return false;
    }
    llmkv_engine_params_init_sized(&params, sizeof(params));
    std::memcpy(&params, p, p->struct_size);
    return true;
}

void require_no_worker(const Engine *engine, const char *call) {
    if (engine->worker_running()) {
        llmkv::fail(LLMKV_ERR_STATE,
                    "%s: the engine's worker thread steps it (llmkv_worker_start); poll its events "
                    "with llmkv_worker_poll, or llmkv_worker_stop first",
                    call);
    }
}

template <typename T>
void copy_out(T *dst, const T &src) {
    uint32_t size = dst->struct_size;
    std::memcpy(dst, &src, size);
    dst->struct_size = size;
}

}  // namespace

extern "C" {

LLMKV_API int llmkv_version(void) {
    return LLMKV_VERSION_NUMBER;
}

LLMKV_API const char *llmkv_version_string(void) {
#define LLMKV_STR2(x) #x
#define LLMKV_STR(x) LLMKV_STR2(x)
    return LLMKV_STR(LLMKV_VERSION_MAJOR) "." LLMKV_STR(LLMKV_VERSION_MINOR) "." LLMKV_STR(
        LLMKV_VERSION_PATCH);
}

LLMKV_API const char *llmkv_status_string(llmkv_status status) {
    switch (status) {
        case LLMKV_OK:
            return "LLMKV_OK";
        case LLMKV_ERR_INVALID_ARGUMENT:
            return "LLMKV_ERR_INVALID_ARGUMENT";
        case LLMKV_ERR_OUT_OF_MEMORY:
            return "LLMKV_ERR_OUT_OF_MEMORY";
        case LLMKV_ERR_KV_CAPACITY:
            return "LLMKV_ERR_KV_CAPACITY";
        case LLMKV_ERR_IO:
            return "LLMKV_ERR_IO";
        case LLMKV_ERR_MODEL_FORMAT:
            return "LLMKV_ERR_MODEL_FORMAT";
        case LLMKV_ERR_UNSUPPORTED:
            return "LLMKV_ERR_UNSUPPORTED";
        case LLMKV_ERR_BACKEND:
            return "LLMKV_ERR_BACKEND";
        case LLMKV_ERR_STATE:
            return "LLMKV_ERR_STATE";
        case LLMKV_ERR_SNAPSHOT_FORMAT:
            return "LLMKV_ERR_SNAPSHOT_FORMAT";
        case LLMKV_ERR_CANCELLED:
            return "LLMKV_ERR_CANCELLED";
        case LLMKV_ERR_INTERNAL:
            return "LLMKV_ERR_INTERNAL";
        default:
            return "LLMKV_ERR_UNKNOWN";
    }
}

LLMKV_API const char *llmkv_last_error(void) {
    return t_last_error.c_str();
}

LLMKV_API void llmkv_log_set(llmkv_log_fn fn, void *user_data, llmkv_log_level max_level) {
    int32_t level;  // read the raw bits: a C host may pass any int
    std::memcpy(&level, &max_level, sizeof(level));
    if (level < LLMKV_LOG_ERROR) level = LLMKV_LOG_ERROR;
    if (level > LLMKV_LOG_DEBUG) level = LLMKV_LOG_DEBUG;
    llmkv::set_log_sink(fn, user_data, llmkv_log_level(level));
}

LLMKV_API void llmkv_engine_params_init_sized(llmkv_engine_params *p, size_t size) {
    if (!p || size < sizeof(uint32_t)) return;
    llmkv_engine_params d;
    std::memset(&d, 0, sizeof(d));
    d.backend = LLMKV_BACKEND_AUTO;
    d.kv_dtype_k = LLMKV_KV_F16;
    d.kv_dtype_v = LLMKV_KV_F16;
    d.flags = LLMKV_ENGINE_PREFIX_CACHE;
    d.spin_us = -1;
    d.thread_priority = 0;
    size = std::min(size, sizeof(d));
    d.struct_size = uint32_t(size);
    std::memcpy(p, &d, size);
}

// The entry point of programs compiled against the 0.1-0.3 headers: their struct ends at
// kv_rotation (later headers call the sized init through a macro).
LLMKV_API void llmkv_engine_params_init(llmkv_engine_params *p) {
    llmkv_engine_params_init_sized(p, kEngineParamsV3);
}

LLMKV_API llmkv_status llmkv_engine_create(const llmkv_engine_params *p, llmkv_engine **out) {
    LLMKV_REQUIRE(out, "out is NULL");
    *out = nullptr;
    LLMKV_REQUIRE(p, "params is NULL");
    llmkv_engine_params params;  // fields the caller's version lacks take their defaults
    if (!full_engine_params(p, params)) return LLMKV_ERR_INVALID_ARGUMENT;
    return guarded(
        [&] { *out = reinterpret_cast<llmkv_engine *>(Engine::create(params).release()); });
}

LLMKV_API llmkv_status llmkv_tp_serve(const llmkv_engine_params *p) {
    LLMKV_REQUIRE(p, "params is NULL");
    llmkv_engine_params params;
    if (!full_engine_params(p, params)) return LLMKV_ERR_INVALID_ARGUMENT;
    return guarded([&] { Engine::serve_rank(params); });
}

LLMKV_API void llmkv_engine_destroy(llmkv_engine *e) {
    if (!e) return;
    Engine *engine = engine_of(e);
    engine->worker_stop();
    { std::lock_guard<llmkv::FairMutex> lock(engine->mutex()); }  // wait for a call in progress
    delete engine;
}

LLMKV_API llmkv_status llmkv_engine_get_info(const llmkv_engine *e, llmkv_engine_info *out) {
    LLMKV_REQUIRE(e, "engine is NULL");
    LLMKV_REQUIRE(out, "out is NULL");
    LLMKV_REQUIRE(output_size_ok(out), "engine_info.struct_size = %u is not valid",
                  out->struct_size);
    return guarded([&] {
        Engine *engine = const_cast<Engine *>(engine_of(e));
        std::lock_guard<llmkv::FairMutex> lock(engine->mutex());
        llmkv_engine_info info{};
        info.struct_size = sizeof(info);
        engine->get_info(info);
        info.n_unrepresentable_bytes = engine->tokenizer().n_unrepresentable_bytes();
        copy_out(out, info);
    });
}

LLMKV_API llmkv_status llmkv_engine_get_stats(const llmkv_engine *e, llmkv_stats *out) {
    LLMKV_REQUIRE(e, "engine is NULL");
    LLMKV_REQUIRE(out, "out is NULL");
    LLMKV_REQUIRE(output_size_ok(out), "stats.struct_size = %u is not valid", out->struct_size);
    return guarded([&] {
        Engine *engine = const_cast<Engine *>(engine_of(e));
        std::lock_guard<llmkv::FairMutex> lock(engine->mutex());
        llmkv_stats stats{};
        stats.struct_size = sizeof(stats);
        engine->get_stats(stats);
        copy_out(out, stats);
    });
}

LLMKV_API llmkv_status llmkv_engine_validate(const llmkv_engine *e) {
    LLMKV_REQUIRE(e, "engine is NULL");
    return guarded([&] {
        Engine *engine = const_cast<Engine *>(engine_of(e));
        std::lock_guard<llmkv::FairMutex> lock(engine->mutex());
        engine->check_invariants();
    });
}

LLMKV_API llmkv_status llmkv_tokenize(const llmkv_engine *e, const char *text, size_t len,
                                      uint32_t flags, int32_t *tokens, size_t capacity,
                                      size_t *n_tokens) {
    LLMKV_REQUIRE(e, "engine is NULL");
    LLMKV_REQUIRE(n_tokens, "n_tokens is NULL");
    *n_tokens = 0;
    LLMKV_REQUIRE(text || len == 0, "text is NULL with len = %zu", len);
    LLMKV_REQUIRE(tokens || capacity == 0, "tokens is NULL with capacity = %zu", capacity);
    LLMKV_REQUIRE((flags & ~(LLMKV_TOKENIZE_ADD_BOS | LLMKV_TOKENIZE_PARSE_SPECIAL |
                             LLMKV_TOKENIZE_STRICT)) == 0,
                  "tokenize flags 0x%x has unknown bits", flags);
    return guarded([&] {
        const Engine *engine = engine_of(e);
        llmkv::DroppedBytes dropped;
        std::vector<int32_t> ids = engine->tokenizer().encode(
            std::string_view(text ? text : "", len),
            (flags & LLMKV_TOKENIZE_ADD_BOS) && engine->tokenizer().add_bos_default(),
            flags & LLMKV_TOKENIZE_PARSE_SPECIAL, &dropped);
        if ((flags & LLMKV_TOKENIZE_STRICT) && dropped.count > 0) {
            llmkv::fail(LLMKV_ERR_INVALID_ARGUMENT,
                        "the vocabulary has no token for %zu byte(s) of the text (the first: "
                        "0x%02x); without "
                        "LLMKV_TOKENIZE_STRICT they are dropped",
                        dropped.count, dropped.first);
        }
        *n_tokens = ids.size();
        if (ids.size() > capacity) {
            llmkv::fail(LLMKV_ERR_INVALID_ARGUMENT, "capacity %zu is too small: %zu tokens needed",
                        capacity, ids.size());
        }
        if (!ids.empty()) std::memcpy(tokens, ids.data(), ids.size() * sizeof(int32_t));
    });
}

LLMKV_API llmkv_status llmkv_detokenize(const llmkv_engine *e, const int32_t *tokens, size_t n,
                                        char *buf, size_t capacity, size_t *n_bytes) {
    LLMKV_REQUIRE(e, "engine is NULL");
    LLMKV_REQUIRE(n_bytes, "n_bytes is NULL");
    *n_bytes = 0;
    LLMKV_REQUIRE(tokens || n == 0, "tokens is NULL with n = %zu", n);
    LLMKV_REQUIRE(buf || capacity == 0, "buf is NULL with capacity = %zu", capacity);
    return guarded([&] {
        const Engine *engine = engine_of(e);
        const size_t n_vocab = engine->tokenizer().n_vocab();
        for (size_t i = 0; i < n; ++i) {
            if (tokens[i] < 0 || size_t(tokens[i]) >= n_vocab) {
                llmkv::fail(LLMKV_ERR_INVALID_ARGUMENT,
                            "tokens[%zu] = %d is outside the vocabulary (%zu)", i, tokens[i],
                            n_vocab);
            }
        }
        std::string text = engine->tokenizer().decode(tokens, n);
        *n_bytes = text.size();
        if (text.size() > capacity) {
            llmkv::fail(LLMKV_ERR_INVALID_ARGUMENT, "capacity %zu is too small: %zu bytes needed",
                        capacity, text.size());
        }
        if (!text.empty()) std::memcpy(buf, text.data(), text.size());
    });
}

LLMKV_API llmkv_status llmkv_chat_format(const llmkv_engine *e, const llmkv_chat_message *msgs,
                                         size_t n, int add_generation_prompt, char *buf,
                                         size_t capacity, size_t *n_bytes) {
    LLMKV_REQUIRE(e, "engine is NULL");
    LLMKV_REQUIRE(n_bytes, "n_bytes is NULL");
    *n_bytes = 0;
    LLMKV_REQUIRE(buf || capacity == 0, "buf is NULL with capacity = %zu", capacity);
    return guarded([&] {
        std::string text = engine_of(e)->chat_format(msgs, n, add_generation_prompt != 0);
        *n_bytes = text.size();
        if (text.size() > capacity) {
            llmkv::fail(LLMKV_ERR_INVALID_ARGUMENT, "capacity %zu is too small: %zu bytes needed",
                        capacity, text.size());
        }
        if (!text.empty()) std::memcpy(buf, text.data(), text.size());
        if (text.size() < capacity) buf[text.size()] = '\0';
    });
}

LLMKV_API void llmkv_session_params_init_sized(llmkv_session_params *p, size_t size) {
    if (!p || size < sizeof(uint32_t)) return;
    llmkv_session_params d;
    std::memset(&d, 0, sizeof(d));
    d.sampling.temperature = 0.0f;
    d.sampling.top_k = 0;
    d.sampling.top_p = 1.0f;
    d.sampling.min_p = 0.0f;
    d.sampling.repeat_penalty = 1.0f;
    d.sampling.seed = 0;
    d.sampling.repeat_last_n = 0;
    size = std::min(size, sizeof(d));
    d.struct_size = uint32_t(size);
    std::memcpy(p, &d, size);
}

// The entry point of programs compiled against the 0.1-0.3 headers (the struct has not grown
// since 0.2; a 0.1 program's is kSessionParamsV1 bytes and was written past by 0.2 and 0.3
// libraries too: what the sized init fixes from 0.4 on).
LLMKV_API void llmkv_session_params_init(llmkv_session_params *p) {
    llmkv_session_params_init_sized(p, sizeof(*p));
}

LLMKV_API llmkv_status llmkv_session_create(llmkv_engine *e, const llmkv_session_params *p,
                                            llmkv_session **out) {
    LLMKV_REQUIRE(out, "out is NULL");
    *out = nullptr;
    LLMKV_REQUIRE(e, "engine is NULL");
    LLMKV_REQUIRE(p, "params is NULL");
    LLMKV_REQUIRE(
        p->struct_size == sizeof(llmkv_session_params) || p->struct_size == kSessionParamsV1,
        "session_params.struct_size = %u is not a known size (%zu or %zu); call "
        "llmkv_session_params_init",
        p->struct_size, sizeof(llmkv_session_params), kSessionParamsV1);
    llmkv_session_params params{};  // fields the caller's version lacks stay zero
    std::memcpy(&params, p, p->struct_size);
    return guarded([&] {
        Engine *engine = engine_of(e);
        std::lock_guard<llmkv::FairMutex> lock(engine->mutex());
        Session *s = engine->create_session(params);
        s->handle = reinterpret_cast<llmkv_session *>(s);
        *out = s->handle;
    });
}

// A session call under the engine lock; the worker thread, if running, is woken after it
// (the call may have given it work).
#define LLMKV_SESSION_CALL(s, body)                                           \
    LLMKV_REQUIRE(s, "session is NULL");                                      \
    return guarded([&] {                                                      \
        Session *session = session_of(s);                                     \
        {                                                                     \
            std::lock_guard<llmkv::FairMutex> lock(session->engine->mutex()); \
            body;                                                             \
        }                                                                     \
        session->engine->notify_work();                                       \
    })

LLMKV_API llmkv_status llmkv_session_append(llmkv_session *s, const int32_t *tokens, size_t n) {
    LLMKV_SESSION_CALL(s, session->engine->append(session, tokens, n));
}

LLMKV_API llmkv_status llmkv_session_append_text(llmkv_session *s, const char *text, size_t len) {
    LLMKV_SESSION_CALL(s, session->engine->append_text(session, text, len));
}

LLMKV_API llmkv_status llmkv_session_generate(llmkv_session *s, uint32_t max_new_tokens) {
    LLMKV_SESSION_CALL(s, session->engine->generate(session, max_new_tokens));
}

LLMKV_API llmkv_status llmkv_session_cancel(llmkv_session *s) {
    LLMKV_SESSION_CALL(s, session->engine->cancel(session));
}

LLMKV_API llmkv_status llmkv_session_park(llmkv_session *s) {
    LLMKV_SESSION_CALL(s, session->engine->park(session));
}

LLMKV_API llmkv_status llmkv_session_set_grammar(llmkv_session *s, llmkv_grammar_kind kind,
                                                 const char *text, size_t len, const char *root) {
    // A C caller may pass any int: read it without an enum-typed load (UB for a value
    // outside the enumeration); the engine refuses unknown kinds.
    int32_t kind_value = 0;
    std::memcpy(&kind_value, &kind,
                sizeof(kind_value) < sizeof(kind) ? sizeof(kind_value) : sizeof(kind));
    LLMKV_SESSION_CALL(
        s, session->engine->set_grammar(session, uint32_t(kind_value), text, len, root));
}

LLMKV_API llmkv_status llmkv_session_read_text(llmkv_session *s, char *buf, size_t capacity,
                                               size_t *n_bytes) {
    LLMKV_REQUIRE(n_bytes, "n_bytes is NULL");
    *n_bytes = 0;
    LLMKV_REQUIRE(buf || capacity == 0, "buf is NULL with capacity = %zu", capacity);
    LLMKV_REQUIRE(s, "session is NULL");
    return guarded([&] {
        Session *session = session_of(s);
        std::string text = session->engine->read_text(session, capacity);
        if (!text.empty()) std::memcpy(buf, text.data(), text.size());
        *n_bytes = text.size();
    });
}

LLMKV_API llmkv_status llmkv_session_get_info(const llmkv_session *s, llmkv_session_info *out) {
    LLMKV_REQUIRE(s, "session is NULL");
    LLMKV_REQUIRE(out, "out is NULL");
    LLMKV_REQUIRE(output_size_ok(out), "session_info.struct_size = %u is not valid",
                  out->struct_size);
    return guarded([&] {
        const Session *session = session_of(s);
        std::lock_guard<llmkv::FairMutex> lock(session->engine->mutex());
        llmkv_session_info info{};
        info.struct_size = sizeof(info);
        info.state = session->state;
        info.finish_reason = session->finish_reason;
        info.n_tokens = uint32_t(session->tokens.size());
        info.n_cached = session->seq.n_tokens();
        info.n_generated = session->n_generated;
        info.n_blocks = session->seq.n_blocks();
        info.tier = !session->seq.on_device()             ? LLMKV_TIER_HOST
                    : session->seq.offloaded_blocks() > 0 ? LLMKV_TIER_MIXED
                                                          : LLMKV_TIER_DEVICE;
        info.priority = session->priority;
        info.stop_string = session->stops.matched();
        info.text_held = uint32_t(session->stops.held());
        const llmkv::GrammarState &g = session->constraints.grammar;
        info.has_grammar = g ? 1 : 0;
        info.grammar_complete = g && g.masker->accepting(g.state) ? 1 : 0;
        copy_out(out, info);
    });
}

LLMKV_API llmkv_status llmkv_session_get_tokens(const llmkv_session *s, int32_t *tokens,
                                                size_t capacity, size_t *n_tokens) {
    LLMKV_REQUIRE(s, "session is NULL");
    LLMKV_REQUIRE(n_tokens, "n_tokens is NULL");
    LLMKV_REQUIRE(tokens || capacity == 0, "tokens is NULL with capacity = %zu", capacity);
    return guarded([&] {
        const Session *session = session_of(s);
        std::lock_guard<llmkv::FairMutex> lock(session->engine->mutex());
        size_t n = std::min(capacity, session->tokens.size());
        if (n) std::memcpy(tokens, session->tokens.data(), n * sizeof(int32_t));
        *n_tokens = session->tokens.size();
    });
}

LLMKV_API llmkv_status llmkv_session_fork(llmkv_session *s, llmkv_session **out) {
    LLMKV_REQUIRE(out, "out is NULL");
    *out = nullptr;
    LLMKV_SESSION_CALL(s, {
        Session *child = session->engine->fork(session);
        child->handle = reinterpret_cast<llmkv_session *>(child);
        *out = child->handle;
    });
}

LLMKV_API llmkv_status llmkv_session_to_prefix(llmkv_session *s, llmkv_prefix **out) {
    LLMKV_REQUIRE(out, "out is NULL");
    *out = nullptr;
    LLMKV_SESSION_CALL(
        s, *out = reinterpret_cast<llmkv_prefix *>(session->engine->session_to_prefix(session)));
}

LLMKV_API llmkv_status llmkv_prefix_create(llmkv_engine *e, const int32_t *tokens, size_t n,
                                           llmkv_prefix **out) {
    LLMKV_REQUIRE(out, "out is NULL");
    *out = nullptr;
    LLMKV_REQUIRE(e, "engine is NULL");
    return guarded([&] {
        Engine *engine = engine_of(e);
        std::lock_guard<llmkv::FairMutex> lock(engine->mutex());
        *out = reinterpret_cast<llmkv_prefix *>(engine->create_prefix(tokens, n));
    });
}

LLMKV_API llmkv_status llmkv_prefix_save(const llmkv_prefix *p, const char *path) {
    LLMKV_REQUIRE(p, "prefix is NULL");
    LLMKV_REQUIRE(path && *path, "path is NULL or empty");
    return guarded([&] {
        const Prefix *prefix = prefix_of(p);
        std::lock_guard<llmkv::FairMutex> lock(prefix->engine->mutex());
        prefix->engine->save_prefix(prefix, path);
    });
}

LLMKV_API llmkv_status llmkv_prefix_load(llmkv_engine *e, const char *path, llmkv_prefix **out) {
    LLMKV_REQUIRE(out, "out is NULL");
    *out = nullptr;
    LLMKV_REQUIRE(e, "engine is NULL");
    LLMKV_REQUIRE(path && *path, "path is NULL or empty");
    return guarded([&] {
        Engine *engine = engine_of(e);
        std::lock_guard<llmkv::FairMutex> lock(engine->mutex());
        *out = reinterpret_cast<llmkv_prefix *>(engine->load_prefix(path, false));
    });
}

LLMKV_API llmkv_status llmkv_prefix_load_ex(llmkv_engine *e, const char *path, uint32_t flags,
                                            llmkv_prefix **out) {
    LLMKV_REQUIRE(out, "out is NULL");
    *out = nullptr;
    LLMKV_REQUIRE(e, "engine is NULL");
    LLMKV_REQUIRE(path && *path, "path is NULL or empty");
    LLMKV_REQUIRE((flags & ~uint32_t(LLMKV_PREFIX_LOAD_SHARE | LLMKV_PREFIX_LOAD_ANY_KERNEL)) == 0,
                  "flags 0x%x has unknown bits", flags);
    return guarded([&] {
        Engine *engine = engine_of(e);
        std::lock_guard<llmkv::FairMutex> lock(engine->mutex());
        *out = reinterpret_cast<llmkv_prefix *>(
            engine->load_prefix(path, (flags & LLMKV_PREFIX_LOAD_SHARE) != 0,
                                (flags & LLMKV_PREFIX_LOAD_ANY_KERNEL) != 0));
    });
}

LLMKV_API llmkv_status llmkv_prefix_get_tokens(const llmkv_prefix *p, int32_t *tokens,
                                               size_t capacity, size_t *n_tokens) {
    LLMKV_REQUIRE(p, "prefix is NULL");
    LLMKV_REQUIRE(n_tokens, "n_tokens is NULL");
    LLMKV_REQUIRE(tokens || capacity == 0, "tokens is NULL with capacity = %zu", capacity);
    return guarded([&] {
        const Prefix *prefix = prefix_of(p);
        std::lock_guard<llmkv::FairMutex> lock(prefix->engine->mutex());
        const std::vector<int32_t> &t = prefix->state.tokens;
        size_t n = std::min(capacity, t.size());
        if (n) std::memcpy(tokens, t.data(), n * sizeof(int32_t));
        *n_tokens = t.size();
    });
}

LLMKV_API size_t llmkv_prefix_n_tokens(const llmkv_prefix *p) {
    if (!p) return 0;
    const Prefix *prefix = prefix_of(p);
    std::lock_guard<llmkv::FairMutex> lock(prefix->engine->mutex());
    return prefix->state.tokens.size();
}

LLMKV_API void llmkv_prefix_release(llmkv_prefix *p) {
    if (!p) return;
    Prefix *prefix = prefix_of(p);
    Engine *engine = prefix->engine;
    std::lock_guard<llmkv::FairMutex> lock(engine->mutex());
    engine->release_prefix(prefix);
}

LLMKV_API void llmkv_session_destroy(llmkv_session *s) {
    if (!s) return;
    Session *session = session_of(s);
    Engine *engine = session->engine;
    std::lock_guard<llmkv::FairMutex> lock(engine->mutex());
    engine->destroy_session(session);
}

LLMKV_API llmkv_status llmkv_step(llmkv_engine *e, llmkv_event *events, size_t capacity,
                                  size_t *n_events) {
    LLMKV_REQUIRE(n_events, "n_events is NULL");
    *n_events = 0;
    LLMKV_REQUIRE(e, "engine is NULL");
    LLMKV_REQUIRE(events || capacity == 0, "events is NULL with capacity = %zu", capacity);
    return guarded([&] {
        Engine *engine = engine_of(e);
        std::lock_guard<llmkv::FairMutex> lock(engine->mutex());
        require_no_worker(engine, "llmkv_step");
        engine->step();
        *n_events = engine->take_events(events, capacity);
    });
}

LLMKV_API size_t llmkv_pending_events(const llmkv_engine *e) {
    if (!e) return 0;
    Engine *engine = const_cast<Engine *>(engine_of(e));
    try {
        return engine->worker_pending_events();
    } catch (...) {
        return 0;
    }
}

LLMKV_API int llmkv_engine_has_work(const llmkv_engine *e) {
    if (!e) return 0;
    Engine *engine = const_cast<Engine *>(engine_of(e));
    std::lock_guard<llmkv::FairMutex> lock(engine->mutex());
    return engine->has_work() ? 1 : 0;
}

LLMKV_API llmkv_status llmkv_run(llmkv_engine *e, llmkv_event_fn on_event, void *user_data) {
    LLMKV_REQUIRE(e, "engine is NULL");
    Engine *engine = engine_of(e);
    llmkv_event batch[64];
    for (;;) {
        size_t n = 0;
        bool more = false;
        llmkv_status st = guarded([&] {
            std::lock_guard<llmkv::FairMutex> lock(engine->mutex());
            require_no_worker(engine, "llmkv_run");
            if (engine->pending_events() == 0) engine->step();
            n = engine->take_events(batch, 64);
            more = engine->has_work() || engine->pending_events() > 0;
        });
        if (st != LLMKV_OK) return st;
        // Callbacks run without the engine lock held.
        if (on_event) {
            for (size_t i = 0; i < n; ++i) on_event(&batch[i], user_data);
        }
        if (!more && n == 0) return LLMKV_OK;
    }
}

LLMKV_API llmkv_status llmkv_worker_start(llmkv_engine *e) {
    LLMKV_REQUIRE(e, "engine is NULL");
    return guarded([&] { engine_of(e)->worker_start(); });
}

LLMKV_API llmkv_status llmkv_worker_stop(llmkv_engine *e) {
    LLMKV_REQUIRE(e, "engine is NULL");
    return guarded([&] { engine_of(e)->worker_stop(); });
}

LLMKV_API llmkv_status llmkv_worker_poll(llmkv_engine *e, llmkv_event *events, size_t capacity,
                                         uint32_t timeout_us, size_t *n_events) {
    LLMKV_REQUIRE(n_events, "n_events is NULL");
    *n_events = 0;
    LLMKV_REQUIRE(e, "engine is NULL");
    LLMKV_REQUIRE(events || capacity == 0, "events is NULL with capacity = %zu", capacity);
    return guarded([&] { *n_events = engine_of(e)->worker_poll(events, capacity, timeout_us); });
}

namespace {
constexpr uint32_t kSubmitFlags = LLMKV_SUBMIT_GENERATE;
}

LLMKV_API llmkv_status llmkv_session_submit_text(llmkv_session *s, const char *text, size_t len,
                                                 uint32_t flags, uint32_t max_new_tokens) {
    LLMKV_REQUIRE(s, "session is NULL");
    LLMKV_REQUIRE(text || len == 0, "text is NULL with len = %zu", len);
    LLMKV_REQUIRE((flags & ~kSubmitFlags) == 0, "flags 0x%x has unknown bits", flags);
    return guarded([&] {
        llmkv::Submission r;
        r.session = session_of(s);
        r.is_text = true;
        if (len) r.text.assign(text, len);
        r.flags = flags;
        r.max_new_tokens = max_new_tokens;
        r.session->engine->submit(std::move(r));
    });
}

LLMKV_API llmkv_status llmkv_session_submit_tokens(llmkv_session *s, const int32_t *tokens,
                                                   size_t n, uint32_t flags,
                                                   uint32_t max_new_tokens) {
    LLMKV_REQUIRE(s, "session is NULL");
    LLMKV_REQUIRE(tokens || n == 0, "tokens is NULL with n = %zu", n);
    LLMKV_REQUIRE((flags & ~kSubmitFlags) == 0, "flags 0x%x has unknown bits", flags);
    return guarded([&] {
        llmkv::Submission r;
        r.session = session_of(s);
        if (n) r.tokens.assign(tokens, tokens + n);
        r.flags = flags;
        r.max_new_tokens = max_new_tokens;
        r.session->engine->submit(std::move(r));
    });
}

LLMKV_API llmkv_status llmkv_session_submit_cancel(llmkv_session *s) {
    LLMKV_REQUIRE(s, "session is NULL");
    return guarded([&] {
        llmkv::Submission r;
        r.session = session_of(s);
        r.cancel = true;
        r.session->engine->submit(std::move(r));
    });
}

LLMKV_API llmkv_status llmkv_session_submit_error(const llmkv_session *s, char *buf,
                                                  size_t capacity, size_t *n_bytes) {
    LLMKV_REQUIRE(n_bytes, "n_bytes is NULL");
    *n_bytes = 0;
    LLMKV_REQUIRE(s, "session is NULL");
    LLMKV_REQUIRE(buf || capacity == 0, "buf is NULL with capacity = %zu", capacity);
    return guarded([&] {
        Session *session = const_cast<Session *>(session_of(s));
        const std::string msg = session->engine->submit_error(session);
        *n_bytes = msg.size();
        if (capacity > 0) {
            const size_t n = std::min(capacity - 1, msg.size());
            std::memcpy(buf, msg.data(), n);
            buf[n] = '\0';
        }
    });
}

}  // extern "C"
