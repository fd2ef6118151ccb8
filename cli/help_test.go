package cli

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Every command and subcommand answers --help, -h and help with exit 0 on
// stdout: a command names each of its subcommands, a subcommand its synopsis
// and the flags it takes. Nothing is "unknown subcommand".
func TestHelpEveryCommand(t *testing.T) {
	t.Parallel()
	type want struct {
		args []string
		has  []string
	}
	var cases []want
	cmds := commands()
	for name, c := range cmds {
		forms := [][]string{{name, "--help"}, {name, "-h"}, {name, "help"}}
		for _, f := range forms {
			has := []string{"aetherium " + name}
			if len(c.subs) > 0 {
				has = append(has, "subcommands: "+strings.Join(c.subs, ", "))
			}
			cases = append(cases, want{f, has})
		}
		for _, sub := range c.subs {
			has := []string{"aetherium " + name + " " + sub}
			for _, fl := range append(append(approvalFlags[sub], runsFlags[sub]...), schedulesFlags[sub]...) {
				if name == "approvals" && slices.Contains(approvalFlags[sub], fl) || name == "runs" && slices.Contains(runsFlags[sub], fl) ||
					name == "schedules" && slices.Contains(schedulesFlags[sub], fl) {
					has = append(has, "  -"+fl)
				}
			}
			for _, f := range [][]string{{name, sub, "--help"}, {name, sub, "-h"}, {name, "help", sub}, {name, sub, "x", "-h"}} {
				cases = append(cases, want{f, has})
			}
		}
	}
	for _, role := range serverRoles {
		cases = append(cases, want{[]string{role, "--help"}, []string{"aetherium " + role, "-insecure-no-auth"}})
	}
	cases = append(cases,
		want{[]string{"help"}, []string{"runs list|show|cancel|retry|export", "approvals list"}},
		want{[]string{"help", "runs"}, []string{"subcommands: list, show, cancel, retry, export"}},
		want{[]string{"runs", "retry", "--help"}, []string{"aetherium runs retry  RUN_ID", "a new run of yours"}},
		want{[]string{"help", "approvals", "deny"}, []string{"aetherium approvals deny", "  -reason"}},
		want{[]string{"run", "--help"}, []string{"--template NAME", "  -follow", "  -prompt"}},
		want{[]string{"events", "-h"}, []string{"RUN_ID", "  -api"}},
		want{[]string{"leases", "--help"}, []string{"  -events"}},
	)
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			t.Parallel()
			var out, errOut bytes.Buffer
			require.Equal(t, 0, Main(c.args, &out, &errOut), errOut.String())
			for _, h := range c.has {
				require.Contains(t, out.String(), h)
			}
			require.NotContains(t, out.String()+errOut.String(), "unknown subcommand")
			require.NotContains(t, out.String()+errOut.String(), "is the API running", "help asks no API")
		})
	}
}

// An unknown subcommand is refused naming the valid ones.
func TestUnknownSubcommandNamesTheValidOnes(t *testing.T) {
	t.Parallel()
	for name, c := range commands() {
		if len(c.subs) == 0 {
			continue
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var out, errOut bytes.Buffer
			require.NotEqual(t, 0, Main([]string{name, "frobnicate", "--api", "http://127.0.0.1:1"}, &out, &errOut))
			if name == "migrate" {
				require.Contains(t, errOut.String(), "up|down|status")
				return
			}
			require.Contains(t, errOut.String(), `unknown subcommand "frobnicate" of `+name+" ("+strings.Join(c.subs, ", ")+")")
		})
	}
}

// describe gives every event a detail: approvals say what waits and the
// commands that decide it, and who decided what; an unknown type shows its
// data; model text loses its terminal escapes.
func TestDescribeEvents(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 6, 10, 0, 0, 0, time.Local)
	for _, c := range []struct {
		typ, data string
		want      []string
	}{
		{"approval.requested", `{"approval_id":"apr_1","kind":"call","tool":"run_shell","tier":"restricted","why":"destructive command"}`,
			[]string{"apr_1 run_shell (restricted) waits for a human: destructive command", "\n" + strings.Repeat(" ", 43) + "approve: aetherium approvals approve apr_1",
				"deny: aetherium approvals deny apr_1 --reason WHY"}},
		{"approval.requested", `{"approval_id":"apr_2","kind":"question","tool":"ask_user","question":"Which db?","choices":["postgres","sqlite"]}`,
			[]string{"apr_2 question: Which db? [postgres | sqlite]", "answer: aetherium approvals answer apr_2 ANSWER"}},
		{"approval.decided", `{"approval_id":"apr_1","kind":"call","tool":"run_shell","status":"denied","decided_by":"ann","reason":"not on main"}`,
			[]string{"apr_1 run_shell: denied by ann (not on main)"}},
		{"approval.decided", `{"approval_id":"apr_1","kind":"call","tool":"run_shell","status":"approved","decided_by":"ann","grant_id":"grt_9","edited":true}`,
			[]string{"approved by ann, with edited arguments, grant grt_9"}},
		{"approval.decided", `{"approval_id":"apr_2","kind":"question","tool":"ask_user","status":"answered","decided_by":"bob","answer":"sqlite"}`,
			[]string{"apr_2: answered by bob: sqlite"}},
		{"approval.decided", `{"approval_id":"apr_3","kind":"call","tool":"download_pdf","status":"timed_out","decided_by":"system","reason":"no decision within 1h0m0s"}`,
			[]string{"timed_out by system (no decision within 1h0m0s)"}},
		{"agent.waiting", `{"limit":"rpm","retry_after_ms":1200}`, []string{"rate limited (rpm): asks again in 1200ms"}},
		{"something.new", `{"b":2,"a":"x\ny","c":{"d":1}}`, []string{`something.new        a=x y b=2 c={"d":1}`}},
		{"something.empty", `{}`, []string{"(no data)"}},
		{"agent.message", `{"content":"red \u001b[31m text"}`, []string{"red \uFFFD[31m text"}},
	} {
		got := describe(sseEvent{Type: c.typ, Agent: "lead", Data: json.RawMessage(c.data), Time: at})
		for _, w := range c.want {
			require.Contains(t, got, w, c.data)
		}
		require.NotContains(t, got, "\x1b")
		require.NotContains(t, got, "<nil>")
	}
}

func TestRelativeTimes(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	for d, want := range map[time.Duration]string{
		time.Second: "just now", 30 * time.Second: "30s ago", 5 * time.Minute: "5m ago", 3 * time.Hour: "3h ago",
		5 * 24 * time.Hour: "5d ago", 40 * 24 * time.Hour: now.Add(-40 * 24 * time.Hour).Local().Format(time.DateOnly),
	} {
		require.Equal(t, want, ago(now, now.Add(-d)), d)
	}
	for d, want := range map[time.Duration]string{
		850 * time.Millisecond: "850ms", 12 * time.Second: "12s", 245 * time.Second: "4m05s", 130 * time.Minute: "2h10m", 76 * time.Hour: "3d4h",
	} {
		require.Equal(t, want, humanDuration(d), d)
	}
}
