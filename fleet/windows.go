package fleet

import (
	"sync"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/llm/tokens"
)

// memoEntries is how many long texts each model's counter remembers: a
// session's messages are counted once, not again at every turn (counting runs
// at a few MB/s), across the sessions one worker steps at once.
const memoEntries = 8192

// windows is the worker's view of the models' context windows (worker.Windows):
// the window table (llm.windows over the shipped one), a counter per model
// (tiktoken for OpenAI families, the byte estimate for the others) and the
// calibration learnt from the providers' reported usage.
type windows struct {
	table *tokens.Table
	cal   tokens.Calibrator
	mu    sync.Mutex
	memos map[string]*tokens.Memo
	// caps are windows learnt from providers' refusals (the table said more).
	caps map[string]int
}

func newWindows(table *tokens.Table) *windows {
	return &windows{table: table, memos: map[string]*tokens.Memo{}, caps: map[string]int{}}
}

// Limits are the table's, or less where a provider refused a smaller request
// (the answer's room then at most half the learnt window).
func (w *windows) Limits(model string) (int, int) {
	l, _ := w.table.Lookup(model)
	w.mu.Lock()
	c, ok := w.caps[model]
	w.mu.Unlock()
	if ok && c < l.Context {
		return c, min(l.Output, c/2)
	}
	return l.Context, l.Output
}

// Refused: the provider refused a request of about estimated tokens (its
// answer's room included) as over the window; the window is taken to be a
// tenth less, for this process's life (a restart asks the table again).
func (w *windows) Refused(model string, estimated int) {
	c := estimated * 9 / 10
	if c <= 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if old, ok := w.caps[model]; !ok || c < old {
		w.caps[model] = c
	}
}

func (w *windows) counter(model string) *tokens.Memo {
	w.mu.Lock()
	defer w.mu.Unlock()
	m, ok := w.memos[model]
	if !ok {
		m = tokens.NewMemo(tokens.ForModel(model), memoEntries)
		w.memos[model] = m
	}
	return m
}

// Estimate is the counted request scaled by what the provider reported so far.
func (w *windows) Estimate(model string, r llm.Request) int {
	return w.cal.Scaled(model, tokens.Request(w.counter(model), r))
}

// Observe takes the estimate Estimate gave: the calibrator learns from the
// unscaled count.
func (w *windows) Observe(model string, estimated, reported int) {
	w.cal.Observe(model, int(float64(estimated)/w.cal.Scale(model)), reported)
}
