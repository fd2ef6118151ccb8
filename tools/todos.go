package tools

import (
	"slices"
	"sync"

	"github.com/aetherium-engine/aetherium/store"
)

// HoldsTodos marks a tool that reads or changes the calling agent's todo list
// through Session.Todos: a step whose session can see one reads the list with
// its lease (store.Acquire.Todos), in the transaction it takes anyway.
func HoldsTodos() Option { return func(s *Spec) { s.HoldsTodos = true } }

// HoldsTodos reports whether a session with access a can call a tool that
// holds the todo list (see HoldsTodos).
func (r *Registry) HoldsTodos(a Access) bool {
	for _, name := range a.Tools {
		if s, ok := r.specs[name]; ok && s.HoldsTodos {
			return true
		}
	}
	return false
}

// Todos is the calling agent's todo list as its step holds it (Session.Todos):
// read with the step's lease (or at its first use, when the lease was taken
// before the session's tools were known), changed in memory by the calls, and
// written by the save that stores those calls' results, in its transaction. A
// model turn with a todo call then costs no transaction of its own (issue 45:
// it was one of the turn's 3.2), and a turn redone after a crash redoes its
// list changes with its results instead of finding them already applied.
//
// Two sessions of the same agent in one run (parallel delegations to it) share
// the row: the later save wins, as the later write did before.
type Todos struct {
	mu     sync.Mutex
	items  []store.TodoItem
	loaded bool
	// changes counts Set calls; saved is the count the last save took.
	changes, saved int
}

// NewTodos is a step's list as its lease read it (loaded), or one to read at
// its first use (loaded false).
func NewTodos(items []store.TodoItem, loaded bool) *Todos {
	return &Todos{items: items, loaded: loaded}
}

// Items is a copy of the list; load reads it the first time when the step's
// lease did not.
func (t *Todos) Items(load func() ([]store.TodoItem, error)) ([]store.TodoItem, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.loaded {
		items, err := load()
		if err != nil {
			return nil, err
		}
		t.items, t.loaded = items, true
	}
	out := slices.Clone(t.items)
	if out == nil {
		out = []store.TodoItem{}
	}
	return out, nil
}

// Set replaces the list; the step's next save writes it.
func (t *Todos) Set(items []store.TodoItem) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.items, t.loaded = slices.Clone(items), true
	t.changes++
}

// Unsaved is the list when it changed since the last save, with the mark to
// hand Saved once that save committed. Nil-safe: a step without a list has
// nothing unsaved.
func (t *Todos) Unsaved() (items []store.TodoItem, mark int, ok bool) {
	if t == nil {
		return nil, 0, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.changes == t.saved {
		return nil, 0, false
	}
	items = slices.Clone(t.items)
	if items == nil {
		items = []store.TodoItem{}
	}
	return items, t.changes, true
}

// Saved records that a save stored the list as of mark.
func (t *Todos) Saved(mark int) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.saved = max(t.saved, mark)
}
