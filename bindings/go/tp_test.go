package llmkv_test

import (
	"testing"

	"llmkv.dev/llmkv"
)

// tpSizes returns the smallest rank count in 2..4 the model's heads split over (its query
// heads divide by it, its KV heads divide by it or replicate evenly), and one its query heads
// do not divide by; 0 when there is none (SmolLM2: 9 heads, 3 KV heads -> 3 and 2).
func tpSizes(nHeads, nKVHeads uint32) (good, bad uint32) {
	for tp := uint32(2); tp <= 4; tp++ {
		if good == 0 && nHeads%tp == 0 && (nKVHeads%tp == 0 || tp%nKVHeads == 0) {
			good = tp
		}
		if bad == 0 && nHeads%tp != 0 {
			bad = tp
		}
	}
	return good, bad
}

// Tensor parallelism on CPU ranks (0.5): a default engine reports one rank whose byte counts
// are the engine's; with TPSize each rank holds its share of the weights and KV, and
// generation works.
func TestTensorParallel(t *testing.T) {
	one := newEngine(t, opts(t))
	info, err := one.Info()
	if err != nil {
		t.Fatal(err)
	}
	r := info.Raw
	if info.TPSize != 1 || r.TpSize != 1 || r.KvBytesPerTokenRank != r.KvBytesPerTokenDevice || r.WeightBytesRank != r.WeightBytes {
		t.Errorf("one rank: tp_size %d, kv_bytes_per_token_rank %d (device %d), weight_bytes_rank %d (weight_bytes %d)",
			info.TPSize, r.KvBytesPerTokenRank, r.KvBytesPerTokenDevice, r.WeightBytesRank, r.WeightBytes)
	}
	// SmolLM2 is dense: no experts, every parameter read per token (0.6 fields).
	if info.NExpert != 0 || info.NExpertUsed != 0 || info.NParamsActive != r.NParams || info.WeightBytesActive != r.WeightBytes {
		t.Errorf("dense model: experts %d/%d, active params %d of %d, active bytes %d of %d",
			info.NExpertUsed, info.NExpert, info.NParamsActive, r.NParams, info.WeightBytesActive, r.WeightBytes)
	}
	s := newSession(t, one, llmkv.SessionOptions{})
	if err := s.AppendText(chat(t, one, "Say hello.")); err != nil {
		t.Fatal(err)
	}
	if err := s.Generate(4); err != nil {
		t.Fatal(err)
	}
	drive(t, one, s)
	if st, err := one.Stats(); err != nil || st.KvBytesUsed == 0 || st.KvBytesUsedRank != st.KvBytesUsed || st.TpReduces != 0 {
		t.Errorf("one rank: kv_bytes_used %d, kv_bytes_used_rank %d, tp_reduces %d (%v)", st.KvBytesUsed, st.KvBytesUsedRank, st.TpReduces, err)
	}
	s.Close()

	tp, bad := tpSizes(r.NHeads, r.NKvHeads)
	if bad != 0 {
		o := opts(t)
		o.TPSize = bad
		_, err := llmkv.NewEngine(o)
		wantErr(t, err, llmkv.ErrUnsupported, llmkv.StatusUnsupported, "tensor parallelism", "heads")
	}
	o := opts(t)
	o.TPSize = 257
	_, err = llmkv.NewEngine(o)
	wantErr(t, err, llmkv.ErrInvalidArgument, llmkv.StatusInvalidArgument, "tp_size")
	if tp == 0 {
		t.Skipf("SKIP: the model's %d query / %d KV heads split over no rank count in 2..4", r.NHeads, r.NKvHeads)
	}

	o = opts(t)
	o.TPSize = tp
	e := newEngine(t, o)
	ti, err := e.Info()
	if err != nil {
		t.Fatal(err)
	}
	tr := ti.Raw
	if ti.TPSize != tp || tr.TpSize != tp {
		t.Errorf("tp_size %d (raw %d), want %d", ti.TPSize, tr.TpSize, tp)
	}
	if tr.KvBytesPerTokenDevice != r.KvBytesPerTokenDevice || tr.WeightBytes != r.WeightBytes {
		t.Errorf("whole-model bytes differ from one rank's engine: kv/token %d vs %d, weights %d vs %d",
			tr.KvBytesPerTokenDevice, r.KvBytesPerTokenDevice, tr.WeightBytes, r.WeightBytes)
	}
	if tr.KvBytesPerTokenRank == 0 || (r.NKvHeads > 1 && tr.KvBytesPerTokenRank >= tr.KvBytesPerTokenDevice) {
		t.Errorf("kv_bytes_per_token_rank %d, device %d: not a rank's share", tr.KvBytesPerTokenRank, tr.KvBytesPerTokenDevice)
	}
	if tr.WeightBytesRank == 0 || tr.WeightBytesRank >= tr.WeightBytes {
		t.Errorf("weight_bytes_rank %d, weight_bytes %d: not a rank's share", tr.WeightBytesRank, tr.WeightBytes)
	}

	s = newSession(t, e, llmkv.SessionOptions{})
	defer s.Close()
	if err := s.AppendText(chat(t, e, "What is the capital of France?")); err != nil {
		t.Fatal(err)
	}
	if err := s.Generate(8); err != nil {
		t.Fatal(err)
	}
	res := drive(t, e, s)[s]
	if res.err != 0 || len(res.tokens) == 0 {
		t.Fatalf("generation at tp %d: %d tokens, error %v", tp, len(res.tokens), res.err)
	}
	text, err := s.ReadText()
	if err != nil || text == "" {
		t.Errorf("text at tp %d: %q, %v", tp, text, err)
	}
	st, err := e.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.KvBytesUsed == 0 || st.KvBytesUsedRank == 0 || (r.NKvHeads > 1 && st.KvBytesUsedRank >= st.KvBytesUsed) || st.TpReduces == 0 {
		t.Errorf("tp %d: kv_bytes_used %d, kv_bytes_used_rank %d, tp_reduces %d", tp, st.KvBytesUsed, st.KvBytesUsedRank, st.TpReduces)
	}
	if err := e.Validate(); err != nil {
		t.Errorf("Validate at tp %d: %v", tp, err)
	}
}
