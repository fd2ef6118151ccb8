package quality

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParsers feeds every report parser arbitrary bytes: the reports are
// written by code the agent controls (its tests, its eslint config), so a
// parser must never panic on them, whatever they hold.
func FuzzParsers(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "outputs", "*"))
	for _, s := range seeds {
		if b, err := os.ReadFile(s); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("@@n rc 1\n@@n stderr\n@@n report\n@@n stdout\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s := string(b)
		_ = parseFlake8(s)
		_, _ = parsePylint(b)
		_, _, _ = parseESLint(b)
		_, _ = parseShellcheck(b)
		_ = parseGofmt(s, s)
		_, _ = parseGoVet(s, "m")
		_ = parseSections(s, "@@n")
		r := TestReport{}
		_ = parseJUnit(b, &r)
		_ = parseGoTest(s, &r)
		_ = parseJest(b, &r)
		parseTAP(s, &r)
	})
}
