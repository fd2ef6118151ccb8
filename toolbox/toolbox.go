// Package toolbox assembles every server class this build ships into one registry,
// the single catalog the router dispatches from and the API serves.
package toolbox

import (
	"context"
	"fmt"

	hwdevice "github.com/aetherium-engine/aetherium/device"
	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/gpu"
	"github.com/aetherium-engine/aetherium/knowledge"
	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/mailbox"
	"github.com/aetherium-engine/aetherium/media"
	"github.com/aetherium-engine/aetherium/sandbox"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/toolbox/audio"
	comfyuitools "github.com/aetherium-engine/aetherium/toolbox/comfyui"
	"github.com/aetherium-engine/aetherium/toolbox/comms"
	"github.com/aetherium-engine/aetherium/toolbox/device"
	knowledgetools "github.com/aetherium-engine/aetherium/toolbox/knowledge"
	"github.com/aetherium-engine/aetherium/toolbox/orchestration"
	"github.com/aetherium-engine/aetherium/toolbox/planning"
	"github.com/aetherium-engine/aetherium/toolbox/quality"
	"github.com/aetherium-engine/aetherium/toolbox/research"
	"github.com/aetherium-engine/aetherium/toolbox/shell"
	"github.com/aetherium-engine/aetherium/toolbox/team"
	"github.com/aetherium-engine/aetherium/toolbox/workspace"
	"github.com/aetherium-engine/aetherium/tools"
)

// Deps are what the server classes need.
type Deps struct {
	// Store backs planning tools; nil builds a catalog-only registry (schemas, CLI).
	Store     *store.Store
	Workspace workspace.Config
	// Egress is the policy-enforcing HTTP client factory of outbound tools.
	Egress   *egress.Egress
	Research research.Config
	// Device drives the Steam Frame headset; nil registers the device tools but
	// they fail at call time (no headset configured).
	Device *hwdevice.Driver
	// Mailbox and Roster back send_message_to; nil registers it but it fails at
	// call time. Roster lists the agents of the calling session's run.
	Mailbox *mailbox.Mailbox
	Roster  team.Roster
	// Executor runs run_shell commands (sandbox.New); nil registers the shell
	// tools but they fail at call time. With Store it also backs the command log.
	Executor sandbox.Executor
	Shell    shell.Config
	// Knowledge backs search_knowledge and write_knowledge (knowledge.NewPostgres);
	// nil registers them, write_knowledge then saves without indexing and
	// search_knowledge fails. KnowledgeConfig is the `knowledge` section.
	Knowledge       knowledge.Backend
	KnowledgeConfig knowledge.Config
	// Quality bounds analyze_code, run_tests and code_review (the `quality`
	// section); the first two run in the executor's toolchain image
	// (sandbox.docker.image's toolchain). Its webapp_* keys bound
	// validate_web_app and capture_api_schema, which reach a running app.
	Quality quality.Config
	// Audio picks tts_render's voice backend and bounds it (the `audio`
	// section); the media image (sandbox.docker.image's media purpose) mixes
	// the MP3 and runs espeak-ng. GPU and Leases, when set, let tts_status
	// report the qwen-tts service's container and health check.
	Audio  audio.Config
	GPU    *gpu.Controller
	Leases *lease.Manager
	// ComfyUI is the `comfyui` section; the ComfyUI tools reach the GPU
	// services Leases declares (their URLs) with the run's grant, and
	// comfyui_video checks its clips with ffprobe in the media image.
	ComfyUI comfyuitools.Config
}

// New registers every tool and checks the result against tools/catalog.yaml.
func New(d Deps) (*tools.Registry, error) {
	reg := tools.NewRegistry()
	workspace.Register(reg, workspaceConfig(d))
	workspace.RegisterResults(reg, resultReader(d))
	planning.Register(reg, d.Store)
	comms.Register(reg)
	orchestration.Register(reg)
	device.Register(reg, d.Device)
	browser := research.Register(reg, d.Egress, d.Research, pdfRunner(d))
	team.Register(reg, d.Mailbox, d.Roster)
	shell.Register(reg, shellDeps(d), d.Shell)
	knowledgetools.Register(reg, knowledgeDeps(d))
	quality.Register(reg, quality.Deps{Runner: qualityRunner(d)}, d.Quality)
	quality.RegisterReview(reg, d.Quality.Review)
	quality.RegisterFinishing(reg, workspaceConfig(d))
	quality.RegisterWebApp(reg, quality.WebAppDeps{Egress: d.Egress, Sandbox: sandboxDialer(d), Browser: pageBrowser(browser), Workspace: workspaceConfig(d)}, d.Quality.WebApp)
	audio.Register(reg, audioDeps(d), d.Audio)
	var svc func(string) (lease.Service, bool)
	if d.Leases != nil {
		svc = d.Leases.Service
	}
	cd := comfyuitools.Deps{Service: svc}
	if r, ok := d.Executor.(media.Runner); ok {
		cd.Runner = r // comfyui_video's ffprobe check, in the media image
	}
	comfyuitools.Register(reg, cd, d.ComfyUI)
	comfyuitools.RegisterFinish(reg, finishStore(d), d.ComfyUI)
	if err := tools.CheckCatalog(reg); err != nil {
		return nil, fmt.Errorf("tool catalog check: %w", err)
	}
	return reg, nil
}

// pdfRunner is the executor's one-shot runner when it has one (Docker): nil
// otherwise, and download_pdf refuses to parse on the host.
func pdfRunner(d Deps) research.Runner {
	if r, ok := d.Executor.(research.Runner); ok {
		return r
	}
	return nil
}

// qualityRunner is the executor's one-shot runner with images by purpose
// (Docker): nil otherwise, and the quality tools refuse to run on the host.
func qualityRunner(d Deps) quality.Runner {
	if r, ok := d.Executor.(quality.Runner); ok {
		return r
	}
	return nil
}

// audioDeps are the audio tools' collaborators, without typed nils: a missing
// runner makes them refuse to run (never on the host).
func audioDeps(d Deps) audio.Deps {
	ad := audio.Deps{Owner: workspaceConfig(d).Owner}
	if r, ok := d.Executor.(media.Runner); ok {
		ad.Runner = r
	}
	if d.GPU != nil {
		ad.GPU = d.GPU
	}
	if d.Leases != nil {
		ad.Services = d.Leases
	}
	return ad
}

// The Docker executor is what puts the web app tools inside a run's sandbox; a
// signature drift would silently send localhost to the worker instead.
var _ quality.SandboxDialer = (*sandbox.Docker)(nil)

// sandboxDialer is the executor's in-sandbox dialer when it has one (Docker):
// the web app tools then reach a run's localhost inside its sandbox.
func sandboxDialer(d Deps) quality.SandboxDialer {
	if s, ok := d.Executor.(quality.SandboxDialer); ok && s != nil {
		return s
	}
	return nil
}

// pageBrowser hands validate_web_app the run's browser (the one play_test and
// capture_reference use); nil without the Docker sandbox.
func pageBrowser(b *research.Browser) quality.PageBrowser {
	if b == nil {
		return nil
	}
	return browserPages{b}
}

// browserPages adapts research.Browser to quality.PageBrowser, so neither
// server class imports the other.
type browserPages struct{ b *research.Browser }

func (p browserPages) LoadPage(ctx context.Context, s *tools.Session, rawURL string, q quality.PageQuery) (quality.PageLoad, error) {
	c, err := p.b.CheckPage(ctx, s, rawURL, research.PageQuery{Selectors: q.Selectors, Texts: q.Texts, Wait: q.Wait})
	if err != nil {
		return quality.PageLoad{}, err
	}
	l := quality.PageLoad{Status: c.Status, Selectors: c.Selectors, Texts: c.Texts, MS: c.Duration.Milliseconds()}
	for _, e := range c.Errors {
		l.Errors = append(l.Errors, e.Kind+": "+e.Message)
	}
	for _, f := range c.Failed {
		l.Failed = append(l.Failed, f.URL+" → "+f.Error)
	}
	return l, nil
}

// shellDeps avoids a typed-nil command log when there is no store.
func shellDeps(d Deps) shell.Deps {
	sd := shell.Deps{Executor: d.Executor}
	if d.Store != nil {
		sd.Commands = d.Store
	}
	return sd
}

// knowledgeDeps gives write_knowledge's files the workspace tools' owner.
func knowledgeDeps(d Deps) knowledgetools.Deps {
	kd := knowledgetools.Deps{Backend: d.Knowledge, Config: d.KnowledgeConfig}
	if o := workspaceConfig(d).Owner; o != nil {
		kd.Owner = &knowledgetools.Owner{UID: o.UID, GID: o.GID}
	}
	return kd
}

// workspaceConfig hands files the tools write to the sandbox's user when the
// executor runs commands as another user than the worker.
func workspaceConfig(d Deps) workspace.Config {
	c := d.Workspace
	if o, ok := d.Executor.(interface{ Owner() (int, int, bool) }); ok && c.Owner == nil {
		if uid, gid, chown := o.Owner(); chown {
			c.Owner = &workspace.Owner{UID: uid, GID: gid}
		}
	}
	return c
}

// finishStore records finish_image's requests, without a typed nil: no store
// makes the tool refuse to run.
func finishStore(d Deps) comfyuitools.FinishStore {
	if d.Store == nil {
		return nil
	}
	return d.Store
}

// resultReader pages the tool results the worker stored, without a typed nil:
// no store makes read_result refuse to run.
func resultReader(d Deps) workspace.ResultReader {
	if d.Store == nil {
		return nil
	}
	return d.Store
}
