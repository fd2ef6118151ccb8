package voice

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/aetherium-engine/aetherium/media"
)

// EspeakName is the espeak-ng backend's config name.
const EspeakName = "espeak"

// Espeak speaks with espeak-ng in the media image (one one-shot container per
// batch of lines, never on the worker's host). It cannot clone a reference
// clip: a speaker with a clip gets a voice of its own from espeak-ng's
// variants, and a designed voice one picked from its description's words
// (female, deep, fast …), so every speaker still sounds distinct.
type Espeak struct {
	Runner media.Runner
	// Project labels the containers (the run they serve).
	Project string
	Timeout time.Duration
}

// espeakVariants are distinct voices handed to speakers in script order.
var espeakVariants = []string{"en-us+m3", "en-gb+f3", "en-us+m7", "en-gb+f4", "en-us+m1", "en-gb+f2", "en-us+m5", "en-gb+f1"}

var presetRE = regexp.MustCompile(`^[a-z]{2,3}(-[a-z0-9]{2,8})*(\+[a-z0-9]{1,12})?$`)

// espeakVoice is how espeak-ng speaks a voice: its -v, -p (pitch 0-99) and -s
// (words per minute).
type espeakVoice struct {
	name         string
	pitch, speed int
}

func (v espeakVoice) String() string {
	return fmt.Sprintf("espeak-ng %s pitch %d speed %d", v.name, v.pitch, v.speed)
}

func pickEspeak(v Voice) espeakVoice {
	out := espeakVoice{name: espeakVariants[v.Index%len(espeakVariants)], pitch: 50, speed: 165}
	if v.Preset != "" && presetRE.MatchString(v.Preset) {
		out.name = v.Preset
		return out
	}
	if v.Design == "" {
		return out
	}
	d := " " + strings.ToLower(v.Design) + " "
	has := func(words ...string) bool {
		for _, w := range words {
			if strings.Contains(d, " "+w) {
				return true
			}
		}
		return false
	}
	lang := "en-us"
	if has("british", "english accent", "london", "scottish") {
		lang = "en-gb"
	}
	switch {
	case has("female", "woman", "girl", "she ", "her "):
		out.name = lang + "+f" + strconv.Itoa(2+v.Index%3)
	case has("male", "man", "boy", "he ", "his "):
		out.name = lang + "+m" + strconv.Itoa(3+v.Index%4)
	}
	switch {
	case has("deep", "low", "gravel", "bass"):
		out.pitch = 25
	case has("high", "bright", "squeak", "child", "young"):
		out.pitch = 75
	}
	switch {
	case has("fast", "quick", "energetic", "excited"):
		out.speed = 190
	case has("slow", "calm", "measured", "soothing"):
		out.speed = 140
	}
	return out
}

// distinctVoices picks each speaker's voice, moving a speaker the cast left
// to the defaults off a variant another speaker already has (a preset or a
// design may take one), so no two speakers sound alike.
func distinctVoices(lines []Utterance) map[string]espeakVoice {
	out := map[string]espeakVoice{}
	taken := map[espeakVoice]bool{}
	var defaults []Voice
	for _, l := range lines {
		if _, ok := out[l.Voice.Speaker]; ok {
			continue
		}
		v := pickEspeak(l.Voice)
		out[l.Voice.Speaker] = v
		if l.Voice.Preset == "" && l.Voice.Design == "" {
			defaults = append(defaults, l.Voice)
			continue
		}
		taken[v] = true
	}
	for _, d := range defaults {
		v := out[d.Speaker]
		for i := 1; taken[v] && i < len(espeakVariants); i++ {
			v.name = espeakVariants[(d.Index+i)%len(espeakVariants)]
		}
		taken[v] = true
		out[d.Speaker] = v
	}
	return out
}

// espeakScript speaks /tmp/in/NNNN.txt into /tmp/out/NNNN.wav; its arguments
// are voice, pitch and speed per line (values of this package's table, never
// an agent's text: the text is in the files).
const espeakScript = `i=0
while [ $# -ge 3 ]; do
  f=$(printf '%04d' "$i")
  espeak-ng -v "$1" -p "$2" -s "$3" -f "$f.txt" -w "/tmp/out/$f.wav" || exit 1
  shift 3; i=$((i + 1))
done`

// Name implements Backend.
func (e *Espeak) Name() string { return EspeakName }

// Speak implements Backend: every line in one container.
func (e *Espeak) Speak(ctx context.Context, lines []Utterance, progress func(int)) ([]Spoken, error) {
	files := make(map[string][]byte, len(lines))
	var args []string
	labels := make([]string, len(lines))
	voices := distinctVoices(lines)
	for i, l := range lines {
		v := voices[l.Voice.Speaker]
		labels[i] = v.String()
		files[fmt.Sprintf("%04d.txt", i)] = []byte(l.Text + "\n")
		args = append(args, v.name, strconv.Itoa(v.pitch), strconv.Itoa(v.speed))
	}
	// espeak-ng writes 22.05 kHz 16-bit mono, about 43 KiB a second: a line of
	// a script is rarely over 15 s, so 1 MiB a line (base64 included) bounds
	// the output, the tmpfs holding it and the container's memory.
	room := int64(len(lines))<<20 + 32<<20
	res, err := media.Run(ctx, e.Runner, media.Job{Script: espeakScript, Args: args, Files: files, Project: e.Project, Timeout: e.Timeout,
		MaxOutBytes: int(room), TmpfsBytes: room, MemoryBytes: room + 256<<20})
	if err != nil {
		return nil, fmt.Errorf("espeak-ng: %w", err)
	}
	if err := res.Failed("espeak-ng"); err != nil {
		return nil, err
	}
	out := make([]Spoken, len(lines))
	for i := range lines {
		wav := res.Files[fmt.Sprintf("%04d.wav", i)]
		if _, err := ReadWAV(wav); err != nil {
			return nil, fmt.Errorf("espeak-ng line %d: %w", i+1, err)
		}
		out[i] = Spoken{WAV: wav, Voice: labels[i]}
	}
	if progress != nil {
		progress(len(lines))
	}
	return out, nil
}

// Design implements Backend: the sample in the voice the description picks.
func (e *Espeak) Design(ctx context.Context, description, sample string) ([]byte, error) {
	sp, err := e.Speak(ctx, []Utterance{{Voice: Voice{Design: description}, Text: sample}}, nil)
	if err != nil {
		return nil, err
	}
	return sp[0].WAV, nil
}

// Status implements Backend: espeak-ng answers in the media image.
func (e *Espeak) Status(ctx context.Context) (Status, error) {
	st := Status{Backend: EspeakName}
	res, err := media.Run(ctx, e.Runner, media.Job{Script: `espeak-ng --version && espeak-ng --voices=en`, Project: e.Project, Timeout: time.Minute})
	if err == nil {
		err = res.Failed("espeak-ng --voices")
	}
	if err != nil {
		st.Detail = err.Error()
		return st, nil
	}
	st.Up = true
	for i, l := range strings.Split(res.Log, "\n") {
		if f := strings.Fields(l); i == 0 {
			st.Detail = strings.TrimSpace(l)
		} else if len(f) >= 2 && f[0] != "Pty" {
			st.Voices = append(st.Voices, f[1])
		}
	}
	return st, nil
}
