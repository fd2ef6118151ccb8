// Package audio is the AudioTools server class (group audio): tts_render speaks
// a workspace script into one MP3 and tts_status tells whether the voice
// service is up. Lines are read by media/script (the parser a node's
// required_output counts with), spoken by a media/voice backend (espeak-ng in
// the media image, or Qwen3-TTS on the leased qwen-tts GPU service), and joined
// by ffmpeg in the media image: nothing runs on the worker's host.
package audio

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/gpu"
	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/media"
	"github.com/aetherium-engine/aetherium/media/script"
	"github.com/aetherium-engine/aetherium/media/voice"
	"github.com/aetherium-engine/aetherium/toolbox/workspace"
	"github.com/aetherium-engine/aetherium/tools"
)

// GPUStatus is the lease controller's view of a service's container
// (gpu.Controller implements it).
type GPUStatus interface {
	Status(ctx context.Context, service string) (gpu.Status, error)
}

// Deps are what the audio tools need.
type Deps struct {
	// Runner runs the media image (sandbox.Docker); nil registers the tools but
	// they refuse to run (never on the host).
	Runner media.Runner
	// GPU reports the qwen-tts service's container; nil leaves it out of
	// tts_status.
	GPU GPUStatus
	// Services names the lease services (lease.Manager): the qwen-tts health
	// check is its lease's health_url.
	Services interface {
		Service(name string) (lease.Service, bool)
	}
	// HTTP reaches the voice service. Default a client with the config's
	// request timeout.
	HTTP *http.Client
	// Owner receives the files written when set (workspace.Config.Owner).
	Owner *workspace.Owner
}

type server struct {
	cfg Config
	d   Deps
}

// Register adds tts_render and tts_status.
func Register(reg *tools.Registry, d Deps, cfg Config) {
	s := &server{cfg: cfg.WithDefaults(), d: d}
	if s.d.HTTP == nil {
		s.d.HTTP = &http.Client{Timeout: s.cfg.RequestTimeout}
	}
	tools.Register(reg, "tts_render", "Speak a workspace script into one MP3. Speaker lines may be written as `NAME: words`, `**NAME:** words`, `[NAME]` or `**Name:**` on its own line with the words below; stage directions, headings and blank lines are not spoken. cast maps a speaker to a reference clip in the workspace (e.g. voices/host.wav) or to `design: <description of the voice>`; speakers left out get distinct default voices. Returns the MP3's path, duration and each speaker's voice and word count.",
		s.render, tools.WritesPath("out", ""), tools.InGroup("audio"))
	tools.Register(reg, "tts_status", "Whether the voice service is up, which backend speaks, its voices, and the designed voices cached in the workspace.",
		s.status, tools.ReadOnly(), tools.Idempotent(), tools.InGroup("audio"))
}

// backend is the configured voice backend for one call.
func (s *server) backend(sess *tools.Session) voice.Backend {
	if s.cfg.Backend == BackendQwen {
		q := &voice.Qwen{URL: s.cfg.URL, Service: s.cfg.Service, Model: s.cfg.Model, Language: s.cfg.Language, HTTP: s.d.HTTP}
		if s.d.Services != nil {
			if svc, ok := s.d.Services.Service(s.cfg.Service); ok {
				q.HealthURL = svc.HealthURL
			}
		}
		return q
	}
	return &voice.Espeak{Runner: s.d.Runner, Project: sess.RunID, Timeout: s.cfg.RenderTimeout}
}

// ws is the session's workspace opened as a root (symlinks resolved first).
func ws(call tools.Call) (*os.Root, error) {
	w, err := call.Workspace()
	if err != nil {
		return nil, err
	}
	dir, err := filepath.EvalSymlinks(w)
	if err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	return r, nil
}

// clean checks an agent's path like the workspace tools (no .., no absolute
// path, nothing the engine keeps) and refuses dot directories and dot files,
// which the media tools never read or write.
func clean(what, p string) (string, error) {
	rel, err := workspace.Clean(p)
	if err != nil {
		return "", fmt.Errorf("%s: %w", what, err)
	}
	if rel == "." {
		return "", fmt.Errorf("%s: %q is the workspace itself, not a file", what, p)
	}
	for _, part := range strings.Split(rel, "/") {
		if strings.HasPrefix(part, ".") {
			return "", fmt.Errorf("%s: %q is under a hidden name (%s), which the audio tools do not touch", what, p, part)
		}
	}
	return rel, nil
}

// readFile reads rel through the root (a symlink out of the workspace is
// refused by the root), refusing what is not a regular file or is over max.
// O_NONBLOCK: a FIFO an agent left at rel opens at once (and the fstat below
// refuses it) instead of blocking the call, and its OS thread, for good.
func readFile(root *os.Root, what, rel string, max int64) ([]byte, error) {
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, rel, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, rel, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s %s is not a regular file", what, rel)
	}
	if fi.Size() > max {
		return nil, fmt.Errorf("%s %s is %d bytes, over the %d byte limit", what, rel, fi.Size(), max)
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", what, rel, err)
	}
	return b, nil
}

// writeFile writes data at rel through the root, atomically (a temporary file
// renamed over it), creating its directories; an existing symlink or
// directory there is refused rather than followed.
func (s *server) writeFile(root *os.Root, rel string, data []byte) error {
	if fi, err := root.Lstat(rel); err == nil && !fi.Mode().IsRegular() {
		return fmt.Errorf("%s exists and is not a regular file (%s)", rel, fi.Mode().Type())
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: %w", rel, err)
	}
	if dir := path.Dir(rel); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", dir, err)
		}
		s.chown(root, dir)
	}
	sum := sha256.Sum256(data)
	tmp := path.Join(path.Dir(rel), ".tts-"+hex.EncodeToString(sum[:6])+".tmp")
	if err := root.WriteFile(tmp, data, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", rel, err)
	}
	if err := root.Rename(tmp, rel); err != nil {
		_ = root.Remove(tmp)
		return fmt.Errorf("write %s: %w", rel, err)
	}
	s.chown(root, rel)
	return nil
}

// chown hands what the tool wrote to the sandbox's user (best effort: only a
// root worker can, and only then is it needed).
func (s *server) chown(root *os.Root, rel string) {
	if o := s.d.Owner; o != nil && os.Geteuid() == 0 {
		_ = root.Lchown(rel, o.UID, o.GID)
	}
}

// progress reports a tool's progress as a run event (the Studio and the CLI
// show it), when the call has a coordinator.
func progress(ctx context.Context, call tools.Call, step, percent int, msg string) {
	sess := call.Session
	if sess == nil || sess.Coordinator == nil {
		return
	}
	_ = sess.Coordinator.Emit(ctx, fmt.Sprintf("progress:%s:%s:tts:%d", sess.SessionID, call.ID, step), events.Progress,
		events.ProgressData{Percent: percent, Message: msg, Tool: "tts_render"})
}

// DesignDir is where designed voices' clips are cached in the workspace.
const DesignDir = "audio/voices"

// designPath is the cached clip of a description for a backend.
func designPath(backend, description string) string {
	sum := sha256.Sum256([]byte(backend + "\x00" + strings.TrimSpace(description)))
	return path.Join(DesignDir, "design-"+hex.EncodeToString(sum[:6])+".wav")
}

// StatusAnswer is tts_status's result.
type StatusAnswer struct {
	Backend string `json:"backend"`
	Up      bool   `json:"up"`
	Detail  string `json:"detail,omitempty"`
	// Service and Container are the qwen-tts lease service's (qwen-tts only).
	Service   string      `json:"service,omitempty"`
	Container *gpu.Status `json:"container,omitempty"`
	Held      bool        `json:"lease_held,omitempty"`
	// Voices are the backend's named voices; Designed the designed voices'
	// clips cached in this workspace (usable as reference clips).
	Voices   []string `json:"voices,omitempty"`
	Designed []string `json:"designed,omitempty"`
}

// StatusArgs are tts_status's (none).
type StatusArgs struct{}

func (s *server) status(ctx context.Context, call tools.Call, _ StatusArgs) (tools.Result, error) {
	sess := call.Session
	if s.cfg.Backend == BackendEspeak && s.d.Runner == nil {
		return tools.Result{}, media.ErrNoRunner
	}
	b := s.backend(sess)
	st, err := b.Status(ctx)
	if err != nil {
		return tools.Result{}, err
	}
	ans := StatusAnswer{Backend: st.Backend, Up: st.Up, Detail: st.Detail, Voices: st.Voices}
	if s.cfg.Backend == BackendQwen {
		ans.Service = s.cfg.Service
		_, ans.Held = lease.GrantFrom(ctx, s.cfg.Service)
		if s.d.GPU != nil {
			if gs, err := s.d.GPU.Status(ctx, s.cfg.Service); err == nil {
				ans.Container = &gs
			} else {
				ans.Detail += "; container: " + err.Error()
			}
		}
	}
	if root, err := ws(call); err == nil {
		defer root.Close()
		if ents, err := fs.ReadDir(root.FS(), DesignDir); err == nil {
			for _, e := range ents {
				if strings.HasPrefix(e.Name(), "design-") && strings.HasSuffix(e.Name(), ".wav") {
					ans.Designed = append(ans.Designed, path.Join(DesignDir, e.Name()))
				}
			}
			sort.Strings(ans.Designed)
		}
	}
	return tools.JSON(ans)
}

// parsed is a read script.
type parsed struct {
	rel string
	sc  script.Script
}

func (s *server) readScript(root *os.Root, p string) (parsed, error) {
	rel, err := clean("script", p)
	if err != nil {
		return parsed{}, err
	}
	b, err := readFile(root, "script", rel, s.cfg.MaxScriptBytes)
	if err != nil {
		return parsed{}, err
	}
	sc := script.Parse(string(b))
	if len(sc.Lines) == 0 {
		return parsed{}, fmt.Errorf("script %s has no speaker lines (write them as `NAME: words`, `**NAME:** words`, or a `[NAME]` / `**Name:**` line with the words below it)", rel)
	}
	if len(sc.Lines) > s.cfg.MaxLines {
		return parsed{}, fmt.Errorf("script %s has %d spoken lines, over the %d line limit (audio.max_lines)", rel, len(sc.Lines), s.cfg.MaxLines)
	}
	return parsed{rel: rel, sc: sc}, nil
}
