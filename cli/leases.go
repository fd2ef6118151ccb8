package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aetherium-engine/aetherium/lease"
)

// leasesView is the body of GET /api/leases.
type leasesView struct {
	Services []lease.ServiceState `json:"services"`
	Events   []lease.Event        `json:"events,omitempty"`
}

// leasesCmd prints the GPU leases: per service its holders (with fencing tokens
// and expiries) and its queue, optionally the latest lease events.
func leasesCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("leases", flag.ContinueOnError)
	fs.SetOutput(stderr)
	setUsage(fs, "usage: aetherium leases [--events N] [--json]\nGPU lease holders (fencing tokens, expiries), waiters and recent lease events.")
	base := fs.String("api", apiURL(), "API base URL (AETHERIUM_API_URL)")
	events := fs.Int("events", 0, "also print the last N lease events (at most 1000)")
	asJSON := fs.Bool("json", false, "print the API's JSON")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "aetherium leases: "+format+"\n", a...)
		return 1
	}
	if *events < 0 || *events > 1000 {
		return fail("--events must be between 0 and 1000")
	}
	raw, err := fetchLeases(ctx, fmt.Sprintf("%s/api/leases?events=%d", *base, *events))
	if err != nil {
		return fail("%v", err)
	}
	if *asJSON {
		_, _ = stdout.Write(raw)
		if len(raw) > 0 && raw[len(raw)-1] != '\n' {
			fmt.Fprintln(stdout)
		}
		return 0
	}
	var v leasesView
	if err := json.Unmarshal(raw, &v); err != nil {
		return fail("unexpected answer: %v", err)
	}
	printLeases(stdout, v)
	return 0
}

func fetchLeases(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	authorize(req)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w (is the API running? AETHERIUM_API_URL)", url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			return nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode, e.Error)
		}
		return nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(data)))
	}
	return data, nil
}

func printLeases(out io.Writer, v leasesView) {
	if len(v.Services) == 0 {
		fmt.Fprintln(out, "no GPU services are configured")
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	for i, s := range v.Services {
		if i > 0 {
			fmt.Fprintln(tw)
		}
		state := "idle"
		switch {
		case s.Stopping:
			state = "stopping"
		case len(s.Holders) > 0:
			state = "in use"
		}
		fmt.Fprintf(tw, "%s\t%d/%d held\t%d waiting\tlast token %d\t%s\n", s.Service, len(s.Holders), s.Capacity, len(s.Waiters), s.LastToken, state)
		for _, h := range s.Holders {
			exp := "expires in " + h.Expires.Sub(s.Now).Round(time.Second).String()
			if h.Expired {
				exp = "EXPIRED (awaiting the reaper)"
			}
			fmt.Fprintf(tw, "  holder\t%s\ttoken %d\theld %s\t%s\n", h.Holder, h.Token, s.Now.Sub(h.Acquired).Round(time.Second), exp)
		}
		for _, w := range s.Waiters {
			fmt.Fprintf(tw, "  waiter #%d\t%s\t\twaiting %s\t\n", w.Position, w.Holder, s.Now.Sub(w.Since).Round(time.Second))
		}
	}
	_ = tw.Flush()
	if len(v.Events) > 0 {
		fmt.Fprintln(out, "\nrecent lease events:")
		tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		for _, e := range v.Events {
			tok := ""
			if e.Token > 0 {
				tok = fmt.Sprintf("token %d", e.Token)
			}
			var extra []string
			for _, k := range []string{"waited_ms", "held_ms", "position", "error"} {
				if val, ok := e.Fields[k]; ok {
					extra = append(extra, k+"="+val)
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", e.At.Local().Format("15:04:05.000"), e.Service, e.Type, e.Holder, tok, strings.Join(extra, " "))
		}
		_ = tw.Flush()
	}
}
