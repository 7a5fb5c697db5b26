package llmkv_test

import (
	"errors"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"llmkv.dev/llmkv"
)

// modelPath returns $LLMKV_MODEL or skips the test, saying why.
func modelPath(t testing.TB) string {
	t.Helper()
	p := os.Getenv("LLMKV_MODEL")
	if p == "" {
		t.Skip("SKIP: LLMKV_MODEL is not set; this test needs a GGUF model (e.g. SmolLM2-135M-Instruct.Q4_1.gguf)")
	}
	if _, err := os.Stat(p); err != nil {
		t.Skipf("SKIP: LLMKV_MODEL=%s: %v", p, err)
	}
	return p
}

// opts are engine options for tests: two threads that never spin (the CI machine is shared).
func opts(t testing.TB) llmkv.EngineOptions {
	return llmkv.EngineOptions{ModelPath: modelPath(t), Threads: 2, SpinUS: llmkv.Int32(0)}
}

func newEngine(t testing.TB, o llmkv.EngineOptions) *llmkv.Engine {
	t.Helper()
	e, err := llmkv.NewEngine(o)
	if err != nil {
		t.Fatalf("NewEngine: %v", err)
	}
	t.Cleanup(func() {
		if err := e.Validate(); err != nil && !errors.Is(err, llmkv.ErrClosed) {
			t.Errorf("Validate at the end: %v", err)
		}
		e.Close()
	})
	return e
}

func newSession(t testing.TB, e *llmkv.Engine, o llmkv.SessionOptions) *llmkv.Session {
	t.Helper()
	s, err := e.NewSession(o)
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	return s
}

// chat wraps a user message in the model's chat template.
func chat(t testing.TB, e *llmkv.Engine, user string) string {
	t.Helper()
	p, err := e.ChatFormat([]llmkv.ChatMessage{{Role: "user", Content: user}}, true)
	if err != nil {
		t.Fatalf("ChatFormat: %v", err)
	}
	return p
}

type result struct {
	tokens []int32
	finish llmkv.FinishReason
	err    llmkv.Status
}

// drive steps the engine until every given session has its DONE or ERROR event, and returns
// each session's tokens and finish reason.
func drive(t testing.TB, e *llmkv.Engine, ss ...*llmkv.Session) map[*llmkv.Session]*result {
	t.Helper()
	res := map[*llmkv.Session]*result{}
	for _, s := range ss {
		res[s] = &result{}
	}
	live := len(ss)
	for steps := 0; live > 0; steps++ {
		if steps > 100000 {
			t.Fatalf("no end after %d steps", steps)
		}
		evs, err := e.Step()
		if err != nil {
			t.Fatalf("Step: %v", err)
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

// complete runs prompt through a fresh session alone and returns its greedy tokens.
func complete(t testing.TB, e *llmkv.Engine, prompt string, n uint32) []int32 {
	t.Helper()
	toks, _ := completeFinish(t, e, prompt, n)
	return toks
}

// completeFinish is complete with the finish reason.
func completeFinish(t testing.TB, e *llmkv.Engine, prompt string, n uint32) ([]int32, llmkv.FinishReason) {
	t.Helper()
	s := newSession(t, e, llmkv.SessionOptions{})
	defer s.Close()
	if err := s.AppendText(prompt); err != nil {
		t.Fatal(err)
	}
	if err := s.Generate(n); err != nil {
		t.Fatal(err)
	}
	r := drive(t, e, s)[s]
	if r.err != 0 {
		t.Fatalf("generation failed: %v", r.err)
	}
	if len(r.tokens) == 0 {
		t.Fatalf("no tokens for %q", prompt)
	}
	return r.tokens, r.finish
}

// wholeChars is the text of tokens up to its last whole UTF-8 character: what read_text
// hands out when a generation ends inside a character (the rest waits for the next token).
func wholeChars(t testing.TB, e *llmkv.Engine, tokens []int32) string {
	t.Helper()
	s, err := e.Detokenize(tokens)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3 && !utf8.ValidString(s); i++ {
		s = s[:len(s)-1]
	}
	return s
}

func equalTokens(a, b []int32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// wantErr checks that err is an *llmkv.Error with the status, matching the sentinel, with a
// detail message containing every word (case-insensitive).
func wantErr(t testing.TB, err error, sentinel error, status llmkv.Status, words ...string) *llmkv.Error {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v", status)
	}
	var le *llmkv.Error
	if !errors.As(err, &le) {
		t.Fatalf("error %v (%T) is not an *llmkv.Error", err, err)
	}
	if le.Status != status || !errors.Is(err, sentinel) {
		t.Fatalf("error %v: status %v, want %v", err, le.Status, status)
	}
	for _, w := range words {
		if !strings.Contains(strings.ToLower(le.Message), strings.ToLower(w)) {
			t.Errorf("error %v: message %q does not contain %q", err, le.Message, w)
		}
	}
	if le.Message == "" {
		t.Errorf("error %v has no detail message", err)
	}
	return le
}

var prompts8 = []string{
	"What is the capital of France?",
	"Name three primary colors.",
	"Write a haiku about the sea.",
	"What is 12 times 12?",
	"Give me a word that rhymes with cat.",
	"Who wrote Romeo and Juliet?",
	"What color is the sky on a clear day?",
	"Say hello in Spanish.",
}
