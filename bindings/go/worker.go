package llmkv

import (
	"context"
	"time"

	"llmkv.dev/llmkv/raw"
)

// StartWorker is llmkv_worker_start: the engine's own thread steps whenever a session has
// work. While it runs, Step and Run return StatusState; submit requests with
// Session.SubmitText / SubmitTokens / SubmitCancel and collect events with Poll (or use
// Session.Stream, which starts the worker itself).
func (e *Engine) StartWorker() error {
	const op = "Engine.StartWorker"
	c := e.c
	h, err := c.enter(op)
	if err != nil {
		return err
	}
	defer c.leave()
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := chk(op)(raw.WorkerStart(h)); err != nil {
		return err
	}
	c.workerOn = true
	return nil
}

// StopWorker is llmkv_worker_stop (after the step in progress). Streams still open end with
// a StatusState error; queued events stay for Poll and Step.
func (e *Engine) StopWorker() error {
	const op = "Engine.StopWorker"
	c := e.c
	c.stopDispatcher()
	h, err := c.enter(op)
	if err != nil {
		return err
	}
	defer c.leave()
	c.wmu.Lock()
	err = chk(op)(raw.WorkerStop(h))
	c.workerOn = false
	c.wmu.Unlock()
	c.life.RLock()
	for _, s := range c.sessions {
		c.endStream(s, Chunk{Token: -1, Done: true, Err: &Error{Status: StatusState, Op: "Session.Stream", Message: "the engine's worker was stopped"}})
	}
	c.life.RUnlock()
	return err
}

// Poll is llmkv_worker_poll: up to 256 queued events, waiting up to timeout for a first one
// (0 = return at once). A failed step of the worker is returned once as an error. Not
// available while Session.Stream's dispatcher owns the engine's events (StatusState).
func (e *Engine) Poll(timeout time.Duration) ([]Event, error) {
	const op = "Engine.Poll"
	c := e.c
	h, err := c.enter(op)
	if err != nil {
		return nil, err
	}
	defer c.leave()
	c.wmu.Lock()
	busy := c.disp != nil
	c.wmu.Unlock()
	if busy {
		return nil, &Error{Status: StatusState, Op: op, Message: "Session.Stream's dispatcher is polling this engine's events"}
	}
	us := timeout.Microseconds()
	if us < 0 {
		us = 0
	} else if us > 1<<31 {
		us = 1 << 31
	}
	c.life.RLock()
	defer c.life.RUnlock()
	var buf [eventBatch]raw.Event
	var n uintptr
	st, msg := raw.WorkerPoll(h, &buf[0], eventBatch, uint32(us), &n)
	out := make([]Event, n)
	for i := range out {
		out[i] = c.event(&buf[i])
	}
	return out, check(op, st, msg)
}

// Chunk is one piece of a streamed generation (Session.Stream).
type Chunk struct {
	Token  int32        // the generated token; -1 in the final chunk
	Text   string       // text that became readable (whole UTF-8 characters; may be "")
	Done   bool         // the final chunk: the channel closes after it
	Finish FinishReason // with Done: why generation ended (FinishCancelled after ctx ended)
	// Err, with Done: the request failed (an *Error with the status and the library's
	// message), or the session or engine was closed (ErrClosed), or the worker stopped.
	Err error
}

type stream struct {
	mu    chanMutex
	q     []Chunk
	ended bool
	wake  chan struct{}
	out   chan Chunk
}

// chanMutex is a tiny mutex (a buffered channel) so that stream has no copy-lock hazards.
type chanMutex chan struct{}

func (m chanMutex) Lock()   { m <- struct{}{} }
func (m chanMutex) Unlock() { <-m }

func (st *stream) push(ch Chunk) {
	st.mu.Lock()
	if st.ended {
		st.mu.Unlock()
		return
	}
	st.q = append(st.q, ch)
	if ch.Done {
		st.ended = true
	}
	st.mu.Unlock()
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// endStream detaches the session's stream (if any) and queues its final chunk.
func (c *engineCore) endStream(s *Session, final Chunk) {
	c.stMu.Lock()
	st := s.stream
	s.stream = nil
	c.stMu.Unlock()
	if st != nil {
		if final.Token == 0 {
			final.Token = -1
		}
		st.push(final)
	}
}

// Stream submits prompt (text appended to the session, then up to maxNewTokens generated;
// 0 = the session's default) to the engine's worker thread, which it starts if needed, and
// returns a channel of the generation's chunks: one per token, then a final one (Done) with
// the finish reason or the error. The channel closes after the final chunk; read it to the
// end. Ending ctx submits a cancel: the stream then ends with FinishCancelled (or the reason
// the generation ended by before the cancel arrived), keeping the KV of the tokens so far.
//
// One goroutine per engine polls the worker's events and routes them to the streams; while it
// runs, Engine.Poll is unavailable and events of sessions without a stream are dropped. One
// stream per session at a time (StatusState otherwise); don't call ReadText on a streaming
// session.
func (s *Session) Stream(ctx context.Context, prompt string, maxNewTokens uint32) (<-chan Chunk, error) {
	const op = "Session.Stream"
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	h, err := s.enter(op)
	if err != nil {
		return nil, err
	}
	defer s.leave()
	c := s.e
	if err := c.ensureDispatcher(op); err != nil {
		return nil, err
	}
	st := &stream{mu: make(chanMutex, 1), wake: make(chan struct{}, 1), out: make(chan Chunk)}
	c.stMu.Lock()
	if s.stream != nil {
		c.stMu.Unlock()
		return nil, &Error{Status: StatusState, Op: op, Message: "the session already has an open stream"}
	}
	s.stream = st
	c.stMu.Unlock()
	p, n := goBytes(prompt)
	if err := chk(op)(raw.SessionSubmitText(h, p, n, raw.LLMKV_SUBMIT_GENERATE, maxNewTokens)); err != nil {
		c.stMu.Lock()
		if s.stream == st {
			s.stream = nil
		}
		c.stMu.Unlock()
		return nil, err
	}
	go st.forward(ctx, s)
	return st.out, nil
}

// forward hands the stream's chunks to its channel and turns the end of ctx into a cancel.
func (st *stream) forward(ctx context.Context, s *Session) {
	defer close(st.out)
	done := ctx.Done()
	cancel := func() {
		done = nil
		_ = s.SubmitCancel() // ErrClosed once the session is gone: nothing to cancel
	}
	for {
		st.mu.Lock()
		if len(st.q) == 0 {
			st.mu.Unlock()
			select {
			case <-st.wake:
			case <-done:
				cancel()
			}
			continue
		}
		ch := st.q[0]
		st.q = st.q[1:]
		st.mu.Unlock()
	send:
		for {
			select {
			case st.out <- ch:
				break send
			case <-done:
				cancel()
			}
		}
		if ch.Done {
			return
		}
	}
}

type dispatcher struct {
	stop chan struct{}
	done chan struct{}
}

// pollTimeout bounds how long the dispatcher holds the engine's lifetime lock per poll (a
// session's creation or Close waits at most that long); events end a poll at once.
const pollTimeout = 20 * time.Millisecond

// ensureDispatcher starts the worker and the event dispatcher if they are not running. The
// caller holds c.mu shared.
func (c *engineCore) ensureDispatcher(op string) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if !c.workerOn {
		if err := chk(op)(raw.WorkerStart(c.h)); err != nil {
			return err
		}
		c.workerOn = true
	}
	if c.disp == nil {
		d := &dispatcher{stop: make(chan struct{}), done: make(chan struct{})}
		c.disp = d
		go c.dispatch(d)
	}
	return nil
}

func (c *engineCore) stopDispatcher() {
	c.wmu.Lock()
	d := c.disp
	c.disp = nil
	c.wmu.Unlock()
	if d != nil {
		close(d.stop)
		<-d.done
	}
}

func (c *engineCore) dispatch(d *dispatcher) {
	defer close(d.done)
	var buf [64]raw.Event
	for {
		select {
		case <-d.stop:
			return
		default:
		}
		h, err := c.enter("dispatch")
		if err != nil {
			return
		}
		c.life.RLock()
		var n uintptr
		st, msg := raw.WorkerPoll(h, &buf[0], uintptr(len(buf)), uint32(pollTimeout.Microseconds()), &n)
		for i := uintptr(0); i < n; i++ {
			c.route(&buf[i])
		}
		if st == raw.LLMKV_ERR_BACKEND || st == raw.LLMKV_ERR_INTERNAL {
			// The worker has stopped: no stream can finish.
			for _, s := range c.sessions {
				c.endStream(s, Chunk{Done: true, Err: check("Session.Stream", st, msg)})
			}
		}
		c.life.RUnlock()
		c.leave()
		if st == raw.LLMKV_ERR_BACKEND || st == raw.LLMKV_ERR_INTERNAL {
			c.wmu.Lock()
			c.workerOn = false
			if c.disp == d {
				c.disp = nil
			}
			c.wmu.Unlock()
			return
		}
	}
}

// route hands one event to its session's stream; the caller holds c.mu and c.life shared,
// so the session is alive.
func (c *engineCore) route(ev *raw.Event) {
	s := c.sessions[ev.Session]
	if s == nil {
		return
	}
	c.stMu.Lock()
	st := s.stream
	c.stMu.Unlock()
	if st == nil {
		return
	}
	const op = "Session.Stream"
	switch EventKind(ev.Kind) {
	case EventToken:
		text, err := readText(op, ev.Session)
		if err != nil {
			c.endStream(s, Chunk{Done: true, Err: err})
			return
		}
		st.push(Chunk{Token: ev.Token, Text: text})
	case EventDone:
		text, err := readText(op, ev.Session)
		c.endStream(s, Chunk{Token: -1, Text: text, Done: true, Finish: FinishReason(ev.FinishReason), Err: err})
	case EventError:
		msg, _ := submitError(op, ev.Session)
		c.endStream(s, Chunk{Token: -1, Done: true, Err: &Error{Status: Status(ev.Status), Op: op, Message: msg}})
	}
}
