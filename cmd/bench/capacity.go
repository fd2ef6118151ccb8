package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/aetherium-engine/aetherium/internal/harness"
)

// Capacity is section 7: what one PostgreSQL primary and one Redis carry, from
// what sections 2 counted — per model turn (one gated call each) and per
// delegation round trip (beyond a run's own work): PostgreSQL transactions and
// CPU, Redis commands and CPU, and the rate one core of each could sustain if
// it did nothing else. docs/explanation/scaling.md quotes these rows.
type Capacity struct {
	// Per model turn of the one-call-per-message workload.
	TurnXact        float64 `json:"turn_pg_xact"`
	TurnPGMicros    float64 `json:"turn_pg_cpu_us"`
	TurnRedisCmds   float64 `json:"turn_redis_cmds"`
	TurnRedisMicros float64 `json:"turn_redis_cpu_us"`
	TurnFleetMicros float64 `json:"turn_fleet_cpu_us"`
	// TurnTopCmds are the commands that make up TurnRedisCmds, most first.
	TurnTopCmds []CmdShare `json:"turn_top_redis_cmds"`
	// Per delegation round trip: depth-D relays minus depth-1 relays over D-1.
	TripXact        float64 `json:"trip_pg_xact"`
	TripRedisCmds   float64 `json:"trip_redis_cmds"`
	TripPGMicros    float64 `json:"trip_pg_cpu_us"`
	TripRedisMicros float64 `json:"trip_redis_cpu_us"`
	// A run's own (depth-1 relay: submit, start, one delegation, finish).
	RunXact      float64 `json:"run_pg_xact"`
	RunRedisCmds float64 `json:"run_redis_cmds"`
}

// CmdShare is one Redis command's calls per unit of work.
type CmdShare struct {
	Cmd     string  `json:"cmd"`
	PerUnit float64 `json:"per_unit"`
}

// redisCounts is a snapshot of the server's INFO commandstats (calls by command).
type redisCounts map[string]int64

// redisCommands reads INFO commandstats. The bench's Redis is the machine's: other
// clients' commands would count too, so the bench runs on a quiet machine (its
// own INFO calls are two per workload, and excluded).
func (e *env) redisCommands(ctx context.Context) (redisCounts, error) {
	raw, err := e.rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, fmt.Errorf("redis INFO commandstats: %w", err)
	}
	out := redisCounts{}
	for _, line := range strings.Split(raw, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("redis INFO commandstats %q: %w", line, err)
				}
				out[strings.TrimPrefix(name, "cmdstat_")] = n
			}
		}
	}
	return out, nil
}

// minus is the calls made between snapshot b and r, without the INFO calls.
func (r redisCounts) minus(b redisCounts) redisCounts {
	d := redisCounts{}
	for k, v := range r {
		if k == "info" {
			continue
		}
		if n := v - b[k]; n > 0 {
			d[k] = n
		}
	}
	return d
}

func (r redisCounts) total() int64 {
	var n int64
	for _, v := range r {
		n += v
	}
	return n
}

// top is the n most called commands, per unit of work.
func (r redisCounts) top(n int, units float64) []CmdShare {
	out := make([]CmdShare, 0, len(r))
	for k, v := range r {
		out = append(out, CmdShare{Cmd: k, PerUnit: float64(v) / units})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].PerUnit != out[j].PerUnit {
			return out[i].PerUnit > out[j].PerUnit
		}
		return out[i].Cmd < out[j].Cmd
	})
	if len(out) > n {
		out = out[:n]
	}
	return out
}

// pgCPUWhat is what a PostgreSQL CPU figure counts (harness.PGMeter), for the
// lines that quote one.
const pgCPUWhat = "the bench's databases' backends and the cluster's shared helpers"

// pgMicrosOf renders a PostgreSQL CPU figure measured over u, or says it was
// not metered (a zero would read as a measurement).
func pgMicrosOf(u harness.CPUUse, micros float64) string {
	if u.Postgres == nil || u.Postgres.Unavailable != "" {
		return "not metered"
	}
	return fmt.Sprintf("%.0f µs", micros)
}

// cpuMicros is a group's CPU per unit of work, in µs.
func cpuMicros(u harness.CPUUse, group string, units float64) float64 {
	if units <= 0 {
		return 0
	}
	return 1e6 * u.Groups[group] / units
}

// perCore is how many units per second one core sustains at micros each.
// marginalMicros is the CPU of group per extra unit of deep over shallow: the
// marginal of a deeper workload of the same runs (section 7's round trip, DBOS's
// further child).
func marginalMicros(deep, shallow harness.CPUUse, group string, extra float64) float64 {
	return 1e6 * (deep.Groups[group] - shallow.Groups[group]) / extra
}

func perCore(micros float64) float64 {
	if micros <= 0 {
		return 0
	}
	return 1e6 / micros
}

// rows prints section 7; r renders PostgreSQL's CPU (or that it was not metered).
func (c Capacity) rows(row func(n, what, val, note string), r Result) {
	if c.TurnXact == 0 {
		return
	}
	var top []string
	for _, s := range c.TurnTopCmds {
		top = append(top, fmt.Sprintf("%s %.1f", strings.ToUpper(s.Cmd), s.PerUnit))
	}
	row("7", "per model turn (one gated call): PostgreSQL", fmt.Sprintf("**%.1f transactions, %s CPU**", c.TurnXact, r.pgMicros(c.TurnPGMicros)),
		fmt.Sprintf("one PostgreSQL core, if it did nothing else: %.0f turns/s; CPU of %s", perCore(c.TurnPGMicros), pgCPUWhat))
	row("7", "per model turn (one gated call): Redis", fmt.Sprintf("**%.1f commands, %.0f µs CPU**", c.TurnRedisCmds, c.TurnRedisMicros),
		fmt.Sprintf("one Redis (single-threaded): %.0f turns/s; commands: %s", perCore(c.TurnRedisMicros), strings.Join(top, ", ")))
	row("7", "per model turn (one gated call): fleet process", fmt.Sprintf("%.0f µs CPU", c.TurnFleetMicros),
		fmt.Sprintf("one worker core: %.0f turns/s (workers scale out)", perCore(c.TurnFleetMicros)))
	if c.TripXact > 0 {
		row("7", "per delegation round trip: PostgreSQL / Redis", fmt.Sprintf("%.1f transactions, %s; %.1f commands, %.0f µs", c.TripXact, r.pgMicros(c.TripPGMicros), c.TripRedisCmds, c.TripRedisMicros),
			fmt.Sprintf("beyond a run's own %.1f transactions and %.1f commands (depth-1 relay); one core of each: %.0f / %.0f round trips/s",
				c.RunXact, c.RunRedisCmds, perCore(c.TripPGMicros), perCore(c.TripRedisMicros)))
	}
}
