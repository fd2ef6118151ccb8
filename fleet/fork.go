package fleet

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/replay"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/submit"
	"github.com/aetherium-engine/aetherium/templates"
	"github.com/aetherium-engine/aetherium/toolbox/workspace"
	"github.com/aetherium-engine/aetherium/tools"
)

// ForkOptions say where a fork starts and what it changes (docs/fork.md).
type ForkOptions struct {
	// At is the step (the replay's numbering) the fork runs live from.
	At int
	// By is who forks: the new run is theirs, submitted through package
	// submit's checks.
	By submit.Principal
	// Team replaces the team (a JSON object, checked like an inline team's).
	Team json.RawMessage
	// Model replaces the team's model; Prompt the supervisor's prompt.
	Model  *llm.ModelConfig
	Prompt string
}

// forkHold is how long the fork holds its supervisor's session while it
// restores the workspace: no step starts before the restore ends (or, should
// this process die, the hold runs out).
const forkHold = 5 * time.Minute

// Fork starts a new run that shares run runID's record up to step o.At and
// runs live from it (issue 44 part 2, docs/fork.md). The record is replayed
// first (the engine must decide the shared steps as the record did); the new
// run is written with the record's sessions and delegations up to the step,
// its workspace rebuilt by re-applying the recorded edits up to the step, and
// started. Nothing of the shared steps runs again: no model call, no gate, no
// audit row, no sandbox, no network.
func (f *Fleet) Fork(ctx context.Context, runID string, o ForkOptions) (replay.ForkResult, error) {
	res := replay.ForkResult{ForkedFrom: runID, At: o.At}
	if f.Worker == nil || f.gate == nil {
		return res, ErrNoEngine
	}
	if o.At < 1 {
		return res, fmt.Errorf("%w: step %d: steps count from 1", replay.ErrBadForkPoint, o.At)
	}
	rec, err := replay.Load(ctx, f.Store, runID, f.Cfg.Replay.MaxMessages)
	if err != nil {
		return res, err
	}
	if rec.Run.Workspace != "" {
		return res, fmt.Errorf("%w: run %s worked in project %q's shared workspace, which later runs changed: a fork restores a run's own workspace",
			replay.ErrBadForkPoint, runID, rec.Run.Project)
	}
	team, err := templates.ParseJSON(rec.Run.Team)
	if err != nil {
		return res, fmt.Errorf("%w: run %s: its team: %w", replay.ErrCorruptRecord, runID, err)
	}
	template, teamJSON, err := f.forkTeam(rec.Run, team, o)
	if err != nil {
		return res, err
	}
	if team, err = templates.ParseJSON(teamJSON); err != nil {
		return res, &submit.Error{Kind: submit.ErrInvalid, Field: "team", Message: err.Error()}
	}
	rep, err := f.Worker.Replay(ctx, rec, tools.NewRecordedRouter(f.Registry, replay.Terminal, f.gate.Recorded(nil).Middleware))
	if err != nil {
		return res, fmt.Errorf("fork run %s: replay: %w", runID, err)
	}
	if d := rep.Divergence; d != nil && d.Index < o.At {
		return res, fmt.Errorf("%w: step %d: %s; fork at step %d or before", replay.ErrForkDiverged, d.Index, d.What, d.Index)
	}
	newID := uuid.NewString()
	plan, err := f.Worker.PlanFork(rec, rep, o.At, newID, team)
	if err != nil {
		return res, err
	}
	// A call a person edited before it ran ran with the person's arguments, not
	// the model's the session holds: the fork re-applies what ran (re-applying
	// the model's would put unapproved content in the fork's workspace).
	for i, rc := range plan.Restore {
		appr, err := f.Store.ApprovalForCall(ctx, rc.From, rc.Call.ID)
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return res, fmt.Errorf("fork run %s: the approval of call %s: %w", runID, rc.Call.ID, err)
		case appr.Status == store.ApprovalEdited:
			plan.Restore[i].Call.Args = appr.EditedArgs
		}
	}
	token := uuid.NewString()
	vars := map[string]any{}
	if len(rec.Run.Variables) > 0 {
		_ = json.Unmarshal(rec.Run.Variables, &vars) // the stored variables: a label of the request, the team is rendered
	}
	req := submit.Request{By: o.By, Template: template, Prompt: rec.Run.Prompt, Variables: vars, Priority: rec.Run.Priority,
		Trigger: fmt.Sprintf("fork:%s@%d", runID, o.At), Untrusted: rec.Run.Untrusted,
		Fork: &submit.Fork{ID: newID, Team: teamJSON, Seed: store.ForkSeed{From: runID, At: o.At, Sessions: plan.Sessions,
			Delegations: plan.Delegations, LeaseToken: token, LeaseFor: forkHold}}}
	if template == "" {
		req.Team = teamJSON
	}
	sub, err := f.Submitter().Submit(ctx, req)
	if err != nil {
		return res, err
	}
	res.RunID, res.Status, res.Position, res.Shared, res.Live = sub.RunID, sub.Status, sub.Position, plan.Shared, plan.Live
	supervisor := queue.SupervisorSession(newID).String()
	restore := func() error {
		run, err := f.Store.GetRun(ctx, newID)
		if err != nil {
			return err
		}
		dir, err := f.Workspaces.Open(ctx, run.WorkspaceID())
		if err != nil {
			return fmt.Errorf("open the fork's workspace: %w", err)
		}
		if res.Restored, err = f.Worker.RestoreFork(ctx, plan, run, dir); err != nil {
			return err
		}
		for _, s := range plan.Sessions {
			if s.Status == "done" {
				if err := workspace.ForgetSession(dir, s.ID); err != nil {
					return err
				}
			}
		}
		res.WorkspaceHash, err = WorkspaceHash(dir)
		return err
	}
	if err := restore(); err != nil {
		f.Worker.FailRun(context.WithoutCancel(ctx), newID, "fork_restore_failed", err.Error())
		_ = f.Store.ReleaseSession(context.WithoutCancel(ctx), supervisor, token)
		return res, fmt.Errorf("fork run %s at step %d: %w", runID, o.At, err)
	}
	if err := f.Store.ReleaseSession(ctx, supervisor, token); err != nil {
		return res, fmt.Errorf("fork run %s: start %s: %w", runID, newID, err)
	}
	return res, nil
}

// forkTeam is the fork's team: the original's as it ran (its template's name
// kept: the gate judges it as a template run), or, changed by o, an inline
// team (the inline team's checks; a changed template team is renamed
// <name>-fork, since an inline team may not use a shipped template's name).
func (f *Fleet) forkTeam(run store.Run, team templates.Template, o ForkOptions) (string, json.RawMessage, error) {
	bad := func(field, format string, a ...any) error {
		return &submit.Error{Kind: submit.ErrInvalid, Field: field, Message: fmt.Sprintf(format, a...)}
	}
	switch {
	case len(o.Team) > 0 && (o.Model != nil || o.Prompt != ""):
		return "", nil, bad("team", "give a team, or a model and prompt to change: not both")
	case len(o.Team) > 0:
		t, err := templates.ParseJSON(o.Team)
		if err != nil {
			return "", nil, bad("team", "%v", err)
		}
		if err := t.Validate(f.Registry); err != nil {
			return "", nil, bad("team", "%v", err)
		}
		return "", o.Team, nil
	case o.Model == nil && o.Prompt == "":
		return run.Template, run.Team, nil
	}
	if o.Model != nil {
		if strings.TrimSpace(o.Model.Provider) == "" {
			return "", nil, bad("model", "a model needs its provider")
		}
		team.Model = *o.Model
	}
	if o.Prompt != "" {
		team.Supervisor.Prompt = o.Prompt
	}
	if run.Template != "" {
		team.Name += "-fork"
	}
	if err := team.Validate(f.Registry); err != nil {
		return "", nil, bad("team", "%v", err)
	}
	raw, err := json.Marshal(team)
	if err != nil {
		return "", nil, fmt.Errorf("fork team: %w", err)
	}
	return "", raw, nil
}

// WorkspaceHash is a SHA-256 over a workspace's files (path, mode and
// content, in path order), without the engine's own directory
// (workspace.InternalDir: snapshots, indexes): two workspaces with the same
// files hash the same.
func WorkspaceHash(dir string) (string, error) {
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == workspace.InternalDir || strings.HasPrefix(rel, workspace.InternalDir+string(filepath.Separator)) {
			return filepath.SkipDir
		}
		if !d.IsDir() && rel != "lost+found" {
			paths = append(paths, rel)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("hash workspace: %w", err)
	}
	sort.Strings(paths)
	h := sha256.New()
	for _, rel := range paths {
		info, err := os.Lstat(filepath.Join(dir, rel))
		if err != nil {
			return "", fmt.Errorf("hash workspace: %w", err)
		}
		fmt.Fprintf(h, "%q %o %d\n", filepath.ToSlash(rel), info.Mode(), info.Size())
		if info.Mode().IsRegular() {
			if err := hashFile(h, filepath.Join(dir, rel)); err != nil {
				return "", err
			}
		} else if info.Mode()&fs.ModeSymlink != 0 {
			target, _ := os.Readlink(filepath.Join(dir, rel))
			fmt.Fprintf(h, "-> %q\n", target)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func hashFile(w io.Writer, p string) error {
	fh, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("hash workspace: %w", err)
	}
	defer fh.Close()
	if _, err := io.Copy(w, fh); err != nil {
		return fmt.Errorf("hash workspace: %w", err)
	}
	return nil
}
