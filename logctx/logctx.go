// Package logctx carries log attributes in a context, so every log line written
// while handling a run (by the worker, the gate, a tool) names the run, the agent,
// the tool and the asynq task without each call site repeating them.
//
// Two ways in: wrap the process's handler with NewHandler and log with the
// *Context methods (slog.InfoContext(ctx, ...)), or take Logger(ctx, base) where a
// logger is used without a context.
package logctx

import (
	"context"
	"log/slog"
	"slices"

	"github.com/hibiken/asynq"
)

// Attribute keys this project uses (one spelling everywhere, so log queries work).
const (
	KeyRunID    = "run_id"
	KeyAgent    = "agent"
	KeyTool     = "tool"
	KeyTaskID   = "task_id"
	KeyTaskType = "task_type"
	KeyQueue    = "queue"
)

type ctxKey struct{}

// With returns ctx carrying attrs after the ones it already carries; a key given
// again replaces the earlier value (the innermost scope wins).
func With(ctx context.Context, attrs ...slog.Attr) context.Context {
	if len(attrs) == 0 {
		return ctx
	}
	// A fresh slice: contexts derived from ctx elsewhere keep theirs.
	out := slices.Clone(Attrs(ctx))
	for _, a := range attrs {
		out = slices.DeleteFunc(out, func(b slog.Attr) bool { return b.Key == a.Key })
		out = append(out, a)
	}
	return context.WithValue(ctx, ctxKey{}, out)
}

// Run is With for the attributes of a run step: run id and agent (empty values are
// left out).
func Run(ctx context.Context, runID, agent string) context.Context {
	var attrs []slog.Attr
	if runID != "" {
		attrs = append(attrs, slog.String(KeyRunID, runID))
	}
	if agent != "" {
		attrs = append(attrs, slog.String(KeyAgent, agent))
	}
	return With(ctx, attrs...)
}

// Tool is With for the tool being called.
func Tool(ctx context.Context, tool string) context.Context {
	return With(ctx, slog.String(KeyTool, tool))
}

// Attrs returns the attributes ctx carries (nil for none). The slice is shared:
// do not modify it.
func Attrs(ctx context.Context) []slog.Attr {
	if ctx == nil {
		return nil
	}
	a, _ := ctx.Value(ctxKey{}).([]slog.Attr)
	return a
}

// Logger returns base with ctx's attributes added, for code that logs without a
// context. With a NewHandler underneath, prefer base.InfoContext(ctx, ...): this
// and the handler together would repeat the attributes.
func Logger(ctx context.Context, base *slog.Logger) *slog.Logger {
	attrs := Attrs(ctx)
	if len(attrs) == 0 {
		return base
	}
	args := make([]any, len(attrs))
	for i, a := range attrs {
		args[i] = a
	}
	return base.With(args...)
}

// Handler adds the attributes of the record's context to every record.
type Handler struct {
	inner slog.Handler
}

// NewHandler wraps inner (e.g. slog.NewJSONHandler). Attributes from the context
// land where the record's own attributes do: inside any group opened with
// WithGroup.
func NewHandler(inner slog.Handler) *Handler { return &Handler{inner: inner} }

// Enabled implements slog.Handler.
func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool { return h.inner.Enabled(ctx, l) }

// Handle implements slog.Handler.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	if attrs := Attrs(ctx); len(attrs) > 0 {
		r = r.Clone()
		r.AddAttrs(attrs...)
	}
	return h.inner.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &Handler{inner: h.inner.WithAttrs(attrs)}
}

// WithGroup implements slog.Handler.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{inner: h.inner.WithGroup(name)}
}

// Task is With for the asynq task being handled: its id, type and queue. Use it
// where asynq hands over a task outside the middleware (the ErrorHandler).
func Task(ctx context.Context, t *asynq.Task) context.Context {
	attrs := []slog.Attr{slog.String(KeyTaskType, t.Type())}
	if id, ok := asynq.GetTaskID(ctx); ok {
		attrs = append(attrs, slog.String(KeyTaskID, id))
	}
	if q, ok := asynq.GetQueueName(ctx); ok {
		attrs = append(attrs, slog.String(KeyQueue, q))
	}
	return With(ctx, attrs...)
}

// TaskMiddleware puts the asynq task's id, type and queue into the handler's
// context, so every line logged while the task runs names it.
func TaskMiddleware() asynq.MiddlewareFunc {
	return func(next asynq.Handler) asynq.Handler {
		return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			return next.ProcessTask(Task(ctx, t), t)
		})
	}
}
