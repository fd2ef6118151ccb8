package fingerprint

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// privateGo and privateDoc are a private Go file and a Markdown note; the
// outbound texts below are different code and prose on the same topics,
// sharing idioms, keys and phrases with them.
const privateGo = `package billing

import (
	"context"
	"fmt"
)

// Ledger keeps the invoices of one customer.
type Ledger struct {
	CustomerID string ` + "`json:\"customer_id\"`" + `
	Invoices   []Invoice ` + "`json:\"invoices\"`" + `
}

// Settle marks every open invoice paid and returns how many it settled.
func (l *Ledger) Settle(ctx context.Context, store Store) (int, error) {
	n := 0
	for i := range l.Invoices {
		if l.Invoices[i].Paid {
			continue
		}
		if err := store.MarkPaid(ctx, l.Invoices[i].ID); err != nil {
			return n, fmt.Errorf("settle %s: %w", l.Invoices[i].ID, err)
		}
		n++
	}
	return n, nil
}

func load(ctx context.Context, id string) (*Ledger, error) {
	l, err := fetch(ctx, id)
	if err != nil {
		return nil, err
	}
	return l, nil
}
`

const privateDoc = `# Billing migration

The ledger service moves to the new cluster in March. The quick brown fox of
our test data stays as it is. Before the switch, run the settle job twice and
compare the totals; a difference of more than one cent stops the migration.

Contacts: the finance team owns the numbers, the platform team owns the cluster.
Endpoint: https://billing.internal.example/v2/ledgers
`

var benignOutbound = []string{
	// Different code on the same topic, with the same idioms.
	`{"path":"invoice.go","content":"package invoice\n\nimport (\n\t\"context\"\n\t\"fmt\"\n)\n\n// Invoice is one bill.\ntype Invoice struct {\n\tID   string ` + "`json:\\\"id\\\"`" + `\n\tPaid bool\n}\n\nfunc get(ctx context.Context, id string) (*Invoice, error) {\n\tinv, err := lookup(ctx, id)\n\tif err != nil {\n\t\treturn nil, err\n\t}\n\treturn inv, nil\n}\n"}`,
	// Prose on the same topic, quoting a short phrase of the note.
	`{"method":"POST","url":"https://api.example.com/v1/issues","body":"The ledger service should compare the totals after each run. The quick brown fox jumps over the lazy dog in every fixture. Ask the finance team owns the numbers question at standup."}`,
	// A 20-character ordinary phrase of the private file, whole.
	`{"q":"run the settle job twice"}`,
	// The private doc's host in a URL, and JSON keys of the private code.
	`{"url":"https://billing.internal.example/health","body":"{\"customer_id\":\"c-1\",\"invoices\":[]}"}`,
	// Common Go phrases.
	`{"body":"if err != nil { return nil, err } return n, nil for i := range l.Invoices { continue }"}`,
	`{"query":"golang context.Context fmt.Errorf %w wrap error settle ledger invoices"}`,
}

func TestBenignCorpusDoesNotMatch(t *testing.T) {
	t.Parallel()
	s, err := New(Config{})
	require.NoError(t, err)
	s.Add("read_file billing/ledger.go", privateGo)
	s.Add("read_file docs/migration.md", privateDoc)
	for _, text := range benignOutbound {
		m, ok := s.Carried(text, benignOutbound...)
		require.False(t, ok, "%s matched %+v", text, m)
	}
	// The same set does find its own content.
	_, ok := s.Carried(`{"content":` + quote(privateGo[200:400]) + `}`)
	require.True(t, ok)
}

func quote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\t", `\t`).Replace(s) + `"`
}

// TestBenignRate measures the false-positive rate on generated corpora:
// 2 MiB of private code, prose and .env files, and 1,000 outbound texts of
// 4 KiB of other code and prose drawn from the same vocabulary (so sharing its
// words, idioms and short phrases), each judged with the 20 before it as prior.
func TestBenignRate(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("measurement")
	}
	r := rand.New(rand.NewPCG(7, 7))
	words := vocab(r, 3000)
	s, err := New(Config{})
	require.NoError(t, err)
	for i, p := range privateCorpus(r, words, 2<<20) {
		s.Add("private "+string(rune('a'+i%26)), p)
	}
	var out []string
	for i := range 1000 {
		if i%2 == 0 {
			out = append(out, args(goCode(r, words, 4<<10)))
		} else {
			out = append(out, args(prose(r, words, 4<<10)))
		}
	}
	matched := 0
	for i, text := range out {
		if m, ok := s.Carried(text, out[max(0, i-20):i]...); ok {
			matched++
			t.Logf("benign text %d matched: %+v", i, m)
		}
	}
	t.Logf("false positives: %d of %d outbound texts (%d fingerprints for %d private bytes)", matched, len(out), s.Size(), s.Bytes())
	// The generated code is four templates around random names, more
	// repetitive than real code: measured 0 of 1,000 (with MinRun 48,
	// MinPiece 20 and pieces of repeated grams joining, 344: chains of
	// template pieces).
	require.LessOrEqual(t, matched, 2)
}

// TestCarriedMarksBoilerplate: a run the private reads hold in several files
// (an import block) is carried, marked as boilerplate; content of one file is not.
func TestCarriedMarksBoilerplate(t *testing.T) {
	t.Parallel()
	imports := "import (\n\t\"context\"\n\t\"encoding/json\"\n\t\"fmt\"\n\t\"net/http\"\n\t\"strings\"\n\n\t\"github.com/example/shop/billing\"\n\t\"github.com/example/shop/store\"\n)\n"
	s, err := New(Config{})
	require.NoError(t, err)
	s.Add("read_file a.go", "package a\n\n"+imports+privateGo[200:])
	s.Add("read_file b.go", "package b\n\n"+imports+privateDoc)
	m, ok := s.Carried(`{"content":` + quote("package c\n\n"+imports+"func main() {}\n") + `}`)
	require.True(t, ok)
	require.True(t, m.Boilerplate, "%+v", m)
	m, ok = s.Carried(`{"content":` + quote(privateGo[300:500]) + `}`)
	require.True(t, ok)
	require.False(t, m.Boilerplate, "%+v", m)
}
