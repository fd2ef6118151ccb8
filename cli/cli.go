// Package cli implements the aetherium command: server roles and client commands.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"syscall"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/egressproxy"
	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/logctx"
)

const usage = `aetherium — a queue-driven worker fleet for multi-agent LLM runs

Server roles:
  api                      HTTP API (runs, events, tools, /metrics, /monitoring/)
  worker                   asynq worker: supervisor steps and agent turns (scale out freely)
  scheduler                periodic maintenance (safe with 2+ replicas)
  egress                   the sandboxes' egress service: firewall rules and proxy listeners in the
                           host's network namespace for containerized workers (docs/sandboxproxy.md)
  dev                      api + worker + scheduler in one process (migrates first); without
                           api.tokens it makes a token, writes it to data/dev-token for the
                           client commands and prints a Studio sign-in URL
  migrate up|down|status   database schema
  knowledge index|search|stats   the knowledge base (talks to PostgreSQL directly, like migrate)
  policy test FILE         which recorded calls a permissions file would deny, ask or allow
                           differently from the rules in force (PostgreSQL directly; docs/policy-test.md)

Client commands (talk to the API at AETHERIUM_API_URL, default http://AETHERIUM_API_ADDR;
bearer token from AETHERIUM_API_TOKEN, else the file AETHERIUM_API_TOKEN_FILE, else, for
an API on loopback, the token a local dev wrote to data/dev-token):
  run [flags]              submit a run; --follow streams its events
  eval SUITE.yaml [flags]  run an eval suite against a team (--compare a second version):
                           a table, JUnit XML, JSON; exit 1 when a task fails (docs/evals.md)
  events RUN_ID            a run's events, with the post-run ones after its end (postrun.finish_image)
  replay RUN_ID            replay a finished run from its record (no tool runs) and print
                           the first step where the engine now decides differently (docs/replay.md)
  fork RUN_ID --at STEP    start a run that shares a finished run's record up to STEP and
                           runs live from it (--team, --model, --prompt change it; docs/fork.md)
  runs list|show|cancel|retry|export|import   the runs you may read: a table (filters), one
                           run with its costs and recent events, cancel one, submit one again
                           as a new run, its history as JSON; import writes retention archives
                           back (PostgreSQL directly, like migrate)
  approvals list|show|approve|deny|edit|answer   human decisions on held calls and
                           answers to the agents' questions (ask_user); approvals --help
  grants list|revoke|confirm   scoped grants made with approvals approve --grant
  hooks list|show|create|rotate|delete|deliveries   inbound webhooks: signed deliveries
                           that start runs (docs/hooks.md)
  schedules list|show|create|pause|resume|delete   runs that start themselves on a cron
                           expression (docs/schedules.md)
  memory list|add|delete   a project's long-term agent memory (--project SLUG)
  leases [--events N]      GPU lease holders, waiters, tokens and recent lease events
  tools [flags]            print the tool catalog

Every command and subcommand takes --help (aetherium runs list --help); flags may
follow positional arguments (aetherium approvals approve apr_… --reason ok).

Configuration: aetherium.yaml (AETHERIUM_CONFIG) with AETHERIUM_* overrides; see docs/reference/configuration.md.
`

// command is one command of the tree: how it runs, its subcommands (what
// --help lists and an unknown one is told) and, for a command with
// subcommands, the synopsis --help prints.
type command struct {
	run      func(ctx context.Context, args []string, stdout, stderr io.Writer) int
	subs     []string
	synopsis string
}

// commands is the command tree of the client and maintenance commands (the
// server roles are served apart: they log and shut down gracefully).
func commands() map[string]command {
	withErr := func(name string, f func(ctx context.Context, args []string, stdout, stderr io.Writer) error) func(context.Context, []string, io.Writer, io.Writer) int {
		return func(ctx context.Context, args []string, stdout, stderr io.Writer) int {
			if err := f(ctx, args, stdout, stderr); err != nil {
				if errors.Is(err, flag.ErrHelp) {
					return 0
				}
				fmt.Fprintf(stderr, "aetherium %s: %v\n", name, err)
				return 1
			}
			return 0
		}
	}
	return map[string]command{
		"approvals": {run: approvalsCmd, subs: []string{"list", "show", "approve", "deny", "edit", "answer"}, synopsis: approvalsUsage},
		"grants":    {run: grantsCmd, subs: []string{"list", "revoke", "confirm"}, synopsis: grantsUsage},
		"memory":    {run: memoryCmd, subs: []string{"list", "add", "delete"}, synopsis: memoryUsage},
		"runs":      {run: runsCmd, subs: []string{"list", "show", "cancel", "retry", "export", "import"}, synopsis: runsUsage},
		"hooks":     {run: hooksCmd, subs: []string{"list", "show", "create", "rotate", "delete", "deliveries"}, synopsis: hooksUsage},
		"schedules": {run: schedulesCmd, subs: []string{"list", "show", "create", "pause", "resume", "delete"}, synopsis: schedulesUsage},
		"knowledge": {run: withErr("knowledge", knowledgeCmd), subs: []string{"index", "search", "stats"}, synopsis: knowledgeUsage},
		"migrate":   {run: withErr("migrate", migrate), subs: []string{"up", "down", "status"}, synopsis: migrateUsage},
		"policy":    {run: withErr("policy", policyCmd), subs: []string{"test"}, synopsis: policyUsage},
		"leases":    {run: leasesCmd},
		"run":       {run: runCmd},
		"eval":      {run: evalCmd},
		"events":    {run: eventsCmd},
		"replay":    {run: replayCmd},
		"fork":      {run: forkCmd},
		"tools":     {run: withErr("tools", toolsCmd)},
	}
}

// serverRoles are the long-running roles: JSON logs, graceful shutdown.
var serverRoles = []string{"api", "worker", "scheduler", "dev", "egress"}

// Main runs the command and returns the process exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	if len(args) > 1 && args[0] == "help" {
		// aetherium help runs [list]: as aetherium runs [list] --help.
		args = append(slices.Clone(args[1:]), "--help")
	}
	if len(args) == 0 || isHelp(args[0]) {
		fmt.Fprint(stdout, usage)
		return 0
	}
	if cmd, sub, ok := helpRequest(args, cmds); ok {
		return printHelp(cmd, sub, cmds, stdout)
	}
	if slices.Contains(serverRoles, args[0]) {
		// JSON logs; logctx adds run_id, agent, tool and task id from the context.
		log := slog.New(logctx.NewHandler(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: logLevel()})))
		ctx, stop := signalContext(log)
		defer stop()
		if err := serve(ctx, args[0], args[1:], stderr, log); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			fmt.Fprintf(stderr, "aetherium %s: %v\n", args[0], err)
			return 1
		}
		return 0
	}
	c, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "aetherium: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	// A client command logs nothing: an interrupt only ends its context, and
	// the command says in its own words what that left (run --follow: the run
	// goes on).
	ctx, stop := interruptContext()
	defer stop()
	return c.run(ctx, args[1:], stdout, stderr)
}

func logLevel() slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(os.Getenv("AETHERIUM_LOG_LEVEL"))); err != nil {
		return slog.LevelInfo
	}
	return l
}

// interruptContext ends quietly on the first SIGINT/SIGTERM; a second one has
// its default effect (the process ends at once).
func interruptContext() (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case <-ch:
			signal.Stop(ch)
			cancel()
		case <-done:
		}
	}()
	return ctx, func() { close(done); signal.Stop(ch); cancel() }
}

// signalContext ends on the first SIGINT/SIGTERM (graceful shutdown); a second
// signal exits at once.
func signalContext(log *slog.Logger) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s, ok := <-ch
		if !ok {
			return
		}
		log.Info("shutting down; send the signal again to exit at once", "signal", s.String())
		cancel()
		if _, ok := <-ch; ok {
			log.Warn("second signal: exiting now")
			os.Exit(130)
		}
	}()
	return ctx, func() { signal.Stop(ch); cancel() }
}

func serve(ctx context.Context, role string, args []string, stderr io.Writer, log *slog.Logger) error {
	fs := flag.NewFlagSet(role, flag.ContinueOnError)
	fs.SetOutput(stderr)
	setUsage(fs, "usage: aetherium "+role+" [--insecure-no-auth]\n"+roleSummary[role])
	insecure := fs.Bool("insecure-no-auth", false, "allow a non-loopback API address without bearer tokens")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := config.Load()
	if err != nil {
		return err
	}
	cfg.API.InsecureNoAuth = cfg.API.InsecureNoAuth || *insecure
	log = log.With("role", role)
	if role == "egress" {
		// No fleet: the firewall rules, the gateways' listeners and the relay
		// to the workers (no database, no Redis, no Docker engine).
		svc, err := egressproxy.NewService(cfg.Sandbox.EgressProxy, log)
		if err != nil {
			return err
		}
		return svc.Run(ctx)
	}
	if role == "dev" {
		stop, err := startDevToken(&cfg, stderr)
		if err != nil {
			return err
		}
		defer stop()
	}
	// dev is the one-command local fleet: it migrates before anything reads the
	// schema (the fleet's id among the first), so a fresh database works.
	open := map[string]func(context.Context, config.Config, *slog.Logger, fleet.Options) (*fleet.Fleet, error){
		"api": fleet.OpenAPI, "worker": fleet.OpenWorker, "scheduler": fleet.OpenScheduler, "dev": fleet.Open,
	}[role]
	f, err := open(ctx, cfg, log, fleet.Options{Migrate: role == "dev"})
	if err != nil {
		return err
	}
	defer f.Close()
	switch role {
	case "api":
		return f.RunAPI(ctx)
	case "worker":
		return fleet.RunAll(ctx, f.RunWorker, func(ctx context.Context) error { return f.ServeMetrics(ctx, cfg.Worker.MetricsAddr) })
	case "scheduler":
		return fleet.RunAll(ctx, f.RunScheduler, func(ctx context.Context) error { return f.ServeMetrics(ctx, cfg.Scheduler.MetricsAddr) })
	default: // dev
		return fleet.RunAll(ctx, f.RunAPI, f.RunWorker, f.RunScheduler)
	}
}

const migrateUsage = `usage: aetherium migrate up|down|status
  aetherium migrate up       apply every pending migration, then print the status
  aetherium migrate down     roll the latest migration back, then print the status
  aetherium migrate status   each migration and whether it is applied
Talks to PostgreSQL directly (database_url, AETHERIUM_DATABASE_URL).`

var roleSummary = map[string]string{
	"api":       "The HTTP API (runs, events, tools, /metrics, /monitoring/).",
	"worker":    "The asynq worker: supervisor steps and agent turns (scale out freely).",
	"scheduler": "Periodic maintenance (safe with 2+ replicas).",
	"dev":       "api + worker + scheduler in one process; migrates first; without api.tokens it makes a token.",
	"egress":    "The sandboxes' egress service: firewall rules and proxy listeners in the host's network namespace, relayed to the workers (sandbox.egress_proxy.service).",
}

func migrate(ctx context.Context, args []string, out, _ io.Writer) error {
	if slices.ContainsFunc(args, isHelp) {
		fmt.Fprintln(out, migrateUsage)
		return flag.ErrHelp
	}
	if len(args) != 1 || (args[0] != "up" && args[0] != "down" && args[0] != "status") {
		return errors.New(migrateUsage)
	}
	cfg, err := config.Load()
	if err != nil {
		return err
	}
	f, err := fleet.OpenStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer f.Close()
	switch args[0] {
	case "up":
		if err := f.MigrateUp(ctx); err != nil {
			return err
		}
	case "down":
		p, closeDB, err := f.Migrator()
		if err != nil {
			return err
		}
		defer closeDB()
		if _, err := p.Down(ctx); err != nil {
			return fmt.Errorf("migrate down: %w", err)
		}
	}
	p, closeDB, err := f.Migrator()
	if err != nil {
		return err
	}
	defer closeDB()
	st, err := p.Status(ctx)
	if err != nil {
		return fmt.Errorf("migrate status: %w", err)
	}
	for _, s := range st {
		fmt.Fprintf(out, "%-10s %s\n", s.State, s.Source.Path)
	}
	return nil
}
