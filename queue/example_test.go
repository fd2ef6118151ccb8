package queue_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/hibiken/asynq"

	"github.com/aetherium-engine/aetherium/queue"
)

// Handling a task type: the role that runs it registers a handler for the type on
// its asynq.ServeMux and decodes the payload with Decode. (A new task type first
// gets, in this package, a Type constant, a payload struct, a task constructor, a
// TaskID function and an Enqueuer method with its options; see the package doc.)
// Here the task is delivered by hand; in the fleet the worker's asynq.Server
// delivers it.
func Example_handler() {
	mux := asynq.NewServeMux()
	mux.HandleFunc(queue.TypeRunCleanup, func(ctx context.Context, t *asynq.Task) error {
		p, err := queue.Decode[queue.CleanupPayload](t)
		if err != nil {
			return err // wraps asynq.SkipRetry: a payload that cannot decode is not retried
		}
		fmt.Println("releasing what run", p.RunID, "held")
		return nil
	})

	ctx := context.Background()
	fmt.Println(mux.ProcessTask(ctx, queue.CleanupTask("run-1")))
	err := mux.ProcessTask(ctx, asynq.NewTask(queue.TypeRunCleanup, []byte("{")))
	fmt.Println("skip retry:", errors.Is(err, asynq.SkipRetry))
	// Output:
	// releasing what run run-1 held
	// <nil>
	// skip retry: true
}

// Wiring the queue into a process (needs Redis, so it only compiles here): one
// Enqueuer for everything that enqueues, and a server that takes every queue at
// its weight.
func ExampleNewEnqueuer() {
	redis := asynq.RedisClientOpt{Addr: "127.0.0.1:6379"}
	client := asynq.NewClient(redis)
	defer client.Close()
	q, err := queue.NewEnqueuer(client, queue.Config{MaxRetry: 5})
	if err != nil {
		panic(err)
	}
	// Starting a run; a second call with the same key is no error and no second task.
	if err := q.Supervise(context.Background(), queue.Route{Key: "alice", Priority: queue.DefaultPriority}, "run-1", "start"); err != nil {
		panic(err)
	}

	srv := asynq.NewServer(redis, asynq.Config{Queues: queue.Weights()})
	mux := asynq.NewServeMux()
	mux.HandleFunc(queue.TypeSupervise, func(ctx context.Context, t *asynq.Task) error { return nil })
	if err := srv.Run(mux); err != nil {
		panic(err)
	}
}

// Session ids are typed; their stored form is parsed back, and a session resumes
// with the task that steps it (Enqueuer.Resume): a supervisor session with a
// supervise task, a delegation's session with a turn task, an MCP client's call
// with an mcp:call task.
func ExampleParseSessionID() {
	for _, stored := range []string{"run-1:supervisor", "d:del_1", "m:mcp_1", "sess-1"} {
		id, err := queue.ParseSessionID(stored)
		if err != nil {
			fmt.Println(err)
			continue
		}
		switch {
		case id.IsMCPCall():
			fmt.Printf("%s: MCP call %s, resumed by %s\n", id, id.MCPCall, queue.MCPCallTaskID(id.MCPCall, "approval:apr_1"))
		case id.IsSupervisor():
			fmt.Printf("%s: run %s's supervisor, resumed by %s\n", id, id.Run, queue.SuperviseTaskID(id.Run, "approval:apr_1"))
		default:
			fmt.Printf("%s: delegation %s, resumed by %s\n", id, id.Delegation, queue.TurnTaskID(id.Delegation, "approval:apr_1"))
		}
	}
	// Output:
	// run-1:supervisor: run run-1's supervisor, resumed by supervise:run-1:approval:apr_1
	// d:del_1: delegation del_1, resumed by turn:del_1:approval:apr_1
	// m:mcp_1: MCP call mcp_1, resumed by mcp-call:mcp_1:approval:apr_1
	// invalid session id "sess-1": want <run>:supervisor, d:<delegation> or m:<mcp call>
}
