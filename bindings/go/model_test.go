package llmkv_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"llmkv.dev/llmkv"
)

const system = "You are a helpful assistant who lives in a small village by the sea. " +
	"You know every fisherman, every boat and every story of the harbor, and you answer briefly."

func TestPrefixHandles(t *testing.T) {
	e := newEngine(t, opts(t))
	sys, err := e.Tokenize("<|im_start|>system\n"+system+"<|im_end|>\n", llmkv.TokenizeAddBOS|llmkv.TokenizeParseSpecial)
	if err != nil {
		t.Fatal(err)
	}
	user, err := e.Tokenize("<|im_start|>user\nWho is the oldest fisherman?<|im_end|>\n<|im_start|>assistant\n", llmkv.TokenizeParseSpecial)
	if err != nil {
		t.Fatal(err)
	}
	if len(sys) < 32 {
		t.Fatalf("system prompt is only %d tokens", len(sys))
	}
	all := append(append([]int32{}, sys...), user...)

	// Reference: the same tokens without a prefix.
	ref := newSession(t, e, llmkv.SessionOptions{})
	if err := ref.Append(all); err != nil {
		t.Fatal(err)
	}
	if err := ref.Generate(16); err != nil {
		t.Fatal(err)
	}
	want := drive(t, e, ref)[ref].tokens
	if len(want) == 0 {
		t.Fatal("no reference tokens")
	}

	p, err := e.NewPrefix(sys)
	if err != nil {
		t.Fatalf("NewPrefix: %v", err)
	}
	defer p.Close()
	if got, err := p.Tokens(); err != nil || !equalTokens(got, sys) || p.Len() != len(sys) {
		t.Fatalf("prefix tokens %v (%d) %v, want %v", got, p.Len(), err, sys)
	}
	fromPrefix := func(p *llmkv.Prefix) []int32 {
		s := newSession(t, e, llmkv.SessionOptions{Prefix: p})
		defer s.Close()
		if err := s.Append(user); err != nil {
			t.Fatal(err)
		}
		if err := s.Generate(16); err != nil {
			t.Fatal(err)
		}
		got := drive(t, e, s)[s].tokens
		ctx, err := s.Tokens()
		if err != nil || !equalTokens(ctx[:len(all)], all) {
			t.Errorf("context of a session from a prefix: %v %v", ctx, err)
		}
		return got
	}
	if got := fromPrefix(p); !equalTokens(got, want) {
		t.Errorf("from a prefix: %v, without: %v", got, want)
	}

	// Snapshot round trip.
	dir := t.TempDir()
	snap := filepath.Join(dir, "sys.snap")
	if err := p.Save(snap); err != nil {
		t.Fatalf("Save: %v", err)
	}
	loaded, err := e.LoadPrefix(snap, 0)
	if err != nil {
		t.Fatalf("LoadPrefix: %v", err)
	}
	if got, _ := loaded.Tokens(); !equalTokens(got, sys) {
		t.Errorf("loaded prefix tokens %v", got)
	}
	if got := fromPrefix(loaded); !equalTokens(got, want) {
		t.Errorf("from a loaded prefix: %v, want %v", got, want)
	}
	loaded.Close()
	shared, err := e.LoadPrefix(snap, llmkv.PrefixLoadShare)
	if err != nil {
		t.Fatalf("LoadPrefix(SHARE): %v", err)
	}
	shared.Close()
	_, err = e.LoadPrefix(snap, 0x80)
	wantErr(t, err, llmkv.ErrInvalidArgument, llmkv.StatusInvalidArgument)

	// Corruption: a flipped byte in the middle, and a truncated file.
	data, err := os.ReadFile(snap)
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte{}, data...)
	bad[len(bad)/2] ^= 0x5a
	flipped := filepath.Join(dir, "flipped.snap")
	if err := os.WriteFile(flipped, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	before, _ := e.Stats()
	_, err = e.LoadPrefix(flipped, 0)
	wantErr(t, err, llmkv.ErrSnapshotFormat, llmkv.StatusSnapshotFormat)
	truncated := filepath.Join(dir, "truncated.snap")
	if err := os.WriteFile(truncated, data[:len(data)-100], 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = e.LoadPrefix(truncated, 0)
	wantErr(t, err, llmkv.ErrSnapshotFormat, llmkv.StatusSnapshotFormat)
	after, _ := e.Stats()
	if after.BlocksUsed != before.BlocksUsed || after.TailBlocksUsed != before.TailBlocksUsed {
		t.Errorf("a failed load changed the engine: blocks used %d -> %d, tails %d -> %d",
			before.BlocksUsed, after.BlocksUsed, before.TailBlocksUsed, after.TailBlocksUsed)
	}
	_, err = e.LoadPrefix(filepath.Join(dir, "missing.snap"), 0)
	wantErr(t, err, llmkv.ErrIO, llmkv.StatusIO)

	// A session's context as a prefix continues the same way as the session.
	s := newSession(t, e, llmkv.SessionOptions{})
	if err := s.Append(all); err != nil {
		t.Fatal(err)
	}
	if err := e.Run(nil); err != nil { // prefill
		t.Fatal(err)
	}
	sp, err := s.ToPrefix()
	if err != nil {
		t.Fatalf("ToPrefix: %v", err)
	}
	defer sp.Close()
	if sp.Len() != len(all) {
		t.Errorf("ToPrefix holds %d tokens, want %d", sp.Len(), len(all))
	}
	s2 := newSession(t, e, llmkv.SessionOptions{Prefix: sp})
	if err := s2.Generate(16); err != nil {
		t.Fatal(err)
	}
	if got := drive(t, e, s2)[s2].tokens; !equalTokens(got, want) {
		t.Errorf("from ToPrefix: %v, want %v", got, want)
	}
}

func TestFork(t *testing.T) {
	e := newEngine(t, opts(t))
	s := newSession(t, e, llmkv.SessionOptions{})
	if err := s.AppendText(chat(t, e, "Tell me a story about a dragon.")); err != nil {
		t.Fatal(err)
	}
	if err := s.Generate(8); err != nil {
		t.Fatal(err)
	}
	first := drive(t, e, s)[s]
	if first.finish != llmkv.FinishLength || len(first.tokens) != 8 {
		t.Fatalf("first part: %+v", first)
	}
	f, err := s.Fork()
	if err != nil {
		t.Fatalf("Fork: %v", err)
	}
	st, _ := s.Tokens()
	ft, _ := f.Tokens()
	if !equalTokens(st, ft) {
		t.Fatalf("fork context %v, original %v", ft, st)
	}
	if err := s.Generate(12); err != nil {
		t.Fatal(err)
	}
	if err := f.Generate(12); err != nil {
		t.Fatal(err)
	}
	r := drive(t, e, s, f)
	if len(r[s].tokens) != 12 || !equalTokens(r[s].tokens, r[f].tokens) {
		t.Errorf("original continued %v, fork %v", r[s].tokens, r[f].tokens)
	}
	// Forking a generating session is STATE.
	if err := s.Generate(4); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Step(); err != nil {
		t.Fatal(err)
	}
	if si, _ := s.Info(); si.State != llmkv.SessionGenerating {
		t.Fatalf("after one step of 4 tokens the session is %v", si.State)
	}
	_, err = s.Fork()
	wantErr(t, err, llmkv.ErrState, llmkv.StatusState)
	drive(t, e, s)
}

func TestPark(t *testing.T) {
	o := opts(t)
	o.KVHostBytes = 64 << 20
	e := newEngine(t, o)
	prompt := chat(t, e, "Describe the harbor at dawn.")
	run := func(park bool) []int32 {
		s := newSession(t, e, llmkv.SessionOptions{})
		defer s.Close()
		if err := s.AppendText(prompt); err != nil {
			t.Fatal(err)
		}
		if err := s.Generate(40); err != nil {
			t.Fatal(err)
		}
		drive(t, e, s)
		if park {
			if err := s.Park(); err != nil {
				t.Fatalf("Park: %v", err)
			}
			si, err := s.Info()
			if err != nil {
				t.Fatal(err)
			}
			if si.Tier != llmkv.TierHost || si.State != llmkv.SessionParked {
				t.Errorf("parked session: tier %d state %v", si.Tier, si.State)
			}
		}
		if err := s.AppendText("<|im_start|>user\nAnd at night?<|im_end|>\n<|im_start|>assistant\n"); err != nil {
			t.Fatal(err)
		}
		if err := s.Generate(16); err != nil {
			t.Fatal(err)
		}
		r := drive(t, e, s)[s]
		if park {
			if si, _ := s.Info(); si.Tier != llmkv.TierDevice {
				t.Errorf("resumed session tier %d", si.Tier)
			}
		}
		return r.tokens
	}
	want := run(false)
	got := run(true)
	if len(want) == 0 || !equalTokens(got, want) {
		t.Errorf("after park: %v, never parked: %v", got, want)
	}
	st, err := e.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Parks < 1 || st.Resumes < 1 || st.BytesToHost == 0 {
		t.Errorf("stats after a park: parks %d resumes %d bytes_to_host %d", st.Parks, st.Resumes, st.BytesToHost)
	}
}

func TestFullPool(t *testing.T) {
	o := opts(t)
	o.MaxSessions = 2
	e := newEngine(t, o)
	a := newSession(t, e, llmkv.SessionOptions{})
	newSession(t, e, llmkv.SessionOptions{})
	_, err := e.NewSession(llmkv.SessionOptions{})
	wantErr(t, err, llmkv.ErrKVCapacity, llmkv.StatusKVCapacity)
	// A closed session frees its slot.
	a.Close()
	c := newSession(t, e, llmkv.SessionOptions{})
	// A prefix counts too.
	toks, _ := e.Tokenize("hello there", 0)
	_, err = e.NewPrefix(toks)
	wantErr(t, err, llmkv.ErrKVCapacity, llmkv.StatusKVCapacity)
	c.Close()

	// A prefix longer than a tiny device pool.
	o = opts(t)
	o.KVDeviceBytes = 1 << 20
	small := newEngine(t, o)
	info, err := small.Info()
	if err != nil {
		t.Fatal(err)
	}
	long, err := small.Tokenize(strings.Repeat("The quick brown fox jumps over the lazy dog. ", 60), 0)
	if err != nil {
		t.Fatal(err)
	}
	if uint64(len(long))*info.Raw.KvBytesPerTokenDevice <= info.Raw.KvDeviceBytes {
		t.Fatalf("%d tokens fit the %d-byte pool", len(long), info.Raw.KvDeviceBytes)
	}
	_, err = small.NewPrefix(long)
	wantErr(t, err, llmkv.ErrKVCapacity, llmkv.StatusKVCapacity)
	// Nothing is kept, and the engine still works.
	if st, _ := small.Stats(); st.BlocksUsed != 0 {
		t.Errorf("a failed prefix keeps %d blocks", st.BlocksUsed)
	}
	if got := complete(t, small, chat(t, small, "Hi!"), 4); len(got) == 0 {
		t.Error("the engine does not generate after the failure")
	}
}

func TestCancel(t *testing.T) {
	e := newEngine(t, opts(t))
	prompt := chat(t, e, "Write a long poem about the ocean.")
	s := newSession(t, e, llmkv.SessionOptions{})
	if err := s.AppendText(prompt); err != nil {
		t.Fatal(err)
	}
	if err := s.Generate(200); err != nil {
		t.Fatal(err)
	}
	var got []int32
	finish := llmkv.FinishNone
	cancelled := false
	for finish == llmkv.FinishNone {
		evs, err := e.Step()
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			switch ev.Kind {
			case llmkv.EventToken:
				got = append(got, ev.Token)
			case llmkv.EventDone:
				finish = ev.FinishReason
			}
		}
		if len(got) >= 3 && !cancelled {
			if err := s.Cancel(); err != nil {
				t.Fatalf("Cancel: %v", err)
			}
			cancelled = true
		}
	}
	if finish != llmkv.FinishCancelled || len(got) < 3 || len(got) >= 200 {
		t.Fatalf("finish %v after %d tokens", finish, len(got))
	}
	si, err := s.Info()
	if err != nil {
		t.Fatal(err)
	}
	ctx, _ := s.Tokens()
	if si.FinishReason != llmkv.FinishCancelled || int(si.NGenerated) != len(got) || !equalTokens(ctx[len(ctx)-len(got):], got) {
		t.Errorf("info after cancel: %+v, tokens %v, context tail %v", si, got, ctx[len(ctx)-len(got):])
	}
	if si.NCached+1 < si.NTokens {
		t.Errorf("KV kept for %d of %d tokens", si.NCached, si.NTokens)
	}
	// Continuing gives what a fresh session over the same tokens gives.
	if err := s.Generate(6); err != nil {
		t.Fatal(err)
	}
	cont := drive(t, e, s)[s].tokens
	f := newSession(t, e, llmkv.SessionOptions{})
	if err := f.Append(ctx); err != nil {
		t.Fatal(err)
	}
	if err := f.Generate(6); err != nil {
		t.Fatal(err)
	}
	if fresh := drive(t, e, f)[f].tokens; !equalTokens(cont, fresh) {
		t.Errorf("after cancel the session continues %v, a fresh one %v", cont, fresh)
	}
}

// Eight sessions stepped together produce exactly the tokens each produces alone.
func TestEightConcurrentSessions(t *testing.T) {
	e := newEngine(t, opts(t))
	alone := make([][]int32, len(prompts8))
	for i, p := range prompts8 {
		alone[i] = complete(t, e, chat(t, e, p), 12)
	}
	ss := make([]*llmkv.Session, len(prompts8))
	for i, p := range prompts8 {
		ss[i] = newSession(t, e, llmkv.SessionOptions{MaxNewTokens: 12})
		if err := ss[i].AppendText(chat(t, e, p)); err != nil {
			t.Fatal(err)
		}
		if err := ss[i].Generate(0); err != nil {
			t.Fatal(err)
		}
	}
	res := drive(t, e, ss...)
	distinct := map[string]bool{}
	for i, s := range ss {
		if !equalTokens(res[s].tokens, alone[i]) {
			t.Errorf("session %d in a batch: %v, alone: %v", i, res[s].tokens, alone[i])
		}
		txt, err := s.ReadText()
		if err != nil || txt == "" {
			t.Errorf("session %d text %q %v", i, txt, err)
		}
		distinct[txt] = true
	}
	if len(distinct) < 4 {
		t.Errorf("only %d distinct answers to 8 prompts", len(distinct))
	}
}

// Engine.Run (llmkv_run with a C collector) gives the same tokens as stepping.
func TestRun(t *testing.T) {
	e := newEngine(t, opts(t))
	want := complete(t, e, chat(t, e, prompts8[0]), 10)
	s := newSession(t, e, llmkv.SessionOptions{})
	if err := s.AppendText(chat(t, e, prompts8[0])); err != nil {
		t.Fatal(err)
	}
	if err := s.Generate(10); err != nil {
		t.Fatal(err)
	}
	var got []int32
	done := 0
	if err := e.Run(func(ev llmkv.Event) {
		if ev.Session != s {
			t.Errorf("event of another session %p", ev.Session)
		}
		switch ev.Kind {
		case llmkv.EventToken:
			got = append(got, ev.Token)
		case llmkv.EventDone:
			done++
		}
	}); err != nil {
		t.Fatal(err)
	}
	if done != 1 || !equalTokens(got, want) {
		t.Errorf("Run: %v (%d DONE), Step: %v", got, done, want)
	}
	if n := e.PendingEvents(); n != 0 {
		t.Errorf("%d events pending after Run", n)
	}
}

// HasWork tells a prefill-only step (no events) from the end of the work.
func TestHasWork(t *testing.T) {
	e := newEngine(t, opts(t))
	idle, err := e.HasWork()
	if err != nil || idle {
		t.Fatalf("a new engine has work: %v %v", idle, err)
	}
	s := newSession(t, e, llmkv.SessionOptions{})
	if err := s.AppendText(strings.Repeat("A long prompt that takes several prefill chunks. ", 60)); err != nil {
		t.Fatal(err)
	}
	if w, err := e.HasWork(); err != nil || !w {
		t.Fatalf("queued input: HasWork %v %v", w, err)
	}
	steps := 0
	for {
		w, err := e.HasWork()
		if err != nil {
			t.Fatal(err)
		}
		if !w {
			break
		}
		evs, err := e.Step()
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 0 {
			t.Errorf("prefill produced events: %v", evs)
		}
		if steps++; steps > 1000 {
			t.Fatal("HasWork never ends")
		}
	}
	si, _ := s.Info()
	if si.NCached+1 != si.NTokens {
		t.Errorf("after HasWork went false: %d of %d tokens cached", si.NCached, si.NTokens)
	}
}
