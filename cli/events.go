package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

const eventsUsage = `usage: aetherium events [--api URL] RUN_ID
A run's events: the stream to its terminal event (waiting for it while the run
runs), then the post-run events stored after it (postrun.finish_image).`

// refusal is an answer of the API a retry would not change (a 4xx but 429).
type refusal struct{ err error }

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

// eventsCmd prints a run's events: the stream to the terminal event (waiting
// for it while the run runs), then the post-run events stored after it
// (postrun.finish_image), which the run's live stream does not carry.
func eventsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("events", flag.ContinueOnError)
	fs.SetOutput(stderr)
	setUsage(fs, eventsUsage)
	base := fs.String("api", apiURL(), "API base URL (AETHERIUM_API_URL)")
	positional, err := parseInterleaved(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if len(positional) != 1 {
		fmt.Fprintln(stderr, eventsUsage)
		return 2
	}
	runID := positional[0]
	var last int64
	for failures := 0; ; failures++ {
		_, terminal, err := streamEvents(ctx, *base, runID, &last, stdout)
		if ctx.Err() != nil {
			return stoppedFollowing(stderr, runID)
		}
		var refused *refusal
		if errors.As(err, &refused) || (err != nil && failures >= 10) {
			// A refusal (404, 400, 401) is the same on a retry: said at once.
			fmt.Fprintf(stderr, "aetherium events: %v\n", err)
			return 1
		}
		if terminal {
			break
		}
		// The stream ended before the terminal event: resume it.
		select {
		case <-ctx.Done():
			return stoppedFollowing(stderr, runID)
		case <-time.After(time.Duration(failures+1) * 300 * time.Millisecond):
		}
	}
	// Resumed past the terminal event, the stream sends what was stored after
	// it and ends (204 when nothing was).
	if _, _, err := streamEvents(ctx, *base, runID, &last, stdout); err != nil {
		if ctx.Err() != nil {
			return 130
		}
		fmt.Fprintf(stderr, "aetherium events: %v\n", err)
		return 1
	}
	return 0
}

// streamEvents reads one event stream of runID past *last, printing each
// event; it reports how many it read and whether the terminal one was among
// them. 204 (a finished run with nothing past *last) reads none.
func streamEvents(ctx context.Context, base, runID string, last *int64, out io.Writer) (int, bool, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/runs/"+runID+"/events", nil)
	req.Header.Set("Accept", "text/event-stream")
	authorize(req)
	if *last > 0 {
		req.Header.Set("Last-Event-ID", fmt.Sprint(*last))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false, fmt.Errorf("event stream: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNoContent {
		return 0, false, nil
	}
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		err := apiError(resp.StatusCode, data)
		if resp.StatusCode/100 == 4 && resp.StatusCode != http.StatusTooManyRequests {
			return 0, false, &refusal{err}
		}
		return 0, false, fmt.Errorf("event stream: %w", err)
	}
	n, terminal := 0, false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		payload, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var e sseEvent
		if json.Unmarshal([]byte(payload), &e) != nil {
			continue
		}
		*last = e.ID
		n++
		fmt.Fprintln(out, describe(e))
		if e.Type == "run.completed" || e.Type == "run.failed" || e.Type == "run.cancelled" {
			terminal = true
		}
	}
	return n, terminal, nil
}
