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
// holds one); the second every gram of the secret-like tokens. Each table is
// open addressing over 8-byte slots (a 32-bit tag, the position) with a Bloom
// filter in front. Carried asks the filters for every gram of the outbound
// text, verifies each hit against the kept text and extends it both ways: the
// runs are exact, a hash collision never matches. A gram the private text
// holds more than once is marked common: most chance hits are of such grams
// ("ofthe", "iferrnil"), so a hit of one waits for a second on its diagonal
// before the text is read, and a piece found by one joins no other (every
// copy of boilerplate maps to its first place, so pieces of it from many texts
// would join into runs the private text never held). A run of MinRun all of
// whose sampled grams are common is reported as Match.Boilerplate (an import
// block, a license header, a doc comment repeated in files): a hint for the
// policy, since a file read twice looks the same. The runs of the texts
// Carried has read are remembered by hash until the next Add, so a session's
// history costs once.
//
// # Why these defaults
//
// K 8: the shortest piece of a key that can be found (a 24-character key in
// three pieces is); shorter grams would make every third gram of prose a hit.
// SecretRun 16: 16 random base62 characters are 95 bits, a secret in
// themselves. MinRun 64 and MinPiece 24: measured on generated code built
// from four templates, MinRun 48 with pieces of 20 counted template chains
// in a third of the texts; at 64 and 24 none of 1,000 (TestBenignRate).
// 64 normalized characters are about a line of code or 12 words.
//
// # What is not matched
//
// A paraphrase, a summary, a translation, a computation on the data (a count,
// a hash), an encoding this package does not decode (compression, encryption,
// base32, a custom alphabet, hex with separators, base64 split at other than
// a multiple of 4), ordinary content sent in pieces shorter than MinPiece,
// and a run whose sampled grams the private text mostly holds at other places
// too (very repetitive text: a gram is kept at its first place only). The
// flow rules' ask for an outbound call of a session that read untrusted
// content covers those. Text shared by chance or by design is matched when it
// is long enough: code of one module shares import blocks, signatures and doc
// comments that generated reference docs repeat, and an outbound text carrying
// them carries private content as far as this package can tell (on this
// module's own code, a third of the 4 KiB chunks of sibling packages did, a
// third of those flagged Boilerplate). High-entropy identifiers that are no
// secret (commit hashes, digests, UUIDs) count as secret-like. Private text
// past MaxBytes is not fingerprinted (Dropped reports it). Combining
// characters are dropped rather than composed (no NFKC in the standard
// library).
//
// # Cost
//
// Measured on a shared 2-core machine (load 5 to 9, so the wall times are up
// to 3 times the CPU times, which are given): Add 25–55 ns a byte and 1.1 to
// 1.25 MiB of heap a MiB of private text (BenchmarkAdd10MiB; this module's
// own 4.9 MB of text: 1.24). Carried on a 64 KiB argument against a 10 MiB
// Set (BenchmarkCarried64KiB): 1.2 ms without shared content or with a copy
// of private text, 2.2–2.4 ms for code and prose that share a vocabulary
// with the private text (a third of their grams hit), 3.8 ms for a
// percent-encoded text (read plain and decoded), 2.3 ms with 256 KiB of
// prior texts already seen; 3.0 ms for this module's code against a Set of
// its other files.
//
// Carried is linear in the text: normalization, the lookups of the plain and
// reversed forms and of the decoded runs (at most 4 decoded bytes a byte of
// text, decodings two deep, a decoded run that is not text dropped), and the
// newest MaxPrior bytes of prior texts it has not seen.
//
// It imports no package of this module (internal/archtest says so): egress
// and the layers above it import it.
package fingerprint
