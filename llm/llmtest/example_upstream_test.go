package llmtest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/llm/llmtest"
	"github.com/aetherium-engine/aetherium/llm/openai"
)

// A fake OpenAI with a limit of two requests a minute: the third call gets
// the vendor's 429, which the client returns at once with retries off. The
// prompt, [{"role":"user","content":"hello"}], is 34 bytes: 9 tokens; "done."
// is 2.
func ExampleStartUpstream() {
	u, err := llmtest.StartUpstream(llmtest.UpstreamConfig{Wire: llmtest.WireOpenAI, RPM: 2, Window: time.Minute})
	if err != nil {
		panic(err)
	}
	defer u.Close()
	p, err := openai.New(openai.Config{BaseURL: u.URL, Model: "gpt-4o-mini", MaxRetries: -1})
	if err != nil {
		panic(err)
	}
	req := llm.Request{MaxTokens: 100, Messages: []llm.Message{{Role: llm.RoleUser, Content: "hello"}}}
	for range 3 {
		resp, err := p.Complete(context.Background(), req)
		if apiErr := (*llm.APIError)(nil); errors.As(err, &apiErr) {
			fmt.Println("HTTP", apiErr.Status, "rate limited:", apiErr.RateLimited())
			continue
		}
		if err != nil {
			panic(err)
		}
		fmt.Println(resp.Message.Content, resp.Usage.InputTokens, resp.Usage.OutputTokens)
	}
	s := u.Stats()
	fmt.Println("answered", s.Answered, "rate-limited", s.RateLimited, "peak", s.PeakWindowRequests)
	// Output:
	// done. 9 2
	// done. 9 2
	// HTTP 429 rate limited: true
	// answered 2 rate-limited 1 peak 2
}
