package metrics

import "sync"

// OtherLabel is the label value every value outside a LabelSet is counted under.
const OtherLabel = "other"

// LabelSet bounds a label whose values come from users (a submitted team's model
// name): only the values it knows get a series of their own, everything else is
// counted as OtherLabel. Without it every new name would add series that live as long
// as the process, and a client could exhaust Prometheus by submitting names.
type LabelSet struct {
	mu    sync.RWMutex
	known map[string]bool
}

// NewLabelSet knows values.
func NewLabelSet(values ...string) *LabelSet {
	s := &LabelSet{known: map[string]bool{}}
	s.Add(values...)
	return s
}

// Add makes values known (configuration the operator wrote, not user input).
func (s *LabelSet) Add(values ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range values {
		if v != "" {
			s.known[v] = true
		}
	}
}

// Value is v when known, else OtherLabel. A nil set knows nothing.
func (s *LabelSet) Value(v string) string {
	if s == nil {
		return OtherLabel
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.known[v] {
		return v
	}
	return OtherLabel
}
