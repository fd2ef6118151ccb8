package store

import (
	"container/list"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5"
)

// MemoryIndex is a worker's in-process index of its projects' long-term memory
// (issue 45): RecallMemory as the store's, without reading the project's
// entries from PostgreSQL at every new session. A recall needs two facts from
// PostgreSQL — the project's generation (migration 00036) and the words of
// the recall's text (PostgreSQL's own parser, so ranks stay ts_rank_cd's) —
// and ranks in memory when the index was built at that generation or later.
// Otherwise it first reads what changed in one repeatable-read snapshot: the
// entries written since its generation, or every entry after a delete.
//
// Those two facts are a MemoryAt. A worker reads it in the batch that takes a
// new session's lease (Acquire.Memory), so its recall (RecallMemoryAt) makes
// no round trip of its own when nothing changed: under load that round trip's
// tail was the recall's p99 (cmd/bench section 4). RecallMemory reads it in a
// round trip of its own, for callers without an acquire.
//
// Correctness: the generation is bumped by triggers in the transaction of every
// change to a long-term entry, and read in the recall's own round trip or in
// the acquire of the session that recalls, so a write or a delete committed by
// any process before that is in what the recall returns, on every worker (a
// write committed after a session's acquire is in the next session's). Entries
// keep their provenance exactly as stored (a copy per recall: a recalled
// untrusted entry stays labelled).
//
// Bounds: at most maxEntries entries over all projects (a project counts as
// one more), the least recently recalled projects evicted first; about 1.6 KB
// of heap an entry of 50 words (BenchmarkMemoryRecall). A project larger than
// maxEntries alone is not indexed: its recalls read PostgreSQL as before. Only a Store over a pool can
// back an index: over one transaction (InTx) it would cache writes that may
// roll back.
type MemoryIndex struct {
	st         *Store
	maxEntries int

	mu       sync.Mutex
	projects map[string]*indexedProject
	lru      *list.List // of *indexedProject, most recently recalled first
	entries  int        // over every project in projects
	// tooBig remembers, per project, the generation at which it had more than
	// maxEntries entries, so its recalls go to PostgreSQL without a count each
	// time until it changes.
	tooBig map[string]int64
}

// NewMemoryIndex builds an empty index over s's pool holding at most
// maxEntries entries (> 0).
func NewMemoryIndex(s *Store, maxEntries int) (*MemoryIndex, error) {
	if s.Pool == nil {
		return nil, fmt.Errorf("memory index: needs a store over a pool, not one transaction")
	}
	if maxEntries <= 0 {
		return nil, fmt.Errorf("memory index: %d entries: must be > 0", maxEntries)
	}
	return &MemoryIndex{st: s, maxEntries: maxEntries, projects: map[string]*indexedProject{}, lru: list.New(), tooBig: map[string]int64{}}, nil
}

// indexedProject is one project's long-term entries at generation gen.
type indexedProject struct {
	project string
	elem    *list.Element
	// load serializes the reads of the project's changes: concurrent recalls
	// that find the index stale wait for one read instead of each doing it.
	load sync.Mutex

	mu       sync.RWMutex
	gen      int64
	byID     map[int64]*indexedEntry
	byAge    []*indexedEntry // created_at, then id, newest first (RecallMemory's recent)
	postings map[string][]posting
	// slots numbers the entries (indexedEntry.slot): a recall's sums are an
	// array, not a map.
	slots int
}

type indexedEntry struct {
	MemoryEntry
	// termAgent is agent_memory_terms.agent: '' for a project-shared entry, else
	// the only agent whose relevance search finds it.
	termAgent string
	// slot is the entry's number in its project, < indexedProject.slots.
	slot int
}

type posting struct {
	e *indexedEntry
	n int64 // positions of the lexeme in the entry (agent_memory_terms.n)
}

// newer orders entries as RecallMemory's recent candidates.
func newer(a, b *indexedEntry) int {
	if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
		return c
	}
	return cmpInt64(b.ID, a.ID)
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// MemoryAt is what a recall of a project's memory for a text needs of
// PostgreSQL, as of one moment: the project's memory generation and the
// text's lexemes (to_tsvector('simple'), as Store.RecallMemory matches them).
type MemoryAt struct {
	Project, Text string
	Gen           int64
	// Lexemes are distinct (tsvector_to_array's).
	Lexemes []string
}

// memoryAtQuery reads a MemoryAt's generation and lexemes: $1 the project, $2
// the text (MemoryIndex.RecallMemory, and AcquireStep with Acquire.Memory).
const memoryAtQuery = `SELECT coalesce((SELECT gen FROM agent_memory_generations WHERE project = $1), 0),
		tsvector_to_array(to_tsvector('simple', $2))`

// RecallMemory is Store.RecallMemory served from the index: the same entries,
// order and relevance. It asks PostgreSQL for the project's generation and the
// text's lexemes first (one round trip); RecallMemoryAt takes them read.
func (x *MemoryIndex) RecallMemory(ctx context.Context, project, agent, text string, limit int) ([]MemoryEntry, error) {
	if limit < 0 {
		return nil, fmt.Errorf("memory index: recall limit %d: must be ≥ 0", limit)
	}
	at, err := x.st.MemoryAt(ctx, project, text)
	if err != nil {
		return nil, fmt.Errorf("memory index: %w", err)
	}
	return x.RecallMemoryAt(ctx, at, agent, limit)
}

// MemoryAt reads a recall's MemoryAt now, in one round trip (a step reads it
// with its lease instead: Acquire.Memory).
func (s *Store) MemoryAt(ctx context.Context, project, text string) (MemoryAt, error) {
	at := MemoryAt{Project: project, Text: text}
	if err := s.db.QueryRow(ctx, memoryAtQuery, project, text).Scan(&at.Gen, &at.Lexemes); err != nil {
		return MemoryAt{}, fmt.Errorf("memory generation of %s: %w", project, err)
	}
	return at, nil
}

// RecallMemoryAt is RecallMemory as of at (read by the session's acquire):
// exact as of when at was read, and without a round trip when the index is at
// at.Gen or later. Behind, it reads what changed first.
func (x *MemoryIndex) RecallMemoryAt(ctx context.Context, at MemoryAt, agent string, limit int) ([]MemoryEntry, error) {
	if limit < 0 {
		return nil, fmt.Errorf("memory index: recall limit %d: must be ≥ 0", limit)
	}
	p, err := x.current(ctx, at.Project, at.Gen)
	if err != nil {
		return nil, err
	}
	if p == nil { // too large to index
		return x.st.RecallMemory(ctx, at.Project, agent, at.Text, limit)
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.recall(agent, at.Lexemes, limit), nil
}

// current returns the project's index at generation gen or later, reading
// what changed when it is older; nil when the project is too large to index.
func (x *MemoryIndex) current(ctx context.Context, project string, gen int64) (*indexedProject, error) {
	x.mu.Lock()
	if g, ok := x.tooBig[project]; ok && g >= gen {
		x.mu.Unlock()
		return nil, nil
	}
	p := x.projects[project]
	if p == nil {
		p = &indexedProject{project: project, gen: -1}
		x.projects[project] = p
		p.elem = x.lru.PushFront(p)
		x.entries++ // a project counts as an entry: many empty ones are bounded too
	} else {
		x.lru.MoveToFront(p.elem)
	}
	x.mu.Unlock()

	if p.generation() >= gen {
		return p, nil
	}
	p.load.Lock()
	defer p.load.Unlock()
	if p.generation() >= gen { // another recall read it meanwhile
		return p, nil
	}
	if err := x.refresh(ctx, p); err != nil {
		return nil, err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.projects[project] != p { // evicted meanwhile: still good for this recall
		return p, nil
	}
	if p.generation() < 0 { // too large
		x.drop(p)
		return nil, nil
	}
	x.evict(p)
	return p, nil
}

func (p *indexedProject) generation() int64 {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.gen
}

// drop removes p from the index; x.mu held.
func (x *MemoryIndex) drop(p *indexedProject) {
	if x.projects[p.project] != p {
		return
	}
	delete(x.projects, p.project)
	x.lru.Remove(p.elem)
	p.mu.RLock()
	x.entries -= 1 + len(p.byID)
	p.mu.RUnlock()
}

// evict drops the least recently recalled projects but keep until the index
// holds at most maxEntries; x.mu held.
func (x *MemoryIndex) evict(keep *indexedProject) {
	for x.entries > x.maxEntries {
		el := x.lru.Back()
		for el != nil && el.Value.(*indexedProject) == keep {
			el = el.Prev()
		}
		if el == nil {
			return
		}
		x.drop(el.Value.(*indexedProject))
	}
}

// memoryRows are the columns refresh reads of an entry: its row as
// RecallMemory returns it, its lexemes with their position counts (what
// agent_memory_terms holds of it, from the same tsvector) and its terms' agent.
const memoryRows = `SELECT m.id, m.project, m.tier, m.scope, m.agent, coalesce(m.run_id::text, ''), coalesce(m.session_id, ''), m.author, m.content,
		m.created_at, m.provenance, CASE WHEN m.scope = 'agent' THEN m.agent ELSE '' END,
		coalesce(t.lexemes, '{}'), coalesce(t.ns, '{}')
	FROM agent_memory m LEFT JOIN LATERAL (
		SELECT array_agg(u.lexeme) AS lexemes, array_agg(greatest(cardinality(u.positions), 1)::bigint) AS ns FROM unnest(m.tsv) u) t ON true
	WHERE m.project = $1 AND m.tier = 'long_term'`

// refresh brings p to the project's current generation in one snapshot: the
// entries written since p's generation, or all of them after a delete (or on
// first use). It leaves p's generation at -1 when the project has more than
// maxEntries entries. Called with p.load held.
func (x *MemoryIndex) refresh(ctx context.Context, p *indexedProject) error {
	tx, err := x.st.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("memory index: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // read-only
	var gen, reset int64
	err = tx.QueryRow(ctx, `SELECT coalesce(max(gen), 0), coalesce(max(reset_gen), 0) FROM agent_memory_generations WHERE project = $1`, p.project).
		Scan(&gen, &reset)
	if err != nil {
		return fmt.Errorf("memory index: generation of %s: %w", p.project, err)
	}
	old := p.generation()
	full := old < 0 || reset > old || gen < old
	if !full && gen == old {
		return nil
	}
	if full {
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM agent_memory WHERE project = $1 AND tier = 'long_term'`, p.project).Scan(&n); err != nil {
			return fmt.Errorf("memory index: count of %s: %w", p.project, err)
		}
		if n+1 > x.maxEntries {
			x.mu.Lock()
			x.tooBig[p.project] = gen
			x.mu.Unlock()
			p.mu.Lock()
			p.gen = -1
			p.mu.Unlock()
			return nil
		}
	}
	q, args := memoryRows, []any{p.project}
	if !full {
		q, args = memoryRows+` AND m.gen > $2`, []any{p.project, old}
	}
	rows, err := tx.Query(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("memory index: read %s: %w", p.project, err)
	}
	defer rows.Close()
	var read []readEntry
	for rows.Next() {
		var r readEntry
		r.e = &indexedEntry{}
		e := &r.e.MemoryEntry
		var prov []byte
		if err := rows.Scan(&e.ID, &e.Project, &e.Tier, &e.Scope, &e.Agent, &e.RunID, &e.SessionID, &e.Author, &e.Content,
			&e.CreatedAt, &prov, &r.e.termAgent, &r.lexemes, &r.ns); err != nil {
			return fmt.Errorf("memory index: read %s: %w", p.project, err)
		}
		if prov != nil {
			e.Provenance = json.RawMessage(prov)
		}
		if len(r.lexemes) != len(r.ns) {
			return fmt.Errorf("memory index: entry %d: %d lexemes, %d counts", e.ID, len(r.lexemes), len(r.ns))
		}
		read = append(read, r)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("memory index: read %s: %w", p.project, err)
	}
	x.apply(p, gen, full, read)
	return nil
}

// readEntry is an entry refresh read, with its lexemes and their counts.
type readEntry struct {
	e       *indexedEntry
	lexemes []string
	ns      []int64
}

// apply installs what refresh read at generation gen: a whole new index of p
// (full), or the entries written since p's generation added to it.
func (x *MemoryIndex) apply(p *indexedProject, gen int64, full bool, read []readEntry) {
	var byID map[int64]*indexedEntry
	var byAge []*indexedEntry
	var postings map[string][]posting
	if full { // built before taking the locks: recalls of the old index go on
		byID, byAge, postings = make(map[int64]*indexedEntry, len(read)), make([]*indexedEntry, 0, len(read)), map[string][]posting{}
		for i, r := range read {
			r.e.slot = i
			byID[r.e.ID] = r.e
			byAge = append(byAge, r.e)
			for i, l := range r.lexemes {
				postings[l] = append(postings[l], posting{e: r.e, n: r.ns[i]})
			}
		}
		slices.SortFunc(byAge, newer)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	before := len(p.byID)
	if full {
		p.byID, p.byAge, p.postings, p.slots = byID, byAge, postings, len(read)
	} else {
		for _, r := range read {
			if p.byID[r.e.ID] != nil {
				continue
			}
			r.e.slot = p.slots
			p.slots++
			p.byID[r.e.ID] = r.e
			i, _ := slices.BinarySearchFunc(p.byAge, r.e, newer)
			p.byAge = slices.Insert(p.byAge, i, r.e)
			for i, l := range r.lexemes {
				p.postings[l] = append(p.postings[l], posting{e: r.e, n: r.ns[i]})
			}
		}
	}
	p.gen = gen
	if x.projects[p.project] == p {
		x.entries += len(p.byID) - before
	}
	delete(x.tooBig, p.project)
}

// recall is RecallMemory's query over the index: the limit entries most
// relevant to the lexemes among those the agent's relevance search finds (by
// the sum of the lexemes' positions, then the higher id), and the limit newest
// the agent sees, the most relevant and then the newest first, relevance
// normalized as RecallMemory does. p.mu held for reading.
//
// Its cost is the lexemes' postings, not the index: sums go to a pooled array
// by entry slot (no map per recall), and the limit best are kept in a heap
// rather than every matching entry sorted. Under CPU contention a recall's
// CPU time is multiplied into its p99 (cmd/bench section 4).
func (p *indexedProject) recall(agent string, lexemes []string, limit int) []MemoryEntry {
	if limit <= 0 {
		return nil
	}
	sc := scratchPool.Get().(*recallScratch)
	defer scratchPool.Put(sc)
	if len(sc.sums) < p.slots {
		sc.sums = make([]int64, p.slots)
	}
	sums, touched := sc.sums, sc.touched[:0]
	for _, l := range lexemes {
		for _, ps := range p.postings[l] {
			if ps.e.termAgent == "" || ps.e.termAgent == agent {
				if sums[ps.e.slot] == 0 {
					touched = append(touched, ps.e)
				}
				sums[ps.e.slot] += ps.n // n ≥ 1: a touched entry's sum is > 0
			}
		}
	}
	// The limit best: a heap whose root is the worst kept.
	rel := sc.rel[:0]
	for _, e := range touched {
		c := cand{e, sums[e.slot]}
		switch {
		case len(rel) < limit:
			rel = append(rel, c)
			siftUp(rel, len(rel)-1)
		case c.better(rel[0]):
			rel[0] = c
			siftDown(rel, 0)
		}
	}
	for _, e := range touched {
		sums[e.slot] = 0
	}
	for _, c := range rel {
		sums[c.e.slot] = -1 // kept for relevance: the recent loop skips it
	}
	taken := 0
	for _, e := range p.byAge {
		if taken == limit {
			break
		}
		if e.Scope != "project" && e.Agent != agent {
			continue
		}
		taken++
		if sums[e.slot] == 0 {
			sums[e.slot] = -1
			rel = append(rel, cand{e, 0})
		}
	}
	for _, c := range rel {
		sums[c.e.slot] = 0
	}
	slices.SortFunc(rel, func(a, b cand) int {
		if a.n != b.n {
			return cmpInt64(b.n, a.n)
		}
		return newer(a.e, b.e)
	})
	out := make([]MemoryEntry, len(rel))
	for i, c := range rel {
		out[i] = c.e.MemoryEntry
		// Each recall its own copy of the label: nothing a caller does to it
		// reaches the index.
		out[i].Provenance = slices.Clone(c.e.Provenance)
		// RecallMemory's (r/(r+1))::real with r = 0.1·n, i.e. n/(n+10).
		out[i].Relevance = float64(float32(float64(c.n) / float64(c.n+10)))
	}
	clear(rel) // the pool keeps no entries of an evicted index alive
	clear(touched)
	sc.touched, sc.rel = touched[:0], rel[:0]
	return out
}

// recallScratch is a recall's working memory, reused across recalls (and
// projects): sums by entry slot, zero between recalls.
type recallScratch struct {
	sums    []int64
	touched []*indexedEntry
	rel     []cand
}

var scratchPool = sync.Pool{New: func() any { return &recallScratch{} }}

// cand is an entry and its relevance sum.
type cand struct {
	e *indexedEntry
	n int64
}

// better orders relevance candidates as RecallMemory's rel: the higher sum,
// then the higher id.
func (c cand) better(o cand) bool {
	if c.n != o.n {
		return c.n > o.n
	}
	return c.e.ID > o.e.ID
}

// siftUp and siftDown keep h a heap with its worst candidate at the root.
func siftUp(h []cand, i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !h[parent].better(h[i]) {
			return
		}
		h[parent], h[i] = h[i], h[parent]
		i = parent
	}
}

func siftDown(h []cand, i int) {
	for {
		worst, l, r := i, 2*i+1, 2*i+2
		if l < len(h) && h[worst].better(h[l]) {
			worst = l
		}
		if r < len(h) && h[worst].better(h[r]) {
			worst = r
		}
		if worst == i {
			return
		}
		h[i], h[worst] = h[worst], h[i]
		i = worst
	}
}

// Len is the number of entries indexed over every project, and of projects.
func (x *MemoryIndex) Len() (entries, projects int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.entries, len(x.projects)
}
