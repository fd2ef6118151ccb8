// Package fingerprint finds private content in outbound text: the session's
// private reads (workspace files, knowledge, memory, logs) are fingerprinted as
// they are read (Set.Add), and an outbound call's arguments are checked
// against them (Set.Carried) before the call leaves. It is the matching engine
// of issue 49's flow rules; the worker and the gate wire it (docs/flow.md).
//
// # What is matched
//
// Both sides are normalized first: case folded, everything but letters and
// digits dropped (whitespace, punctuation, "s-p-a-c-e-d" and "s p a c e d"
// forms, zero-width characters), JSON and source-code escapes undone at any
// nesting depth (\n, \", \\\" and \uXXXX), fullwidth letters and digits
// mapped to ASCII. On the outbound side Carried also reads the text reversed,
// and the decodings of its runs of base64 (standard and URL alphabets, padded
// or not, aligned at the run's start or end), hex and percent-encoding, two
// decodings deep (double percent-encoding, base64 of hex, …), each again plain
// and reversed.
//
// Content counts when the outbound text carries a run of MinRun (64)
// normalized characters of ordinary private content, or SecretRun (16) of a
// secret-like token (a token of at least 16 letters and digits mixing classes
// often, with few vowels or letters and digits interleaved, and 3 bits of
// entropy a character: keys, tokens, passwords, hex digests). Pieces join: the
// prior texts (the session's earlier outbound calls) and the fields of the
// current one each cover positions of the private text, and the union counts,
// so a 24-character key sent as three pieces of 8 in three calls is found when
// the third is sent. A piece of ordinary content joins others when it is at
// least MinPiece (24) long and not boilerplate (see below); a piece of a
// secret-like token when it is at least K (8). A run counts only when the
// current text adds to it.
//
// # How
//
// Add keeps the normalized text (about 0.8 bytes a byte of prose or code) and
// two tables of K-gram hashes. The first holds the grams winnowing selects
// (the minimum hash of each window of MinPiece-K+1 grams: about 2 in
// MinPiece-K+2 grams, and every piece of MinPiece characters two texts share
// holds a gram both select); the second every gram of the secret-like tokens.
// Each table is open addressing over 8-byte slots (a 32-bit tag, the position)
// with a Bloom filter in front. Carried winnows the outbound text the same
// way, looks the selected grams up (and every gram in the small secret table),
// verifies each hit against the kept text and extends it both ways: the runs
// are exact, a hash collision never matches. A gram the private text holds
// more than once is marked common: a piece found by one is likely boilerplate
// (an import block, a license header, a template) and joins no other piece,
// though a run of MinRun counts on its own.
//
// # What is not matched
//
// A paraphrase, a summary, a translation, a computation on the data (a count,
// a hash), an encoding this package does not decode (compression, encryption,
// base32, a custom alphabet, hex with separators), and ordinary content sent
// in pieces shorter than MinPiece. The flow rules' ask for an outbound call of
// a session that read untrusted content covers those. Private text past
// MaxBytes is not fingerprinted (Dropped reports it). Combining characters are
// dropped rather than composed (no NFKC: the standard library has none).
//
// # Cost
//
// Add costs about 50–100 ns and 1.1 MB of heap per MiB of private text
// (BenchmarkAdd10MiB). Carried is linear in the text: normalization, the
// winnowing and the lookups of the plain and reversed forms and of the decoded
// runs (at most 4 decoded bytes a byte of text); prior texts cost the same
// again, so a caller passes the session's recent outbound calls (the newest
// MaxPrior bytes are read). See BenchmarkCarried64KiB.
//
// It imports no package of this module (internal/archtest says so): egress
// and the layers above it import it.
package fingerprint
