package security

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/egress/fingerprint"
	"github.com/aetherium-engine/aetherium/egress/shell"
	"github.com/aetherium-engine/aetherium/tools"
)

// benchRules is a realistic permissions file: none of its rules matches the
// benchmarked call, so every one is evaluated.
const benchRules = `
rules:
  - match: {tool: run_shell, arg_pattern: "rm -rf|dd if=|mkfs"}
    action: always_deny
    reason: destructive
  - match: {tool: write_file, path_pattern: "(^|/)\\.github/workflows/"}
    action: always_deny
    reason: ci
  - match: {tool: http_request, url_pattern: "^https://api\\.stripe\\.com/"}
    action: always_deny
    reason: payments
  - match: {team: demo, agent: writer, tool: read_file}
    action: always_allow
    reason: advisory
  - match: {tool: "*", path_pattern: "(^|/)secrets?/"}
    action: always_deny
    reason: secrets dir
  - match: {tool: web_fetch, url_pattern: "\\.internal(/|$)"}
    action: ask_user
    reason: internal
`

func BenchmarkGateDecision(b *testing.B) {
	path := filepath.Join(b.TempDir(), "permissions.yaml")
	if err := os.WriteFile(path, []byte(benchRules), 0o644); err != nil {
		b.Fatal(err)
	}
	rules, err := LoadRules(path, nil)
	if err != nil {
		b.Fatal(err)
	}
	dlp, err := egress.NewDLP()
	if err != nil {
		b.Fatal(err)
	}
	reg := tools.NewRegistry()
	tools.Register(reg, "read_file", "read", func(_ context.Context, _ tools.Call, a struct {
		Path string `json:"path"`
	}) (tools.Result, error) {
		return tools.Result{Content: "package main"}, nil
	}, tools.InGroup("workspace"))
	g := NewGate(GateDeps{Registry: reg, Rules: rules, DLP: dlp})
	router := tools.NewRouter(reg, g.Middleware)
	access := tools.Access{Tools: []string{"create_plan", "edit_file", "list_files", "read_file", "run_shell", "search_files", "write_file"}}
	ctx := context.Background()
	call := tools.Call{ID: "c1", Name: "read_file", Args: json.RawMessage(`{"path":"src/internal/server/handler.go"}`),
		Session: &tools.Session{RunID: "r", SessionID: "s", Team: "web", Agent: "coder", Role: "worker", Access: access}}

	b.Run("standard allowed, through the middleware", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := router.Dispatch(ctx, call); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("capability+rules+tier only", func(b *testing.B) {
		b.ReportAllocs()
		rs := rules.Current()
		for b.Loop() {
			if err := tools.CheckCapability(reg, access, "coder", call.Name); err != nil {
				b.Fatal(err)
			}
			if deny, _ := rs.Evaluate(CallFacts{Tool: call.Name, Team: "web", Agent: "coder", Args: call.Args}); deny != nil {
				b.Fatal("denied")
			}
			if tools.TierOf(call.Name) != tools.Standard {
				b.Fatal("tier")
			}
		}
	})
	b.Run("Destructive", func(b *testing.B) {
		for b.Loop() {
			if ok, _ := shell.Destructive("cd /srv/app && go test ./... 2>&1 | tee test.log"); ok {
				b.Fatal("destructive")
			}
		}
	})
	b.Run("CheckURL", func(b *testing.B) {
		allow := []string{"api.example.com", "*.docs.example.com", "github.com", "*.githubusercontent.com"}
		for b.Loop() {
			if err := egress.CheckURL("https://raw.githubusercontent.com/org/repo/main/README.md?plain=1", allow); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkGateFlowContent is what the flow rules add to an outbound call's
// decision in a session that read untrusted content and 10 MiB of private
// content (issue 49): the fingerprint check of 64 KiB of arguments, beside the
// DLP scan of the same arguments the gate makes anyway (the bar: 5 ms for DLP's
// 64 KiB).
func BenchmarkGateFlowContent(b *testing.B) {
	set, err := fingerprint.New(fingerprint.Config{})
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(7, 8))
	words := strings.Fields(`the fleet worker reads a file and writes a plan then calls the api with a key token
		secret auth header config value func return err nil if for range map string int package import struct
		type interface method request response status body json yaml customer invoice order account ledger`)
	text := func(n int) string {
		var sb strings.Builder
		for sb.Len() < n {
			for i := range 10 {
				if i > 0 {
					sb.WriteByte(' ')
				}
				sb.WriteString(words[r.IntN(len(words))])
			}
			fmt.Fprintf(&sb, " = %d;\n", r.IntN(100000))
		}
		return sb.String()[:n]
	}
	for i := range 10 {
		set.Add(fmt.Sprintf("read_file src/part%d.go (turn %d)", i, i+1), text(1<<20))
	}
	l := &tools.Label{Content: benchContent{set}}
	l.Add(tools.Untrusted, "web_fetch https://example.com/ (turn 1)")
	l.Add(tools.Private, "read_file src/part0.go (turn 2)")
	raw, err := json.Marshal(map[string]any{"method": "POST", "url": "https://api.example.com/v1/documents", "body": text(64 << 10)})
	if err != nil {
		b.Fatal(err)
	}
	dlp, err := egress.NewDLP()
	if err != nil {
		b.Fatal(err)
	}
	b.Run("fingerprints", func(b *testing.B) {
		for b.Loop() {
			if c, ok := carried(l, true, raw); ok && !c.Boilerplate {
				b.Fatalf("ordinary text carried %+v", c)
			}
		}
	})
	b.Run("dlp", func(b *testing.B) {
		for b.Loop() {
			if fs, err := dlp.ScanArgs(raw); err != nil || len(fs) > 0 {
				b.Fatal(err, fs)
			}
		}
	})
}

type benchContent struct{ set *fingerprint.Set }

func (c benchContent) Carried(text string) (tools.Carried, bool) {
	m, ok := c.set.Carried(text)
	return tools.Carried{Source: m.Source, Form: m.Form, Chars: m.Chars, Boilerplate: m.Boilerplate}, ok
}
