package worker

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/worker/hook"
)

func TestConfigDefaults(t *testing.T) {
	d := Defaults()
	want := Config{Concurrency: DefaultConcurrency, ShutdownTimeout: DefaultShutdownTimeout, TaskCheckInterval: DefaultTaskCheckInterval,
		StepLease: DefaultStepLease, MaxRetry: DefaultMaxRetry, CircuitBreaker: DefaultCircuitBreaker, MaxSteps: DefaultMaxSteps,
		MetricsAddr: DefaultMetricsAddr, MaxCallsPerMessage: DefaultMaxCallsPerMessage,
		MaxDelegationsPerSession: DefaultMaxDelegationsPerSession, MaxDelegationsPerRun: DefaultMaxDelegationsPerRun, MaxWait: DefaultMaxWait,
		CompactAt: DefaultCompactAt, KeepTurns: DefaultKeepTurns, SummaryTokens: DefaultSummaryTokens, NotesTokens: DefaultNotesTokens,
		ResultHeadBytes: DefaultResultHeadBytes}
	if !reflect.DeepEqual(d, want) { // Config holds the hooks (slices): not comparable
		t.Fatalf("Defaults() = %+v, want %+v", d, want)
	}
	if err := d.Validate(); err != nil {
		t.Fatalf("the defaults are invalid: %v", err)
	}
	z := Config{}.WithDefaults()
	if z.MaxRetry != 0 || z.MetricsAddr != "" {
		t.Errorf("WithDefaults must keep the meaningful zeros (max_retry 0 runs once, no metrics listener): %+v", z)
	}
	if got := (Config{StepLease: time.Minute}).WithDefaults().StepLease; got != time.Minute {
		t.Errorf("a set field is kept: got %s", got)
	}
}

func noCheck(context.Context, hook.Reply) error { return nil }

func postRun(name, typ string) hook.PostRun {
	return hook.PostRun{Name: name, TaskType: typ, Schedule: func(context.Context, string) error { return nil },
		Run: func(context.Context, hook.Delivery) error { return nil }}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  func(*Config)
		want string
	}{
		{"defaults", func(*Config) {}, ""},
		{"runs once, no metrics", func(c *Config) { c.MaxRetry, c.MetricsAddr = 0, "" }, ""},
		{"zero concurrency", func(c *Config) { c.Concurrency = 0 }, "worker.concurrency (AETHERIUM_WORKER_CONCURRENCY)"},
		{"short step lease", func(c *Config) { c.StepLease = 500 * time.Millisecond }, "worker.step_lease"},
		{"negative max retry", func(c *Config) { c.MaxRetry = -1 }, "max_retry"},
		{"zero max steps", func(c *Config) { c.MaxSteps = 0 }, "max_steps"},
		{"bad metrics addr", func(c *Config) { c.MetricsAddr = "nope" }, "worker.metrics_addr"},
		{"compact past the window", func(c *Config) { c.CompactAt = 1.5 }, "worker.compact_at"},
		{"no turn kept", func(c *Config) { c.KeepTurns = -1 }, "keep_turns"},
		{"zero calls per message", func(c *Config) { c.MaxCallsPerMessage = 0 }, "max_calls_per_message"},
		{"session cap over the run cap", func(c *Config) { c.MaxDelegationsPerSession = c.MaxDelegationsPerRun + 1 }, "worker.max_delegations_per_session"},
		{"tiny result head", func(c *Config) { c.ResultHeadBytes = 100 }, "worker.result_head_bytes"},
		{"hooks", func(c *Config) {
			c.ReplyChecks, c.PostRun = []hook.ReplyCheck{noCheck}, []hook.PostRun{postRun("a", "t:a"), postRun("b", "t:b")}
		}, ""},
		{"a nil reply check", func(c *Config) { c.ReplyChecks = []hook.ReplyCheck{noCheck, nil} }, "reply check 2 is nil"},
		{"post-run work without Run", func(c *Config) { p := postRun("a", "t:a"); p.Run = nil; c.PostRun = []hook.PostRun{p} }, "needs a name, a task type, Schedule and Run"},
		{"post-run work twice", func(c *Config) { c.PostRun = []hook.PostRun{postRun("a", "t:a"), postRun("a", "t:b")} }, `post-run work "a" is registered twice`},
		{"post-run work on the loop's task type", func(c *Config) { c.PostRun = []hook.PostRun{postRun("a", queue.TypeTurn)} }, "task type agent:turn is taken"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Defaults()
			tc.cfg(&c)
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one naming %q", err, tc.want)
			}
		})
	}
}
