package llmkv_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"llmkv.dev/llmkv"
)

func TestStatusNames(t *testing.T) {
	cases := map[llmkv.Status]string{
		llmkv.StatusOK: "LLMKV_OK", llmkv.StatusInvalidArgument: "LLMKV_ERR_INVALID_ARGUMENT",
		llmkv.StatusOutOfMemory: "LLMKV_ERR_OUT_OF_MEMORY", llmkv.StatusKVCapacity: "LLMKV_ERR_KV_CAPACITY",
		llmkv.StatusIO: "LLMKV_ERR_IO", llmkv.StatusModelFormat: "LLMKV_ERR_MODEL_FORMAT",
		llmkv.StatusUnsupported: "LLMKV_ERR_UNSUPPORTED", llmkv.StatusBackend: "LLMKV_ERR_BACKEND",
		llmkv.StatusState: "LLMKV_ERR_STATE", llmkv.StatusSnapshotFormat: "LLMKV_ERR_SNAPSHOT_FORMAT",
		llmkv.StatusCancelled: "LLMKV_ERR_CANCELLED", llmkv.StatusInternal: "LLMKV_ERR_INTERNAL",
		llmkv.Status(-42): "LLMKV_ERR_UNKNOWN",
	}
	for st, name := range cases {
		if got := st.String(); got != name {
			t.Errorf("Status(%d).String() = %q, want %q", int32(st), got, name)
		}
	}
	if v, n := llmkv.Version(); n/100 != 6 || !strings.HasPrefix(v, "0.6.") {
		t.Errorf("library version %s (%d), want 0.6.x", v, n)
	}
}

func TestErrorsIsAndAs(t *testing.T) {
	err := fmt.Errorf("wrapped: %w", &llmkv.Error{Status: llmkv.StatusKVCapacity, Op: "X", Message: "pool full"})
	if !errors.Is(err, llmkv.ErrKVCapacity) || errors.Is(err, llmkv.ErrState) || errors.Is(err, llmkv.ErrClosed) {
		t.Errorf("errors.Is against the sentinels is wrong for %v", err)
	}
	var le *llmkv.Error
	if !errors.As(err, &le) || le.Status != llmkv.StatusKVCapacity || le.Message != "pool full" {
		t.Errorf("errors.As: %+v", le)
	}
	if s := err.Error(); !strings.Contains(s, "LLMKV_ERR_KV_CAPACITY") || !strings.Contains(s, "pool full") || !strings.Contains(s, "X") {
		t.Errorf("Error() = %q lacks the status, op or message", s)
	}
}

// Engine creation failures that need no model file.
func TestNewEngineErrors(t *testing.T) {
	_, err := llmkv.NewEngine(llmkv.EngineOptions{})
	wantErr(t, err, llmkv.ErrInvalidArgument, llmkv.StatusInvalidArgument, "ModelPath")

	missing := filepath.Join(t.TempDir(), "no-such-model.gguf")
	_, err = llmkv.NewEngine(llmkv.EngineOptions{ModelPath: missing})
	wantErr(t, err, llmkv.ErrIO, llmkv.StatusIO, "no-such-model.gguf")

	junk := filepath.Join(t.TempDir(), "junk.gguf")
	if err := os.WriteFile(junk, []byte(strings.Repeat("this is not a gguf file\n", 100)), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = llmkv.NewEngine(llmkv.EngineOptions{ModelPath: junk})
	wantErr(t, err, llmkv.ErrModelFormat, llmkv.StatusModelFormat)
}

// Bad values of the 0.4 fields and others are INVALID_ARGUMENT naming the field.
func TestNewEngineBadValues(t *testing.T) {
	o := opts(t)
	o.ThreadPriority = 20
	_, err := llmkv.NewEngine(o)
	wantErr(t, err, llmkv.ErrInvalidArgument, llmkv.StatusInvalidArgument, "thread_priority")

	o = opts(t)
	o.ThreadPriority = -1
	_, err = llmkv.NewEngine(o)
	wantErr(t, err, llmkv.ErrInvalidArgument, llmkv.StatusInvalidArgument, "thread_priority")

	o = opts(t)
	o.SpinUS = llmkv.Int32(100001)
	_, err = llmkv.NewEngine(o)
	wantErr(t, err, llmkv.ErrInvalidArgument, llmkv.StatusInvalidArgument, "spin_us")

	o = opts(t)
	o.KVDtypeK = llmkv.KVDtype(99)
	_, err = llmkv.NewEngine(o)
	wantErr(t, err, llmkv.ErrInvalidArgument, llmkv.StatusInvalidArgument)

	// The accepted extremes of the 0.4 fields.
	o = opts(t)
	o.ThreadPriority = 19
	o.SpinUS = llmkv.Int32(100000)
	e, err := llmkv.NewEngine(o)
	if err != nil {
		t.Fatalf("ThreadPriority 19, SpinUS 100000: %v", err)
	}
	e.Close()
}

// The detail message comes from the failing call itself, even when many goroutines fail
// differently at once and move between OS threads between cgo calls.
func TestErrorMessagesPerCall(t *testing.T) {
	e := newEngine(t, opts(t))
	info, err := e.Info()
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			s, err := e.NewSession(llmkv.SessionOptions{})
			if err != nil {
				t.Errorf("NewSession: %v", err)
				return
			}
			defer s.Close()
			for i := 0; i < 50; i++ {
				runtime.Gosched()
				if g%2 == 0 {
					err := s.Append([]int32{int32(info.NVocab) + int32(g)})
					var le *llmkv.Error
					if !errors.As(err, &le) || le.Status != llmkv.StatusInvalidArgument || !strings.Contains(strings.ToLower(le.Message), "token") {
						t.Errorf("bad token: %v", err)
						return
					}
				} else {
					err := s.Generate(1) // nothing in the context to continue from
					var le *llmkv.Error
					if !errors.As(err, &le) || le.Status != llmkv.StatusState || le.Message == "" || strings.Contains(strings.ToLower(le.Message), "vocab") {
						t.Errorf("generate on an empty session: %v", err)
						return
					}
				}
			}
		}(g)
	}
	wg.Wait()
}

func TestBadArguments(t *testing.T) {
	e := newEngine(t, opts(t))
	info, err := e.Info()
	if err != nil {
		t.Fatal(err)
	}
	if info.NVocab == 0 || info.Architecture != "llama" {
		t.Errorf("engine info: %+v", info)
	}
	s := newSession(t, e, llmkv.SessionOptions{})

	// A token outside the vocabulary: append, detokenize, prefix, submit (at once: a bad
	// token of a submit arrives as an ERROR event, tested with the worker).
	wantErr(t, s.Append([]int32{1, int32(info.NVocab)}), llmkv.ErrInvalidArgument, llmkv.StatusInvalidArgument, "token")
	wantErr(t, s.Append([]int32{-1}), llmkv.ErrInvalidArgument, llmkv.StatusInvalidArgument, "token")
	_, err = e.Detokenize([]int32{int32(info.NVocab) + 100})
	wantErr(t, err, llmkv.ErrInvalidArgument, llmkv.StatusInvalidArgument)
	_, err = e.NewPrefix([]int32{int32(info.NVocab)})
	wantErr(t, err, llmkv.ErrInvalidArgument, llmkv.StatusInvalidArgument, "token")
	_, err = e.NewPrefix(nil)
	wantErr(t, err, llmkv.ErrInvalidArgument, llmkv.StatusInvalidArgument)
	// Nothing was queued by the failed appends.
	if si, err := s.Info(); err != nil || si.NTokens != 0 {
		t.Errorf("after failed appends: %+v %v", si, err)
	}

	// Bad values in calls.
	wantErr(t, s.SubmitText("hi", 0x80, 1), llmkv.ErrInvalidArgument, llmkv.StatusInvalidArgument)
	wantErr(t, s.SetGrammar(llmkv.GrammarGBNF, "root ::= (", ""), llmkv.ErrInvalidArgument, llmkv.StatusInvalidArgument)
	wantErr(t, s.SetGrammar(llmkv.GrammarKind(7), "x", ""), llmkv.ErrInvalidArgument, llmkv.StatusInvalidArgument)
	_, err = e.NewSession(llmkv.SessionOptions{GrammarKind: llmkv.GrammarJSONSchema, Grammar: "{not json"})
	wantErr(t, err, llmkv.ErrInvalidArgument, llmkv.StatusInvalidArgument)
	_, err = e.ChatFormat([]llmkv.ChatMessage{{Role: "wizard", Content: "x"}}, true)
	wantErr(t, err, llmkv.ErrInvalidArgument, llmkv.StatusInvalidArgument, "wizard")
	wantErr(t, s.Cancel(), llmkv.ErrState, llmkv.StatusState)
	wantErr(t, s.Generate(4), llmkv.ErrState, llmkv.StatusState)
	_, err = e.Tokenize("a\x04b", llmkv.TokenizeStrict)
	wantErr(t, err, llmkv.ErrInvalidArgument, llmkv.StatusInvalidArgument)
	if toks, err := e.Tokenize("a\x04b", 0); err != nil || len(toks) == 0 {
		t.Errorf("non-strict tokenize drops the byte: %v %v", toks, err)
	}
	if err := s.Park(); !errors.Is(err, llmkv.ErrUnsupported) {
		t.Errorf("Park without a host tier: %v, want UNSUPPORTED", err)
	}

	// A prefix of another engine.
	e2 := newEngine(t, opts(t))
	toks, err := e2.Tokenize("Hello there, how are you", 0)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := e2.NewPrefix(toks)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.NewSession(llmkv.SessionOptions{Prefix: p2})
	wantErr(t, err, llmkv.ErrInvalidArgument, llmkv.StatusInvalidArgument, "another engine")

	// Closed handles: a closed session, prefix, and everything of a closed engine.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wantErr(t, s.AppendText("hi"), llmkv.ErrClosed, llmkv.StatusInvalidArgument, "session is closed")
	if !errors.Is(s.AppendText("hi"), llmkv.ErrInvalidArgument) {
		t.Error("a closed-handle error does not match ErrInvalidArgument")
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := p2.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = p2.Tokens()
	wantErr(t, err, llmkv.ErrClosed, llmkv.StatusInvalidArgument, "prefix is closed")
	_, err = e2.NewSession(llmkv.SessionOptions{Prefix: p2})
	wantErr(t, err, llmkv.ErrClosed, llmkv.StatusInvalidArgument, "prefix is closed")

	s2 := newSession(t, e2, llmkv.SessionOptions{})
	p3, err := e2.NewPrefix(toks)
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.AppendText("hello"); err != nil {
		t.Fatal(err)
	}
	e2.Close()
	wantErr(t, s2.AppendText("hi"), llmkv.ErrClosed, llmkv.StatusInvalidArgument, "engine is closed")
	_, err = s2.Info()
	wantErr(t, err, llmkv.ErrClosed, llmkv.StatusInvalidArgument, "engine is closed")
	_, err = s2.Fork()
	wantErr(t, err, llmkv.ErrClosed, llmkv.StatusInvalidArgument)
	wantErr(t, p3.Save(filepath.Join(t.TempDir(), "x.snap")), llmkv.ErrClosed, llmkv.StatusInvalidArgument)
	_, err = e2.Step()
	wantErr(t, err, llmkv.ErrClosed, llmkv.StatusInvalidArgument, "engine is closed")
	_, err = e2.NewSession(llmkv.SessionOptions{})
	wantErr(t, err, llmkv.ErrClosed, llmkv.StatusInvalidArgument)
	if err := s2.Close(); err != nil || p3.Close() != nil || e2.Close() != nil {
		t.Error("closing after the engine must be a no-op")
	}
	if p3.Len() != 0 {
		t.Error("Len of a closed prefix")
	}
}
