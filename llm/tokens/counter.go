package tokens

import (
	"fmt"
	"strings"
	"sync"

	"github.com/tiktoken-go/tokenizer"
)

// Counter counts the tokens of a text for one model family. Implementations
// are safe for concurrent use and never panic, whatever the bytes (invalid
// UTF-8 and NUL included).
type Counter interface {
	Count(text string) int
	// Name says how the counting is done ("o200k_base", "estimate/3"), for
	// logs and metrics that must tell an exact count from a guess.
	Name() string
}

// BytesPerToken is the divisor of the estimate. English prose runs about four
// bytes a token in OpenAI's tokenizers; code, JSON and tool schemas (most of an
// agent's prompt) run closer to three; Anthropic's tokenizer yields noticeably
// more tokens than OpenAI's for the same text; CJK is three UTF-8 bytes a
// character and about a token a character. Three bytes a token is therefore
// at or above the true count for nearly all of what the fleet sends, so the
// estimate errs toward compacting early. Text it under-counts (long runs of
// emoji, random bytes, which a byte-level BPE can split a token a byte) is
// what the Calibrator's learned scale covers.
const BytesPerToken = 3

// Estimate is the Counter of models without a known tokenizer: the bytes of
// the text over BytesPerToken, rounded up.
type Estimate struct{}

// Count is ceil(len(text) / BytesPerToken).
func (Estimate) Count(text string) int { return (len(text) + BytesPerToken - 1) / BytesPerToken }

// Name is "estimate/3".
func (Estimate) Name() string { return fmt.Sprintf("estimate/%d", BytesPerToken) }

// Tiktoken encodings of the OpenAI families.
const (
	O200kBase  = "o200k_base"
	Cl100kBase = "cl100k_base"
)

// codec is one encoding, built on first use: its vocabulary is a map of
// 100,000 to 200,000 entries (tens of megabytes and a noticeable fraction of a
// second to build), which a process that never counts an OpenAI prompt should
// not pay for.
type codec struct {
	enc  tokenizer.Encoding
	once sync.Once
	c    tokenizer.Codec
	err  error
}

func (c *codec) get() (tokenizer.Codec, error) {
	c.once.Do(func() { c.c, c.err = tokenizer.Get(c.enc) })
	return c.c, c.err
}

// codecs are the encodings this package counts with, each loaded once for the
// whole process (a per-Counter load would build the vocabulary again for each).
var codecs = map[string]*codec{
	O200kBase:  {enc: tokenizer.O200kBase},
	Cl100kBase: {enc: tokenizer.Cl100kBase},
}

// Tiktoken is the exact Counter of an OpenAI encoding (O200kBase or
// Cl100kBase). Its vocabulary is loaded on the first Count, once per process.
type Tiktoken struct {
	codec *codec
	name  string
}

// NewTiktoken is the Counter of encoding; an encoding this package does not
// ship is an error.
func NewTiktoken(encoding string) (*Tiktoken, error) {
	c, ok := codecs[encoding]
	if !ok {
		return nil, fmt.Errorf("tokens: unknown encoding %q (want %q or %q)", encoding, O200kBase, Cl100kBase)
	}
	return &Tiktoken{codec: c, name: encoding}, nil
}

// Name is the encoding's name.
func (t *Tiktoken) Name() string { return t.name }

// Count is the number of tokens of text in the encoding. Special-token text
// ("<|endoftext|>") is counted as the ordinary text it is in a prompt. Should
// the encoding fail (it cannot load, or its splitting regexp gives up), the
// count falls back to Estimate rather than to 0, which would let a request
// through unchecked.
func (t *Tiktoken) Count(text string) int {
	if text == "" {
		return 0
	}
	c, err := t.codec.get()
	if err != nil {
		return Estimate{}.Count(text)
	}
	n, err := countSplit(c, text)
	if err != nil {
		return Estimate{}.Count(text)
	}
	// The port's splitting regexp matches no DEL (0x7f), so it drops them
	// from the count; tiktoken has a token for the byte. Found by FuzzCount
	// (v0.10.0).
	return n + strings.Count(text, "\x7f")
}

// openAIFamilies map model-name prefixes to their encoding; the longest
// matching prefix wins (gpt-4o before gpt-4). The o-series prefixes match the
// bare name or the name followed by "-" only, so that an unrelated model
// starting with "o1" is not taken for OpenAI's.
var openAIFamilies = []struct {
	prefix, encoding string
	dashed           bool
}{
	{"gpt-4o", O200kBase, false},
	{"chatgpt-4o", O200kBase, false},
	{"gpt-4.1", O200kBase, false},
	{"gpt-4.5", O200kBase, false},
	{"gpt-5", O200kBase, false},
	{"gpt-oss", O200kBase, false},
	{"o1", O200kBase, true},
	{"o3", O200kBase, true},
	{"o4", O200kBase, true},
	{"gpt-4", Cl100kBase, false},
	{"gpt-3.5", Cl100kBase, false},
	{"text-embedding-3", Cl100kBase, false},
	{"text-embedding-ada-002", Cl100kBase, false},
}

// Encoding is the tiktoken encoding of model, "" when it is not an OpenAI
// model this package knows. The name is matched case-insensitively, after the
// last "/" (gateways such as OpenRouter name models "openai/gpt-4o").
func Encoding(model string) string {
	name := strings.ToLower(strings.TrimSpace(model))
	name = name[strings.LastIndex(name, "/")+1:]
	best, enc := -1, ""
	for _, f := range openAIFamilies {
		match := strings.HasPrefix(name, f.prefix)
		if f.dashed {
			match = name == f.prefix || strings.HasPrefix(name, f.prefix+"-")
		}
		if match && len(f.prefix) > best {
			best, enc = len(f.prefix), f.encoding
		}
	}
	return enc
}

// ForModel is the Counter of model: its tiktoken encoding for an OpenAI model
// (see Encoding), Estimate for any other.
func ForModel(model string) Counter {
	if enc := Encoding(model); enc != "" {
		t, err := NewTiktoken(enc)
		if err == nil {
			return t
		}
	}
	return Estimate{}
}

// maxSpaceRun is the longest run of mixed whitespace given to the tokenizer.
// The port's byte-pair merging is quadratic in the length of a piece, and its
// splitting regexp makes a run of mixed whitespace (" \n" repeated) one piece:
// 40 KB of it took 3.7 s, even 64-byte pieces of it a millisecond each, and a
// tool's output (an HTML page, a padded table) can hold that much. A longer
// mixed run is counted as its length in bytes, the most tokens any text can
// be (a token is at least a byte; random whitespace runs up to 0.9 a byte),
// so the count stays at or above tiktoken's; such runs are rare enough that
// the over-count does not matter. A run of one repeated byte (indentation,
// blank lines) merges fast and is counted exactly.
const maxSpaceRun = 64

// countSplit is c.Count(text) with long mixed whitespace runs counted as
// their length.
func countSplit(c tokenizer.Codec, text string) (int, error) {
	total, start := 0, 0
	for i := 0; i < len(text); {
		if !isSpace(text[i]) {
			i++
			continue
		}
		j, mixed := i, false
		for j < len(text) && isSpace(text[j]) {
			mixed = mixed || text[j] != text[i]
			j++
		}
		if mixed && j-i > maxSpaceRun {
			n, err := c.Count(text[start:i])
			if err != nil {
				return 0, err
			}
			total += n + (j - i)
			start = j
		}
		i = j
	}
	n, err := c.Count(text[start:])
	return total + n, err
}

func isSpace(b byte) bool {
	switch b {
	case ' ', '\t', '\n', '\r', '\v', '\f':
		return true
	}
	return false
}
