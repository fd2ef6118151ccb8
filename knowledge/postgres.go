package knowledge

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Ranking constants. Coverage is the IDF-weighted share of the query's words a
// chunk holds (typo corrections count by their closeness); it carries most of
// the score because ts_rank_cd alone knows no IDF and rewards a common word
// repeated. ts_rank_cd (normalized rank/(rank+1)) breaks ties between chunks of
// equal coverage.
//
// Scoring reads each candidate's tsvector (detoasting it), so the candidates are
// bounded: every chunk holding one of the query's rarest words (while their
// document frequencies add up to at most rareBudget) plus the chunks holding all
// of its words, each branch capped at candidateCap. A chunk that only holds
// frequent words of the query is not a candidate: its coverage would be low.
const (
	coverageShare = 0.7
	rareBudget    = 250
	candidateCap  = 250
	// commonShare: a word in more than this share of all chunks is left out of
	// the query (when the query has other words and the index is not tiny): it
	// weighs next to nothing and would make every chunk a candidate.
	commonShare   = 0.2
	commonMinDocs = 500
	// Typo correction: a query word of at least minFixLen runes that no chunk
	// holds is replaced by up to maxFixes of its fixCandidates nearest
	// vocabulary words by trigram distance that are within one edit (two for
	// words of 8 runes or more; a transposition is one edit).
	minFixLen     = 4
	maxFixes      = 2
	fixCandidates = 8
)

// Postgres is the PostgreSQL Backend (migration 00009_knowledge.sql).
type Postgres struct {
	pool *pgxpool.Pool
	cfg  Config
	emb  Embedder
	log  *slog.Logger
}

var _ Backend = (*Postgres)(nil)

// Option adjusts a Postgres backend.
type Option func(*Postgres)

// WithEmbedder replaces the embedder of the configuration (nil: none).
func WithEmbedder(e Embedder) Option { return func(p *Postgres) { p.emb = e } }

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(p *Postgres) { p.log = l } }

// NewPostgres returns the backend on pool; cfg's embeddings endpoint, when set,
// builds its embedder.
func NewPostgres(pool *pgxpool.Pool, cfg Config, opts ...Option) *Postgres {
	cfg = cfg.WithDefaults()
	p := &Postgres{pool: pool, cfg: cfg, emb: NewEmbedder(cfg.Embeddings), log: slog.Default()}
	for _, o := range opts {
		o(p)
	}
	return p
}

// Config returns the backend's configuration, defaults applied.
func (p *Postgres) Config() Config { return p.cfg }

func (p *Postgres) model() string {
	if p.emb == nil {
		return ""
	}
	return p.emb.Model()
}

// prepare validates doc and fills its defaults.
func (p *Postgres) prepare(doc Document) (Document, error) {
	if err := doc.Source.validate(); err != nil {
		return doc, err
	}
	clean, err := CleanPath(doc.Path)
	if err != nil {
		return doc, err
	}
	doc.Path = clean
	doc.Title = strings.TrimSpace(doc.Title)
	if doc.Title == "" {
		return doc, fmt.Errorf("%w: %s has no title", ErrInvalidDocument, doc.Path)
	}
	doc.Title = clip(doc.Title, 300)
	if len(doc.Content) > MaxDocumentBytes {
		return doc, fmt.Errorf("%w: %s is %d bytes, over the %d byte limit", ErrInvalidDocument, doc.Path, len(doc.Content), MaxDocumentBytes)
	}
	if doc.Language == "" {
		doc.Language = p.cfg.Language
	}
	if !validLanguage(doc.Language) {
		return doc, fmt.Errorf("%w: language %q", ErrInvalidDocument, doc.Language)
	}
	return doc, nil
}

// contentHash covers everything the stored chunks depend on: a document indexed
// again with the same hash is unchanged.
func (p *Postgres) contentHash(doc Document, model string) string {
	h := sha256.New()
	for _, s := range []string{"v1", doc.Title, strings.Join(doc.Tags, "\x1f"), doc.Language, fmt.Sprint(p.cfg.ChunkSize), model, doc.Content} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Index implements Backend: an unchanged document (same content hash) is a
// no-op; a changed one has its chunks replaced in one transaction. Embeddings are
// fetched before the transaction opens; when the endpoint fails the document is
// indexed without them and embedded on its next re-index.
func (p *Postgres) Index(ctx context.Context, doc Document) (Indexed, error) {
	doc, err := p.prepare(doc)
	if err != nil {
		return Indexed{}, err
	}
	id := DocID(doc.Source, doc.Path)
	want := p.contentHash(doc, p.model())
	if cur, n, ok, err := p.current(ctx, p.pool, id); err != nil {
		return Indexed{ID: id}, err
	} else if ok && cur == want {
		return Indexed{ID: id, Chunks: n, Embedded: p.emb != nil}, nil
	}
	chunks := SplitMarkdown(doc.Content, p.cfg.ChunkSize)
	if len(chunks) == 0 {
		chunks = []Chunk{{}} // the title alone is still findable
	}
	var vecs [][]float32
	model := ""
	if p.emb != nil {
		texts := make([]string, len(chunks))
		for i, c := range chunks {
			texts[i] = doc.Title + "\n" + c.Heading + "\n" + c.Body
		}
		if vecs, err = p.emb.Embed(ctx, texts); err != nil {
			if ctx.Err() != nil {
				return Indexed{ID: id}, fmt.Errorf("index %s: %w", doc.Path, ctx.Err())
			}
			p.log.Warn("knowledge: indexing without embeddings", "doc", doc.Path, "source", doc.Source.String(), "err", err)
			vecs = nil
		} else {
			model = p.emb.Model()
		}
	}
	stored := p.contentHash(doc, model)
	res := Indexed{ID: id, Chunks: len(chunks), Changed: true, Embedded: vecs != nil}
	err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if err := lockWrite(ctx, tx, id); err != nil {
			return err
		}
		cur, _, existed, err := p.current(ctx, tx, id)
		if err != nil {
			return err
		}
		if existed && cur == stored {
			res.Changed = false
			return nil
		}
		before, err := wordCounts(ctx, tx, id)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO knowledge_sources (kind, source, language) VALUES ($1, $2, $3::text::regconfig)
			ON CONFLICT (kind, source) DO UPDATE SET language = excluded.language, updated_at = now()`,
			doc.Source.Kind, doc.Source.Name, doc.Language); err != nil {
			return languageErr(doc.Language, err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM knowledge_chunks WHERE doc_id = $1`, id); err != nil {
			return err
		}
		tags := doc.Tags
		if tags == nil {
			tags = []string{}
		}
		if _, err := tx.Exec(ctx, `INSERT INTO knowledge_docs (id, kind, source, path, title, tags, language, content_hash, chunks, embedding_model)
			VALUES ($1, $2, $3, $4, $5, $6, $7::text::regconfig, $8, $9, $10)
			ON CONFLICT (id) DO UPDATE SET title = excluded.title, tags = excluded.tags, language = excluded.language,
				content_hash = excluded.content_hash, chunks = excluded.chunks, embedding_model = excluded.embedding_model, indexed_at = now()`,
			id, doc.Source.Kind, doc.Source.Name, doc.Path, doc.Title, tags, doc.Language, stored, len(chunks), model); err != nil {
			return languageErr(doc.Language, err)
		}
		var b pgx.Batch
		for i, c := range chunks {
			var v []float32
			if vecs != nil {
				v = vecs[i]
			}
			b.Queue(`INSERT INTO knowledge_chunks (doc_id, kind, source, ord, title, heading, body, language, embedding)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8::text::regconfig, $9)`,
				id, doc.Source.Kind, doc.Source.Name, i, doc.Title, c.Heading, c.Body, doc.Language, v)
		}
		if err := tx.SendBatch(ctx, &b).Close(); err != nil {
			return err
		}
		after, err := wordCounts(ctx, tx, id)
		if err != nil {
			return err
		}
		return tally(ctx, tx, before, after)
	})
	if err != nil {
		return Indexed{ID: id}, fmt.Errorf("index %s %s: %w", doc.Source, doc.Path, err)
	}
	return res, nil
}

// writeLock is the advisory lock every write of the knowledge tables holds: the
// vocabulary's counts are shared by all documents, so writes are serialized
// (they are short: embeddings are fetched before the transaction) and can never
// deadlock on its rows.
const writeLock = 7274017

// lockWrite takes document id's lock (waiting out another writer of it, so its
// hash is read after that one committed), then the write lock.
func lockWrite(ctx context.Context, tx pgx.Tx, id string) error {
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1)), pg_advisory_xact_lock($2)`, id, writeLock)
	return err
}

func languageErr(lang string, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42704" { // undefined_object
		return fmt.Errorf("%w: %q is not a text-search configuration of this database", ErrInvalidDocument, lang)
	}
	return err
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// current returns the stored content hash and chunk count of document id.
func (p *Postgres) current(ctx context.Context, q querier, id string) (string, int, bool, error) {
	var hash string
	var n int
	err := q.QueryRow(ctx, `SELECT content_hash, chunks FROM knowledge_docs WHERE id = $1`, id).Scan(&hash, &n)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", 0, false, nil
	}
	if err != nil {
		return "", 0, false, fmt.Errorf("knowledge: read document %s: %w", id, err)
	}
	return hash, n, true, nil
}

// wordCounts is, per simple-form word, the number of chunks of document id that
// hold it; "" counts the chunks.
func wordCounts(ctx context.Context, q querier, id string) (map[string]int64, error) {
	rows, err := q.Query(ctx, `
		SELECT u.lexeme, count(*) FROM knowledge_chunks c,
			unnest(to_tsvector('simple', c.title || ' ' || c.heading || ' ' || c.body)) u
		WHERE c.doc_id = $1 GROUP BY u.lexeme
		UNION ALL SELECT '', count(*) FROM knowledge_chunks WHERE doc_id = $1`, id)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	var w string
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&w, &n}, func() error { out[w] = n; return nil }); err != nil {
		return nil, err
	}
	return out, nil
}

// tally applies the change from before to after to the vocabulary, in word order
// (so concurrent tallies lock rows in one order and cannot deadlock).
func tally(ctx context.Context, tx pgx.Tx, before, after map[string]int64) error {
	delta := map[string]int64{}
	for w, n := range after {
		delta[w] += n
	}
	for w, n := range before {
		delta[w] -= n
	}
	words := make([]string, 0, len(delta))
	for w, d := range delta {
		if d != 0 {
			words = append(words, w)
		}
	}
	if len(words) == 0 {
		return nil
	}
	sort.Strings(words)
	ds := make([]int64, len(words))
	for i, w := range words {
		ds[i] = delta[w]
	}
	_, err := tx.Exec(ctx, `INSERT INTO knowledge_terms (word, df)
		SELECT w, d FROM unnest($1::text[], $2::bigint[]) AS u(w, d) ORDER BY w
		ON CONFLICT (word) DO UPDATE SET df = knowledge_terms.df + excluded.df`, words, ds)
	return err
}

// Delete implements Backend.
func (p *Postgres) Delete(ctx context.Context, src Source, path string) error {
	clean, err := CleanPath(path)
	if err != nil && !errors.Is(err, ErrHiddenPath) {
		return err
	} else if err != nil {
		clean = path // nothing hidden is ever indexed, but let it be asked
	}
	id := DocID(src, clean)
	found := true
	err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if err := lockWrite(ctx, tx, id); err != nil {
			return err
		}
		before, err := wordCounts(ctx, tx, id)
		if err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM knowledge_docs WHERE id = $1`, id)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			found = false
			return nil
		}
		return tally(ctx, tx, before, nil)
	})
	if err != nil {
		return fmt.Errorf("delete %s %s: %w", src, clean, err)
	}
	if !found {
		return fmt.Errorf("%w: %s %s", ErrNotFound, src, clean)
	}
	return nil
}

// Docs implements Backend.
func (p *Postgres) Docs(ctx context.Context, src Source) ([]DocInfo, error) {
	rows, err := p.pool.Query(ctx, `SELECT id, path, title, content_hash, chunks, indexed_at FROM knowledge_docs
		WHERE kind = $1 AND source = $2 ORDER BY path`, src.Kind, src.Name)
	if err != nil {
		return nil, fmt.Errorf("knowledge: list %s: %w", src, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (DocInfo, error) {
		d := DocInfo{Source: src}
		return d, r.Scan(&d.ID, &d.Path, &d.Title, &d.ContentHash, &d.Chunks, &d.IndexedAt)
	})
	if err != nil {
		return nil, fmt.Errorf("knowledge: list %s: %w", src, err)
	}
	return out, nil
}

// Stats implements Backend.
func (p *Postgres) Stats(ctx context.Context) (Stats, error) {
	var st Stats
	rows, err := p.pool.Query(ctx, `
		SELECT s.kind, s.source, s.language::text,
			(SELECT count(*) FROM knowledge_docs d WHERE d.kind = s.kind AND d.source = s.source),
			(SELECT count(*) FROM knowledge_chunks c WHERE c.kind = s.kind AND c.source = s.source),
			(SELECT count(*) FROM knowledge_chunks c WHERE c.kind = s.kind AND c.source = s.source AND c.embedding IS NOT NULL)
		FROM knowledge_sources s ORDER BY s.kind, s.source`)
	if err != nil {
		return st, fmt.Errorf("knowledge: stats: %w", err)
	}
	st.Sources, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (SourceStats, error) {
		var s SourceStats
		return s, r.Scan(&s.Source.Kind, &s.Source.Name, &s.Language, &s.Docs, &s.Chunks, &s.Embedded)
	})
	if err != nil {
		return st, fmt.Errorf("knowledge: stats: %w", err)
	}
	for _, s := range st.Sources {
		st.Docs += s.Docs
		st.Chunks += s.Chunks
	}
	if err := p.pool.QueryRow(ctx, `SELECT count(*) FROM knowledge_terms WHERE df > 0 AND word <> ''`).Scan(&st.Terms); err != nil {
		return st, fmt.Errorf("knowledge: stats: %w", err)
	}
	return st, nil
}

// term is one word searched for, with its weight; concept is the index of the
// query word it stands for (a typo's corrections share their word's concept).
type term struct {
	concept int
	word    string
	weight  float64
	df      float64
	rare    bool
}

// plan turns a query's words into weighted terms: known words by IDF, unknown
// ones replaced by their nearest vocabulary words (pg_trgm), very common words
// dropped. total is the sum of the concepts' weights (coverage's denominator).
func (p *Postgres) plan(ctx context.Context, words []string) (terms []term, total float64, err error) {
	rows, err := p.pool.Query(ctx, `
		WITH q AS (SELECT w, i FROM unnest($1::text[]) WITH ORDINALITY AS u(w, i)),
		known AS (SELECT q.i, t.word, t.df FROM q JOIN knowledge_terms t ON t.word = q.w AND t.df > 0)
		SELECT i, word, df, true FROM known
		UNION ALL
		SELECT q.i, f.word, f.df, false FROM q CROSS JOIN LATERAL (
			SELECT word, df FROM knowledge_terms WHERE df > 0 AND word <> '' ORDER BY lower(word) <-> q.w LIMIT $2) f
		WHERE length(q.w) >= $3 AND NOT EXISTS (SELECT 1 FROM known WHERE known.i = q.i)
		UNION ALL
		SELECT 0, '', df, true FROM knowledge_terms WHERE word = ''`, words, fixCandidates, minFixLen)
	if err != nil {
		return nil, 0, fmt.Errorf("knowledge: vocabulary: %w", err)
	}
	type hit struct {
		word string
		df   float64
		sim  float64
	}
	found := map[int][]hit{}
	var n float64
	for rows.Next() {
		var i int
		var h hit
		var df int64
		var exact bool
		if err := rows.Scan(&i, &h.word, &df, &exact); err != nil {
			rows.Close()
			return nil, 0, err
		}
		h.df = float64(df)
		if i == 0 {
			n = h.df
			continue
		}
		w := words[i-1]
		if exact {
			h.sim = 1
		} else {
			d, lw := editDistance(w, h.word), utf8.RuneCountInString(w)
			allowed := 1
			if lw >= 8 {
				allowed = 2
			}
			if d > allowed {
				continue
			}
			h.sim = 1 - float64(d)/float64(lw+1)
		}
		found[i-1] = append(found[i-1], h)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("knowledge: vocabulary: %w", err)
	}
	for i, hs := range found {
		// The closest corrections first, the more frequent among equals.
		sort.SliceStable(hs, func(a, b int) bool {
			if hs[a].sim != hs[b].sim {
				return hs[a].sim > hs[b].sim
			}
			return hs[a].df > hs[b].df
		})
		found[i] = hs[:min(len(hs), maxFixes)]
	}
	idf := func(df float64) float64 { return math.Log(1 + (n-df+0.5)/(df+0.5)) }
	common := func(df float64) bool { return n >= commonMinDocs && df/n > commonShare }
	rare := 0
	for i := range words {
		for _, h := range found[i] {
			if !common(h.df) {
				rare++
				break
			}
		}
	}
	for i, w := range words {
		hits := found[i]
		if len(hits) == 0 {
			// Unknown and uncorrectable: searched (its stem may match another
			// form) but not counted in coverage.
			terms = append(terms, term{concept: i, word: w})
			continue
		}
		best := 0.0
		for _, h := range hits {
			if common(h.df) && rare > 0 {
				continue
			}
			wt := idf(h.df)
			best = max(best, wt)
			terms = append(terms, term{concept: i, word: h.word, weight: wt * h.sim, df: h.df})
		}
		total += best
	}
	// The rarest words generate candidates; the budget always admits the first.
	order := make([]int, len(terms))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return terms[order[a]].df < terms[order[b]].df })
	sum := 0.0
	for n, i := range order {
		sum += terms[i].df
		if n > 0 && sum > rareBudget {
			break
		}
		terms[i].rare = true
	}
	return terms, total, nil
}

// Search implements Backend.
func (p *Postgres) Search(ctx context.Context, q Query) ([]Result, error) {
	k := q.K
	if k <= 0 {
		k = DefaultK
	}
	k = min(k, MaxK)
	words := Terms(q.Text)
	if len(words) == 0 || q.Scope.Empty() {
		return nil, nil
	}
	terms, total, err := p.plan(ctx, words)
	if err != nil {
		return nil, err
	}
	if len(terms) == 0 {
		return nil, nil
	}
	share := coverageShare
	if total == 0 {
		total, share = 1, 0
	}
	concepts := make([]int32, len(terms))
	tw := make([]string, len(terms))
	weights := make([]float64, len(terms))
	rare := make([]bool, len(terms))
	for i, t := range terms {
		concepts[i], tw[i], weights[i], rare[i] = int32(t.concept), t.word, t.weight, t.rare
	}
	limit := k
	if p.emb != nil {
		limit = max(k, p.cfg.Candidates)
	}
	packs := q.Scope.Packs
	if packs == nil {
		packs = []string{}
	}
	rows, err := p.pool.Query(ctx, searchSQL, packs, q.Scope.Project, concepts, tw, weights, rare, candidateCap, total, share, limit)
	if err != nil {
		return nil, fmt.Errorf("knowledge: search: %w", err)
	}
	type cand struct {
		Result
		model string
		vec   []float32
	}
	cands, err := pgx.AppendRows([]cand(nil), rows, func(r pgx.CollectableRow) (cand, error) {
		var c cand
		var kind, name string
		err := r.Scan(&c.DocID, &c.Score, &c.Title, &c.Path, &kind, &name, &c.Heading, &c.Snippet, &c.model, &c.vec)
		c.Source = Source{Kind: kind, Name: name}.String()
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("knowledge: search: %w", err)
	}
	if p.emb != nil && len(cands) > 0 {
		vs, err := p.emb.Embed(ctx, []string{q.Text})
		if err != nil || len(vs) != 1 {
			p.log.Warn("knowledge: search without semantic re-ranking", "err", err)
		} else {
			w := p.cfg.Embeddings.Weight
			for i := range cands {
				if cands[i].model == p.emb.Model() && len(cands[i].vec) == len(vs[0]) {
					cands[i].Score = (1-w)*cands[i].Score + w*max(0, Cosine(vs[0], cands[i].vec))
				}
			}
			sort.SliceStable(cands, func(i, j int) bool { return cands[i].Score > cands[j].Score })
		}
	}
	out := make([]Result, 0, k)
	for _, c := range cands {
		if c.Score < p.cfg.ScoreFloor || len(out) == k {
			continue
		}
		c.Score = math.Round(c.Score*1000) / 1000
		out = append(out, c.Result)
	}
	return out, nil
}

// searchSQL: $1 packs, $2 project, $3/$4/$5/$6 the terms (concept, word, weight,
// rare), $7 candidate cap per branch, $8 total concept weight, $9 coverage share,
// $10 limit.
const searchSQL = `
WITH langs AS (
	SELECT DISTINCT language FROM knowledge_sources
	WHERE (kind = 'pack' AND source = ANY($1)) OR (kind = 'project' AND source = $2)
), terms AS (
	-- A word is parsed in every language of the scope, plus simple; a stop word
	-- of every language is no term (under simple alone it would match everything).
	SELECT u.concept, u.weight, u.rare, x.lq || websearch_to_tsquery('simple', u.word) AS q
	FROM unnest($3::int[], $4::text[], $5::float8[], $6::bool[]) AS u(concept, word, weight, rare)
	CROSS JOIN LATERAL (SELECT knowledge_tsquery_or(websearch_to_tsquery(l.language, u.word)) AS lq FROM langs l) x
	WHERE numnode(x.lq) > 0
), query AS (
	SELECT knowledge_tsquery_or(q) AS anyq, knowledge_tsquery_or(q) FILTER (WHERE rare) AS rareq FROM terms
), conj AS (
	SELECT knowledge_tsquery_and(cq) AS allq FROM (SELECT knowledge_tsquery_or(q) AS cq FROM terms GROUP BY concept) x
), cand AS (
	-- Only ids here: the GIN index answers without reading the tsvectors.
	(SELECT c.id FROM knowledge_chunks c, query
	 WHERE c.tsv @@ query.rareq AND ((c.kind = 'pack' AND c.source = ANY($1)) OR (c.kind = 'project' AND c.source = $2))
	 LIMIT $7)
	UNION
	(SELECT c.id FROM knowledge_chunks c, conj
	 WHERE c.tsv @@ conj.allq AND ((c.kind = 'pack' AND c.source = ANY($1)) OR (c.kind = 'project' AND c.source = $2))
	 LIMIT $7)
), scored AS (
	SELECT c.id, c.doc_id, ts_rank_cd(c.tsv, query.anyq, 32) AS fts,
		coalesce((SELECT sum(m) FROM (SELECT max(t.weight) AS m FROM terms t WHERE c.tsv @@ t.q GROUP BY t.concept) x), 0) / $8 AS cov
	FROM cand JOIN knowledge_chunks c ON c.id = cand.id, query
), best AS (
	SELECT DISTINCT ON (doc_id) id, doc_id, least(1.0, $9 * cov + (1 - $9) * fts) AS score
	FROM scored ORDER BY doc_id, score DESC, id
), top AS (
	SELECT * FROM best ORDER BY score DESC, id LIMIT $10
)
SELECT d.id, top.score, d.title, d.path, d.kind, d.source, c.heading,
	ts_headline(c.language, c.body, query.anyq,
		'StartSel=**, StopSel=**, MaxWords=35, MinWords=12, MaxFragments=2, FragmentDelimiter=" … "'),
	d.embedding_model, c.embedding
FROM top
JOIN knowledge_chunks c ON c.id = top.id
JOIN knowledge_docs d ON d.id = top.doc_id, query
ORDER BY top.score DESC, top.id`

// editDistance is the optimal-string-alignment distance of a and b in runes:
// insertions, deletions, substitutions and transpositions of neighbours cost one.
func editDistance(a, b string) int {
	x, y := []rune(a), []rune(b)
	d := make([][]int, len(x)+1)
	for i := range d {
		d[i] = make([]int, len(y)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(x); i++ {
		for j := 1; j <= len(y); j++ {
			cost := 1
			if x[i-1] == y[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && x[i-1] == y[j-2] && x[i-2] == y[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(x)][len(y)]
}

// BulkLoad indexes many new documents at once through COPY, for initial loads of
// large packs and the benchmark. Unlike Index it neither compares hashes nor
// embeds nor replaces: a document already indexed fails the whole load (its
// primary key). One transaction.
func (p *Postgres) BulkLoad(ctx context.Context, docs []Document) (chunks int, err error) {
	var docRows, chunkRows [][]any
	for _, d := range docs {
		d, err := p.prepare(d)
		if err != nil {
			return 0, err
		}
		id := DocID(d.Source, d.Path)
		cs := SplitMarkdown(d.Content, p.cfg.ChunkSize)
		if len(cs) == 0 {
			cs = []Chunk{{}}
		}
		tags := d.Tags
		if tags == nil {
			tags = []string{}
		}
		docRows = append(docRows, []any{id, d.Source.Kind, d.Source.Name, d.Path, d.Title, tags, d.Language, p.contentHash(d, ""), len(cs)})
		for i, c := range cs {
			chunkRows = append(chunkRows, []any{id, d.Source.Kind, d.Source.Name, i, d.Title, c.Heading, c.Body, d.Language})
		}
	}
	err = pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, writeLock); err != nil {
			return err
		}
		// COPY cannot name a regconfig in binary form: stage as text, cast once.
		for _, q := range []string{
			`CREATE TEMP TABLE knowledge_load_docs (id text, kind text, source text, path text, title text, tags text[],
				language text, content_hash text, chunks integer) ON COMMIT DROP`,
			`CREATE TEMP TABLE knowledge_load_chunks (doc_id text, kind text, source text, ord integer, title text,
				heading text, body text, language text) ON COMMIT DROP`,
		} {
			if _, err := tx.Exec(ctx, q); err != nil {
				return err
			}
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"knowledge_load_docs"},
			[]string{"id", "kind", "source", "path", "title", "tags", "language", "content_hash", "chunks"}, pgx.CopyFromRows(docRows)); err != nil {
			return err
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"knowledge_load_chunks"},
			[]string{"doc_id", "kind", "source", "ord", "title", "heading", "body", "language"}, pgx.CopyFromRows(chunkRows)); err != nil {
			return err
		}
		for _, q := range []string{
			`INSERT INTO knowledge_sources (kind, source, language)
				SELECT DISTINCT ON (kind, source) kind, source, language::regconfig FROM knowledge_load_docs
				ON CONFLICT (kind, source) DO UPDATE SET language = excluded.language, updated_at = now()`,
			`INSERT INTO knowledge_docs (id, kind, source, path, title, tags, language, content_hash, chunks)
				SELECT id, kind, source, path, title, tags, language::regconfig, content_hash, chunks FROM knowledge_load_docs`,
			`INSERT INTO knowledge_chunks (doc_id, kind, source, ord, title, heading, body, language)
				SELECT doc_id, kind, source, ord, title, heading, body, language::regconfig FROM knowledge_load_chunks`,
			`INSERT INTO knowledge_terms (word, df)
				SELECT w, n FROM (
					SELECT u.lexeme AS w, count(*) AS n FROM knowledge_load_chunks c,
						unnest(to_tsvector('simple', c.title || ' ' || c.heading || ' ' || c.body)) u GROUP BY u.lexeme
					UNION ALL SELECT '', count(*) FROM knowledge_load_chunks) x
				ORDER BY w
				ON CONFLICT (word) DO UPDATE SET df = knowledge_terms.df + excluded.df`,
		} {
			if _, err := tx.Exec(ctx, q); err != nil {
				return languageErr("", err)
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("knowledge: bulk load: %w", err)
	}
	return len(chunkRows), nil
}

// DeleteSource removes every document of src and src itself (a deleted project's
// knowledge; a retired pack) in one transaction, and returns how many documents
// it removed.
func (p *Postgres) DeleteSource(ctx context.Context, src Source) (int, error) {
	var n int64
	err := pgx.BeginFunc(ctx, p.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, writeLock); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `
			SELECT u.lexeme, count(*) FROM knowledge_chunks c,
				unnest(to_tsvector('simple', c.title || ' ' || c.heading || ' ' || c.body)) u
			WHERE c.kind = $1 AND c.source = $2 GROUP BY u.lexeme
			UNION ALL SELECT '', count(*) FROM knowledge_chunks WHERE kind = $1 AND source = $2`, src.Kind, src.Name)
		if err != nil {
			return err
		}
		before := map[string]int64{}
		var w string
		var c int64
		if _, err := pgx.ForEachRow(rows, []any{&w, &c}, func() error { before[w] = c; return nil }); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM knowledge_docs WHERE kind = $1 AND source = $2`, src.Kind, src.Name)
		if err != nil {
			return err
		}
		n = tag.RowsAffected()
		if _, err := tx.Exec(ctx, `DELETE FROM knowledge_sources WHERE kind = $1 AND source = $2`, src.Kind, src.Name); err != nil {
			return err
		}
		return tally(ctx, tx, before, nil)
	})
	if err != nil {
		return 0, fmt.Errorf("knowledge: delete %s: %w", src, err)
	}
	return int(n), nil
}
