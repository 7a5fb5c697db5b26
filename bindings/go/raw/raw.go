// Package raw is the thin layer of the llmkv Go binding: one Go function per LLMKV_API
// function of include/llmkv.h, Go mirrors of its structs (types.go) and its constants under
// their C names (consts.go). Names: llmkv_engine_create -> EngineCreate (the C name without
// "llmkv_", in CamelCase).
//
// The one departure from the header: llmkv_last_error() is thread-local, and a goroutine can
// move to another OS thread between two cgo calls, so every fallible function here returns
// (status, message): a C shim calls the llmkv function and, when it fails, copies
// llmkv_last_error() in the same C call. LastError is still declared for completeness, but
// its answer is only meaningful for calls made on the same OS thread
// (runtime.LockOSThread).
//
// Pointer rules are cgo's: pointers inside the structs passed to the library must point to C
// memory (CString, Malloc) or be nil; buffers passed directly (text, tokens, events) may be Go
// memory. Nothing here keeps handles alive or checks them: the package llmkv does.
package raw

/*
#cgo LDFLAGS: -lllmkv
#include <stdlib.h>
#include <string.h>
// The raw layer calls each function by its name: llmkv_engine_params_init is then the
// function itself (the unsized 0.3 entry point), not the header's macro for the sized init.
#define LLMKV_NO_INIT_MACROS
#include <llmkv.h>

// go_llmkv_err copies the calling thread's llmkv_last_error() for a failed status (NULL for
// LLMKV_OK). It runs inside the same C call as the failing function: the message can never
// come from another thread or another call.
static char *go_llmkv_err(llmkv_status st) {
	const char *m;
	size_t n;
	char *c;
	if (st == LLMKV_OK) return NULL;
	m = llmkv_last_error();
	if (m == NULL) m = "";
	n = strlen(m);
	c = (char *)malloc(n + 1);
	if (c != NULL) memcpy(c, m, n + 1);
	return c;
}

#define GO_SHIM(call) do { llmkv_status st_ = (call); *err = go_llmkv_err(st_); return st_; } while (0)

static llmkv_status go_engine_create(const llmkv_engine_params *p, llmkv_engine **out, char **err) { GO_SHIM(llmkv_engine_create(p, out)); }
static llmkv_status go_tp_serve(const llmkv_engine_params *p, char **err) { GO_SHIM(llmkv_tp_serve(p)); }
static llmkv_status go_engine_get_info(const llmkv_engine *e, llmkv_engine_info *out, char **err) { GO_SHIM(llmkv_engine_get_info(e, out)); }
static llmkv_status go_engine_get_stats(const llmkv_engine *e, llmkv_stats *out, char **err) { GO_SHIM(llmkv_engine_get_stats(e, out)); }
static llmkv_status go_engine_validate(const llmkv_engine *e, char **err) { GO_SHIM(llmkv_engine_validate(e)); }
static llmkv_status go_tokenize(const llmkv_engine *e, const char *text, size_t len, uint32_t flags, int32_t *tokens, size_t capacity, size_t *n_tokens, char **err) { GO_SHIM(llmkv_tokenize(e, text, len, flags, tokens, capacity, n_tokens)); }
static llmkv_status go_detokenize(const llmkv_engine *e, const int32_t *tokens, size_t n, char *buf, size_t capacity, size_t *n_bytes, char **err) { GO_SHIM(llmkv_detokenize(e, tokens, n, buf, capacity, n_bytes)); }
static llmkv_status go_chat_format(const llmkv_engine *e, const llmkv_chat_message *msgs, size_t n, int add_generation_prompt, char *buf, size_t capacity, size_t *n_bytes, char **err) { GO_SHIM(llmkv_chat_format(e, msgs, n, add_generation_prompt, buf, capacity, n_bytes)); }
static llmkv_status go_prefix_create(llmkv_engine *e, const int32_t *tokens, size_t n, llmkv_prefix **out, char **err) { GO_SHIM(llmkv_prefix_create(e, tokens, n, out)); }
static llmkv_status go_prefix_save(const llmkv_prefix *p, const char *path, char **err) { GO_SHIM(llmkv_prefix_save(p, path)); }
static llmkv_status go_prefix_load(llmkv_engine *e, const char *path, llmkv_prefix **out, char **err) { GO_SHIM(llmkv_prefix_load(e, path, out)); }
static llmkv_status go_prefix_load_ex(llmkv_engine *e, const char *path, uint32_t flags, llmkv_prefix **out, char **err) { GO_SHIM(llmkv_prefix_load_ex(e, path, flags, out)); }
static llmkv_status go_prefix_get_tokens(const llmkv_prefix *p, int32_t *tokens, size_t capacity, size_t *n_tokens, char **err) { GO_SHIM(llmkv_prefix_get_tokens(p, tokens, capacity, n_tokens)); }
static llmkv_status go_session_create(llmkv_engine *e, const llmkv_session_params *p, llmkv_session **out, char **err) { GO_SHIM(llmkv_session_create(e, p, out)); }
static llmkv_status go_session_append(llmkv_session *s, const int32_t *tokens, size_t n, char **err) { GO_SHIM(llmkv_session_append(s, tokens, n)); }
static llmkv_status go_session_append_text(llmkv_session *s, const char *text, size_t len, char **err) { GO_SHIM(llmkv_session_append_text(s, text, len)); }
static llmkv_status go_session_generate(llmkv_session *s, uint32_t max_new_tokens, char **err) { GO_SHIM(llmkv_session_generate(s, max_new_tokens)); }
static llmkv_status go_session_cancel(llmkv_session *s, char **err) { GO_SHIM(llmkv_session_cancel(s)); }
static llmkv_status go_session_park(llmkv_session *s, char **err) { GO_SHIM(llmkv_session_park(s)); }
static llmkv_status go_session_read_text(llmkv_session *s, char *buf, size_t capacity, size_t *n_bytes, char **err) { GO_SHIM(llmkv_session_read_text(s, buf, capacity, n_bytes)); }
static llmkv_status go_session_get_info(const llmkv_session *s, llmkv_session_info *out, char **err) { GO_SHIM(llmkv_session_get_info(s, out)); }
static llmkv_status go_session_get_tokens(const llmkv_session *s, int32_t *tokens, size_t capacity, size_t *n_tokens, char **err) { GO_SHIM(llmkv_session_get_tokens(s, tokens, capacity, n_tokens)); }
static llmkv_status go_session_fork(llmkv_session *s, llmkv_session **out, char **err) { GO_SHIM(llmkv_session_fork(s, out)); }
static llmkv_status go_session_to_prefix(llmkv_session *s, llmkv_prefix **out, char **err) { GO_SHIM(llmkv_session_to_prefix(s, out)); }
static llmkv_status go_session_set_grammar(llmkv_session *s, uint32_t kind, const char *text, size_t len, const char *root, char **err) { GO_SHIM(llmkv_session_set_grammar(s, (llmkv_grammar_kind)kind, text, len, root)); }
static llmkv_status go_step(llmkv_engine *e, llmkv_event *events, size_t capacity, size_t *n_events, char **err) { GO_SHIM(llmkv_step(e, events, capacity, n_events)); }
static llmkv_status go_run(llmkv_engine *e, void *on_event, void *user_data, char **err) { GO_SHIM(llmkv_run(e, (llmkv_event_fn)on_event, user_data)); }
static llmkv_status go_worker_start(llmkv_engine *e, char **err) { GO_SHIM(llmkv_worker_start(e)); }
static llmkv_status go_worker_stop(llmkv_engine *e, char **err) { GO_SHIM(llmkv_worker_stop(e)); }
static llmkv_status go_worker_poll(llmkv_engine *e, llmkv_event *events, size_t capacity, uint32_t timeout_us, size_t *n_events, char **err) { GO_SHIM(llmkv_worker_poll(e, events, capacity, timeout_us, n_events)); }
static llmkv_status go_session_submit_text(llmkv_session *s, const char *text, size_t len, uint32_t flags, uint32_t max_new_tokens, char **err) { GO_SHIM(llmkv_session_submit_text(s, text, len, flags, max_new_tokens)); }
static llmkv_status go_session_submit_tokens(llmkv_session *s, const int32_t *tokens, size_t n, uint32_t flags, uint32_t max_new_tokens, char **err) { GO_SHIM(llmkv_session_submit_tokens(s, tokens, n, flags, max_new_tokens)); }
static llmkv_status go_session_submit_cancel(llmkv_session *s, char **err) { GO_SHIM(llmkv_session_submit_cancel(s)); }
static llmkv_status go_session_submit_error(const llmkv_session *s, char *buf, size_t capacity, size_t *n_bytes, char **err) { GO_SHIM(llmkv_session_submit_error(s, buf, capacity, n_bytes)); }

static int go_engine_has_work(const llmkv_engine *e) { return llmkv_engine_has_work(e); }

// A C event callback for llmkv_run that collects the events into a growing C array, so a Go
// host can use llmkv_run without a Go callback crossing cgo.
typedef struct go_event_buf { llmkv_event *ev; size_t n, cap; int oom; } go_event_buf;
static void go_collect_event(const llmkv_event *event, void *user_data) {
	go_event_buf *b = (go_event_buf *)user_data;
	if (b->n == b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 64;
		llmkv_event *ev = (llmkv_event *)realloc(b->ev, cap * sizeof(llmkv_event));
		if (ev == NULL) { b->oom = 1; return; }
		b->ev = ev;
		b->cap = cap;
	}
	b->ev[b->n++] = *event;
}
static void *go_collect_event_fn(void) { return (void *)go_collect_event; }
*/
import "C"

import "unsafe"

func goErr(c *C.char) string {
	if c == nil {
		return ""
	}
	s := C.GoString(c)
	C.free(unsafe.Pointer(c))
	return s
}

func cs(p *byte) *C.char                                  { return (*C.char)(unsafe.Pointer(p)) }
func ce(e *Engine) *C.llmkv_engine                        { return (*C.llmkv_engine)(unsafe.Pointer(e)) }
func cse(s *Session) *C.llmkv_session                     { return (*C.llmkv_session)(unsafe.Pointer(s)) }
func cp(p *Prefix) *C.llmkv_prefix                        { return (*C.llmkv_prefix)(unsafe.Pointer(p)) }
func ci32(p *int32) *C.int32_t                            { return (*C.int32_t)(unsafe.Pointer(p)) }
func csz(p *uintptr) *C.size_t                            { return (*C.size_t)(unsafe.Pointer(p)) }
func cev(p *Event) *C.llmkv_event                         { return (*C.llmkv_event)(unsafe.Pointer(p)) }
func status(st C.llmkv_status, e *C.char) (int32, string) { return int32(st), goErr(e) }

// ---- Version, status, logging -------------------------------------------------------------

// Version is llmkv_version: MAJOR*10000 + MINOR*100 + PATCH of the loaded library.
func Version() int32 { return int32(C.llmkv_version()) }

// VersionString is llmkv_version_string.
func VersionString() string { return C.GoString(C.llmkv_version_string()) }

// StatusString is llmkv_status_string.
func StatusString(st int32) string { return C.GoString(C.llmkv_status_string(C.llmkv_status(st))) }

// LastError is llmkv_last_error. Only meaningful on a locked OS thread; the fallible
// functions of this package return the message themselves.
func LastError() string { return C.GoString(C.llmkv_last_error()) }

// LogSet is llmkv_log_set. fn must be a C function pointer of type llmkv_log_fn (or nil for
// the default stderr logger); user data is passed through as is.
func LogSet(fn unsafe.Pointer, userData unsafe.Pointer, maxLevel int32) {
	C.llmkv_log_set(C.llmkv_log_fn(fn), userData, C.llmkv_log_level(maxLevel))
}

// ---- Engine --------------------------------------------------------------------------------

// EngineParamsInit is the function llmkv_engine_params_init: the entry point of programs
// built against headers before 0.4, which fills only the 0.3 struct (struct_size 96). Use
// EngineParamsInitSized.
func EngineParamsInit(p *EngineParams) {
	C.llmkv_engine_params_init((*C.llmkv_engine_params)(unsafe.Pointer(p)))
}

// EngineParamsInitSized is llmkv_engine_params_init_sized: fills size bytes (pass
// unsafe.Sizeof(*p)) with the defaults.
func EngineParamsInitSized(p *EngineParams, size uintptr) {
	C.llmkv_engine_params_init_sized((*C.llmkv_engine_params)(unsafe.Pointer(p)), C.size_t(size))
}

// EngineCreate is llmkv_engine_create.
func EngineCreate(p *EngineParams, out **Engine) (int32, string) {
	var e *C.char
	st := C.go_engine_create((*C.llmkv_engine_params)(unsafe.Pointer(p)), (**C.llmkv_engine)(unsafe.Pointer(out)), &e)
	return status(st, e)
}

// TpServe is llmkv_tp_serve (0.5): runs rank p.TpTransport.Rank (1 or more) of tensor
// parallelism across processes until rank 0's engine is destroyed. p.TpTransport must point
// to C memory whose Broadcast and AllGather are C functions.
func TpServe(p *EngineParams) (int32, string) {
	var e *C.char
	st := C.go_tp_serve((*C.llmkv_engine_params)(unsafe.Pointer(p)), &e)
	return status(st, e)
}

// EngineDestroy is llmkv_engine_destroy.
func EngineDestroy(e *Engine) { C.llmkv_engine_destroy(ce(e)) }

// EngineGetInfo is llmkv_engine_get_info (out.StructSize must be set).
func EngineGetInfo(e *Engine, out *EngineInfo) (int32, string) {
	var m *C.char
	st := C.go_engine_get_info(ce(e), (*C.llmkv_engine_info)(unsafe.Pointer(out)), &m)
	return status(st, m)
}

// EngineGetStats is llmkv_engine_get_stats (out.StructSize must be set).
func EngineGetStats(e *Engine, out *Stats) (int32, string) {
	var m *C.char
	st := C.go_engine_get_stats(ce(e), (*C.llmkv_stats)(unsafe.Pointer(out)), &m)
	return status(st, m)
}

// EngineValidate is llmkv_engine_validate.
func EngineValidate(e *Engine) (int32, string) {
	var m *C.char
	st := C.go_engine_validate(ce(e), &m)
	return status(st, m)
}

// ---- Tokens and text -------------------------------------------------------------------------

// Tokenize is llmkv_tokenize.
func Tokenize(e *Engine, text *byte, n uintptr, flags uint32, tokens *int32, capacity uintptr, nTokens *uintptr) (int32, string) {
	var m *C.char
	st := C.go_tokenize(ce(e), cs(text), C.size_t(n), C.uint32_t(flags), ci32(tokens), C.size_t(capacity), csz(nTokens), &m)
	return status(st, m)
}

// Detokenize is llmkv_detokenize.
func Detokenize(e *Engine, tokens *int32, n uintptr, buf *byte, capacity uintptr, nBytes *uintptr) (int32, string) {
	var m *C.char
	st := C.go_detokenize(ce(e), ci32(tokens), C.size_t(n), cs(buf), C.size_t(capacity), csz(nBytes), &m)
	return status(st, m)
}

// ChatFormat is llmkv_chat_format. msgs must point to C memory (the messages hold pointers).
func ChatFormat(e *Engine, msgs *ChatMessage, n uintptr, addGenerationPrompt int32, buf *byte, capacity uintptr, nBytes *uintptr) (int32, string) {
	var m *C.char
	st := C.go_chat_format(ce(e), (*C.llmkv_chat_message)(unsafe.Pointer(msgs)), C.size_t(n), C.int(addGenerationPrompt), cs(buf), C.size_t(capacity), csz(nBytes), &m)
	return status(st, m)
}

// ---- Prefix handles ----------------------------------------------------------------------------

// PrefixCreate is llmkv_prefix_create.
func PrefixCreate(e *Engine, tokens *int32, n uintptr, out **Prefix) (int32, string) {
	var m *C.char
	st := C.go_prefix_create(ce(e), ci32(tokens), C.size_t(n), (**C.llmkv_prefix)(unsafe.Pointer(out)), &m)
	return status(st, m)
}

// PrefixSave is llmkv_prefix_save (path NUL-terminated).
func PrefixSave(p *Prefix, path *byte) (int32, string) {
	var m *C.char
	st := C.go_prefix_save(cp(p), cs(path), &m)
	return status(st, m)
}

// PrefixLoad is llmkv_prefix_load (path NUL-terminated).
func PrefixLoad(e *Engine, path *byte, out **Prefix) (int32, string) {
	var m *C.char
	st := C.go_prefix_load(ce(e), cs(path), (**C.llmkv_prefix)(unsafe.Pointer(out)), &m)
	return status(st, m)
}

// PrefixLoadEx is llmkv_prefix_load_ex.
func PrefixLoadEx(e *Engine, path *byte, flags uint32, out **Prefix) (int32, string) {
	var m *C.char
	st := C.go_prefix_load_ex(ce(e), cs(path), C.uint32_t(flags), (**C.llmkv_prefix)(unsafe.Pointer(out)), &m)
	return status(st, m)
}

// PrefixNTokens is llmkv_prefix_n_tokens.
func PrefixNTokens(p *Prefix) uintptr { return uintptr(C.llmkv_prefix_n_tokens(cp(p))) }

// PrefixGetTokens is llmkv_prefix_get_tokens.
func PrefixGetTokens(p *Prefix, tokens *int32, capacity uintptr, nTokens *uintptr) (int32, string) {
	var m *C.char
	st := C.go_prefix_get_tokens(cp(p), ci32(tokens), C.size_t(capacity), csz(nTokens), &m)
	return status(st, m)
}

// PrefixRelease is llmkv_prefix_release.
func PrefixRelease(p *Prefix) { C.llmkv_prefix_release(cp(p)) }

// ---- Sessions ------------------------------------------------------------------------------------

// SessionParamsInit is the function llmkv_session_params_init (the unsized entry point of
// programs built against headers before 0.4). Use SessionParamsInitSized.
func SessionParamsInit(p *SessionParams) {
	C.llmkv_session_params_init((*C.llmkv_session_params)(unsafe.Pointer(p)))
}

// SessionParamsInitSized is llmkv_session_params_init_sized (pass unsafe.Sizeof(*p)).
func SessionParamsInitSized(p *SessionParams, size uintptr) {
	C.llmkv_session_params_init_sized((*C.llmkv_session_params)(unsafe.Pointer(p)), C.size_t(size))
}

// SessionCreate is llmkv_session_create.
func SessionCreate(e *Engine, p *SessionParams, out **Session) (int32, string) {
	var m *C.char
	st := C.go_session_create(ce(e), (*C.llmkv_session_params)(unsafe.Pointer(p)), (**C.llmkv_session)(unsafe.Pointer(out)), &m)
	return status(st, m)
}

// SessionAppend is llmkv_session_append.
func SessionAppend(s *Session, tokens *int32, n uintptr) (int32, string) {
	var m *C.char
	st := C.go_session_append(cse(s), ci32(tokens), C.size_t(n), &m)
	return status(st, m)
}

// SessionAppendText is llmkv_session_append_text.
func SessionAppendText(s *Session, text *byte, n uintptr) (int32, string) {
	var m *C.char
	st := C.go_session_append_text(cse(s), cs(text), C.size_t(n), &m)
	return status(st, m)
}

// SessionGenerate is llmkv_session_generate.
func SessionGenerate(s *Session, maxNewTokens uint32) (int32, string) {
	var m *C.char
	st := C.go_session_generate(cse(s), C.uint32_t(maxNewTokens), &m)
	return status(st, m)
}

// SessionCancel is llmkv_session_cancel.
func SessionCancel(s *Session) (int32, string) {
	var m *C.char
	st := C.go_session_cancel(cse(s), &m)
	return status(st, m)
}

// SessionPark is llmkv_session_park.
func SessionPark(s *Session) (int32, string) {
	var m *C.char
	st := C.go_session_park(cse(s), &m)
	return status(st, m)
}

// SessionReadText is llmkv_session_read_text.
func SessionReadText(s *Session, buf *byte, capacity uintptr, nBytes *uintptr) (int32, string) {
	var m *C.char
	st := C.go_session_read_text(cse(s), cs(buf), C.size_t(capacity), csz(nBytes), &m)
	return status(st, m)
}

// SessionGetInfo is llmkv_session_get_info (out.StructSize must be set).
func SessionGetInfo(s *Session, out *SessionInfo) (int32, string) {
	var m *C.char
	st := C.go_session_get_info(cse(s), (*C.llmkv_session_info)(unsafe.Pointer(out)), &m)
	return status(st, m)
}

// SessionGetTokens is llmkv_session_get_tokens.
func SessionGetTokens(s *Session, tokens *int32, capacity uintptr, nTokens *uintptr) (int32, string) {
	var m *C.char
	st := C.go_session_get_tokens(cse(s), ci32(tokens), C.size_t(capacity), csz(nTokens), &m)
	return status(st, m)
}

// SessionFork is llmkv_session_fork.
func SessionFork(s *Session, out **Session) (int32, string) {
	var m *C.char
	st := C.go_session_fork(cse(s), (**C.llmkv_session)(unsafe.Pointer(out)), &m)
	return status(st, m)
}

// SessionToPrefix is llmkv_session_to_prefix.
func SessionToPrefix(s *Session, out **Prefix) (int32, string) {
	var m *C.char
	st := C.go_session_to_prefix(cse(s), (**C.llmkv_prefix)(unsafe.Pointer(out)), &m)
	return status(st, m)
}

// SessionSetGrammar is llmkv_session_set_grammar (root NUL-terminated or nil).
func SessionSetGrammar(s *Session, kind uint32, text *byte, n uintptr, root *byte) (int32, string) {
	var m *C.char
	st := C.go_session_set_grammar(cse(s), C.uint32_t(kind), cs(text), C.size_t(n), cs(root), &m)
	return status(st, m)
}

// SessionDestroy is llmkv_session_destroy.
func SessionDestroy(s *Session) { C.llmkv_session_destroy(cse(s)) }

// ---- Stepping ------------------------------------------------------------------------------------

// Step is llmkv_step.
func Step(e *Engine, events *Event, capacity uintptr, nEvents *uintptr) (int32, string) {
	var m *C.char
	st := C.go_step(ce(e), cev(events), C.size_t(capacity), csz(nEvents), &m)
	return status(st, m)
}

// EngineHasWork is llmkv_engine_has_work: 1 when a step has something to do, else 0.
func EngineHasWork(e *Engine) int32 { return int32(C.go_engine_has_work(ce(e))) }

// PendingEvents is llmkv_pending_events.
func PendingEvents(e *Engine) uintptr { return uintptr(C.llmkv_pending_events(ce(e))) }

// Run is llmkv_run. onEvent must be a C function pointer of type llmkv_event_fn (or nil);
// a Go function cannot be passed. RunCollect runs it with a C collector instead.
func Run(e *Engine, onEvent unsafe.Pointer, userData unsafe.Pointer) (int32, string) {
	var m *C.char
	st := C.go_run(ce(e), onEvent, userData, &m)
	return status(st, m)
}

// RunCollect calls llmkv_run with a C callback that collects every event, and returns them
// in order once the run has finished (not part of the header: a helper for Go hosts).
func RunCollect(e *Engine) ([]Event, int32, string) {
	var b C.go_event_buf
	var m *C.char
	st := C.go_run(ce(e), C.go_collect_event_fn(), unsafe.Pointer(&b), &m)
	var evs []Event
	if b.n > 0 {
		src := unsafe.Slice((*Event)(unsafe.Pointer(b.ev)), int(b.n))
		evs = make([]Event, len(src))
		copy(evs, src)
	}
	C.free(unsafe.Pointer(b.ev))
	msg := goErr(m)
	if b.oom != 0 && st == C.LLMKV_OK {
		return evs, LLMKV_ERR_OUT_OF_MEMORY, "llmkv go binding: out of memory collecting the events of llmkv_run (some were lost)"
	}
	return evs, int32(st), msg
}

// ---- Worker thread (0.4) ------------------------------------------------------------------------

// WorkerStart is llmkv_worker_start.
func WorkerStart(e *Engine) (int32, string) {
	var m *C.char
	st := C.go_worker_start(ce(e), &m)
	return status(st, m)
}

// WorkerStop is llmkv_worker_stop.
func WorkerStop(e *Engine) (int32, string) {
	var m *C.char
	st := C.go_worker_stop(ce(e), &m)
	return status(st, m)
}

// WorkerPoll is llmkv_worker_poll.
func WorkerPoll(e *Engine, events *Event, capacity uintptr, timeoutUs uint32, nEvents *uintptr) (int32, string) {
	var m *C.char
	st := C.go_worker_poll(ce(e), cev(events), C.size_t(capacity), C.uint32_t(timeoutUs), csz(nEvents), &m)
	return status(st, m)
}

// SessionSubmitText is llmkv_session_submit_text.
func SessionSubmitText(s *Session, text *byte, n uintptr, flags uint32, maxNewTokens uint32) (int32, string) {
	var m *C.char
	st := C.go_session_submit_text(cse(s), cs(text), C.size_t(n), C.uint32_t(flags), C.uint32_t(maxNewTokens), &m)
	return status(st, m)
}

// SessionSubmitTokens is llmkv_session_submit_tokens.
func SessionSubmitTokens(s *Session, tokens *int32, n uintptr, flags uint32, maxNewTokens uint32) (int32, string) {
	var m *C.char
	st := C.go_session_submit_tokens(cse(s), ci32(tokens), C.size_t(n), C.uint32_t(flags), C.uint32_t(maxNewTokens), &m)
	return status(st, m)
}

// SessionSubmitCancel is llmkv_session_submit_cancel.
func SessionSubmitCancel(s *Session) (int32, string) {
	var m *C.char
	st := C.go_session_submit_cancel(cse(s), &m)
	return status(st, m)
}

// SessionSubmitError is llmkv_session_submit_error.
func SessionSubmitError(s *Session, buf *byte, capacity uintptr, nBytes *uintptr) (int32, string) {
	var m *C.char
	st := C.go_session_submit_error(cse(s), cs(buf), C.size_t(capacity), csz(nBytes), &m)
	return status(st, m)
}

// ---- C memory helpers (not part of the header) ------------------------------------------------

// CString copies s into C memory with a terminating NUL; free it with Free.
func CString(s string) *byte { return (*byte)(unsafe.Pointer(C.CString(s))) }

// Malloc allocates n bytes of zeroed C memory (at least 1); free it with Free. Panics when
// out of memory.
func Malloc(n uintptr) unsafe.Pointer {
	if n == 0 {
		n = 1
	}
	p := C.calloc(1, C.size_t(n))
	if p == nil {
		panic("llmkv: out of C memory")
	}
	return p
}

// Free frees C memory from CString or Malloc (nil is fine).
func Free(p unsafe.Pointer) { C.free(p) }
