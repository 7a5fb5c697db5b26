package llmkv

import (
	"runtime"
	"sync"
	"unsafe"

	"llmkv.dev/llmkv/raw"
)

// Prefix is an llmkv_prefix: an immutable run of tokens whose KV is computed once and
// shared by the sessions created from it (SessionOptions.Prefix). Close releases it
// (sessions made from it keep their blocks); a finalizer releases an unreachable Prefix.
type Prefix struct{ c *prefixCore }

type prefixCore struct {
	e  *engineCore
	mu sync.RWMutex
	h  *raw.Prefix
}

func (c *engineCore) newPrefix(h *raw.Prefix) *Prefix {
	pc := &prefixCore{e: c, h: h}
	c.regMu.Lock()
	c.prefixes[pc] = struct{}{}
	c.regMu.Unlock()
	p := &Prefix{c: pc}
	runtime.SetFinalizer(p, func(p *Prefix) { _ = p.Close() })
	return p
}

// NewPrefix is llmkv_prefix_create: computes the KV of tokens now (blocking).
func (e *Engine) NewPrefix(tokens []int32) (*Prefix, error) {
	const op = "Engine.NewPrefix"
	h, err := e.c.enter(op)
	if err != nil {
		return nil, err
	}
	defer e.c.leave()
	var p *raw.Prefix
	if err := chk(op)(raw.PrefixCreate(h, tokPtr(tokens), uintptr(len(tokens)), &p)); err != nil {
		return nil, err
	}
	return e.c.newPrefix(p), nil
}

// LoadPrefix is llmkv_prefix_load (flags 0) or llmkv_prefix_load_ex (PrefixLoadShare,
// PrefixLoadAnyKernel): a prefix from a snapshot file written by Prefix.Save.
func (e *Engine) LoadPrefix(path string, flags uint32) (*Prefix, error) {
	const op = "Engine.LoadPrefix"
	h, err := e.c.enter(op)
	if err != nil {
		return nil, err
	}
	defer e.c.leave()
	cpath := raw.CString(path)
	defer raw.Free(unsafe.Pointer(cpath))
	var p *raw.Prefix
	var st int32
	var msg string
	if flags == 0 {
		st, msg = raw.PrefixLoad(h, cpath, &p)
	} else {
		st, msg = raw.PrefixLoadEx(h, cpath, flags, &p)
	}
	if err := check(op, st, msg); err != nil {
		return nil, err
	}
	return e.c.newPrefix(p), nil
}

// enter locks the engine and the prefix shared and returns the live handle.
func (p *Prefix) enter(op string) (*raw.Prefix, error) {
	if p == nil || p.c == nil {
		return nil, argErr(op, "nil prefix")
	}
	if _, err := p.c.e.enter(op); err != nil {
		return nil, err
	}
	p.c.mu.RLock()
	if p.c.h == nil {
		p.c.mu.RUnlock()
		p.c.e.leave()
		return nil, closedErr(op, "prefix")
	}
	return p.c.h, nil
}

func (p *Prefix) leave() {
	p.c.mu.RUnlock()
	p.c.e.leave()
}

// Save is llmkv_prefix_save: writes the prefix's tokens and KV to a snapshot file.
func (p *Prefix) Save(path string) error {
	const op = "Prefix.Save"
	h, err := p.enter(op)
	if err != nil {
		return err
	}
	defer p.leave()
	cpath := raw.CString(path)
	defer raw.Free(unsafe.Pointer(cpath))
	return chk(op)(raw.PrefixSave(h, cpath))
}

// Len is llmkv_prefix_n_tokens (0 once closed).
func (p *Prefix) Len() int {
	h, err := p.enter("Prefix.Len")
	if err != nil {
		return 0
	}
	defer p.leave()
	return int(raw.PrefixNTokens(h))
}

// Tokens is llmkv_prefix_get_tokens.
func (p *Prefix) Tokens() ([]int32, error) {
	const op = "Prefix.Tokens"
	h, err := p.enter(op)
	if err != nil {
		return nil, err
	}
	defer p.leave()
	buf := make([]int32, raw.PrefixNTokens(h))
	var n uintptr
	if err := chk(op)(raw.PrefixGetTokens(h, tokPtr(buf), uintptr(len(buf)), &n)); err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// Close is llmkv_prefix_release. Closing twice, or after the engine, is fine.
func (p *Prefix) Close() error {
	if p == nil || p.c == nil {
		return nil
	}
	runtime.SetFinalizer(p, nil)
	c := p.c
	if _, err := c.e.enter("Prefix.Close"); err != nil {
		return nil // the engine freed it
	}
	defer c.e.leave()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.h == nil {
		return nil
	}
	raw.PrefixRelease(c.h)
	c.h = nil
	c.e.regMu.Lock()
	delete(c.e.prefixes, c)
	c.e.regMu.Unlock()
	return nil
}
