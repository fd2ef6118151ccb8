-- +goose Up
-- The knowledge base (issue 17): documents of packs and projects, chunked, with a
-- full-text vector per chunk and, when an embeddings endpoint is configured, an
-- embedding. pg_trgm backs typo tolerance through the vocabulary in knowledge_terms.
CREATE EXTENSION IF NOT EXISTS pg_trgm;

-- A source is one pack or one project; its language is the text-search
-- configuration its documents are parsed with (queries are parsed with every
-- language of the sources in scope, plus simple).
CREATE TABLE knowledge_sources (
    kind       text NOT NULL CHECK (kind IN ('pack', 'project')),
    source     text NOT NULL,
    language   regconfig NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, source)
);

-- id is derived from (kind, source, path), so a receipt can name the document even
-- when indexing failed, and a re-index keeps it.
CREATE TABLE knowledge_docs (
    id              text PRIMARY KEY,
    kind            text NOT NULL CHECK (kind IN ('pack', 'project')),
    source          text NOT NULL,
    path            text NOT NULL,
    title           text NOT NULL,
    tags            text[] NOT NULL DEFAULT '{}',
    language        regconfig NOT NULL,
    content_hash    text NOT NULL,
    chunks          integer NOT NULL,
    embedding_model text NOT NULL DEFAULT '',
    indexed_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (kind, source, path)
);

-- kind and source are repeated on the chunk so the scope filter needs no join; the
-- title is repeated because it ranks every chunk of its document.
CREATE TABLE knowledge_chunks (
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    doc_id    text NOT NULL REFERENCES knowledge_docs (id) ON DELETE CASCADE,
    kind      text NOT NULL,
    source    text NOT NULL,
    ord       integer NOT NULL,
    title     text NOT NULL,
    heading   text NOT NULL,
    body      text NOT NULL,
    language  regconfig NOT NULL,
    -- Stemmed in the source's language (title and headings weigh A, the body B),
    -- plus the unstemmed simple form (D) so names, identifiers and words the
    -- language's dictionary drops still match.
    tsv       tsvector GENERATED ALWAYS AS (
                  setweight(to_tsvector(language, title || ' ' || heading), 'A') ||
                  setweight(to_tsvector(language, body), 'B') ||
                  setweight(to_tsvector('simple'::regconfig, title || ' ' || heading || ' ' || body), 'D')
              ) STORED,
    embedding real[],
    UNIQUE (doc_id, ord)
);
CREATE INDEX knowledge_chunks_tsv ON knowledge_chunks USING gin (tsv);
CREATE INDEX knowledge_chunks_scope ON knowledge_chunks (kind, source);

-- The vocabulary: every simple-form word with the number of chunks holding it (its
-- document frequency, for IDF weights), and under the empty word the number of
-- chunks. A query word the vocabulary lacks is looked up by trigram distance
-- (GiST: nearest neighbours without a threshold), then checked by edit distance.
CREATE TABLE knowledge_terms (
    word text PRIMARY KEY,
    df   bigint NOT NULL
);
-- On an expression (words are lower case already): an index on word itself would
-- also answer word = $1, and the planner takes it over the primary key, scanning
-- the whole GiST index for a lookup the btree answers in microseconds.
CREATE INDEX knowledge_terms_trgm ON knowledge_terms USING gist (lower(word) gist_trgm_ops);

-- Scoring reads every candidate's tsvector several times (rank and coverage of
-- each word), and every read of a compressed or out-of-line value decompresses or
-- fetches it again: keep rows up to a page plain and inline (toast_tuple_target),
-- and a larger row's tsvector compressed in the row rather than out of line.
ALTER TABLE knowledge_chunks ALTER COLUMN tsv SET STORAGE MAIN;
ALTER TABLE knowledge_chunks SET (toast_tuple_target = 8160);

-- OR and AND of text-search queries, to build queries out of per-word ones.
CREATE AGGREGATE knowledge_tsquery_or (tsquery) (SFUNC = tsquery_or, STYPE = tsquery);
CREATE AGGREGATE knowledge_tsquery_and (tsquery) (SFUNC = tsquery_and, STYPE = tsquery);

-- +goose Down
DROP AGGREGATE knowledge_tsquery_and (tsquery);
DROP AGGREGATE knowledge_tsquery_or (tsquery);
DROP TABLE knowledge_terms;
DROP TABLE knowledge_chunks;
DROP TABLE knowledge_docs;
DROP TABLE knowledge_sources;
