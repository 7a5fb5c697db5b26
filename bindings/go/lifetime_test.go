package llmkv_test

import (
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"llmkv.dev/llmkv"
)

// Sessions used from many goroutines while sessions and then the engine are closed: every
// call either works or returns ErrClosed (never a crash, never another error), and a closed
// engine leaves nothing usable.
func TestCloseWhileInUse(t *testing.T) {
	e, err := llmkv.NewEngine(opts(t))
	if err != nil {
		t.Fatal(err)
	}
	prompt := chat(t, e, "Count from one to twenty.")
	ss := make([]*llmkv.Session, 4)
	for i := range ss {
		ss[i] = newSession(t, e, llmkv.SessionOptions{})
		if err := ss[i].AppendText(prompt); err != nil {
			t.Fatal(err)
		}
		if err := ss[i].Generate(64); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	closedSeen := 0
	bad := func(op string, err error) bool {
		if err == nil {
			return false
		}
		if errors.Is(err, llmkv.ErrClosed) {
			mu.Lock()
			closedSeen++
			mu.Unlock()
			return true
		}
		if errors.Is(err, llmkv.ErrState) && op == "Fork" {
			return false // forking a generating session
		}
		t.Errorf("%s: %v", op, err)
		return true
	}
	for _, s := range ss {
		for g := 0; g < 2; g++ {
			wg.Add(1)
			go func(s *llmkv.Session) {
				defer wg.Done()
				for {
					if _, err := s.Info(); bad("Info", err) {
						return
					}
					if _, err := s.Tokens(); bad("Tokens", err) {
						return
					}
					f, err := s.Fork()
					if bad("Fork", err) {
						return
					}
					if f != nil {
						f.Close()
					}
				}
			}(s)
		}
	}
	wg.Add(1)
	go func() { // the host's stepping goroutine
		defer wg.Done()
		for {
			if _, err := e.Step(); bad("Step", err) {
				return
			}
		}
	}()
	// Close two sessions, let the rest run, then close the engine under everyone.
	for i := 0; i < 20; i++ {
		if _, err := e.Stats(); err != nil {
			t.Fatal(err)
		}
		if i == 5 {
			ss[0].Close()
			ss[1].Close()
		}
	}
	e.Close()
	wg.Wait()
	if closedSeen < 9 { // 8 session goroutines and the stepper all end on ErrClosed
		t.Errorf("only %d goroutines saw ErrClosed", closedSeen)
	}
	for _, s := range ss {
		if _, err := s.Info(); !errors.Is(err, llmkv.ErrClosed) {
			t.Errorf("Info after the engine closed: %v", err)
		}
	}
}

// An unreachable Prefix is released by its finalizer (its tail slot returns to the pool).
func TestPrefixFinalizer(t *testing.T) {
	e := newEngine(t, opts(t))
	toks, err := e.Tokenize(strings.Repeat("A prefix nobody closes. ", 4), 0)
	if err != nil {
		t.Fatal(err)
	}
	before, _ := e.Stats()
	func() {
		p, err := e.NewPrefix(toks)
		if err != nil {
			t.Fatal(err)
		}
		during, _ := e.Stats()
		if during.TailBlocksUsed != before.TailBlocksUsed+1 {
			t.Fatalf("a prefix holds %d tail blocks, want %d", during.TailBlocksUsed, before.TailBlocksUsed+1)
		}
		_ = p.Len()
	}()
	for i := 0; i < 100; i++ {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
		if st, _ := e.Stats(); st.TailBlocksUsed == before.TailBlocksUsed {
			return
		}
	}
	st, _ := e.Stats()
	t.Errorf("the dropped prefix was not released: %d tail blocks used, %d before", st.TailBlocksUsed, before.TailBlocksUsed)
}
