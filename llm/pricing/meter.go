package pricing

import (
	"context"

	"github.com/aetherium-engine/aetherium/llm"
)

// Meter is the metering middleware: the provider it wraps prices each answer
// by table() (read at every call, so the fleet can swap tables while calls
// run; a nil func or a nil table prices nothing). On success it sets
// resp.Cost and resp.Priced from the table's Cost for resp.Provider (next's
// Name when the answer names none) and resp.Model (the request's Model when
// the answer names none), overwriting what an inner layer set: the last
// table is the one that counts. An error and its response pass through
// unchanged. Name is next's.
func Meter(table func() *Table) func(llm.Provider) llm.Provider {
	return func(next llm.Provider) llm.Provider { return &meter{next: next, table: table} }
}

type meter struct {
	next  llm.Provider
	table func() *Table
}

func (m *meter) Name() string { return m.next.Name() }

func (m *meter) Complete(ctx context.Context, req llm.Request) (llm.Response, error) {
	resp, err := m.next.Complete(ctx, req)
	if err != nil {
		return resp, err
	}
	provider := resp.Provider
	if provider == "" {
		provider = m.next.Name()
	}
	model := resp.Model
	if model == "" {
		model = req.Model
	}
	var t *Table
	if m.table != nil {
		t = m.table()
	}
	resp.Cost, resp.Priced = t.Cost(provider, model, resp.Usage)
	return resp, nil
}
