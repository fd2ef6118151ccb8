package audio

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path"
	"sort"
	"strings"

	"github.com/aetherium-engine/aetherium/lease"
	"github.com/aetherium-engine/aetherium/media"
	"github.com/aetherium-engine/aetherium/media/script"
	"github.com/aetherium-engine/aetherium/media/voice"
	"github.com/aetherium-engine/aetherium/tools"
)

// RenderArgs are tts_render's arguments.
type RenderArgs struct {
	Script string            `json:"script" jsonschema:"description=Workspace path of the script (e.g. script.md)"`
	Cast   map[string]string `json:"cast,omitempty" jsonschema:"description=Speaker → voice: a reference clip in the workspace (voices/host.wav; a transcript beside it as voices/host.txt helps cloning) or 'design: <description of the voice>' (turned into a clip once and cached under audio/voices/) or 'voice: <preset name>'"`
	Out    string            `json:"out,omitempty" jsonschema:"description=Workspace path of the MP3 (default audio/<script name>.mp3); an existing file there is replaced"`
}

// SpeakerAnswer is one speaker's part of the render.
type SpeakerAnswer struct {
	Speaker string `json:"speaker"`
	// Voice is how the speaker was voiced (the backend's label); Cast is what
	// the cast said ("" when the speaker was not cast).
	Voice string `json:"voice"`
	Cast  string `json:"cast,omitempty"`
	Clip  string `json:"clip,omitempty"`
	Lines int    `json:"lines"`
	Words int    `json:"words"`
}

// RenderAnswer is tts_render's result.
type RenderAnswer struct {
	Path            string          `json:"path"`
	Bytes           int             `json:"bytes"`
	DurationSeconds float64         `json:"duration_seconds"`
	Backend         string          `json:"backend"`
	Lines           int             `json:"lines"`
	Words           int             `json:"words"`
	Speakers        []SpeakerAnswer `json:"speakers"`
	Notes           []string        `json:"notes,omitempty"`
}

func (s *server) render(ctx context.Context, call tools.Call, a RenderArgs) (tools.Result, error) {
	sess := call.Session
	if s.d.Runner == nil {
		return tools.Result{}, media.ErrNoRunner
	}
	if s.cfg.Backend == BackendQwen {
		if _, ok := lease.GrantFrom(ctx, s.cfg.Service); !ok {
			return tools.Result{}, fmt.Errorf("tts_render speaks on the %s GPU service, which this run does not hold: its template must declare gpu_services: [%s]", s.cfg.Service, s.cfg.Service)
		}
	}
	root, err := ws(call)
	if err != nil {
		return tools.Result{}, err
	}
	defer root.Close()
	sc, err := s.readScript(root, a.Script)
	if err != nil {
		return tools.Result{}, err
	}
	out := a.Out
	if out == "" {
		stem := strings.TrimSuffix(path.Base(sc.rel), path.Ext(sc.rel))
		out = path.Join("audio", stem+".mp3")
	}
	outRel, err := clean("out", out)
	if err != nil {
		return tools.Result{}, err
	}
	if !strings.EqualFold(path.Ext(outRel), ".mp3") {
		return tools.Result{}, fmt.Errorf("out: %q must end in .mp3", out)
	}
	if outRel == sc.rel {
		return tools.Result{}, fmt.Errorf("out: %q is the script itself", out)
	}

	b := s.backend(sess)
	speakers := sc.sc.Speakers()
	cast, notes, err := s.castVoices(ctx, root, b, speakers, a.Cast)
	if err != nil {
		return tools.Result{}, err
	}
	progress(ctx, call, 0, 5, fmt.Sprintf("speaking %d lines of %s with %s", len(sc.sc.Lines), sc.rel, b.Name()))
	lines := make([]voice.Utterance, len(sc.sc.Lines))
	for i, l := range sc.sc.Lines {
		lines[i] = voice.Utterance{Voice: cast[script.Key(l.Speaker)], Text: l.Text}
	}
	total := len(lines)
	spoken, err := b.Speak(ctx, lines, func(done int) {
		progress(ctx, call, done, 5+int(math.Round(80*float64(done)/float64(total))), fmt.Sprintf("spoke %d of %d lines", done, total))
	})
	if err != nil {
		return tools.Result{}, err
	}
	clips := make([][]byte, len(spoken))
	for i, sp := range spoken {
		clips[i] = sp.WAV
	}
	mp3, info, err := media.MixMP3(ctx, s.d.Runner, clips, media.MixConfig{Gap: s.cfg.Gap, Bitrate: s.cfg.Bitrate, Project: sess.RunID, Timeout: s.cfg.RenderTimeout})
	if err != nil {
		return tools.Result{}, err
	}
	if err := s.writeFile(root, outRel, mp3); err != nil {
		return tools.Result{}, err
	}
	progress(ctx, call, total+1, 100, fmt.Sprintf("wrote %s (%.1f s)", outRel, info.Duration.Seconds()))

	ans := RenderAnswer{Path: outRel, Bytes: len(mp3), DurationSeconds: math.Round(info.Duration.Seconds()*100) / 100,
		Backend: b.Name(), Lines: len(sc.sc.Lines), Words: sc.sc.Words, Notes: notes}
	by := map[string]*SpeakerAnswer{}
	for _, sp := range speakers {
		k := script.Key(sp)
		v := cast[k]
		by[k] = &SpeakerAnswer{Speaker: sp, Cast: castEntry(a.Cast, sp), Clip: v.ClipPath}
	}
	for i, l := range sc.sc.Lines {
		x := by[script.Key(l.Speaker)]
		x.Lines++
		x.Words += l.Words
		if x.Voice == "" {
			x.Voice = spoken[i].Voice
		}
	}
	for _, sp := range speakers {
		ans.Speakers = append(ans.Speakers, *by[script.Key(sp)])
	}
	return tools.JSON(ans)
}

// castEntry is the cast's value for speaker (matched like the script's
// speakers: case does not matter).
func castEntry(cast map[string]string, speaker string) string {
	for k, v := range cast {
		if script.Key(k) == script.Key(speaker) {
			return v
		}
	}
	return ""
}

// castVoices resolves every speaker's voice: reference clips read from the
// workspace, designs turned into clips once (cached under DesignDir), presets
// named, and the uncast given distinct defaults.
func (s *server) castVoices(ctx context.Context, root *os.Root, b voice.Backend, speakers []string, cast map[string]string) (map[string]voice.Voice, []string, error) {
	known := map[string]bool{}
	for _, sp := range speakers {
		known[script.Key(sp)] = true
	}
	var notes []string
	names := make([]string, 0, len(cast))
	for k := range cast {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		if !known[script.Key(k)] {
			notes = append(notes, fmt.Sprintf("cast entry %q speaks no line of the script", k))
		}
	}
	out := map[string]voice.Voice{}
	for i, sp := range speakers {
		v := voice.Voice{Speaker: sp, Index: i}
		entry := strings.TrimSpace(castEntry(cast, sp))
		switch {
		case entry == "":
			if b.Name() == BackendQwen {
				v.Preset = s.cfg.Voices[i%len(s.cfg.Voices)]
			}
		case hasPrefixFold(entry, "design:"):
			desc := strings.TrimSpace(entry[len("design:"):])
			if desc == "" || len(desc) > 1000 {
				return nil, nil, fmt.Errorf("cast %s: a design needs a description of the voice (at most 1000 characters)", sp)
			}
			clipRel := designPath(b.Name(), desc)
			clip, err := readFile(root, "designed voice", clipRel, s.cfg.MaxClipBytes)
			if errors.Is(err, fs.ErrNotExist) {
				if clip, err = b.Design(ctx, desc, s.cfg.DesignSample); err != nil {
					return nil, nil, fmt.Errorf("cast %s: %w", sp, err)
				}
				if err := s.writeFile(root, clipRel, clip); err != nil {
					return nil, nil, fmt.Errorf("cast %s: cache the designed voice: %w", sp, err)
				}
				notes = append(notes, fmt.Sprintf("designed a voice for %s, cached as %s", sp, clipRel))
			} else if err != nil {
				return nil, nil, fmt.Errorf("cast %s: %w", sp, err)
			}
			v.Design, v.Clip, v.ClipPath, v.ClipText = desc, clip, clipRel, s.cfg.DesignSample
		case hasPrefixFold(entry, "voice:"):
			v.Preset = strings.TrimSpace(entry[len("voice:"):])
			if v.Preset == "" || strings.ContainsAny(v.Preset, " \t\n/") || len(v.Preset) > 64 {
				return nil, nil, fmt.Errorf("cast %s: %q is not a voice name", sp, entry)
			}
		default:
			rel, err := clean("cast "+sp, entry)
			if err != nil {
				return nil, nil, err
			}
			switch strings.ToLower(path.Ext(rel)) {
			case ".wav", ".mp3", ".flac", ".ogg":
			default:
				return nil, nil, fmt.Errorf("cast %s: %q is neither a reference clip (.wav, .mp3, .flac, .ogg) nor 'design: <description>'", sp, entry)
			}
			clip, err := readFile(root, "reference clip", rel, s.cfg.MaxClipBytes)
			if err != nil {
				return nil, nil, fmt.Errorf("cast %s: %w", sp, err)
			}
			v.Clip, v.ClipPath = clip, rel
			// A transcript beside the clip (voices/host.txt) helps cloning.
			if txt, err := readFile(root, "transcript", strings.TrimSuffix(rel, path.Ext(rel))+".txt", 4096); err == nil {
				v.ClipText = strings.TrimSpace(string(txt))
			}
			if b.Name() == BackendEspeak {
				notes = append(notes, fmt.Sprintf("espeak-ng cannot clone %s's reference clip %s: it speaks in a voice of its own", sp, rel))
			}
		}
		out[script.Key(sp)] = v
	}
	return out, notes, nil
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}
