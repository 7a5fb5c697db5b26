package llmkv

import (
	"sync"
	"unsafe"

	"llmkv.dev/llmkv/raw"
)

// Sampling is llmkv_sampling (Temperature 0 = greedy). Start from DefaultSampling().
type Sampling = raw.Sampling

// LogitBias is llmkv_logit_bias: Bias is added to Token's logit; float32(math.Inf(-1)) bans it.
type LogitBias = raw.LogitBias

// DefaultSampling returns the library's defaults (greedy, top_p 1, repeat_penalty 1, ...).
func DefaultSampling() Sampling {
	var p raw.SessionParams
	raw.SessionParamsInitSized(&p, unsafe.Sizeof(p))
	return p.Sampling
}

// SessionOptions maps llmkv_session_params; the zero value is the library's defaults
// (greedy, no limits).
type SessionOptions struct {
	Prefix       *Prefix   // start from this prefix (of the same engine)
	Sampling     *Sampling // nil = DefaultSampling() (greedy)
	MaxNewTokens uint32    // default limit of Generate; 0 = until a stop or the context end
	StopTokens   []int32   // besides the model's end-of-generation tokens
	Priority     int32     // higher runs first, is preempted last
	StopStrings  []string  // at most 64, of 1..256 bytes each
	LogitBias    []LogitBias
	MinNewTokens uint32
	GrammarKind  GrammarKind // GrammarNone, GrammarGBNF, GrammarJSONSchema
	Grammar      string
	GrammarRoot  string // GBNF start rule; "" = "root"
}

// Session is an llmkv_session. It belongs to its engine: Close frees it, and closing the
// engine frees it too (the Session then returns ErrClosed). The engine keeps track of its
// sessions (events name them), so a Session dropped without Close lives until its engine is
// closed or finalized.
type Session struct {
	e  *engineCore
	mu sync.RWMutex // guards h: shared per call, exclusive to destroy
	h  *raw.Session
	// stream is the active Stream (guarded by e.stMu).
	stream *stream
}

// cmem collects C allocations to free after a call.
type cmem []unsafe.Pointer

func (m *cmem) alloc(n uintptr) unsafe.Pointer {
	p := raw.Malloc(n)
	*m = append(*m, p)
	return p
}

func (m *cmem) str(s string) *byte {
	p := raw.CString(s)
	*m = append(*m, unsafe.Pointer(p))
	return p
}

func (m *cmem) free() {
	for _, p := range *m {
		raw.Free(p)
	}
}

// NewSession is llmkv_session_create.
func (e *Engine) NewSession(opts SessionOptions) (*Session, error) {
	const op = "Engine.NewSession"
	c := e.c
	h, err := c.enter(op)
	if err != nil {
		return nil, err
	}
	defer c.leave()
	var p raw.SessionParams
	raw.SessionParamsInitSized(&p, unsafe.Sizeof(p))
	var m cmem
	defer m.free()
	if opts.Prefix != nil {
		if opts.Prefix.c == nil || opts.Prefix.c.e != c {
			return nil, argErr(op, "the prefix belongs to another engine")
		}
		opts.Prefix.c.mu.RLock()
		defer opts.Prefix.c.mu.RUnlock()
		if opts.Prefix.c.h == nil {
			return nil, closedErr(op, "prefix")
		}
		p.Prefix = opts.Prefix.c.h
	}
	if opts.Sampling != nil {
		p.Sampling = *opts.Sampling
	}
	p.MaxNewTokens = opts.MaxNewTokens
	if n := len(opts.StopTokens); n > 0 {
		t := unsafe.Slice((*int32)(m.alloc(uintptr(n)*4)), n)
		copy(t, opts.StopTokens)
		p.StopTokens, p.NStopTokens = &t[0], uint32(n)
	}
	p.Priority = opts.Priority
	if n := len(opts.StopStrings); n > 0 {
		ptrs := unsafe.Slice((**byte)(m.alloc(uintptr(n)*unsafe.Sizeof(uintptr(0)))), n)
		lens := unsafe.Slice((*uintptr)(m.alloc(uintptr(n)*unsafe.Sizeof(uintptr(0)))), n)
		for i, s := range opts.StopStrings {
			ptrs[i], lens[i] = m.str(s), uintptr(len(s))
		}
		p.StopStrings, p.StopStringLengths, p.NStopStrings = &ptrs[0], &lens[0], uint32(n)
	}
	if n := len(opts.LogitBias); n > 0 {
		b := unsafe.Slice((*raw.LogitBias)(m.alloc(uintptr(n)*unsafe.Sizeof(raw.LogitBias{}))), n)
		copy(b, opts.LogitBias)
		p.LogitBias, p.NLogitBias = &b[0], uint32(n)
	}
	p.MinNewTokens = opts.MinNewTokens
	p.GrammarKind = uint32(opts.GrammarKind)
	if opts.GrammarKind != GrammarNone || opts.Grammar != "" {
		p.Grammar, p.GrammarLen = m.str(opts.Grammar), uintptr(len(opts.Grammar))
	}
	if opts.GrammarRoot != "" {
		p.GrammarRoot = m.str(opts.GrammarRoot)
	}
	c.life.Lock()
	defer c.life.Unlock()
	var sh *raw.Session
	if err := chk(op)(raw.SessionCreate(h, &p, &sh)); err != nil {
		return nil, err
	}
	s := &Session{e: c, h: sh}
	c.sessions[sh] = s
	return s, nil
}

// enter locks the engine and the session shared and returns the live handle.
func (s *Session) enter(op string) (*raw.Session, error) {
	if s == nil || s.e == nil {
		return nil, argErr(op, "nil session")
	}
	if _, err := s.e.enter(op); err != nil {
		return nil, err
	}
	s.mu.RLock()
	if s.h == nil {
		s.mu.RUnlock()
		s.e.leave()
		return nil, closedErr(op, "session")
	}
	return s.h, nil
}

func (s *Session) leave() {
	s.mu.RUnlock()
	s.e.leave()
}

// Close is llmkv_session_destroy. An open Stream ends with ErrClosed. Closing twice, or
// after the engine, is fine.
func (s *Session) Close() error {
	if s == nil || s.e == nil {
		return nil
	}
	c := s.e
	if _, err := c.enter("Session.Close"); err != nil {
		return nil // the engine freed it
	}
	defer c.leave()
	c.life.Lock()
	defer c.life.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.h == nil {
		return nil
	}
	raw.SessionDestroy(s.h)
	delete(c.sessions, s.h)
	s.h = nil
	c.endStream(s, Chunk{Done: true, Err: closedErr("Session.Stream", "session")})
	return nil
}

// Append is llmkv_session_append: queues input tokens.
func (s *Session) Append(tokens []int32) error {
	const op = "Session.Append"
	h, err := s.enter(op)
	if err != nil {
		return err
	}
	defer s.leave()
	return chk(op)(raw.SessionAppend(h, tokPtr(tokens), uintptr(len(tokens))))
}

// AppendText is llmkv_session_append_text: tokenizes text (special tokens parsed, BOS when
// the session is empty and the model wants one) and queues it.
func (s *Session) AppendText(text string) error {
	const op = "Session.AppendText"
	h, err := s.enter(op)
	if err != nil {
		return err
	}
	defer s.leave()
	p, n := goBytes(text)
	return chk(op)(raw.SessionAppendText(h, p, n))
}

// Generate is llmkv_session_generate: asks for up to maxNewTokens tokens (0 = the
// session's default), delivered by Engine.Step / Engine.Run.
func (s *Session) Generate(maxNewTokens uint32) error {
	const op = "Session.Generate"
	h, err := s.enter(op)
	if err != nil {
		return err
	}
	defer s.leave()
	return chk(op)(raw.SessionGenerate(h, maxNewTokens))
}

// Cancel is llmkv_session_cancel: stops generating, keeping the KV of every token so far;
// a DONE event with FinishCancelled follows from the next step.
func (s *Session) Cancel() error {
	const op = "Session.Cancel"
	h, err := s.enter(op)
	if err != nil {
		return err
	}
	defer s.leave()
	return chk(op)(raw.SessionCancel(h))
}

// Park is llmkv_session_park: moves an idle session's KV to the host tier.
func (s *Session) Park() error {
	const op = "Session.Park"
	h, err := s.enter(op)
	if err != nil {
		return err
	}
	defer s.leave()
	return chk(op)(raw.SessionPark(h))
}

// readText drains llmkv_session_read_text; the caller keeps h alive.
func readText(op string, h *raw.Session) (string, error) {
	var out []byte
	var buf [4096]byte
	for {
		var n uintptr
		if err := chk(op)(raw.SessionReadText(h, &buf[0], uintptr(len(buf)), &n)); err != nil {
			return string(out), err
		}
		out = append(out, buf[:n]...)
		if n < uintptr(len(buf))-4 {
			return string(out), nil
		}
	}
}

// ReadText is llmkv_session_read_text: the text generated since the last read (whole UTF-8
// characters). Do not call it on a session that has an open Stream (the stream reads it).
func (s *Session) ReadText() (string, error) {
	const op = "Session.ReadText"
	h, err := s.enter(op)
	if err != nil {
		return "", err
	}
	defer s.leave()
	return readText(op, h)
}

// SessionInfo is llmkv_session_info.
type SessionInfo struct {
	State        SessionState
	FinishReason FinishReason // of the last generation
	NTokens      uint32       // tokens in the context
	NCached      uint32       // tokens whose KV is computed
	NGenerated   uint32       // by the current / last generation
	NBlocks      uint32
	Tier         Tier
	Priority     int32
	StopString   int32 // index of the stop string that ended the last generation; -1 none
	Raw          raw.SessionInfo
}

// Info is llmkv_session_get_info.
func (s *Session) Info() (SessionInfo, error) {
	const op = "Session.Info"
	h, err := s.enter(op)
	if err != nil {
		return SessionInfo{}, err
	}
	defer s.leave()
	r := raw.SessionInfo{StructSize: uint32(unsafe.Sizeof(raw.SessionInfo{}))}
	if err := chk(op)(raw.SessionGetInfo(h, &r)); err != nil {
		return SessionInfo{}, err
	}
	return SessionInfo{State: SessionState(r.State), FinishReason: FinishReason(r.FinishReason), NTokens: r.NTokens,
		NCached: r.NCached, NGenerated: r.NGenerated, NBlocks: r.NBlocks, Tier: Tier(r.Tier), Priority: r.Priority,
		StopString: r.StopString, Raw: r}, nil
}

// Tokens is llmkv_session_get_tokens: the session's context (prompt and generated tokens).
func (s *Session) Tokens() ([]int32, error) {
	const op = "Session.Tokens"
	h, err := s.enter(op)
	if err != nil {
		return nil, err
	}
	defer s.leave()
	buf := make([]int32, 256)
	for {
		var n uintptr
		if err := chk(op)(raw.SessionGetTokens(h, &buf[0], uintptr(len(buf)), &n)); err != nil {
			return nil, err
		}
		if n <= uintptr(len(buf)) {
			return buf[:n], nil
		}
		buf = make([]int32, n)
	}
}

// Fork is llmkv_session_fork: a new session with the same context, sampling state and RNG.
func (s *Session) Fork() (*Session, error) {
	const op = "Session.Fork"
	if s == nil || s.e == nil {
		return nil, argErr(op, "nil session")
	}
	c := s.e
	if _, err := c.enter(op); err != nil {
		return nil, err
	}
	defer c.leave()
	// Lock order: engine, lifetime, session (as Close).
	c.life.Lock()
	defer c.life.Unlock()
	s.mu.RLock()
	defer s.mu.RUnlock()
	h := s.h
	if h == nil {
		return nil, closedErr(op, "session")
	}
	var fh *raw.Session
	if err := chk(op)(raw.SessionFork(h, &fh)); err != nil {
		return nil, err
	}
	f := &Session{e: c, h: fh}
	c.sessions[fh] = f
	return f, nil
}

// ToPrefix is llmkv_session_to_prefix: a prefix holding the session's current context.
func (s *Session) ToPrefix() (*Prefix, error) {
	const op = "Session.ToPrefix"
	h, err := s.enter(op)
	if err != nil {
		return nil, err
	}
	defer s.leave()
	var p *raw.Prefix
	if err := chk(op)(raw.SessionToPrefix(h, &p)); err != nil {
		return nil, err
	}
	return s.e.newPrefix(p), nil
}

// SetGrammar is llmkv_session_set_grammar (GrammarNone removes it; root "" = "root").
func (s *Session) SetGrammar(kind GrammarKind, text, root string) error {
	const op = "Session.SetGrammar"
	h, err := s.enter(op)
	if err != nil {
		return err
	}
	defer s.leave()
	var m cmem
	defer m.free()
	var t, r *byte
	if text != "" {
		t = m.str(text)
	}
	if root != "" {
		r = m.str(root)
	}
	return chk(op)(raw.SessionSetGrammar(h, uint32(kind), t, uintptr(len(text)), r))
}

// SubmitText is llmkv_session_submit_text: queues "append text, then (flags SubmitGenerate)
// generate up to maxNewTokens" for the next step; never waits for a step in progress.
// Failures at that step arrive as an EventError (Engine.Poll / Engine.Step) and SubmitError
// gives their message.
func (s *Session) SubmitText(text string, flags, maxNewTokens uint32) error {
	const op = "Session.SubmitText"
	h, err := s.enter(op)
	if err != nil {
		return err
	}
	defer s.leave()
	p, n := goBytes(text)
	return chk(op)(raw.SessionSubmitText(h, p, n, flags, maxNewTokens))
}

// SubmitTokens is llmkv_session_submit_tokens.
func (s *Session) SubmitTokens(tokens []int32, flags, maxNewTokens uint32) error {
	const op = "Session.SubmitTokens"
	h, err := s.enter(op)
	if err != nil {
		return err
	}
	defer s.leave()
	return chk(op)(raw.SessionSubmitTokens(h, tokPtr(tokens), uintptr(len(tokens)), flags, maxNewTokens))
}

// SubmitCancel is llmkv_session_submit_cancel: a cancel for the next step.
func (s *Session) SubmitCancel() error {
	const op = "Session.SubmitCancel"
	h, err := s.enter(op)
	if err != nil {
		return err
	}
	defer s.leave()
	return chk(op)(raw.SessionSubmitCancel(h))
}

func submitError(op string, h *raw.Session) (string, error) {
	buf := make([]byte, 512)
	for {
		var n uintptr
		if err := chk(op)(raw.SessionSubmitError(h, &buf[0], uintptr(len(buf)), &n)); err != nil {
			return "", err
		}
		if n < uintptr(len(buf)) {
			return string(buf[:n]), nil
		}
		buf = make([]byte, n+1)
	}
}

// SubmitError is llmkv_session_submit_error: the message of the session's last submitted
// request that failed ("" if none).
func (s *Session) SubmitError() (string, error) {
	const op = "Session.SubmitError"
	h, err := s.enter(op)
	if err != nil {
		return "", err
	}
	defer s.leave()
	return submitError(op, h)
}
