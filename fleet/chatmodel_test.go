package fleet_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// chatModel is an OpenAI-compatible chat-completions server (POST
// /v1/chat/completions, the real wire format) whose answers a test's decide
// function picks from each request. It records every request as received.
type chatModel struct {
	decide func(chatRequest) chatAnswer

	mu       sync.Mutex
	requests []chatRequest
	calls    int
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type chatRequest struct {
	Model    string
	Messages []chatMessage
}

// task is the request's first user message.
func (r chatRequest) task() string {
	for _, m := range r.Messages {
		if m.Role == "user" {
			return m.Content
		}
	}
	return ""
}

// has reports a message of role in the request.
func (r chatRequest) has(role string) bool {
	for _, m := range r.Messages {
		if m.Role == role {
			return true
		}
	}
	return false
}

// chatAnswer is one tool call (Tool set) or a text answer.
type chatAnswer struct {
	Tool string
	Args map[string]any
	Text string
	// Status, when set, is an error status instead of an answer.
	Status int
}

func (m *chatModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(r.Body)
	if err != nil || r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		http.Error(w, `{"error":{"message":"not found"}}`, http.StatusNotFound)
		return
	}
	var req struct {
		Model    string            `json:"model"`
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(raw, &req); err != nil {
		http.Error(w, `{"error":{"message":"malformed JSON"}}`, http.StatusBadRequest)
		return
	}
	cr := chatRequest{Model: req.Model}
	for _, rm := range req.Messages {
		var msg struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		_ = json.Unmarshal(rm, &msg)
		var text string
		_ = json.Unmarshal(msg.Content, &text) // string content; parts stay empty
		cr.Messages = append(cr.Messages, chatMessage{Role: msg.Role, Content: text})
	}
	m.mu.Lock()
	m.requests = append(m.requests, cr)
	m.calls++
	id := fmt.Sprintf("call_%d", m.calls)
	m.mu.Unlock()
	a := m.decide(cr)
	if a.Status != 0 {
		http.Error(w, `{"error":{"message":"scripted failure"}}`, a.Status)
		return
	}
	msg := map[string]any{"role": "assistant", "content": a.Text}
	finish := "stop"
	if a.Tool != "" {
		args, _ := json.Marshal(a.Args)
		msg = map[string]any{"role": "assistant", "content": nil, "tool_calls": []map[string]any{{
			"id": id, "type": "function", "function": map[string]any{"name": a.Tool, "arguments": string(args)},
		}}}
		finish = "tool_calls"
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": "chatcmpl-" + id, "object": "chat.completion", "created": time.Now().Unix(), "model": req.Model,
		"choices": []map[string]any{{"index": 0, "finish_reason": finish, "message": msg}},
		"usage":   map[string]any{"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60},
	})
}

// requestsFor are the recorded requests whose task is task.
func (m *chatModel) requestsFor(task string) []chatRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []chatRequest
	for _, r := range m.requests {
		if r.task() == task {
			out = append(out, r)
		}
	}
	return out
}
