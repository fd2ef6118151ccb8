package media

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// VideoInfo is what ffprobe reads of a video file's first video stream,
// after decoding every frame of it.
type VideoInfo struct {
	Format   string        `json:"format"`
	Codec    string        `json:"codec"`
	Width    int           `json:"width"`
	Height   int           `json:"height"`
	Frames   int           `json:"frames"`
	FPS      float64       `json:"fps"`
	Duration time.Duration `json:"duration"`
}

// videoProbeScript decodes /tmp/in/$1's first video stream (-count_frames
// reads every frame, so a file whose frames do not decode fails here, not in
// the agent's player) and prints ffprobe's JSON into /tmp/out/probe.json. A
// decoder complaint goes to the log even when ffprobe exits 0; the script
// fails then too.
const videoProbeScript = `ffprobe -v error -count_frames -select_streams v:0 -show_entries format=format_name,duration:stream=codec_type,codec_name,width,height,avg_frame_rate,nb_read_frames -of json "$1" >/tmp/out/probe.json 2>/tmp/probe.err
rc=$?; cat /tmp/probe.err; [ "$rc" -eq 0 ] && [ ! -s /tmp/probe.err ]`

// ErrNoVideo is a file ffprobe reads without finding a decodable video stream.
var ErrNoVideo = errors.New("no decodable video stream")

// ProbeVideo decodes data (named name in the container, its extension
// helping ffprobe) with ffprobe in the media image of r and reports its first
// video stream. A file that does not decode is an error wrapping the log's
// last lines; one without a video stream wraps ErrNoVideo.
func ProbeVideo(ctx context.Context, r Runner, project, name string, data []byte) (VideoInfo, error) {
	res, err := Run(ctx, r, Job{Script: videoProbeScript, Args: []string{name}, Files: map[string][]byte{name: data}, Project: project,
		Timeout: 2 * time.Minute, TmpfsBytes: int64(len(data)) + 64<<20})
	if err != nil {
		return VideoInfo{}, err
	}
	if err := res.Failed("ffprobe"); err != nil {
		return VideoInfo{}, fmt.Errorf("%w: %w", ErrNoVideo, err)
	}
	return parseVideoProbe(res.Files["probe.json"])
}

func parseVideoProbe(raw []byte) (VideoInfo, error) {
	var p struct {
		Format  probeFormat `json:"format"`
		Streams []struct {
			Type      string `json:"codec_type"`
			Codec     string `json:"codec_name"`
			Width     int    `json:"width"`
			Height    int    `json:"height"`
			FrameRate string `json:"avg_frame_rate"`
			Frames    string `json:"nb_read_frames"`
		} `json:"streams"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return VideoInfo{}, fmt.Errorf("ffprobe output: %w", err)
	}
	if len(p.Streams) == 0 || p.Streams[0].Type != "video" {
		return VideoInfo{}, ErrNoVideo
	}
	st := p.Streams[0]
	d, err := p.Format.duration()
	if err != nil {
		return VideoInfo{}, err
	}
	frames, _ := strconv.Atoi(st.Frames)
	if frames <= 0 || st.Width <= 0 || st.Height <= 0 {
		return VideoInfo{}, fmt.Errorf("%w: %d frames of %dx%d decoded", ErrNoVideo, frames, st.Width, st.Height)
	}
	return VideoInfo{Format: p.Format.Name, Codec: st.Codec, Width: st.Width, Height: st.Height, Frames: frames,
		FPS: rate(st.FrameRate), Duration: d}, nil
}

// rate reads ffprobe's "num/den" frame rate (0 when unknown).
func rate(s string) float64 {
	num, den, ok := strings.Cut(s, "/")
	n, err1 := strconv.ParseFloat(num, 64)
	if !ok {
		if err1 != nil {
			return 0
		}
		return n
	}
	d, err2 := strconv.ParseFloat(den, 64)
	if err1 != nil || err2 != nil || d == 0 {
		return 0
	}
	return n / d
}
