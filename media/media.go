// Package media runs the media image's tools (ffmpeg, ffprobe, espeak-ng, sox:
// sandbox/images/media.packages) in the executor's one-shot containers — no
// network, the sandbox's lockdown, never on the worker's host — with files in
// and out through the container's standard streams, so no host path an agent
// can touch is ever bind-mounted.
//
// In: the job's files travel as a tar archive on stdin and are unpacked under
// /tmp/in. Out: the files the script leaves under /tmp/out come back base64
// encoded on stdout, each behind a line with a nonce the script cannot predict
// (the one-shot's stdout is text: binary would not survive it).
package media

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aetherium-engine/aetherium/sandbox"
)

// Runner runs one command in a fresh container of an image of the sandbox
// family and names the image of a purpose (sandbox.Docker implements it).
type Runner interface {
	RunOnce(ctx context.Context, job sandbox.OneShot) (sandbox.OneShotResult, error)
	ImageFor(purpose string) string
}

// ErrNoRunner is a media job without a container runner: the media tools never
// run ffmpeg or espeak-ng on the host.
var ErrNoRunner = errors.New("no container sandbox is configured (media tools run ffmpeg and espeak-ng only in the media image, never on the host)")

// Job is one script in the media image.
type Job struct {
	// Script is a /bin/sh script run in /tmp/in with Args as "$@". It writes its
	// results under /tmp/out. Only the caller's own text belongs here: every
	// agent-supplied value goes in Files or Args.
	Script string
	Args   []string
	// Files are put under /tmp/in (names are slash-separated, relative).
	Files map[string][]byte
	// Project is the run the container serves (the orphan sweep's label).
	Project string
	// Timeout bounds the container; MemoryBytes, CPUs and TmpfsBytes its limits
	// (zero: the sandbox's). The tmpfs holds the input, the work and the output.
	Timeout     time.Duration
	MemoryBytes int64
	CPUs        float64
	TmpfsBytes  int64
	// MaxOutBytes caps the base64 output read back. Default 64 MiB.
	MaxOutBytes int
}

// Result is a finished job.
type Result struct {
	// Files are what the script left under /tmp/out, by name.
	Files map[string][]byte
	// Log is the script's stdout and stderr (tail).
	Log      string
	ExitCode int
	Duration time.Duration
}

// wrapper unpacks stdin into /tmp/in, runs the script there, and prints the
// exit status, the log's tail and every file of /tmp/out, base64, each behind a
// nonce line. $1 is the nonce, $2 the script, the rest its arguments.
const wrapper = `n=$1; s=$2; shift 2
mkdir -p /tmp/in /tmp/out && cd /tmp/in && tar -x -f - || { echo "$n rc 125"; exit 0; }
sh -c "$s" script "$@" >/tmp/aeth.log 2>&1 </dev/null
rc=$?
printf '%s rc %d\n' "$n" "$rc"
printf '%s log\n' "$n"; tail -c 8192 /tmp/aeth.log | base64 -w0; printf '\n'
for f in /tmp/out/*; do [ -f "$f" ] || continue; printf '%s file %s\n' "$n" "${f##*/}"; base64 -w0 "$f"; printf '\n'; done
printf '%s end\n' "$n"
exit 0`

// Image is the media image of r (sandbox.docker.image's media purpose).
func Image(r Runner) string {
	if img := r.ImageFor(sandbox.PurposeMedia); img != "" {
		return img
	}
	return sandbox.DefaultMediaImage
}

// Run runs job in the media image of r.
func Run(ctx context.Context, r Runner, job Job) (Result, error) {
	if r == nil {
		return Result{}, ErrNoRunner
	}
	var in bytes.Buffer
	tw := tar.NewWriter(&in)
	names := make([]string, 0, len(job.Files))
	for name := range job.Files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if c := path.Clean(name); c != name || path.IsAbs(name) || strings.HasPrefix(name, "..") {
			return Result{}, fmt.Errorf("media: input name %q must be a clean relative path", name)
		}
		body := job.Files[name]
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			return Result{}, fmt.Errorf("media: pack %s: %w", name, err)
		}
		if _, err := tw.Write(body); err != nil {
			return Result{}, fmt.Errorf("media: pack %s: %w", name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return Result{}, fmt.Errorf("media: pack input: %w", err)
	}
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	nonce := "@@aetherium-media-" + hex.EncodeToString(b)
	maxOut := job.MaxOutBytes
	if maxOut <= 0 {
		maxOut = 64 << 20
	}
	res, err := r.RunOnce(ctx, sandbox.OneShot{
		Image:   Image(r),
		Cmd:     append([]string{"/bin/sh", "-c", wrapper, "media", nonce, job.Script}, job.Args...),
		Project: job.Project, Stdin: &in,
		Timeout: job.Timeout, MemoryBytes: job.MemoryBytes, CPUs: job.CPUs, TmpfsBytes: job.TmpfsBytes,
		PidsLimit: 64, MaxStdoutBytes: maxOut,
	})
	out := Result{Duration: res.Duration, ExitCode: -1, Files: map[string][]byte{}}
	switch {
	case errors.Is(err, sandbox.ErrNoImage):
		return out, fmt.Errorf("the media image is missing: %w", err)
	case err != nil:
		return out, fmt.Errorf("media container: %w", err)
	}
	if res.StdoutTruncated {
		return out, fmt.Errorf("media: the output is over %d bytes", maxOut)
	}
	if err := parseOutput(res.Stdout, nonce, &out); err != nil {
		return out, fmt.Errorf("media: %w (stderr: %s)", err, strings.TrimSpace(res.Stderr))
	}
	return out, nil
}

func parseOutput(s, nonce string, out *Result) error {
	lines := strings.Split(s, "\n")
	ended := false
	for i := 0; i < len(lines); i++ {
		rest, ok := strings.CutPrefix(lines[i], nonce+" ")
		if !ok {
			continue
		}
		tag, arg, _ := strings.Cut(rest, " ")
		next := ""
		if i+1 < len(lines) {
			next = lines[i+1]
		}
		switch tag {
		case "rc":
			out.ExitCode, _ = strconv.Atoi(arg)
		case "log":
			b, _ := base64.StdEncoding.DecodeString(next)
			out.Log = strings.ToValidUTF8(string(b), "\uFFFD")
			i++
		case "file":
			b, err := base64.StdEncoding.DecodeString(next)
			if err != nil {
				return fmt.Errorf("output %s: %w", arg, err)
			}
			out.Files[arg] = b
			i++
		case "end":
			ended = true
		}
	}
	if out.ExitCode == 125 {
		return errors.New("the input could not be unpacked")
	}
	if !ended {
		return errors.New("the media script's output ended early")
	}
	return nil
}

// Failed turns a job that exited non-zero into an error naming what and the
// log's last lines.
func (r Result) Failed(what string) error {
	if r.ExitCode == 0 {
		return nil
	}
	return fmt.Errorf("%s failed (exit %d): %s", what, r.ExitCode, lastLines(r.Log, 4))
}

func lastLines(s string, n int) string {
	ls := strings.Split(strings.TrimSpace(s), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, " | ")
}

// Info is what ffprobe says of a media file.
type Info struct {
	Format   string        `json:"format"`
	Codec    string        `json:"codec"`
	Duration time.Duration `json:"duration"`
	// SampleRate and Channels are the first audio stream's.
	SampleRate int `json:"sample_rate"`
	Channels   int `json:"channels"`
}

// ProbeScript prints ffprobe's JSON of /tmp/in/$1 into /tmp/out/probe.json.
const probeScript = `ffprobe -v error -show_entries format=format_name,duration:stream=codec_type,codec_name,sample_rate,channels -of json "$1" >/tmp/out/probe.json`

// Probe decodes data's container headers with ffprobe in the media image (the
// file is named name there, its extension helping ffprobe).
func Probe(ctx context.Context, r Runner, project, name string, data []byte) (Info, error) {
	res, err := Run(ctx, r, Job{Script: probeScript, Args: []string{name}, Files: map[string][]byte{name: data}, Project: project, Timeout: time.Minute})
	if err != nil {
		return Info{}, err
	}
	if err := res.Failed("ffprobe"); err != nil {
		return Info{}, err
	}
	return parseProbe(res.Files["probe.json"])
}

// probeFormat is ffprobe's format section, which audio and video probes share.
type probeFormat struct {
	Name     string `json:"format_name"`
	Duration string `json:"duration"`
}

// duration is the container's duration.
func (f probeFormat) duration() (time.Duration, error) {
	secs, err := strconv.ParseFloat(f.Duration, 64)
	if err != nil {
		return 0, fmt.Errorf("ffprobe found no duration (%q)", f.Duration)
	}
	return time.Duration(secs * float64(time.Second)), nil
}

func parseProbe(raw []byte) (Info, error) {
	var p struct {
		Format  probeFormat `json:"format"`
		Streams []struct {
			Type       string `json:"codec_type"`
			Codec      string `json:"codec_name"`
			SampleRate string `json:"sample_rate"`
			Channels   int    `json:"channels"`
		} `json:"streams"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return Info{}, fmt.Errorf("ffprobe output: %w", err)
	}
	d, err := p.Format.duration()
	if err != nil {
		return Info{}, err
	}
	info := Info{Format: p.Format.Name, Duration: d}
	for _, s := range p.Streams {
		if s.Type == "audio" {
			info.Codec, info.Channels = s.Codec, s.Channels
			info.SampleRate, _ = strconv.Atoi(s.SampleRate)
			break
		}
	}
	return info, nil
}

// mixScript joins /tmp/in/0000.wav … (in order) into one MP3 with $1 seconds
// of silence between lines, every clip first brought to 24 kHz mono (clips of
// different voices or backends differ), then measures it.
// $1 the gap in seconds, $2 the bitrate, $3 the number of clips.
const mixScript = `gap=$1; rate=$2; n=$3
set --; f=""; i=0
while [ "$i" -lt "$n" ]; do
  set -- "$@" -i "$(printf '%04d' "$i").wav"
  pad=""; [ "$i" -lt $((n - 1)) ] && pad=",apad=pad_dur=$gap"
  f="$f[$i:a]aresample=24000,aformat=sample_fmts=s16:channel_layouts=mono$pad[a$i];"
  i=$((i + 1))
done
i=0; while [ "$i" -lt "$n" ]; do f="$f[a$i]"; i=$((i + 1)); done
f="${f}concat=n=$n:v=0:a=1[out]"
ffmpeg -nostdin -hide_banner -loglevel error "$@" -filter_complex "$f" -map '[out]' -c:a libmp3lame -b:a "$rate" -ar 24000 -ac 1 /tmp/out/mix.mp3 &&
ffprobe -v error -show_entries format=format_name,duration:stream=codec_type,codec_name,sample_rate,channels -of json /tmp/out/mix.mp3 >/tmp/out/probe.json`

// MixConfig shapes a mix.
type MixConfig struct {
	// Gap is the silence between two lines.
	Gap time.Duration
	// Bitrate is the MP3's (ffmpeg's -b:a, e.g. "128k").
	Bitrate string
	Project string
	Timeout time.Duration
}

var bitrateRE = regexp.MustCompile(`^[1-9][0-9]{1,2}k$`)

// MixMP3 joins WAV clips into one MP3 in the media image and returns it with
// what ffprobe reads of it (the proof it decodes).
func MixMP3(ctx context.Context, r Runner, clips [][]byte, cfg MixConfig) ([]byte, Info, error) {
	if len(clips) == 0 {
		return nil, Info{}, errors.New("media: nothing to mix")
	}
	if !bitrateRE.MatchString(cfg.Bitrate) {
		return nil, Info{}, fmt.Errorf("media: bitrate %q: want e.g. 128k", cfg.Bitrate)
	}
	files := make(map[string][]byte, len(clips))
	var total int64
	for i, c := range clips {
		files[fmt.Sprintf("%04d.wav", i)] = c
		total += int64(len(c))
	}
	res, err := Run(ctx, r, Job{
		Script: mixScript, Args: []string{strconv.FormatFloat(cfg.Gap.Seconds(), 'f', 3, 64), cfg.Bitrate, strconv.Itoa(len(clips))},
		Files: files, Project: cfg.Project, Timeout: cfg.Timeout,
		// The clips, ffmpeg's work and the MP3 live on the tmpfs.
		TmpfsBytes: 2*total + 64<<20, MemoryBytes: 2*total + 512<<20,
		// An MP3 is smaller than its 16-bit clips (128k is a third of 24 kHz
		// PCM); base64 adds a third.
		MaxOutBytes: int(total/2 + 16<<20),
	})
	if err != nil {
		return nil, Info{}, err
	}
	if err := res.Failed("ffmpeg mix"); err != nil {
		return nil, Info{}, err
	}
	info, err := parseProbe(res.Files["probe.json"])
	if err != nil {
		return nil, Info{}, err
	}
	return res.Files["mix.mp3"], info, nil
}
