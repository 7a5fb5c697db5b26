package llmkv_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"llmkv.dev/llmkv"
)

// pollUntil polls until every session has its DONE or ERROR event.
func pollUntil(t *testing.T, e *llmkv.Engine, ss ...*llmkv.Session) map[*llmkv.Session]*result {
	t.Helper()
	res := map[*llmkv.Session]*result{}
	for _, s := range ss {
		res[s] = &result{}
	}
	live := len(ss)
	deadline := time.Now().Add(5 * time.Minute) // a hung worker fails instead of hanging
	for live > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the worker delivered no DONE event")
		}
		evs, err := e.Poll(50 * time.Millisecond)
		if err != nil {
			t.Fatalf("Poll: %v", err)
		}
		for _, ev := range evs {
			r := res[ev.Session]
			if r == nil {
				continue
			}
			switch ev.Kind {
			case llmkv.EventToken:
				r.tokens = append(r.tokens, ev.Token)
			case llmkv.EventDone:
				r.finish = ev.FinishReason
				live--
			case llmkv.EventError:
				r.err = ev.Status
				live--
			}
		}
	}
	return res
}

func TestWorkerSubmitPoll(t *testing.T) {
	o := opts(t)
	o.ThreadPriority = 5
	e := newEngine(t, o)
	prompt := chat(t, e, prompts8[1])
	want := complete(t, e, prompt, 10)

	if err := e.StartWorker(); err != nil {
		t.Fatalf("StartWorker: %v", err)
	}
	wantErr(t, e.StartWorker(), llmkv.ErrState, llmkv.StatusState)
	_, err := e.Step()
	wantErr(t, err, llmkv.ErrState, llmkv.StatusState)
	wantErr(t, e.Run(nil), llmkv.ErrState, llmkv.StatusState)

	s := newSession(t, e, llmkv.SessionOptions{})
	if err := s.SubmitText(prompt, llmkv.SubmitGenerate, 10); err != nil {
		t.Fatalf("SubmitText: %v", err)
	}
	r := pollUntil(t, e, s)[s]
	if r.err != 0 || r.finish != llmkv.FinishLength || !equalTokens(r.tokens, want) {
		t.Errorf("worker: %+v, stepping: %v", r, want)
	}
	text, err := s.ReadText()
	wantText := wholeChars(t, e, want)
	if err != nil || text == "" || text != wantText {
		t.Errorf("ReadText %q %v, want %q", text, err, wantText)
	}
	if msg, err := s.SubmitError(); err != nil || msg != "" {
		t.Errorf("SubmitError with no failure: %q %v", msg, err)
	}

	// A submitted request that fails arrives as an ERROR event; SubmitError says why, and the
	// session is as before the request.
	info, _ := e.Info()
	before, _ := s.Tokens()
	if err := s.SubmitTokens([]int32{int32(info.NVocab) + 3}, llmkv.SubmitGenerate, 4); err != nil {
		t.Fatalf("SubmitTokens returned at once: %v", err)
	}
	r = pollUntil(t, e, s)[s]
	if r.err != llmkv.StatusInvalidArgument || len(r.tokens) != 0 {
		t.Errorf("bad token submit: %+v, want an ERROR event with INVALID_ARGUMENT", r)
	}
	msg, err := s.SubmitError()
	if err != nil || !strings.Contains(strings.ToLower(msg), "token") {
		t.Errorf("SubmitError: %q %v", msg, err)
	}
	if after, _ := s.Tokens(); !equalTokens(before, after) {
		t.Errorf("the failed request changed the context: %d -> %d tokens", len(before), len(after))
	}
	// Generating while generating: STATE as an ERROR event.
	if err := s.SubmitText(" And more.", llmkv.SubmitGenerate, 50); err != nil {
		t.Fatal(err)
	}
	if err := s.SubmitText("", llmkv.SubmitGenerate, 5); err != nil {
		t.Fatal(err)
	}
	var sawState, sawDone bool
	for deadline := time.Now().Add(5 * time.Minute); !(sawState && sawDone) && time.Now().Before(deadline); {
		evs, err := e.Poll(50 * time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Kind == llmkv.EventError && ev.Status == llmkv.StatusState {
				sawState = true
			}
			if ev.Kind == llmkv.EventDone {
				sawDone = true
			}
		}
	}
	if !sawState || !sawDone {
		t.Errorf("second generate while generating: STATE event %v, DONE %v", sawState, sawDone)
	}
	if msg, _ := s.SubmitError(); msg == "" {
		t.Error("no SubmitError message for the STATE failure")
	}
	s.ReadText()

	// Cancel through the worker. End-of-generation tokens are banned for this session, so
	// only the cancel can end the generation early (the model may well stop at once otherwise).
	s = newSession(t, e, llmkv.SessionOptions{MinNewTokens: 200})
	if err := s.SubmitText(prompt, llmkv.SubmitGenerate, 200); err != nil {
		t.Fatal(err)
	}
	n := 0
	finish := llmkv.FinishNone
	for deadline := time.Now().Add(5 * time.Minute); finish == llmkv.FinishNone && time.Now().Before(deadline); {
		evs, err := e.Poll(50 * time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Kind == llmkv.EventToken {
				n++
				if n == 2 {
					if err := s.SubmitCancel(); err != nil {
						t.Fatal(err)
					}
				}
			}
			if ev.Kind == llmkv.EventDone {
				finish = ev.FinishReason
			}
		}
	}
	if finish != llmkv.FinishCancelled || n >= 200 {
		t.Errorf("submit cancel: finish %v after %d tokens", finish, n)
	}

	if err := e.StopWorker(); err != nil {
		t.Fatalf("StopWorker: %v", err)
	}
	if err := e.StopWorker(); err != nil {
		t.Errorf("stopping a stopped worker: %v", err)
	}
	// Stepping is the host's again.
	if _, err := e.Step(); err != nil {
		t.Errorf("Step after StopWorker: %v", err)
	}
}

// collectStream reads a stream to its end.
func collectStream(t *testing.T, ch <-chan llmkv.Chunk) ([]int32, string, llmkv.Chunk) {
	t.Helper()
	var toks []int32
	var text strings.Builder
	var last llmkv.Chunk
	for c := range ch {
		if c.Done {
			last = c
		} else {
			toks = append(toks, c.Token)
		}
		text.WriteString(c.Text)
	}
	if !last.Done {
		t.Error("the stream closed without a final chunk")
	}
	return toks, text.String(), last
}

// Eight sessions streamed concurrently, each from its own goroutine, produce exactly the
// tokens and text each produces alone.
func TestStreamEightConcurrent(t *testing.T) {
	e := newEngine(t, opts(t))
	alone := make([][]int32, len(prompts8))
	finish := make([]llmkv.FinishReason, len(prompts8))
	texts := make([]string, len(prompts8))
	for i, p := range prompts8 {
		alone[i], finish[i] = completeFinish(t, e, chat(t, e, p), 12)
		texts[i] = wholeChars(t, e, alone[i])
	}
	var wg sync.WaitGroup
	for i, p := range prompts8 {
		s := newSession(t, e, llmkv.SessionOptions{})
		ch, err := s.Stream(context.Background(), chat(t, e, p), 12)
		if err != nil {
			t.Fatalf("Stream: %v", err)
		}
		wg.Add(1)
		go func(i int, ch <-chan llmkv.Chunk) {
			defer wg.Done()
			toks, text, last := collectStream(t, ch)
			if last.Err != nil || last.Finish != finish[i] {
				t.Errorf("stream %d ended with %+v", i, last)
			}
			if !equalTokens(toks, alone[i]) || text != texts[i] {
				t.Errorf("stream %d: %v %q, alone: %v %q", i, toks, text, alone[i], texts[i])
			}
		}(i, ch)
	}
	wg.Wait()
	_, err := e.Poll(0)
	wantErr(t, err, llmkv.ErrState, llmkv.StatusState, "dispatcher")
}

func TestStreamCancelAndErrors(t *testing.T) {
	o := opts(t)
	o.MaxContext = 256
	e := newEngine(t, o)
	s := newSession(t, e, llmkv.SessionOptions{})
	prompt := chat(t, e, "Write a very long story about a lighthouse keeper.")
	promptToks, _ := e.Tokenize(prompt, llmkv.TokenizeAddBOS|llmkv.TokenizeParseSpecial)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := s.Stream(ctx, prompt, 200)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stream(context.Background(), "more", 4); !errors.Is(err, llmkv.ErrState) {
		t.Errorf("a second stream on one session: %v", err)
	}
	var toks []int32
	var last llmkv.Chunk
	for c := range ch {
		if c.Done {
			last = c
			break
		}
		toks = append(toks, c.Token)
		if len(toks) == 3 {
			cancel()
		}
	}
	if last.Err != nil || last.Finish != llmkv.FinishCancelled || len(toks) < 3 || len(toks) >= 200 {
		t.Fatalf("cancelled stream: %d tokens, final %+v", len(toks), last)
	}
	si, err := s.Info()
	if err != nil {
		t.Fatal(err)
	}
	if si.FinishReason != llmkv.FinishCancelled || int(si.NGenerated) != len(toks) || int(si.NTokens) != len(promptToks)+len(toks) {
		t.Errorf("after a cancelled stream: %+v (prompt %d, streamed %d)", si, len(promptToks), len(toks))
	}
	// An ended context refuses to start.
	if _, err := s.Stream(ctx, "x", 4); !errors.Is(err, context.Canceled) {
		t.Errorf("Stream with an ended context: %v", err)
	}

	// A request that fails in the worker ends the stream with its status and message.
	long := strings.Repeat("The lighthouse keeper climbed the stairs again. ", 40)
	s2 := newSession(t, e, llmkv.SessionOptions{})
	ch, err = s2.Stream(context.Background(), long, 8)
	if err != nil {
		t.Fatal(err)
	}
	toks2, _, last := collectStream(t, ch)
	if len(toks2) != 0 {
		t.Errorf("a failed request streamed %d tokens", len(toks2))
	}
	wantErr(t, last.Err, llmkv.ErrKVCapacity, llmkv.StatusKVCapacity)

	// The session keeps working after both.
	ch, err = s2.Stream(context.Background(), chat(t, e, "Hi!"), 4)
	if err != nil {
		t.Fatal(err)
	}
	if toks, text, last := collectStream(t, ch); len(toks) == 0 || text == "" || last.Err != nil {
		t.Errorf("stream after a failure: %v %q %+v", toks, text, last)
	}

	// Closing the session ends its stream; closing the engine ends every stream.
	s3 := newSession(t, e, llmkv.SessionOptions{})
	ch3, err := s3.Stream(context.Background(), prompt, 200)
	if err != nil {
		t.Fatal(err)
	}
	<-ch3
	s3.Close()
	if _, _, last := collectStream(t, ch3); !errors.Is(last.Err, llmkv.ErrClosed) && last.Finish == llmkv.FinishNone {
		t.Errorf("stream of a closed session ended with %+v", last)
	}
	s4 := newSession(t, e, llmkv.SessionOptions{})
	ch4, err := s4.Stream(context.Background(), prompt, 200)
	if err != nil {
		t.Fatal(err)
	}
	<-ch4
	e.Close()
	if _, _, last := collectStream(t, ch4); !errors.Is(last.Err, llmkv.ErrClosed) && last.Finish == llmkv.FinishNone {
		t.Errorf("stream of a closed engine ended with %+v", last)
	}
	if _, err := s4.Stream(context.Background(), "x", 1); !errors.Is(err, llmkv.ErrClosed) {
		t.Errorf("Stream on a closed engine: %v", err)
	}
}
