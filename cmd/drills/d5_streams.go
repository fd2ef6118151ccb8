package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/internal/harness"
	"github.com/aetherium-engine/aetherium/llm"
	"github.com/aetherium-engine/aetherium/llm/script"
	"github.com/aetherium-engine/aetherium/templates"
)

// Drill 5's extra pressure: event streams held open through the load, and a limit on
// runs in flight the load's submissions go over.
const (
	// drillStreams is how many event streams stay open during the load.
	drillStreams = 200
	// drillRunsInFlight is api.max_runs_in_flight: low enough that the load's
	// submissions exceed it within a second.
	drillRunsInFlight = 25
	// streamRedisClients is how many Redis clients the streams may add in all (the
	// API fans one subscription out to every stream).
	streamRedisClients = 4
)

// waitingTeam is a run that stays in flight until it is cancelled: its worker asks
// for approval of a destructive command nobody decides.
func waitingTeam() templates.Template {
	return templates.Template{
		Name: "drill-waiting", Description: "drill 5: a run that waits for approval", Model: llm.ModelConfig{Provider: "script"},
		Supervisor: templates.Node{Name: "supervisor", Prompt: "Delegate.", MCPServers: []string{"orchestration"}},
		Workers:    []templates.Node{{Name: "w", Prompt: "Clean up.", MCPServers: []string{"shell"}}},
		Budget:     templates.Budget{MaxTokens: 1 << 40},
		Script: script.Script{Agents: map[string][]script.Turn{
			"supervisor": {
				{Calls: []script.Call{{Tool: "delegate", Args: map[string]any{"agent": "w", "task": "clean"}}}},
				{Calls: []script.Call{{Tool: "reply", Args: map[string]any{"message": "cleaned"}}}},
			},
			"w": {{Calls: []script.Call{{Tool: "run_shell", Args: map[string]any{"command": "rm -rf scratch"}}}}, {Say: "done"}},
		}},
	}
}

// streams holds open event streams and counts how they end.
type streams struct {
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	opened  atomic.Int64
	refused atomic.Int64
	ended   atomic.Int64 // ended by the server after the run's terminal event
	example atomic.Value
}

// openStreams opens n event streams of runID and returns once each has its answer
// headers (or failed).
func openStreams(ctx context.Context, base, runID string, n int) *streams {
	ctx, cancel := context.WithCancel(ctx)
	s := &streams{cancel: cancel}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: n, MaxConnsPerHost: 0}}
	var ready sync.WaitGroup
	for range n {
		ready.Add(1)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			once := sync.OnceFunc(ready.Done)
			defer once()
			req, _ := http.NewRequestWithContext(ctx, "GET", base+"/api/runs/"+runID+"/events", nil)
			req.Header.Set("Accept", "text/event-stream")
			resp, err := client.Do(req)
			if err != nil {
				s.refused.Add(1)
				s.example.CompareAndSwap(nil, err.Error())
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				s.refused.Add(1)
				s.example.CompareAndSwap(nil, fmt.Sprintf("HTTP %d %s", resp.StatusCode, resp.Header.Get("Content-Type")))
				return
			}
			s.opened.Add(1)
			once()
			sc := bufio.NewScanner(resp.Body)
			terminal := false
			for sc.Scan() {
				if typ, ok := strings.CutPrefix(sc.Text(), "event: "); ok && events.Terminal(typ) {
					terminal = true
				}
			}
			if terminal && ctx.Err() == nil {
				s.ended.Add(1)
			}
		}()
	}
	ready.Wait()
	return s
}

// redisClients is Redis's connected_clients.
func redisClients(ctx context.Context, rdb *redis.Client) (int, error) {
	info, err := rdb.Info(ctx, "clients").Result()
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "connected_clients:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, fmt.Errorf("no connected_clients in INFO clients")
}

// inFlightSampler samples the runs not yet terminal while the load runs.
type inFlightSampler struct {
	max  atomic.Int64
	errs atomic.Int64
	done chan struct{}
}

func sampleInFlight(ctx context.Context, c *cluster, stop time.Time) *inFlightSampler {
	s := &inFlightSampler{done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for time.Now().Before(stop) && ctx.Err() == nil {
			var n int64
			err := c.pool.QueryRow(ctx, `SELECT count(*) FROM runs WHERE status NOT IN ('completed', 'failed', 'cancelled')`).Scan(&n)
			if err != nil {
				s.errs.Add(1)
			} else if n > s.max.Load() {
				s.max.Store(n)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	return s
}

// modelSeries counts the distinct values of the model label on a worker's /metrics.
func modelSeries(ctx context.Context, addr string) (int, error) {
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	seen := map[string]bool{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		_, rest, ok := strings.Cut(line, `model="`)
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		if v, _, ok := strings.Cut(rest, `"`); ok {
			seen[v] = true
		}
	}
	return len(seen), sc.Err()
}

// crewWithModel is the load's inline team under a model name of its own.
func crewWithModel(model string) templates.Template {
	t := harness.Crew(1)
	t.Model.Model = model
	return t
}
