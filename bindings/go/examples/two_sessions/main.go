// two_sessions streams two conversations over one engine at once, printing each chunk of
// text as it arrives with the session it came from:
//
//	go run ./examples/two_sessions [MODEL.gguf]     (default: $LLMKV_MODEL)
//
// Output: one line per chunk, `[1] "text"` (the text quoted), then one summary line per
// session.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"llmkv.dev/llmkv"
)

func main() {
	model := os.Getenv("LLMKV_MODEL")
	if len(os.Args) > 1 {
		model = os.Args[1]
	}
	if model == "" {
		fmt.Fprintln(os.Stderr, "usage: two_sessions MODEL.gguf (or set LLMKV_MODEL)")
		os.Exit(2)
	}
	if err := run(model); err != nil {
		fmt.Fprintln(os.Stderr, "two_sessions:", err)
		os.Exit(1)
	}
}

func run(model string) error {
	engine, err := llmkv.NewEngine(llmkv.EngineOptions{ModelPath: model, SpinUS: llmkv.Int32(0)})
	if err != nil {
		return err
	}
	defer engine.Close()

	questions := []string{"What is the capital of France?", "Name three primary colors."}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	chans := make([]<-chan llmkv.Chunk, len(questions))
	for i, q := range questions {
		prompt, err := engine.ChatFormat([]llmkv.ChatMessage{{Role: "user", Content: q}}, true)
		if err != nil {
			return err
		}
		s, err := engine.NewSession(llmkv.SessionOptions{})
		if err != nil {
			return err
		}
		defer s.Close()
		// The engine's worker thread generates both in the same batched steps.
		if chans[i], err = s.Stream(ctx, prompt, 48); err != nil {
			return err
		}
		fmt.Printf("Q%d: %s\n", i+1, q)
	}

	tokens := make([]int, len(chans))
	bytes := make([]int, len(chans))
	for open := len(chans); open > 0; {
		// Take whichever session has a chunk ready.
		var c llmkv.Chunk
		var ok bool
		var i int
		select {
		case c, ok = <-chans[0]:
			i = 0
		case c, ok = <-chans[1]:
			i = 1
		}
		if !ok {
			chans[i] = nil // a nil channel never fires again
			open--
			continue
		}
		if c.Text != "" {
			fmt.Printf("[%d] %q\n", i+1, c.Text)
			bytes[i] += len(c.Text)
		}
		if !c.Done {
			tokens[i]++
			continue
		}
		if c.Err != nil {
			return fmt.Errorf("session %d: %w", i+1, c.Err)
		}
		fmt.Printf("session %d done (%s): %d tokens, %d bytes of text\n", i+1, c.Finish, tokens[i], bytes[i])
	}
	return nil
}
