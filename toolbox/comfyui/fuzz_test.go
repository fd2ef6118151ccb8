package comfyui

import (
	"regexp"
	"strings"
	"testing"
)

var safeName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,100}$`)

// Whatever an agent passes as filename, a name that comes out is one plain file
// name: no separator, no dot-dot prefix, only safe characters.
func FuzzSanitizeName(f *testing.F) {
	for _, s := range []string{"hero", "../../etc/passwd", "a b!.png", "..", ".hidden", "x/y", `a\b`, "\x00", "名前.png"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := sanitizeName(s)
		if err != nil || got == "" {
			return
		}
		if !safeName.MatchString(got) || strings.HasPrefix(got, ".") {
			t.Fatalf("sanitizeName(%q) = %q", s, got)
		}
	})
}
