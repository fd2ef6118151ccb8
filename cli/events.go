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

// eventsCmd prints a run's events: the stream to the terminal event (waiting
// for it while the run runs), then the post-run events stored after it
// (postrun.finish_image), which the run's live stream does not carry.
func eventsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("events", flag.ContinueOnError)
	fs.SetOutput(stderr)
	base := fs.String("api", apiURL(), "API base URL (AETHERIUM_API_URL)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: aetherium events [--api URL] RUN_ID")
		return 2
	}
	runID := fs.Arg(0)
	var last int64
	for failures := 0; ; failures++ {
		_, terminal, err := streamEvents(ctx, *base, runID, &last, stdout)
		if err != nil && failures >= 10 {
			fmt.Fprintf(stderr, "aetherium events: %v\n", err)
			return 1
		}
		if terminal {
			break
		}
		// The stream ended before the terminal event: resume it.
		select {
		case <-ctx.Done():
			return 1
		case <-time.After(time.Duration(failures+1) * 300 * time.Millisecond):
		}
	}
	// Resumed past the terminal event, the stream sends what was stored after
	// it and ends (204 when nothing was).
	if _, _, err := streamEvents(ctx, *base, runID, &last, stdout); err != nil {
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
		return 0, false, fmt.Errorf("event stream: HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(data)))
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
