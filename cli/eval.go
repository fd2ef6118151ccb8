package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/evals"
	"github.com/aetherium-engine/aetherium/fleet"
	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/templates"
)

const evalUsage = `usage: aetherium eval SUITE.yaml [--team FILE | --template NAME] [--compare FILE_OR_TEMPLATE]
                      [--junit OUT.xml] [--json OUT.json] [--parallel N] [--timeout D] [--new-runs]
Run an eval suite: each task is a run of the team through the API, judged by its
assertions on the trajectory (tools called, their order, gate outcomes,
delegations), the result (contains, regex, JSON schema, a judge model's rubric)
and the cost, tokens and turns (docs/evals.md). Prints a table, writes JUnit XML
and JSON, and exits 1 when a task fails (2 on a bad suite or flag).
--compare runs the suite against a second team version too (a team file, or a
template's name) and prints both side by side: pass rate, cost, turns.
Each run is submitted under an Idempotency-Key derived from the suite, the task
and the team, so running the suite again after an interrupt picks up the runs
already submitted instead of starting them twice; within the key's day the same
runs answer again — --new-runs submits new ones.`

// teamSpec is a team version the suite runs against.
type teamSpec struct {
	// label names it in reports, id in idempotency keys.
	label, id string
	template  string
	team      *templates.Template
}

var templateName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$`)

// resolveTeam reads a team file, or takes a template's name.
func resolveTeam(file, template string) (teamSpec, error) {
	if template != "" {
		if !templateName.MatchString(template) {
			return teamSpec{}, fmt.Errorf("template %q: not a template name (letters, digits, . _ -)", template)
		}
		return teamSpec{label: "template " + template, id: "template:" + template, template: template}, nil
	}
	t, err := readTeamFile(file)
	if err != nil {
		return teamSpec{}, err
	}
	canon, err := json.Marshal(t)
	if err != nil {
		return teamSpec{}, fmt.Errorf("%s: %w", file, err)
	}
	sum := sha256.Sum256(canon)
	hash := hex.EncodeToString(sum[:])[:12]
	return teamSpec{label: filepath.Base(file) + " (" + hash + ")", id: "team:" + hash, team: &t}, nil
}

// fileOrTemplate resolves --compare: an existing file is a team file,
// anything else a template's name.
func fileOrTemplate(arg string) (teamSpec, error) {
	if fi, err := os.Stat(arg); err == nil && fi.Mode().IsRegular() {
		return resolveTeam(arg, "")
	}
	return resolveTeam("", arg)
}

func evalCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("eval", flag.ContinueOnError)
	fs.SetOutput(stderr)
	setUsage(fs, evalUsage)
	base := fs.String("api", apiURL(), "API base URL (AETHERIUM_API_URL)")
	teamFile := fs.String("team", "", "the team: a template YAML file (default: the suite's team)")
	tmpl := fs.String("template", "", "the team: a template of the fleet (default: the suite's team)")
	compare := fs.String("compare", "", "a second team version to run the suite against: a team file or a template name")
	junitOut := fs.String("junit", "", "write JUnit XML here")
	jsonOut := fs.String("json", "", "write the reports as JSON here")
	parallel := fs.Int("parallel", evals.DefaultParallel, "runs at once (1 to 64)")
	timeout := fs.Duration("timeout", evals.DefaultTaskTimeout, "a task's timeout when the suite gives none")
	newRuns := fs.Bool("new-runs", false, "submit new runs even if this suite, task and team ran within the idempotency window")
	positional, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	bad := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "aetherium eval: "+format+"\n", a...)
		return 2
	}
	if len(positional) != 1 {
		return bad("give one suite file\n%s", evalUsage)
	}
	if *teamFile != "" && *tmpl != "" {
		return bad("give --team or --template, not both")
	}
	cfg := evals.Config{Parallel: *parallel, TaskTimeout: *timeout}
	if err := cfg.Validate(); err != nil {
		return bad("%v", err)
	}
	suitePath := positional[0]
	suite, err := readSuite(suitePath, cfg)
	if err != nil {
		return bad("%v", err)
	}
	team, err := suiteTeam(suite, suitePath, *teamFile, *tmpl)
	if err != nil {
		return bad("%v", err)
	}
	specs := []teamSpec{team}
	if *compare != "" {
		other, err := fileOrTemplate(*compare)
		if err != nil {
			return bad("--compare: %v", err)
		}
		if other.id == team.id {
			return bad("--compare: %s is the team the suite already runs against", other.label)
		}
		specs = append(specs, other)
	}
	ev := judgeFor(suite)
	salt := ""
	if *newRuns {
		salt = randomKey()
	}
	started := time.Now()
	var reports []evals.Report
	for _, spec := range specs {
		fmt.Fprintf(stdout, "suite %s: %d tasks against %s, %d at once\n", suite.Name, len(suite.Tasks), spec.label, cfg.WithDefaults().Parallel)
		run := func(ctx context.Context, t evals.Task) evals.Outcome {
			return runEvalTask(ctx, *base, suite, t, spec, salt, suite.TimeoutOf(t, cfg.WithDefaults().TaskTimeout))
		}
		finished := 0
		progress := func(r evals.TaskResult) {
			finished++
			fmt.Fprintf(stderr, "  [%d/%d] %s: %s (%s)\n", finished, len(suite.Tasks), r.Task, r.Summary(), r.Duration.Round(10*time.Millisecond))
		}
		rep := evals.Run(ctx, suite, spec.label, cfg, run, ev, progress)
		if err := evals.WriteTable(stdout, rep); err != nil {
			return bad("%v", err)
		}
		fmt.Fprintln(stdout)
		reports = append(reports, rep)
		if ctx.Err() != nil {
			break
		}
	}
	if len(reports) == 2 {
		fmt.Fprintf(stdout, "comparison, A: %s, B: %s\n", reports[0].Team, reports[1].Team)
		if err := evals.WriteComparison(stdout, reports[0], reports[1]); err != nil {
			return bad("%v", err)
		}
	}
	if *junitOut != "" {
		if err := writeFile(*junitOut, func(w io.Writer) error { return evals.WriteJUnit(w, started, reports...) }); err != nil {
			fmt.Fprintf(stderr, "aetherium eval: --junit: %v\n", err)
			return 1
		}
	}
	if *jsonOut != "" {
		if err := writeFile(*jsonOut, func(w io.Writer) error { return evals.WriteJSON(w, reports...) }); err != nil {
			fmt.Fprintf(stderr, "aetherium eval: --json: %v\n", err)
			return 1
		}
	}
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "aetherium eval: interrupted; the runs submitted go on (aetherium runs list); the same command picks them up again")
		return 130
	}
	for _, r := range reports {
		if r.Failing() {
			return 1
		}
	}
	return 0
}

func readSuite(path string, cfg evals.Config) (evals.Suite, error) {
	f, err := os.Open(path)
	if err != nil {
		return evals.Suite{}, err
	}
	defer f.Close()
	// One byte past the cap, so Parse sees a file too large as such.
	raw, err := io.ReadAll(io.LimitReader(f, int64(cfg.WithDefaults().MaxSuiteBytes)+1))
	if err != nil {
		return evals.Suite{}, fmt.Errorf("%s: %w", path, err)
	}
	name := filepath.Base(path)
	s, err := evals.Parse(raw, name[:len(name)-len(filepath.Ext(name))], cfg)
	if err != nil {
		return s, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// suiteTeam is the team of the flags, else the suite's (a file relative to
// the suite's directory).
func suiteTeam(s evals.Suite, suitePath, file, template string) (teamSpec, error) {
	switch {
	case file != "" || template != "":
		return resolveTeam(file, template)
	case s.Team.Template != "":
		return resolveTeam("", s.Team.Template)
	case s.Team.File != "":
		p := s.Team.File
		if !filepath.IsAbs(p) {
			p = filepath.Join(filepath.Dir(suitePath), p)
		}
		return resolveTeam(p, "")
	}
	return teamSpec{}, errors.New("no team: give --team FILE or --template NAME, or team: in the suite")
}

// judgeFor is the suite's judge, when it names a real model whose provider
// is configured; otherwise the judge assertions are skipped, saying why.
func judgeFor(s evals.Suite) evals.Evaluator {
	if s.Judge == nil {
		return evals.Evaluator{NoJudge: "the suite names no judge model (judge: {provider, model})"}
	}
	cfg, err := config.Load()
	if err != nil {
		return evals.Evaluator{NoJudge: "the configuration does not load: " + err.Error()}
	}
	configured := map[string]bool{
		"openai":    cfg.LLM.OpenAI.APIKey != "" || cfg.LLM.OpenAI.BaseURL != "",
		"anthropic": cfg.LLM.Anthropic.APIKey != "",
	}
	if !configured[s.Judge.Provider] {
		return evals.Evaluator{NoJudge: fmt.Sprintf("no real model is configured for the judge (provider %q: set its API key, docs/reference/configuration.md)", s.Judge.Provider)}
	}
	models := &fleet.ModelFactory{LLM: cfg.LLM}
	p, mc, err := models.For(templates.Template{Model: llm.ModelConfig{Provider: s.Judge.Provider, Model: s.Judge.Model}}, templates.Node{})
	if err != nil {
		return evals.Evaluator{NoJudge: "the judge model: " + err.Error()}
	}
	return evals.Evaluator{Judge: evals.LLMJudge{Provider: p, Model: mc.Model}}
}

// writeFile writes a report beside its final name and renames it into
// place, so a failed write leaves no half report a CI server would read.
func writeFile(path string, write func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := write(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// runEvalTask submits a task's run, follows it to its end and reads what the
// assertions judge: its events and its outcome.
func runEvalTask(ctx context.Context, base string, s evals.Suite, t evals.Task, spec teamSpec, salt string, timeout time.Duration) evals.Outcome {
	start := time.Now()
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	vars := map[string]any{}
	for k, v := range s.VariablesOf(t) {
		vars[k] = v
	}
	body := map[string]any{"prompt": t.Prompt, "variables": vars, "project": t.Project}
	path := "/api/orchestrator/run"
	if spec.team != nil {
		body["team"] = spec.team
	} else {
		path = "/api/orchestrator/run-from-template"
		body["template"] = spec.template
	}
	var accepted struct {
		RunID string `json:"run_id"`
	}
	key := evals.IdempotencyKey(s, t, spec.id, salt)
	reused, err := submitOnce(tctx, base+path, key, body, &accepted)
	o := evals.Outcome{RunID: accepted.RunID, Reused: reused}
	done := func(err error) evals.Outcome {
		o.Duration, o.Err = time.Since(start), err
		return o
	}
	switch {
	case err != nil && ctx.Err() != nil:
		return done(fmt.Errorf("interrupted before the API answered the submission (key %s)", key))
	case err != nil && tctx.Err() != nil:
		return done(fmt.Errorf("timed out after %s before the API answered the submission (key %s)", timeout, key))
	case err != nil:
		return done(fmt.Errorf("submit: %w", err))
	}
	if _, _, err := followRun(tctx, base, accepted.RunID, io.Discard); err != nil {
		switch {
		case ctx.Err() != nil:
			return done(fmt.Errorf("interrupted while run %s ran; it goes on", accepted.RunID))
		case tctx.Err() != nil:
			// The run is the suite's: it is cancelled rather than left
			// holding the fleet, on a context of its own (the task's ended).
			cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
			defer ccancel()
			note := "cancelled it"
			if cerr := postJSON(cctx, base+"/api/runs/"+url.PathEscape(accepted.RunID)+"/cancel", struct{}{}, nil); cerr != nil {
				note = "cancelling it failed: " + cerr.Error()
			}
			return done(fmt.Errorf("timed out: run %s did not end within %s (the task's timeout); %s", accepted.RunID, timeout, note))
		}
		return done(fmt.Errorf("following run %s: %w", accepted.RunID, err))
	}
	stored, err := storedEvents(ctx, base, accepted.RunID)
	if err != nil {
		return done(fmt.Errorf("run %s: %w", accepted.RunID, err))
	}
	for _, e := range stored {
		o.Events = append(o.Events, evals.Event{ID: e.ID, Type: e.Type, Agent: e.Agent, Data: e.Data})
	}
	var rv runView
	if err := getJSON(ctx, base+"/api/runs/"+url.PathEscape(accepted.RunID), &rv); err != nil {
		return done(fmt.Errorf("run %s: %w", accepted.RunID, err))
	}
	o.Status, o.Result, o.Error, o.Reason, o.TokensUsed, o.CostUSD = rv.Status, rv.Result, rv.Error, rv.Reason, rv.TokensUsed, rv.CostUSD
	return done(nil)
}
