package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/aetherium-engine/aetherium/llm/llmtest"
)

func TestChunk(t *testing.T) {
	a, b := chunk(42, 500), chunk(43, 500)
	if len(a) != longChunkBytes || len(b) != longChunkBytes {
		t.Fatalf("chunk sizes %d, %d; want %d", len(a), len(b), longChunkBytes)
	}
	if n, ok := chunkOf("some prefix " + string(a)); !ok || n != 42 {
		t.Fatalf("chunkOf = %d, %v; want 42", n, ok)
	}
	if bytes.Equal(a[100:], b[100:]) {
		t.Fatal("two chunks share their content")
	}
	if _, ok := chunkOf("read_file: no such file"); ok {
		t.Fatal("a tool error read as a chunk")
	}
}

// The bench counts a request's tokens as the fake bills them.
func TestPromptTokensMatchesTheFake(t *testing.T) {
	up, err := llmtest.StartUpstream(llmtest.UpstreamConfig{Wire: llmtest.WireOpenAI})
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	body := []byte(`{"model": "m", "max_tokens": 16,
		"tools": [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}],
		"messages": [{"role": "system", "content": "Read."}, {"role": "user", "content": "go"},
			{"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"a\"}"}}]},
			{"role": "tool", "tool_call_id": "c1", "content": ` + string(mustJSON(t, string(chunk(1, 2)))) + `}]}`)
	resp, err := http.Post(up.URL+"/chat/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var got struct {
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(raw, &got); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%d %s: %v", resp.StatusCode, raw, err)
	}
	if want := promptTokens(body); got.Usage.PromptTokens != want {
		t.Fatalf("the fake billed %d input tokens, the bench counts %d", got.Usage.PromptTokens, want)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// The driver reads the turn from the newest tool result: retries repeat a
// turn, a compacted history does not restart the count.
func TestLongDriverTurns(t *testing.T) {
	d := &longDriver{turns: 5, window: 1000, seen: map[int]longSample{}}
	req := func(chunks ...int) llmtest.UpstreamRequest {
		r := llmtest.UpstreamRequest{Messages: []llmtest.UpstreamMessage{{Role: "system", Text: "s"}, {Role: "user", Text: "go"}}, Tools: []string{"read_file"}}
		for _, c := range chunks {
			r.Messages = append(r.Messages, llmtest.UpstreamMessage{Role: "assistant"}, llmtest.UpstreamMessage{Role: "tool", Text: string(chunk(c, 5))})
		}
		r.Body = []byte(`{"messages": []}`)
		return r
	}
	path := func(a llmtest.UpstreamAnswer) string {
		var args struct{ Path string }
		_ = json.Unmarshal([]byte(a.Args), &args)
		return a.Tool + " " + args.Path + a.Text
	}
	steps := []struct {
		req  llmtest.UpstreamRequest
		want string
	}{
		{req(), "read_file chunks/c0001.txt"},
		{req(1), "read_file chunks/c0002.txt"},
		{req(1), "read_file chunks/c0002.txt"}, // a retry
		{req(1, 2), "read_file chunks/c0003.txt"},
		{req(3), "read_file chunks/c0004.txt"}, // compacted: only the newest result left
		{req(3, 4), "read_file chunks/c0005.txt"},
		{req(4, 5), " done."},
	}
	for i, s := range steps {
		if got := path(d.answer(s.req)); got != s.want {
			t.Fatalf("step %d: %q, want %q", i, got, s.want)
		}
	}
	if d.retries != 1 || d.maxTurn != 6 || d.broken != "" {
		t.Fatalf("retries %d, max turn %d, broken %q", d.retries, d.maxTurn, d.broken)
	}
	bad := req(1)
	bad.Messages = append(bad.Messages, llmtest.UpstreamMessage{Role: "tool", Text: "read_file: no such file"})
	if a := d.answer(bad); a.Tool != "" || d.broken == "" {
		t.Fatalf("a failed read answered %+v, broken %q", a, d.broken)
	}
}
