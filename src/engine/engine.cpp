// Engine: the conductor. Made from the set-up stage's parts (src/setup/), it keeps sessions
// and prefix handles, and runs the step loop that turns a scheduler plan into one batched
// forward pass and events. Its reports are in engine_info.cpp, the worker thread in worker.cpp.
#include "engine/engine.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <unordered_map>

#include "common/error.h"
#include "common/log.h"
#include "engine/chat_template.h"
#include "setup/engine_setup.h"

namespace llmkv {

std::unique_ptr<Engine> Engine::create(const llmkv_engine_params &p) {
    EngineParts parts = set_up_engine(p);
    std::unique_ptr<Engine> e(new Engine());
    const EngineConfig &cfg = parts.config;
    e->params_ = cfg.params;
    e->tp_size_ = cfg.tp_size;
    e->max_context_ = cfg.max_context;
    e->max_batch_tokens_ = cfg.max_batch_tokens;
    e->window_ = cfg.window;
    e->kv_device_bytes_ = parts.kv_device_bytes;
    e->file_ = std::move(parts.file);
    e->model_ = std::move(parts.model);
    e->tokenizer_ = std::move(parts.tokenizer);
    e->pool_ = std::move(parts.pool);
    e->tp_comm_ = std::move(parts.tp_comm);
    e->tp_ = parts.tp;
    e->backend_ = std::move(parts.backend);
    e->kv_ = std::move(parts.kv_manager);
    e->forward_ = std::move(parts.forward);
    for (size_t i = 0; i < e->tokenizer_->n_vocab(); ++i) {
        if (e->tokenizer_->is_end_of_generation(int32_t(i))) e->eog_ids_.push_back(int32_t(i));
    }
    e->scheduler_ = std::make_unique<Scheduler>(*e->kv_, e->max_batch_tokens_);
    return e;
}

void Engine::serve_rank(const llmkv_engine_params &p) {
    serve_engine_rank(p);
}

Engine::~Engine() {
    worker_stop();
    if (kv_) {
        kv_->drain();
        for (Request *r : sessions_) {
            kv_->drop(r->seq);
            delete static_cast<Session *>(r);
        }
        for (Prefix *p : prefixes_) {
            kv_->unpin_handle(&p->state.seq);
            kv_->drop(p->state.seq);
            delete p;
        }
    }
    // The KV manager goes first: its host tier may be the backend's memory.
    forward_.reset();
    kv_.reset();
}

std::string Engine::chat_format(const llmkv_chat_message *msgs, size_t n,
                                bool add_generation_prompt) const {
    return format_chat(*file_, *tokenizer_, msgs, n, add_generation_prompt);
}

// Sessions and prefix handles each own one tail slot; max_sessions bounds them together.
void Engine::require_handle_room() const {
    if (sessions_.size() + prefixes_.size() >= params_.max_sessions) {
        fail(LLMKV_ERR_KV_CAPACITY, "max_sessions (%u) sessions and prefixes are already live",
             params_.max_sessions);
    }
}

void Engine::check_tokens(const int32_t *tokens, size_t n) const {
    if (n > 0 && !tokens) fail(LLMKV_ERR_INVALID_ARGUMENT, "tokens is NULL with n = %zu", n);
    const uint32_t n_vocab = model_->config().n_vocab;
    for (size_t i = 0; i < n; ++i) {
        if (tokens[i] < 0 || uint32_t(tokens[i]) >= n_vocab) {
            fail(LLMKV_ERR_INVALID_ARGUMENT, "tokens[%zu] = %d is outside the vocabulary (%u)", i,
                 tokens[i], n_vocab);
        }
    }
}

void Engine::share_state(const Session &from, Session &to) {
    to.tokens = from.tokens;  // first: a throwing copy must not leave `to` holding KV
    kv_->share(from.seq, to.seq, params_.max_sessions);
    to.kv_dropped = from.kv_dropped;
    to.n_committed = from.n_committed;
}

Prefix *Engine::adopt_prefix(std::unique_ptr<Prefix> p) {
    // A throwing push must not leave the handle's KV held (or a dangling entry listed).
    try {
        prefixes_.push_back(p.get());
    } catch (...) {
        kv_->drop(p->state.seq);
        throw;
    }
    try {
        kv_->pin_handle(&p->state.seq);
    } catch (...) {
        prefixes_.pop_back();
        kv_->drop(p->state.seq);
        throw;
    }
    return p.release();
}

Prefix *Engine::create_prefix(const int32_t *tokens, size_t n) {
    if (n == 0) fail(LLMKV_ERR_INVALID_ARGUMENT, "a prefix needs at least one token");
    check_tokens(tokens, n);
    if (n > max_context_)
        fail(LLMKV_ERR_KV_CAPACITY, "prefix of %zu tokens exceeds max_context %u", n, max_context_);
    require_handle_room();
    auto p = std::make_unique<Prefix>();
    p->engine = this;
    Session &s = p->state;
    s.engine = this;
    s.tokens.assign(tokens, tokens + n);
    try {
        prefill_now(s);
    } catch (...) {
        kv_->drop(s.seq);
        throw;
    }
    return adopt_prefix(std::move(p));
}

// Like a session's prompt: every token but the last gets its KV now; the last one is
// computed with the logits by the first generate of a session made from the handle.
void Engine::prefill_now(Session &s) {
    kv_->match_prefix(s.seq, s.tokens);
    ensure_sink(s);
    const uint32_t target = uint32_t(s.tokens.size()) - 1;
    while (s.seq.n_tokens() < target) {
        uint32_t chunk = std::min(max_batch_tokens_, target - s.seq.n_tokens());
        if (!kv_->reserve(s.seq, s.seq.n_tokens() + chunk)) {
            fail(LLMKV_ERR_KV_CAPACITY,
                 "KV pool cannot hold a %zu-token prefix (%u blocks available)", s.tokens.size(),
                 kv_->available());
        }
        spans_.assign(1,
                      ForwardSpan{s.seq.table(), s.tokens.data() + s.seq.n_tokens(), chunk, false});
        run_forward(spans_);
        tokens_prefilled_ += chunk;
        kv_->publish_sealed(s.seq, s.tokens);
    }
}

Prefix *Engine::session_to_prefix(Session *s) {
    if (s->generate_requested)
        fail(LLMKV_ERR_STATE, "session is generating; a prefix needs a settled context");
    if (s->tokens.empty()) fail(LLMKV_ERR_STATE, "session has no tokens");
    require_handle_room();
    scheduler_->bring_back(sessions_, s);
    auto p = std::make_unique<Prefix>();
    p->engine = this;
    p->state.engine = this;
    share_state(*s, p->state);
    try {
        ensure_sink(p->state);  // a handle's KV is complete (it may be saved)
        // The session's KV was taken by preemption (or never computed): a handle holds it.
        if (p->state.seq.n_tokens() + 1 < p->state.tokens.size()) prefill_now(p->state);
    } catch (...) {
        kv_->drop(p->state.seq);
        throw;
    }
    return adopt_prefix(std::move(p));
}

void Engine::release_prefix(Prefix *p) {
    auto it = std::find(prefixes_.begin(), prefixes_.end(), p);
    if (it == prefixes_.end()) return;
    prefixes_.erase(it);
    kv_->unpin_handle(&p->state.seq);
    kv_->drop(p->state.seq);
    delete p;
}

// What a snapshot of this engine must agree on. The kernel variant is part of the codec
// string: kernels that round differently (AVX2 and portable, CPU and CUDA) seal different
// bytes, and a loaded prefix must be bitwise what this engine would compute.
SnapshotMeta Engine::snapshot_meta() const {
    return kv_->snapshot_meta(model_->fingerprint(), backend_->kernel_id());
}

void Engine::save_prefix(const Prefix *p, const std::string &path) const {
    SnapshotMeta m = snapshot_meta();
    m.tokens = p->state.tokens;
    kv_->save_snapshot(p->state.seq, std::move(m), path);
}

Prefix *Engine::load_prefix(const std::string &path, bool share, bool any_kernel) {
    SnapshotMeta expected = snapshot_meta();
    expected.any_kernel = any_kernel;
    LoadedSnapshot snap = read_snapshot(path, expected);
    const SnapshotMeta &m = snap.meta();
    if (m.codec != expected.codec) {
        // Another kernel variant computed these bytes: never offered to the prefix cache,
        // which must hold only what this engine computes.
        LLMKV_LOG_INFO_F(
            "snapshot %s: written by another kernel variant (\"%s\", this engine \"%s\"); loaded, "
            "not bitwise, not shared",
            path.c_str(), m.codec.c_str(), expected.codec.c_str());
        share = false;
    }
    if (m.tokens.empty()) fail(LLMKV_ERR_SNAPSHOT_FORMAT, "snapshot %s: no tokens", path.c_str());
    if (m.n_cached >= m.tokens.size()) {
        fail(LLMKV_ERR_SNAPSHOT_FORMAT,
             "snapshot %s: %u cached tokens of %zu: the last token must not be cached",
             path.c_str(), m.n_cached, m.tokens.size());
    }
    try {
        check_tokens(m.tokens.data(), m.tokens.size());
    } catch (const Error &e) {
        fail(LLMKV_ERR_SNAPSHOT_FORMAT, "snapshot %s: %s", path.c_str(), e.what());
    }
    if (m.tokens.size() > max_context_) {
        fail(LLMKV_ERR_KV_CAPACITY, "snapshot %s: %zu tokens exceed max_context %u", path.c_str(),
             m.tokens.size(), max_context_);
    }
    require_handle_room();
    auto p = std::make_unique<Prefix>();
    p->engine = this;
    Session &s = p->state;
    s.engine = this;
    s.tokens = m.tokens;
    // Checksums catch accidents, not intent: a snapshot is trusted by the host that loads it,
    // not by every session of the engine, so its KV reaches the shared cache only on request.
    try {
        kv_->load_snapshot(s.seq, snap, path, share);
        kv_->publish_sealed(s.seq, s.tokens);
    } catch (...) {
        kv_->drop(s.seq);
        throw;
    }
    return adopt_prefix(std::move(p));
}

Session *Engine::fork(Session *src) {
    if (src->generate_requested)
        fail(LLMKV_ERR_STATE, "session is generating; fork it before generate or after DONE");
    require_handle_room();
    scheduler_->bring_back(sessions_, src);
    auto s = std::make_unique<Session>();
    s->engine = this;
    s->user_data = src->user_data;
    s->priority = src->priority;
    s->default_max_new_tokens = src->default_max_new_tokens;
    s->sampler = std::make_unique<Sampler>(*src->sampler);  // same RNG state: same continuation
    s->constraints = src->constraints;                      // grammar state included
    s->stops = src->stops;
    s->finish_reason = src->finish_reason;
    sessions_.reserve(sessions_.size() + 1);  // the push below cannot throw once KV is shared
    share_state(*src, *s);
    s->refresh_state();
    sessions_.push_back(s.get());
    return s.release();
}

Session *Engine::create_session(const llmkv_session_params &p) {
    const Prefix *from = reinterpret_cast<const Prefix *>(p.prefix);
    if (from && std::find(prefixes_.begin(), prefixes_.end(), from) == prefixes_.end()) {
        fail(LLMKV_ERR_INVALID_ARGUMENT,
             "session_params.prefix is not a live prefix of this engine");
    }
    if (const char *why = validate_sampling(p.sampling))
        fail(LLMKV_ERR_INVALID_ARGUMENT, "%s", why);
    if (p.n_stop_tokens > 0 && !p.stop_tokens)
        fail(LLMKV_ERR_INVALID_ARGUMENT,
             "session_params.stop_tokens is NULL with n_stop_tokens = %u", p.n_stop_tokens);
    if (p.n_stop_tokens > 1024)
        fail(LLMKV_ERR_INVALID_ARGUMENT, "session_params.n_stop_tokens = %u exceeds 1024",
             p.n_stop_tokens);
    const uint32_t n_vocab = model_->config().n_vocab;
    for (uint32_t i = 0; i < p.n_stop_tokens; ++i) {
        if (p.stop_tokens[i] < 0 || uint32_t(p.stop_tokens[i]) >= n_vocab) {
            fail(LLMKV_ERR_INVALID_ARGUMENT,
                 "session_params.stop_tokens[%u] = %d is outside the vocabulary (%u)", i,
                 p.stop_tokens[i], n_vocab);
        }
    }
    std::vector<std::string> stop_strings = copy_stop_strings(p);
    std::vector<std::pair<int32_t, float>> bias = copy_logit_bias(p, n_vocab);
    std::shared_ptr<TokenMasker> masker =
        grammar_masker(p.grammar_kind, p.grammar, p.grammar_len, p.grammar_root);
    require_handle_room();
    auto s = std::make_unique<Session>();
    s->engine = this;
    s->user_data = p.user_data;
    s->priority = p.priority;
    s->default_max_new_tokens = p.max_new_tokens;
    s->sampler = std::make_unique<Sampler>(p.sampling, n_vocab);
    s->constraints.set_stop_tokens(
        std::vector<int32_t>(p.stop_tokens, p.stop_tokens + p.n_stop_tokens), eog_ids_);
    s->constraints.bias = std::move(bias);
    s->constraints.min_new_tokens = p.min_new_tokens;
    s->constraints.grammar.masker = std::move(masker);
    s->constraints.grammar.restart();
    s->stops = StopStrings(std::move(stop_strings));
    sessions_.reserve(sessions_.size() + 1);  // the push below cannot throw once KV is shared
    if (from) {
        share_state(from->state, *s);
        s->refresh_state();
    }
    sessions_.push_back(s.get());
    return s.release();
}

void Engine::destroy_session(Session *s) {
    auto it = std::find(sessions_.begin(), sessions_.end(), static_cast<Request *>(s));
    if (it == sessions_.end()) return;
    sessions_.erase(it);
    kv_->drop(s->seq);
    auto of_s = [&](const llmkv_event &ev) { return ev.session == s->handle; };
    events_.erase(std::remove_if(events_.begin(), events_.end(), of_s), events_.end());
    {
        std::lock_guard<std::mutex> io(io_mutex_);
        worker_.forget_locked(of_s);
        submissions_.erase(std::remove_if(submissions_.begin(), submissions_.end(),
                                          [&](const Submission &r) { return r.session == s; }),
                           submissions_.end());
        n_submissions_.store(submissions_.size(), std::memory_order_release);
    }
    delete s;
}

void Engine::append(Session *s, const int32_t *tokens, size_t n) {
    if (s->generate_requested)
        fail(LLMKV_ERR_STATE, "session is generating; cancel it or wait for DONE before appending");
    check_tokens(tokens, n);
    if (s->tokens.size() + n > max_context_) {
        fail(LLMKV_ERR_KV_CAPACITY, "appending %zu tokens to %zu would exceed max_context %u", n,
             s->tokens.size(), max_context_);
    }
    if (n == 0) return;
    s->tokens.insert(s->tokens.end(), tokens, tokens + n);
    s->constraints.grammar.restart();  // new input: the next output is a new sentence
    s->kv_dropped = false;
    s->last_active = ++activity_clock_;
    if (!s->started) s->admit_seq = next_admit_seq_++;
    s->refresh_state();
}

void Engine::append_text(Session *s, const char *text, size_t len) {
    if (len > 0 && !text) fail(LLMKV_ERR_INVALID_ARGUMENT, "text is NULL with len = %zu", len);
    if (s->generate_requested)
        fail(LLMKV_ERR_STATE, "session is generating; cancel it or wait for DONE before appending");
    bool add_bos = s->tokens.empty() && tokenizer_->add_bos_default();
    std::vector<int32_t> ids =
        tokenizer_->encode(std::string_view(text ? text : "", len), add_bos, true);
    append(s, ids.data(), ids.size());
}

void Engine::generate(Session *s, uint32_t max_new_tokens) {
    if (s->generate_requested) fail(LLMKV_ERR_STATE, "session is already generating");
    if (s->tokens.empty())
        fail(LLMKV_ERR_STATE, "session has no tokens to continue from; append a prompt first");
    if (s->tokens.size() >= max_context_) {
        fail(LLMKV_ERR_KV_CAPACITY,
             "session holds %zu tokens, the max_context (%u): no room to generate",
             s->tokens.size(), max_context_);
    }
    s->stops.flush(s->text);  // bytes an earlier generation ended holding (after an error)
    s->stops.reset();
    s->generate_requested = true;
    s->generate_limit = max_new_tokens ? max_new_tokens : s->default_max_new_tokens;
    s->n_generated = 0;
    s->finish_reason = LLMKV_FINISH_NONE;
    s->admit_seq = next_admit_seq_++;
    s->started = false;
    s->kv_dropped = false;
    s->last_active = ++activity_clock_;
    s->refresh_state();
}

std::shared_ptr<TokenMasker> Engine::grammar_masker(uint32_t kind, const char *text, size_t len,
                                                    const char *root) {
    if (kind == LLMKV_GRAMMAR_NONE) return nullptr;
    if (kind != LLMKV_GRAMMAR_GBNF && kind != LLMKV_GRAMMAR_JSON_SCHEMA) {
        fail(LLMKV_ERR_INVALID_ARGUMENT, "grammar kind %u is not a llmkv_grammar_kind", kind);
    }
    if (!text && len > 0)
        fail(LLMKV_ERR_INVALID_ARGUMENT, "grammar text is NULL with length %zu", len);
    std::string_view body(text ? text : "", len);
    std::string_view start = root ? std::string_view(root) : std::string_view("root");
    std::string key = std::to_string(kind) + ':' + std::string(start) + '\n' + std::string(body);
    auto it = maskers_.find(key);
    if (it != maskers_.end()) {
        if (std::shared_ptr<TokenMasker> m = it->second.lock()) return m;
    }
    std::shared_ptr<const Grammar> g = kind == LLMKV_GRAMMAR_GBNF ? Grammar::from_gbnf(body, start)
                                                                  : Grammar::from_json_schema(body);
    if (!grammar_vocab_) {
        const size_t n = tokenizer_->n_vocab();
        std::vector<std::string> bytes(n);
        std::vector<uint8_t> eligible(n);
        for (size_t i = 0; i < n; ++i) {
            bytes[i] = tokenizer_->token_bytes(int32_t(i));
            // Markup (control, unknown) and byteless tokens are never grammar text.
            eligible[i] = !tokenizer_->is_special(int32_t(i)) && !bytes[i].empty();
        }
        grammar_vocab_ =
            std::make_shared<const GrammarVocab>(std::move(bytes), std::move(eligible));
    }
    auto m = std::make_shared<TokenMasker>(std::move(g), grammar_vocab_);
    for (auto e = maskers_.begin(); e != maskers_.end();) {  // forget grammars no session uses
        e = e->second.expired() ? maskers_.erase(e) : std::next(e);
    }
    maskers_[key] = m;
    return m;
}

void Engine::set_grammar(Session *s, uint32_t kind, const char *text, size_t len,
                         const char *root) {
    if (s->generate_requested)
        fail(LLMKV_ERR_STATE,
             "session is generating; set its grammar before generate or after DONE");
    std::shared_ptr<TokenMasker> m = grammar_masker(kind, text, len, root);
    s->constraints.grammar.masker = std::move(m);
    s->constraints.grammar.restart();
}

void Engine::cancel(Session *s) {
    if (!s->generate_requested) fail(LLMKV_ERR_STATE, "session is not generating");
    finish(s, LLMKV_FINISH_CANCELLED);
}

bool Engine::has_work() const {
    if (n_submissions_.load(std::memory_order_acquire) > 0) return true;
    for (const Request *s : sessions_) {
        if (s->pending_runnable() > 0) return true;
    }
    return false;
}

void Engine::push_event(Session *s, llmkv_event_kind kind, int32_t token,
                        llmkv_finish_reason reason, llmkv_status status) {
    llmkv_event ev{};
    ev.session = s->handle;
    ev.user_data = s->user_data;
    ev.kind = kind;
    ev.token = token;
    ev.finish_reason = reason;
    ev.status = status;
    events_.push_back(ev);
}

void Engine::finish(Session *s, llmkv_finish_reason reason) {
    s->generate_requested = false;
    s->finish_reason = reason;
    s->stops.flush(s->text);  // nothing when a stop string matched
    // A complete sentence (or one no token can continue) ends the grammar's turn.
    if (reason == LLMKV_FINISH_STOP || reason == LLMKV_FINISH_CONSTRAINT)
        s->constraints.grammar.restart();
    push_event(s, LLMKV_EVENT_DONE, -1, reason, LLMKV_OK);
    s->refresh_state();
}

void Engine::run_forward(const std::vector<ForwardSpan> &spans) {
    forward_->run(spans, logits_);
}

void Engine::ensure_sink(Request &r) {
    if (!r.seq.needs_sink()) return;
    if (!r.seq.has_tail() && !kv_->reserve(r.seq, r.seq.n_tokens())) {
        fail(LLMKV_ERR_KV_CAPACITY,
             "no free tail slot for the KV sink (max_sessions = %u counts sessions and prefixes)",
             params_.max_sessions);
    }
    sink_requests_.assign(1, &r);
    compute_sinks(sink_requests_);
}

void Engine::compute_sinks(const std::vector<Request *> &requests) {
    // Position 0 alone: a sequence with nothing computed over the request's tail slot. Its tail
    // rows hold no position of the request yet (they start after the matched blocks, at
    // n_tokens), so the pass writes only what is free: row 0 and the sink rows.
    sink_kv_.clear();
    sink_kv_.reserve(requests.size());  // the spans point into it
    sink_spans_.clear();
    for (Request *r : requests) {
        if (!r->seq.needs_sink()) continue;
        if (!r->seq.has_tail() || r->tokens.empty())
            fail(LLMKV_ERR_INTERNAL, "KV sink: a request without a tail slot or tokens");
        sink_kv_.push_back(r->seq.tail_only());
        sink_spans_.push_back(ForwardSpan{&sink_kv_.back(), r->tokens.data(), 1, false});
    }
    if (sink_spans_.empty()) return;
    forward_->run(sink_spans_, logits_);
    for (Request *r : requests) r->seq.sink_written();
}

// One step: the scheduler's plan, one batched forward pass, sampling, events.
void Engine::step() {
    run_submissions();
    // Requests the scheduler failed are already ended: their ERROR events go out even if
    // planning throws afterwards.
    auto report_failed = [this] {
        for (Request *r : plan_.failed) {
            push_event(static_cast<Session *>(r), LLMKV_EVENT_ERROR, -1, LLMKV_FINISH_NONE,
                       LLMKV_ERR_KV_CAPACITY);
        }
        plan_.failed.clear();
    };
    try {
        scheduler_->schedule(sessions_, plan_);
    } catch (...) {
        report_failed();
        throw;
    }
    report_failed();
    if (plan_.spans.empty()) return;

    try {
        if (kv_->geometry().sink) {
            sink_requests_.clear();
            for (const StepPlan::Span &p : plan_.spans) {
                if (p.request->seq.needs_sink()) sink_requests_.push_back(p.request);
            }
            if (!sink_requests_.empty()) compute_sinks(sink_requests_);
        }
        spans_.clear();
        for (const StepPlan::Span &p : plan_.spans) {
            Request *r = p.request;
            spans_.push_back({r->seq.table(), r->tokens.data() + r->seq.n_tokens(), p.n_tokens,
                              p.want_logits, false, p.block_data});
        }
        mark_step();
        run_forward(spans_);
    } catch (...) {
        // A pass that fails part-way may have written (and sealed) some layers of the new
        // KV: every span's KV is recomputed from scratch instead, with identical tokens.
        for (const StepPlan::Span &p : plan_.spans) recompute_later(*p.request);
        throw;
    }
    ++steps_;
    ++activity_clock_;
    struct UndoOnThrow {  // the rest of the step is all or nothing (see StepMark)
        Engine *e;
        size_t events_mark;
        bool done = false;
        ~UndoOnThrow() {
            if (!done) e->undo_step(events_mark);
        }
    } undo_on_throw{this, events_.size()};
    for (const StepPlan::Span &p : plan_.spans) {
        Request *r = p.request;
        kv_->publish_sealed(r->seq, r->tokens);
        r->n_committed = std::max(r->n_committed, r->seq.n_tokens());
        r->last_active = activity_clock_;
    }

    const uint32_t n_vocab = model_->config().n_vocab;
    size_t logit_row = 0;
    for (size_t i = 0; i < plan_.spans.size(); ++i) {
        Session *s = static_cast<Session *>(plan_.spans[i].request);
        s->started = true;
        if (!spans_[i].want_logits) {
            tokens_prefilled_ += spans_[i].n;
            s->refresh_state();
            continue;
        }
        tokens_prefilled_ += s->n_generated == 0 ? spans_[i].n : 0;
        float *row = logits_.data() + logit_row * n_vocab;
        ++logit_row;
        auto t0 = std::chrono::steady_clock::now();
        bool any = s->constraints.apply(row, n_vocab, s->n_generated, constraint_counters_);
        int32_t token = any ? s->sampler->sample(row, s->tokens) : -1;
        sample_ns_ += uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now() - t0)
                                   .count());
        bool is_stop = any && s->constraints.is_stop_token(token);
        if (any && !is_stop &&
            !s->constraints.advance(*tokenizer_, token)) {  // a mask never allows this
            LLMKV_LOG_ERROR_F("sampled token %d is outside the session's grammar; generation ends",
                              token);
            any = false;
        }
        if (!any) {
            // The grammar, bias and bans leave nothing: the context is unchanged, but its last
            // token's KV is now computed, and an idle session holds all but its last token.
            // Its KV is recomputed when it next has work (its sealed blocks from the prefix cache).
            recompute_later(*s);
            s->kv_dropped = true;
            finish(s, LLMKV_FINISH_CONSTRAINT);
            continue;
        }
        s->tokens.push_back(token);
        s->n_committed = std::max<uint32_t>(s->n_committed, uint32_t(s->tokens.size()));
        if (is_stop) {
            finish(s, LLMKV_FINISH_STOP);
            continue;
        }
        ++s->n_generated;
        ++tokens_generated_;
        s->stops.feed(tokenizer_->token_bytes(token), s->text);
        push_event(s, LLMKV_EVENT_TOKEN, token, LLMKV_FINISH_NONE, LLMKV_OK);
        if (s->stops.matched() >= 0) {
            finish(s, LLMKV_FINISH_STOP);
        } else if (s->generate_limit && s->n_generated >= s->generate_limit) {
            finish(s, LLMKV_FINISH_LENGTH);
        } else if (s->tokens.size() >= max_context_) {
            finish(s, LLMKV_FINISH_CONTEXT);
        } else {
            s->refresh_state();
        }
    }
    undo_on_throw.done = true;
}

void Engine::mark_step() {
    step_marks_.resize(plan_.spans.size());
    for (size_t i = 0; i < plan_.spans.size(); ++i) {
        const Session *s = static_cast<const Session *>(plan_.spans[i].request);
        step_marks_[i] = StepMark{
            s->tokens.size(), s->n_generated, s->n_committed,  s->generate_requested,
            s->finish_reason, s->text.mark(), s->stops.mark(), s->constraints.grammar.state,
            s->sampler->rng()};
    }
    marked_prefilled_ = tokens_prefilled_;
    marked_generated_ = tokens_generated_;
}

void Engine::recompute_later(Request &r) {
    kv_->drop(r.seq);
    r.started = false;
    r.refresh_state();
}

void Engine::undo_step(size_t events_mark) noexcept {
    try {
        for (size_t i = 0; i < plan_.spans.size() && i < step_marks_.size(); ++i) {
            if (!plan_.spans[i].want_logits) continue;  // its KV advanced; nothing to undo
            Session *s = static_cast<Session *>(plan_.spans[i].request);
            const StepMark &m = step_marks_[i];
            s->tokens.resize(m.n_tokens);
            s->n_generated = m.n_generated;
            s->n_committed = m.n_committed;
            s->generate_requested = m.generate_requested;
            s->finish_reason = m.finish_reason;
            s->text.rollback(m.text);
            s->stops.rollback(m.stops);
            s->constraints.grammar.state = m.grammar_state;
            s->sampler->set_rng(m.rng);
            recompute_later(*s);
        }
        if (events_.size() > events_mark) events_.resize(events_mark);
        tokens_prefilled_ = marked_prefilled_;
        tokens_generated_ = marked_generated_;
    } catch (...) {
        LLMKV_LOG_ERROR_F("step: undoing a failed step failed; llmkv_engine_validate will tell%s",
                          "");
    }
}

void Engine::park(Session *s) {
    if (!kv_->has_host_tier())
        fail(LLMKV_ERR_UNSUPPORTED, "no host tier: engine_params.kv_host_bytes is 0");
    if (s->generate_requested)
        fail(LLMKV_ERR_STATE, "session is generating; park it after DONE or cancel");
    if (s->seq.resuming()) {
        kv_->reap(s->seq, /*wait=*/true);
        s->refresh_state();
    }
    if (!s->seq.on_device() || !s->seq.holds_kv()) return;
    if (!kv_->park_out(s->seq, /*wait=*/false)) {
        fail(LLMKV_ERR_KV_CAPACITY, "host tier full: %.1f of %.1f MiB used",
             kv_->host_region_used() / 1048576.0, kv_->host_bytes_total() / 1048576.0);
    }
    s->refresh_state();
    ++parks_;
}

size_t Engine::take_events(llmkv_event *out, size_t capacity) {
    size_t n = std::min(capacity, events_.size());
    for (size_t i = 0; i < n; ++i) {
        out[i] = events_.front();
        events_.pop_front();
    }
    return n;
}

void Engine::check_invariants() const {
    std::vector<const KvSeq *> seqs;
    for (const Request *r : sessions_) seqs.push_back(&r->seq);
    for (const Prefix *p : prefixes_) seqs.push_back(&p->state.seq);
    kv_->check_invariants(seqs);
}

}  // namespace llmkv
