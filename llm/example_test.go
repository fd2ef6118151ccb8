package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/llm/script"
)

// shouter is a custom provider: anything that answers a Request with one
// assistant message implements llm.Provider. This one calls notify_user with the
// last user message in capitals, then, once the tool has answered, finishes.
type shouter struct{}

func (shouter) Name() string { return "shouter" }

func (shouter) Complete(_ context.Context, req llm.Request) (llm.Response, error) {
	last := req.Messages[len(req.Messages)-1]
	if last.Role == llm.RoleTool {
		return llm.Response{Message: llm.Message{Role: llm.RoleAssistant, Content: "done"}, Usage: llm.Usage{InputTokens: 3, OutputTokens: 1}}, nil
	}
	args, err := json.Marshal(map[string]string{"message": strings.ToUpper(last.Content)})
	if err != nil {
		return llm.Response{}, err
	}
	return llm.Response{
		Message: llm.Message{Role: llm.RoleAssistant, ToolCalls: []llm.ToolCall{{ID: "call_1", Name: "notify_user", Args: args}}},
		Usage:   llm.Usage{InputTokens: 2, OutputTokens: 4},
	}, nil
}

// A custom provider in the agent loop's shape: the loop sends the conversation,
// runs the tool calls of the answer, appends their results as tool messages and
// asks again, until an answer has no tool calls.
func Example_customProvider() {
	var p llm.Provider = shouter{}
	msgs := []llm.Message{{Role: llm.RoleUser, Content: "hello"}}
	for {
		resp, err := p.Complete(context.Background(), llm.Request{Agent: "writer", Messages: msgs})
		if err != nil {
			fmt.Println(err)
			return
		}
		msgs = append(msgs, resp.Message)
		if len(resp.Message.ToolCalls) == 0 {
			fmt.Println("final:", resp.Message.Content)
			break
		}
		for _, c := range resp.Message.ToolCalls {
			fmt.Println("call:", c.Name, string(c.Args))
			msgs = append(msgs, llm.Message{Role: llm.RoleTool, ToolCallID: c.ID, Name: c.Name, Content: "sent"})
		}
	}
	fmt.Println("messages:", len(msgs))
	// Output:
	// call: notify_user {"message":"HELLO"}
	// final: done
	// messages: 4
}

// The deterministic script provider replays a screenplay per agent: each turn
// is one model message (its calls, or a final say), chosen by how many assistant
// messages the conversation already holds, so a resumed or retried step gets the
// same answer. One turn past the end is llm.ErrExhausted.
func Example_scriptProvider() {
	p := script.New(script.Script{Agents: map[string][]script.Turn{
		"writer": {
			{Calls: []script.Call{{Tool: "write_file", Args: map[string]any{"path": "hello.txt", "content": "hi\n"}}}},
			{Say: "wrote hello.txt"},
		},
	}}, 0)
	msgs := []llm.Message{{Role: llm.RoleUser, Content: "write hello.txt"}}
	for i := 0; i < 3; i++ {
		resp, err := p.Complete(context.Background(), llm.Request{Agent: "writer", Messages: msgs})
		if err != nil {
			fmt.Println("exhausted:", errors.Is(err, llm.ErrExhausted))
			break
		}
		m := resp.Message
		for _, c := range m.ToolCalls {
			fmt.Println(c.ID, c.Name, string(c.Args))
		}
		if m.Content != "" {
			fmt.Println("say:", m.Content)
		}
		msgs = append(msgs, m)
	}
	// Output:
	// call_1_1 write_file {"content":"hi\n","path":"hello.txt"}
	// say: wrote hello.txt
	// exhausted: true
}
