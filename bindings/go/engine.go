// Package llmkv is the idiomatic Go binding of llmkv (include/llmkv.h): an Engine loads a
// GGUF model, Sessions hold conversations, Prefixes hold shared prompt KV. Errors are *Error
// values carrying the library's status and detail message. Text streams through
// Session.Stream (the engine's worker thread, 0.4) or the host steps the engine itself
// (Engine.Step / Engine.Run).
//
// Every method may be called from any goroutine: the binding guards handle lifetimes (a call
// on a closed handle, or on a session of a closed engine, returns ErrClosed and never touches
// freed memory) and the library serializes calls on one engine. No Go callback ever crosses
// cgo. The package raw is the thin layer underneath, one function per C function.
package llmkv

import (
	"runtime"
	"sync"
	"unsafe"

	"llmkv.dev/llmkv/raw"
)

// EngineOptions maps llmkv_engine_params. The zero value of every field means the library's
// default.
type EngineOptions struct {
	ModelPath string  // GGUF file (required)
	Backend   Backend // BackendAuto picks CUDA when available, else the CPU
	Devices   []int32 // GPU ordinals (more than one = tensor parallel)
	Threads   uint32  // CPU worker threads; 0 = all cores
	KVDtypeK  KVDtype // codec of sealed K blocks (KVF16 by default)
	KVDtypeV  KVDtype // codec of sealed V blocks
	// KVBlockTokens is tokens per KV block; 0 = 16.
	KVBlockTokens uint32
	// KVDeviceBytes is the device-tier KV budget; 0 = automatic.
	KVDeviceBytes uint64
	// KVHostBytes is the locked host-tier budget (parking, swapping); 0 = no host tier.
	KVHostBytes uint64
	// MaxBatchTokens is one step's token budget; 0 = automatic (512).
	MaxBatchTokens uint32
	// MaxContext is the per-session token limit; 0 = the model's.
	MaxContext uint32
	// DisablePrefixCache turns off the automatic prefix cache (LLMKV_ENGINE_PREFIX_CACHE).
	DisablePrefixCache bool
	// KeepWindowBlocks sets LLMKV_ENGINE_KEEP_WINDOW_BLOCKS.
	KeepWindowBlocks bool
	// KVSink: position 0's K and V kept in fp16 (LLMKV_ENGINE_KV_SINK / NO_KV_SINK);
	// KVSinkAuto (the default) = on with an int4 codec.
	KVSink KVSinkMode
	// MaxSessions is live sessions and prefixes at once; 0 = 256.
	MaxSessions uint32
	// KVResidualTokens: newest tokens always kept in full precision (0..4096).
	KVResidualTokens uint32
	KVRotation       KVRotation
	// SpinUS is how long idle compute threads poll before sleeping, in microseconds
	// (0..100000; 0 never polls). nil = the library default (LLMKV_SPIN_US, else 200). Use
	// llmkv.Int32(0) for a host whose own threads need the cores.
	SpinUS *int32
	// ThreadPriority: 0 = llmkv's threads run at the creating thread's priority; 1..19 =
	// that many nice levels lower.
	ThreadPriority int32
	// TPSize is tensor parallelism on CPU ranks run as threads of this process, Threads
	// split among them (0.5): the query and KV heads, feed-forward columns and vocabulary
	// are split over the ranks. The model's heads must divide by it (or its KV heads
	// replicate evenly), else NewEngine returns StatusUnsupported. 0 or 1 = none. With
	// BackendCUDA (or several Devices) the ranks are GPU ranks: rank r on Devices[r], or on
	// device r without Devices, NCCL between them (docs/PARALLELISM.md; not yet run on a GPU).
	TPSize uint32
}

// Int32 returns a pointer to v (for EngineOptions.SpinUS).
func Int32(v int32) *int32 { return &v }

// Engine is an llmkv_engine. Close it when done; a finalizer closes an unreachable Engine as
// a safety net (with every session and prefix it still holds).
type Engine struct{ c *engineCore }

// engineCore is what sessions, prefixes and goroutines reference, so that the Engine value
// itself can become unreachable and be finalized.
type engineCore struct {
	// mu guards h: every call holds it shared; Close holds it exclusively to destroy.
	mu sync.RWMutex
	h  *raw.Engine
	// life orders session creation/destruction (exclusive) against stepping and event
	// routing (shared), so an event's session pointer always names a live session.
	life     sync.RWMutex
	sessions map[*raw.Session]*Session
	// regMu guards prefixes.
	regMu    sync.Mutex
	prefixes map[*prefixCore]struct{}
	nVocab   uint32
	closed   chan struct{}

	// worker state
	wmu      sync.Mutex
	workerOn bool
	disp     *dispatcher
	// stMu guards every Session.stream of this engine.
	stMu sync.Mutex
}

// NewEngine loads the model and preallocates the KV pool (llmkv_engine_create).
func NewEngine(opts EngineOptions) (*Engine, error) {
	const op = "NewEngine"
	var p raw.EngineParams
	raw.EngineParamsInitSized(&p, unsafe.Sizeof(p))
	if opts.ModelPath == "" {
		return nil, argErr(op, "EngineOptions.ModelPath is empty")
	}
	path := raw.CString(opts.ModelPath)
	defer raw.Free(unsafe.Pointer(path))
	p.ModelPath = path
	p.Backend = int32(opts.Backend)
	if len(opts.Devices) > 0 {
		devs := (*int32)(raw.Malloc(uintptr(len(opts.Devices)) * 4))
		defer raw.Free(unsafe.Pointer(devs))
		copy(unsafe.Slice(devs, len(opts.Devices)), opts.Devices)
		p.Devices = devs
		p.NDevices = uint32(len(opts.Devices))
	}
	p.NThreads = opts.Threads
	p.KvDtypeK = int32(opts.KVDtypeK)
	p.KvDtypeV = int32(opts.KVDtypeV)
	p.KvBlockTokens = opts.KVBlockTokens
	p.KvDeviceBytes = opts.KVDeviceBytes
	p.KvHostBytes = opts.KVHostBytes
	p.MaxBatchTokens = opts.MaxBatchTokens
	p.MaxContext = opts.MaxContext
	if opts.DisablePrefixCache {
		p.Flags &^= raw.LLMKV_ENGINE_PREFIX_CACHE
	}
	if opts.KeepWindowBlocks {
		p.Flags |= raw.LLMKV_ENGINE_KEEP_WINDOW_BLOCKS
	}
	switch opts.KVSink {
	case KVSinkOn:
		p.Flags |= raw.LLMKV_ENGINE_KV_SINK
	case KVSinkOff:
		p.Flags |= raw.LLMKV_ENGINE_NO_KV_SINK
	}
	p.MaxSessions = opts.MaxSessions
	p.KvResidualTokens = opts.KVResidualTokens
	p.KvRotation = int32(opts.KVRotation)
	if opts.SpinUS != nil {
		p.SpinUs = *opts.SpinUS
	}
	p.ThreadPriority = opts.ThreadPriority
	p.TpSize = opts.TPSize
	var h *raw.Engine
	if err := chk(op)(raw.EngineCreate(&p, &h)); err != nil {
		return nil, err
	}
	c := &engineCore{h: h, sessions: map[*raw.Session]*Session{}, prefixes: map[*prefixCore]struct{}{}, closed: make(chan struct{})}
	info := raw.EngineInfo{StructSize: uint32(unsafe.Sizeof(raw.EngineInfo{}))}
	if st, _ := raw.EngineGetInfo(h, &info); st == raw.LLMKV_OK {
		c.nVocab = info.NVocab
	}
	e := &Engine{c: c}
	runtime.SetFinalizer(e, func(e *Engine) { _ = e.Close() })
	return e, nil
}

// enter takes the engine's lock shared and returns the live handle, or ErrClosed.
func (c *engineCore) enter(op string) (*raw.Engine, error) {
	c.mu.RLock()
	if c.h == nil {
		c.mu.RUnlock()
		return nil, closedErr(op, "engine")
	}
	return c.h, nil
}

func (c *engineCore) leave() { c.mu.RUnlock() }

// Close stops the worker and its dispatcher, destroys the engine and every session and
// prefix still open (their Go values then return ErrClosed), and ends open streams with
// ErrClosed. Closing twice is fine.
func (e *Engine) Close() error {
	c := e.c
	runtime.SetFinalizer(e, nil)
	c.stopDispatcher()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.h == nil {
		return nil
	}
	raw.EngineDestroy(c.h) // also stops the worker thread
	c.h = nil
	close(c.closed)
	for _, s := range c.sessions {
		s.mu.Lock()
		s.h = nil
		s.mu.Unlock()
		c.endStream(s, Chunk{Done: true, Err: closedErr("Session.Stream", "engine")})
	}
	c.sessions = map[*raw.Session]*Session{}
	c.regMu.Lock()
	for p := range c.prefixes {
		p.mu.Lock()
		p.h = nil
		p.mu.Unlock()
	}
	c.prefixes = map[*prefixCore]struct{}{}
	c.regMu.Unlock()
	c.wmu.Lock()
	c.workerOn = false
	c.wmu.Unlock()
	return nil
}

// EngineInfo is llmkv_engine_info with its strings as Go strings; Raw holds every field.
type EngineInfo struct {
	ModelName    string
	Architecture string
	BackendName  string
	Backend      Backend
	NVocab       uint32
	NCtxTrain    uint32
	MaxContext   uint32
	NLayers      uint32
	NThreads     uint32
	TPSize       uint32 // tensor-parallel ranks (1: none); Raw has the per-rank byte counts
	BOS, EOS     int32  // -1 if none
	EOT          int32
	// A mixture of experts: experts per layer and per token (0, 0: a dense model), and the
	// parameters and weight bytes one decoded token reads (a dense model's all).
	NExpert, NExpertUsed             uint32
	NParamsActive, WeightBytesActive uint64
	Raw                              raw.EngineInfo
}

func cstr(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// Info is llmkv_engine_get_info.
func (e *Engine) Info() (EngineInfo, error) {
	const op = "Engine.Info"
	h, err := e.c.enter(op)
	if err != nil {
		return EngineInfo{}, err
	}
	defer e.c.leave()
	r := raw.EngineInfo{StructSize: uint32(unsafe.Sizeof(raw.EngineInfo{}))}
	before06 := raw.Version() < 600 // a 0.5 library refuses the 0.6 size: ask for its own
	if before06 {
		r.StructSize = uint32(unsafe.Offsetof(r.NExpert))
	}
	if err := chk(op)(raw.EngineGetInfo(h, &r)); err != nil {
		return EngineInfo{}, err
	}
	if before06 { // what the header says a dense model reports (a 0.5 library loads no other)
		r.NParamsActive, r.WeightBytesActive = r.NParams, r.WeightBytes
	}
	return EngineInfo{
		NExpert: r.NExpert, NExpertUsed: r.NExpertUsed, NParamsActive: r.NParamsActive,
		WeightBytesActive: r.WeightBytesActive,
		ModelName:         cstr(r.ModelName[:]), Architecture: cstr(r.Architecture[:]), BackendName: cstr(r.BackendName[:]),
		Backend: Backend(r.Backend), NVocab: r.NVocab, NCtxTrain: r.NCtxTrain, MaxContext: r.MaxContext,
		NLayers: r.NLayers, NThreads: r.NThreads, TPSize: r.TpSize, BOS: r.BosToken, EOS: r.EosToken, EOT: r.EotToken, Raw: r,
	}, nil
}

// Stats is llmkv_stats.
type Stats = raw.Stats

// Stats is llmkv_engine_get_stats.
func (e *Engine) Stats() (Stats, error) {
	const op = "Engine.Stats"
	h, err := e.c.enter(op)
	if err != nil {
		return Stats{}, err
	}
	defer e.c.leave()
	r := raw.Stats{StructSize: uint32(unsafe.Sizeof(raw.Stats{}))}
	return r, chk(op)(raw.EngineGetStats(h, &r))
}

// Validate is llmkv_engine_validate: nil when the KV pool's invariants hold.
func (e *Engine) Validate() error {
	const op = "Engine.Validate"
	h, err := e.c.enter(op)
	if err != nil {
		return err
	}
	defer e.c.leave()
	return chk(op)(raw.EngineValidate(h))
}

// goBytes returns a pointer to a copy of s in Go memory (nil for ""), for one C call.
func goBytes(s string) (*byte, uintptr) {
	if len(s) == 0 {
		return nil, 0
	}
	b := []byte(s)
	return &b[0], uintptr(len(b))
}

func tokPtr(t []int32) *int32 {
	if len(t) == 0 {
		return nil
	}
	return &t[0]
}

// Tokenize is llmkv_tokenize (flags: TokenizeAddBOS, TokenizeParseSpecial, TokenizeStrict).
func (e *Engine) Tokenize(text string, flags uint32) ([]int32, error) {
	const op = "Engine.Tokenize"
	h, err := e.c.enter(op)
	if err != nil {
		return nil, err
	}
	defer e.c.leave()
	p, n := goBytes(text)
	buf := make([]int32, len(text)+8)
	for {
		var got uintptr
		st, msg := raw.Tokenize(h, p, n, flags, tokPtr(buf), uintptr(len(buf)), &got)
		if st == raw.LLMKV_ERR_INVALID_ARGUMENT && got > uintptr(len(buf)) {
			buf = make([]int32, got)
			continue
		}
		if err := check(op, st, msg); err != nil {
			return nil, err
		}
		return buf[:got], nil
	}
}

// Detokenize is llmkv_detokenize: the text of the tokens (special tokens as their text).
func (e *Engine) Detokenize(tokens []int32) (string, error) {
	const op = "Engine.Detokenize"
	h, err := e.c.enter(op)
	if err != nil {
		return "", err
	}
	defer e.c.leave()
	buf := make([]byte, 16*len(tokens)+16)
	for {
		var got uintptr
		st, msg := raw.Detokenize(h, tokPtr(tokens), uintptr(len(tokens)), &buf[0], uintptr(len(buf)), &got)
		if st == raw.LLMKV_ERR_INVALID_ARGUMENT && got > uintptr(len(buf)) {
			buf = make([]byte, got)
			continue
		}
		if err := check(op, st, msg); err != nil {
			return "", err
		}
		return string(buf[:got]), nil
	}
}

// ChatMessage is one message for ChatFormat.
type ChatMessage struct {
	Role    string // "system", "user", "assistant" ("ipython" for Llama 3)
	Content string
}

// ChatFormat is llmkv_chat_format: the messages in the model's chat template.
func (e *Engine) ChatFormat(msgs []ChatMessage, addGenerationPrompt bool) (string, error) {
	const op = "Engine.ChatFormat"
	if len(msgs) == 0 {
		return "", argErr(op, "no messages")
	}
	h, err := e.c.enter(op)
	if err != nil {
		return "", err
	}
	defer e.c.leave()
	cm := unsafe.Slice((*raw.ChatMessage)(raw.Malloc(uintptr(len(msgs))*unsafe.Sizeof(raw.ChatMessage{}))), len(msgs))
	defer raw.Free(unsafe.Pointer(&cm[0]))
	for i, m := range msgs {
		cm[i].Role = raw.CString(m.Role)
		cm[i].Content = raw.CString(m.Content)
		defer raw.Free(unsafe.Pointer(cm[i].Role))
		defer raw.Free(unsafe.Pointer(cm[i].Content))
	}
	add := int32(0)
	if addGenerationPrompt {
		add = 1
	}
	buf := make([]byte, 256)
	for _, m := range msgs {
		buf = append(buf, make([]byte, len(m.Content)+len(m.Role)+64)...)
	}
	for {
		var got uintptr
		st, msg := raw.ChatFormat(h, &cm[0], uintptr(len(msgs)), add, &buf[0], uintptr(len(buf)), &got)
		if st == raw.LLMKV_ERR_INVALID_ARGUMENT && got >= uintptr(len(buf)) {
			buf = make([]byte, got+1)
			continue
		}
		if err := check(op, st, msg); err != nil {
			return "", err
		}
		return string(buf[:got]), nil
	}
}

// Event is one llmkv_event: a token, the end of a generation, or a request's error.
type Event struct {
	Session      *Session // nil if the session was closed meanwhile
	Kind         EventKind
	Token        int32        // EventToken
	FinishReason FinishReason // EventDone
	Status       Status       // EventError
}

// event translates a raw event; the caller holds c.life shared.
func (c *engineCore) event(r *raw.Event) Event {
	return Event{Session: c.sessions[r.Session], Kind: EventKind(r.Kind), Token: r.Token,
		FinishReason: FinishReason(r.FinishReason), Status: Status(r.Status)}
}

const eventBatch = 256

// Step is llmkv_step: at most one batched forward pass, and the events it produced (at most
// 256 per call; the rest stay queued for the next call). No events and a nil error: no work.
// StatusState while the worker thread runs.
func (e *Engine) Step() ([]Event, error) {
	const op = "Engine.Step"
	c := e.c
	h, err := c.enter(op)
	if err != nil {
		return nil, err
	}
	defer c.leave()
	c.life.RLock()
	defer c.life.RUnlock()
	var buf [eventBatch]raw.Event
	var n uintptr
	if err := chk(op)(raw.Step(h, &buf[0], eventBatch, &n)); err != nil {
		return nil, err
	}
	out := make([]Event, n)
	for i := range out {
		out[i] = c.event(&buf[i])
	}
	return out, nil
}

// Run is llmkv_run: steps until no session has work. Callbacks do not cross cgo, so the
// events are collected in C and handed to fn (may be nil) in order after the run; fn may call
// into the engine. Use Step in a loop, or Session.Stream, to see events as they happen.
func (e *Engine) Run(fn func(Event)) error {
	const op = "Engine.Run"
	c := e.c
	h, err := c.enter(op)
	if err != nil {
		return err
	}
	c.life.RLock()
	revs, st, msg := raw.RunCollect(h)
	evs := make([]Event, len(revs))
	for i := range revs {
		evs[i] = c.event(&revs[i])
	}
	c.life.RUnlock()
	c.leave()
	if fn != nil {
		for _, ev := range evs {
			fn(ev)
		}
	}
	return check(op, st, msg)
}

// HasWork is llmkv_engine_has_work: whether a session has input to run, a generation in
// progress or a submitted request waiting (a Step with no events may only have prefilled).
func (e *Engine) HasWork() (bool, error) {
	const op = "Engine.HasWork"
	h, err := e.c.enter(op)
	if err != nil {
		return false, err
	}
	defer e.c.leave()
	return raw.EngineHasWork(h) != 0, nil
}

// PendingEvents is llmkv_pending_events.
func (e *Engine) PendingEvents() int {
	h, err := e.c.enter("Engine.PendingEvents")
	if err != nil {
		return 0
	}
	defer e.c.leave()
	return int(raw.PendingEvents(h))
}
