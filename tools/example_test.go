package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/aetherium-engine/aetherium/tools"
)

// notifyArgs are the arguments of the example tool: the struct is the contract. Its
// JSON schema (from the json and jsonschema tags) is what the model sees, and a
// call's arguments are decoded into it strictly before the handler runs.
type notifyArgs struct {
	Message string `json:"message" jsonschema:"description=What to tell the user"`
	Urgent  bool   `json:"urgent,omitempty"`
}

// Registering a tool and calling it through the router. A tool of the design is
// registered by its server-class package (toolbox/comms registers notify_user for the
// fleet; a new tool name also needs its group in catalog.go and its entry in
// catalog.yaml, or tools.Register panics and the boot check fails). The fleet builds
// the router with the permission gate as middleware; every call carries the calling
// agent's session (tools.Call.Session), which the handler receives with its
// arguments.
func Example() {
	reg := tools.NewRegistry()
	tools.Register(reg, "notify_user", "Tell the user something now.",
		func(ctx context.Context, call tools.Call, a notifyArgs) (tools.Result, error) {
			s := call.Session
			return tools.Text("%s told the user %q (urgent: %v)", s.Agent, a.Message, a.Urgent), nil
		}, tools.Idempotent(), tools.InGroup("comms"))
	router := tools.NewRouter(reg) // middleware (the gate, audit) goes here

	// The capability layer: the agent sees and may call only what its node allows.
	access := reg.Resolve(tools.Node{Role: "worker", Tools: []string{"notify_user"}})
	ctx := context.Background()
	writer := &tools.Session{RunID: "run-1", SessionID: "d:del_1", Agent: "writer", Role: "worker", Access: access}
	def := reg.Definitions(access)[0]
	fmt.Println(def.Name, string(def.Parameters))

	res, err := router.Dispatch(ctx, tools.Call{ID: "call-1", Name: "notify_user", Args: json.RawMessage(`{"message":"hello.txt is written"}`), Session: writer})
	fmt.Println(res.Content, err)

	_, err = router.Dispatch(ctx, tools.Call{ID: "call-2", Name: "notify_user", Args: json.RawMessage(`{"message":7}`), Session: writer})
	fmt.Println("bad arguments:", errors.Is(err, tools.ErrInvalidArgs))

	_, err = router.Dispatch(ctx, tools.Call{ID: "call-3", Name: "run_shell", Args: json.RawMessage(`{"command":"id"}`), Session: writer})
	fmt.Println("unregistered tool:", errors.Is(err, tools.ErrUnknownTool))
	// Output:
	// notify_user {"properties":{"message":{"type":"string","description":"What to tell the user"},"urgent":{"type":"boolean"}},"additionalProperties":false,"type":"object","required":["message"]}
	// writer told the user "hello.txt is written" (urgent: false) <nil>
	// bad arguments: true
	// unregistered tool: true
}
