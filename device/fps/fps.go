// Package fps reads a headset performance recording and judges it against the Steam
// Frame's 72 fps bar. Standard library only, so the simulator writes recordings with
// the same code the driver reads them with.
//
// # Recording format (version 1)
//
// A performance recording is UTF-8 text, one line per presented frame, in
// presentation order:
//
//	# aetherium frame-timing v1          <- optional comment lines start with '#'
//	present_ns,frame_ns                  <- the header line, required, exactly this
//	0,13888889
//	13888889,13888889
//	27777778,13888889
//
// present_ns is the compositor's monotonic clock, in nanoseconds, when the frame
// was presented; any origin, never decreasing. frame_ns is how long that frame
// took: the interval since the previous present (the compositor measures the first
// frame itself). Both are non-negative integers; frame_ns is positive. Blank lines
// and '#' lines are ignored anywhere.
//
// # The 72 fps check
//
// The frame budget at 72 Hz is 1/72 s ≈ 13.889 ms. Frames presented during the first
// WarmUp of the recording (loading, shader compilation) are excluded; the rest are the
// steady state. Steady-state fps is steady frames divided by the sum of their frame
// times. The check passes when
//
//  1. steady-state fps ≥ 72 × (1 − 1%) = 71.28, and
//  2. at most 1% of steady frames take longer than 1.5 budgets (≈ 20.8 ms; such a
//     frame misses at least one vsync and is felt as a judder).
//
// A recording with less than MinSteady of steady state cannot be judged: the result
// is insufficient_data, which is neither a pass nor a fail.
package fps

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/aetherium-engine/aetherium/internal/defaults"
)

// Header is the recording's column line.
const Header = "present_ns,frame_ns"

// Check results.
const (
	Pass         = "pass"
	Fail         = "fail"
	Insufficient = "insufficient_data"
)

// Results lists every check result (bounded metric labels).
var Results = []string{Pass, Fail, Insufficient}

// ErrFormat wraps every problem with a recording.
var ErrFormat = errors.New("bad performance recording")

// MaxFrames bounds a recording: 24 hours at 120 Hz.
const MaxFrames = 24 * 3600 * 120

// Frame is one presented frame.
type Frame struct {
	PresentNS int64
	FrameNS   int64
}

// Parse reads a recording. It refuses anything out of format rather than guessing.
func Parse(r io.Reader) ([]Frame, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<10)
	var frames []Frame
	header := false
	line := 0
	last := int64(math.MinInt64)
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 || b[0] == '#' {
			continue
		}
		if !header {
			if string(b) != Header {
				return nil, fmt.Errorf("%w: line %d: want the header %q, got %q", ErrFormat, line, Header, clip(b))
			}
			header = true
			continue
		}
		a, c, ok := bytes.Cut(b, []byte{','})
		if !ok {
			return nil, fmt.Errorf("%w: line %d: want present_ns,frame_ns, got %q", ErrFormat, line, clip(b))
		}
		p, err1 := strconv.ParseInt(string(a), 10, 64)
		f, err2 := strconv.ParseInt(string(c), 10, 64)
		if err1 != nil || err2 != nil || p < 0 || f <= 0 {
			return nil, fmt.Errorf("%w: line %d: %q is not two integers (present_ns ≥ 0, frame_ns > 0)", ErrFormat, line, clip(b))
		}
		if p < last {
			return nil, fmt.Errorf("%w: line %d: present_ns %d goes back in time (previous %d)", ErrFormat, line, p, last)
		}
		last = p
		if len(frames) >= MaxFrames {
			return nil, fmt.Errorf("%w: more than %d frames", ErrFormat, MaxFrames)
		}
		frames = append(frames, Frame{PresentNS: p, FrameNS: f})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: line %d: %v", ErrFormat, line+1, err)
	}
	if !header {
		return nil, fmt.Errorf("%w: no %q header", ErrFormat, Header)
	}
	return frames, nil
}

func clip(b []byte) string {
	if len(b) > 60 {
		return string(b[:60]) + "…"
	}
	return string(b)
}

// Write renders frames in the recording format.
func Write(w io.Writer, frames []Frame) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.WriteString("# aetherium frame-timing v1\n" + Header + "\n")
	var buf []byte
	for _, f := range frames {
		buf = strconv.AppendInt(buf[:0], f.PresentNS, 10)
		buf = append(buf, ',')
		buf = strconv.AppendInt(buf, f.FrameNS, 10)
		buf = append(buf, '\n')
		bw.Write(buf)
	}
	return bw.Flush()
}

// Options tune the analysis. Zero fields take the documented defaults.
type Options struct {
	// TargetFPS is the bar. Default 72.
	TargetFPS float64
	// WarmUp is excluded from the start of the recording. Default 5s; negative
	// means no warm-up at all.
	WarmUp time.Duration
	// MinSteady is the least steady state that can be judged. Default 5s.
	MinSteady time.Duration
}

func (o Options) withDefaults() Options {
	o.TargetFPS = defaults.Positive(o.TargetFPS, 72)
	if o.WarmUp < 0 {
		o.WarmUp = 0
	} else if o.WarmUp == 0 {
		o.WarmUp = 5 * time.Second
	}
	o.MinSteady = defaults.Positive(o.MinSteady, 5*time.Second)
	return o
}

// The rule's constants (see the package documentation).
const (
	FPSTolerance    = 0.01
	LongFrameFactor = 1.5
	MaxLongFraction = 0.01
)

// Rule states the check in one line, for tool output.
const Rule = "pass when steady-state fps (after the warm-up) ≥ 72 × 0.99 and at most 1% of steady frames take longer than 1.5 frame budgets (20.8 ms)"

// Analysis is a judged recording. Times are milliseconds.
type Analysis struct {
	Frames        int      `json:"frames"`
	WarmUpFrames  int      `json:"warm_up_frames"`
	SteadyFrames  int      `json:"steady_frames"`
	WarmUpSeconds float64  `json:"warm_up_seconds"`
	SteadySeconds float64  `json:"steady_seconds"`
	SteadyFPS     float64  `json:"steady_fps"`
	TargetFPS     float64  `json:"target_fps"`
	BudgetMs      float64  `json:"budget_ms"`
	P50Ms         float64  `json:"p50_ms"`
	P90Ms         float64  `json:"p90_ms"`
	P95Ms         float64  `json:"p95_ms"`
	P99Ms         float64  `json:"p99_ms"`
	MaxMs         float64  `json:"max_ms"`
	OverBudget    int      `json:"over_budget_frames"`
	OverBudgetPct float64  `json:"over_budget_pct"`
	LongFrames    int      `json:"long_frames"`
	LongFramePct  float64  `json:"long_frame_pct"`
	Result        string   `json:"result"`
	Reasons       []string `json:"reasons,omitempty"`
	Rule          string   `json:"rule"`
	steady        []int64  // sorted steady frame times, ns
}

// Passed reports a pass.
func (a Analysis) Passed() bool { return a.Result == Pass }

// SteadyFrameTimes calls fn with every steady frame time, shortest first.
func (a Analysis) SteadyFrameTimes(fn func(time.Duration)) {
	for _, ns := range a.steady {
		fn(time.Duration(ns))
	}
}

// Analyze judges frames against the bar.
func Analyze(frames []Frame, o Options) Analysis {
	o = o.withDefaults()
	budget := 1e9 / o.TargetFPS
	a := Analysis{Frames: len(frames), TargetFPS: o.TargetFPS, BudgetMs: round(budget / 1e6), Rule: Rule}
	if len(frames) == 0 {
		a.Result, a.Reasons = Insufficient, []string{"the recording has no frames"}
		return a
	}
	cut := frames[0].PresentNS + o.WarmUp.Nanoseconds()
	first := 0
	for first < len(frames) && frames[first].PresentNS < cut {
		first++
	}
	a.WarmUpFrames = first
	a.WarmUpSeconds = round(float64(min(cut, frames[len(frames)-1].PresentNS)-frames[0].PresentNS) / 1e9)
	steady := make([]int64, 0, len(frames)-first)
	var sum int64
	long := int64(LongFrameFactor * budget)
	for _, f := range frames[first:] {
		steady = append(steady, f.FrameNS)
		sum += f.FrameNS
		if float64(f.FrameNS) > budget {
			a.OverBudget++
		}
		if f.FrameNS > long {
			a.LongFrames++
		}
	}
	a.SteadyFrames = len(steady)
	a.SteadySeconds = round(float64(sum) / 1e9)
	if len(steady) == 0 || time.Duration(sum) < o.MinSteady {
		a.Result = Insufficient
		a.Reasons = []string{fmt.Sprintf("%.1f s of steady state after a %s warm-up; at least %s is needed to judge", float64(sum)/1e9, o.WarmUp, o.MinSteady)}
		return a
	}
	slices.Sort(steady)
	a.steady = steady
	n := float64(len(steady))
	a.SteadyFPS = round(n / (float64(sum) / 1e9))
	a.P50Ms, a.P90Ms = pct(steady, 50), pct(steady, 90)
	a.P95Ms, a.P99Ms = pct(steady, 95), pct(steady, 99)
	a.MaxMs = round(float64(steady[len(steady)-1]) / 1e6)
	a.OverBudgetPct = round(100 * float64(a.OverBudget) / n)
	a.LongFramePct = round(100 * float64(a.LongFrames) / n)
	a.Result = Pass
	if fps := n / (float64(sum) / 1e9); fps < o.TargetFPS*(1-FPSTolerance) {
		a.Result = Fail
		a.Reasons = append(a.Reasons, fmt.Sprintf("steady-state %.2f fps is below %.2f (%g fps with 1%% tolerance)", fps, o.TargetFPS*(1-FPSTolerance), o.TargetFPS))
	}
	if float64(a.LongFrames) > MaxLongFraction*n {
		a.Result = Fail
		a.Reasons = append(a.Reasons, fmt.Sprintf("%d of %d steady frames (%.2f%%) took longer than %.1f ms (1.5 budgets); at most 1%% may", a.LongFrames, len(steady), 100*float64(a.LongFrames)/n, float64(long)/1e6))
	}
	return a
}

// pct is the nearest-rank percentile of sorted, in ms.
func pct(sorted []int64, p float64) float64 {
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	i = max(0, min(i, len(sorted)-1))
	return round(float64(sorted[i]) / 1e6)
}

func round(x float64) float64 { return math.Round(x*1000) / 1000 }
