package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/api"
	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleettest"
	"github.com/aetherium-engine/aetherium/store"
	"github.com/aetherium-engine/aetherium/webhook/inbound"
)

// hooksFleet is a fleet with tokens (alice and bob submit; root is admin) and
// no worker: a delivery's run stays queued, which is all a delivery does.
type hooksFleet struct {
	*fleettest.Fleet
	t *testing.T
}

func setupHooks(t *testing.T) *hooksFleet {
	t.Helper()
	f := fleettest.Start(t, fleettest.Options{NoWorker: true, Configure: func(c *config.Config) {
		c.API.Tokens = nil
		for name, roles := range map[string][]string{"alice": {api.RoleSubmit, api.RoleRead}, "bob": {api.RoleSubmit, api.RoleRead}, "root": {api.RoleAdmin}} {
			c.API.Tokens = append(c.API.Tokens, api.Token{Name: name, SHA256: api.HashToken(name + "-secret"), Roles: roles})
		}
	}})
	return &hooksFleet{Fleet: f, t: t}
}

// call sends an API request as token's principal and decodes the answer into out.
func (h *hooksFleet) call(token, method, path string, body, out any) int {
	h.t.Helper()
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		require.NoError(h.t, err)
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, h.URL+path, rd)
	require.NoError(h.t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token+"-secret")
	resp, err := h.Client().Do(req)
	require.NoError(h.t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(h.t, err)
	if out != nil && resp.StatusCode < 300 && len(raw) > 0 {
		require.NoError(h.t, json.Unmarshal(raw, out), string(raw))
	}
	return resp.StatusCode
}

type createdHook struct {
	ID     string `json:"id"`
	URL    string `json:"url"`
	Secret string `json:"secret"`
}

func (h *hooksFleet) createHook(token string, req map[string]any) createdHook {
	h.t.Helper()
	var out createdHook
	code := h.call(token, "POST", "/api/hooks", req, &out)
	require.Equal(h.t, http.StatusCreated, code)
	require.NotEmpty(h.t, out.Secret)
	return out
}

// deliver POSTs a delivery (no token, no OpenAPI check: bodies are arbitrary).
func (h *hooksFleet) deliver(hookID string, hdr http.Header, body []byte) (int, []byte) {
	h.t.Helper()
	req, err := http.NewRequest("POST", h.URL+"/hooks/"+hookID, bytes.NewReader(body))
	require.NoError(h.t, err)
	req.Header = hdr.Clone()
	if req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil && len(body) > inbound.DefaultBodyLimit {
		// A body over the limit: the server may answer 413 and close the
		// connection before it has read the rest, and the client's write then
		// fails (a reset, seen under load even just over the limit). The
		// caller still checks the refusal the server recorded.
		return http.StatusRequestEntityTooLarge, nil
	}
	require.NoError(h.t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

func (h *hooksFleet) runs() int {
	h.t.Helper()
	var n int
	require.NoError(h.t, h.Store.Pool.QueryRow(context.Background(), `SELECT count(*) FROM runs`).Scan(&n))
	return n
}

func (h *hooksFleet) lastDelivery(hookID string) store.HookDelivery {
	h.t.Helper()
	ds, err := h.Store.ListHookDeliveries(context.Background(), hookID, 0, 1)
	require.NoError(h.t, err)
	require.Len(h.t, ds, 1)
	return ds[0]
}

func githubHeaders(secret, delivery string, body []byte) http.Header {
	hdr := http.Header{}
	hdr.Set(inbound.HeaderGitHubSignature, inbound.SignGitHub(secret, body))
	hdr.Set(inbound.HeaderGitHubDelivery, delivery)
	hdr.Set("X-GitHub-Event", "issues")
	return hdr
}

func stripeHeaders(secret string, at time.Time, body []byte) http.Header {
	hdr := http.Header{}
	hdr.Set(inbound.HeaderStripeSignature, inbound.SignStripe(secret, at, body))
	return hdr
}

func hmacHeaders(secret, delivery string, at time.Time, body []byte) http.Header {
	hdr := http.Header{}
	hdr.Set(inbound.HeaderTimestamp, fmt.Sprint(at.Unix()))
	hdr.Set(inbound.HeaderDelivery, delivery)
	hdr.Set(inbound.HeaderSignature, inbound.SignHMAC(secret, at, delivery, body))
	return hdr
}

func demoHook(scheme string) map[string]any {
	return map[string]any{"name": "triage " + scheme, "scheme": scheme, "template": "demo",
		"prompt": "Triage issue {{.number}}: {{.topic}}", "variables": map[string]string{"topic": "/issue/title", "number": "/issue/number"}}
}

// TestHookDeliveryStartsOneRunWithTheMappedVariables: a GitHub delivery signed
// with the hook's secret starts exactly one run, as the hook's owner, with the
// variables its pointers name, the prompt rendered, and the trigger recorded.
func TestHookDeliveryStartsOneRunWithTheMappedVariables(t *testing.T) {
	t.Parallel()
	h := setupHooks(t)
	hook := h.createHook("alice", demoHook(inbound.SchemeGitHub))
	require.Equal(t, "/hooks/"+hook.ID, hook.URL)
	body := []byte(`{"action":"opened","issue":{"title":"Printer on fire","number":42}}`)
	// From another origin, as a server sends it: the edge's origin and JSON checks do not apply.
	hdr := githubHeaders(hook.Secret, "d-1", body)
	hdr.Set("Origin", "https://github.com")
	code, raw := h.deliver(hook.ID, hdr, body)
	require.Equal(t, http.StatusAccepted, code, string(raw))
	var got struct {
		RunID      string `json:"run_id"`
		DeliveryID string `json:"delivery_id"`
	}
	require.NoError(t, json.Unmarshal(raw, &got))
	require.Equal(t, "d-1", got.DeliveryID)
	require.Equal(t, 1, h.runs())
	run, err := h.Store.GetRun(context.Background(), got.RunID)
	require.NoError(t, err)
	require.Equal(t, "alice", run.Owner)
	require.Equal(t, "Triage issue 42: Printer on fire", run.Prompt)
	require.JSONEq(t, `{"topic":"Printer on fire","number":42}`, string(run.Variables))
	var trigger string
	require.NoError(t, h.Store.Pool.QueryRow(context.Background(),
		`SELECT data->>'trigger' FROM run_events WHERE run_id = $1 AND type = 'run.queued'`, got.RunID).Scan(&trigger))
	require.Equal(t, "hook:"+hook.ID, trigger)
	d := h.lastDelivery(hook.ID)
	require.Equal(t, store.HookAccepted, d.Outcome)
	require.Equal(t, got.RunID, d.RunID)
	require.Equal(t, 1.0, hookCount(t, h.Metrics.HookDeliveries.WithLabelValues(store.HookAccepted, "")))
}

// TestHookRefusals: each hostile or broken delivery is refused with its
// reason recorded and counted, and no run starts.
func TestHookRefusals(t *testing.T) {
	t.Parallel()
	h := setupHooks(t)
	gh := h.createHook("alice", demoHook(inbound.SchemeGitHub))
	st := h.createHook("alice", demoHook(inbound.SchemeStripe))
	hm := h.createHook("alice", demoHook(inbound.SchemeHMAC))
	off := demoHook(inbound.SchemeGitHub)
	off["enabled"] = false
	disabled := h.createHook("alice", off)
	bobs := h.createHook("bob", demoHook(inbound.SchemeGitHub))
	unmapped := demoHook(inbound.SchemeGitHub)
	unmapped["variables"] = map[string]string{"topic": "/issue/title", "number": "/pull_request/number"}
	nowhere := h.createHook("alice", unmapped)

	good := []byte(`{"id":"evt_1","issue":{"title":"T","number":1}}`)
	// One accepted delivery each for the replays below.
	code, raw := h.deliver(gh.ID, githubHeaders(gh.Secret, "first", good), good)
	require.Equal(t, http.StatusAccepted, code, string(raw))
	var first struct {
		RunID string `json:"run_id"`
	}
	require.NoError(t, json.Unmarshal(raw, &first))
	now := time.Now()
	code, raw = h.deliver(st.ID, stripeHeaders(st.Secret, now, good), good)
	require.Equal(t, http.StatusAccepted, code, string(raw))
	code, raw = h.deliver(hm.ID, hmacHeaders(hm.Secret, "h-1", now, good), good)
	require.Equal(t, http.StatusAccepted, code, string(raw))
	runs := h.runs()
	require.Equal(t, 3, runs)

	deep := []byte(`{"issue":` + strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000) + `}`)
	big := []byte(`{"issue":{"title":"` + strings.Repeat("x", 10<<20) + `","number":1}}`)
	justOver := []byte(`{"issue":{"title":"` + strings.Repeat("x", inbound.DefaultBodyLimit) + `","number":1}}`)
	other := []byte(`{"id":"evt_2","issue":{"title":"U","number":2}}`)
	tests := []struct {
		name   string
		hook   createdHook
		hdr    http.Header
		body   []byte
		code   int
		reason string
	}{
		{"tampered body", gh, githubHeaders(gh.Secret, "t-1", good), []byte(strings.Replace(string(good), `"T"`, `"X"`, 1)), 401, inbound.ReasonBadSignature},
		{"wrong secret", gh, githubHeaders(gh.Secret+"x", "t-2", other), other, 401, inbound.ReasonBadSignature},
		{"no signature", gh, http.Header{inbound.HeaderGitHubDelivery: {"t-3"}}, other, 401, inbound.ReasonBadSignature},
		{"another hook's secret", gh, githubHeaders(bobs.Secret, "t-4", other), other, 401, inbound.ReasonBadSignature},
		{"stale stripe timestamp", st, stripeHeaders(st.Secret, now.Add(-10*time.Minute), other), other, 401, inbound.ReasonStale},
		{"stale hmac timestamp", hm, hmacHeaders(hm.Secret, "h-2", now.Add(-10*time.Minute), other), other, 401, inbound.ReasonStale},
		{"replayed github delivery", gh, githubHeaders(gh.Secret, "first", good), good, 200, inbound.ReasonReplayed},
		{"github body resent under a new delivery id", gh, githubHeaders(gh.Secret, "forged-new-id", good), good, 200, inbound.ReasonReplayed},
		{"replayed stripe event, re-signed later", st, stripeHeaders(st.Secret, now.Add(time.Second), good), good, 200, inbound.ReasonReplayed},
		{"replayed hmac delivery id", hm, hmacHeaders(hm.Secret, "h-1", now.Add(time.Second), good), good, 200, inbound.ReasonReplayed},
		{"body just over the limit", gh, githubHeaders(gh.Secret, "t-5", justOver), justOver, 413, inbound.ReasonTooLarge},
		{"10 MiB payload", gh, githubHeaders(gh.Secret, "t-6", big), big, 413, inbound.ReasonTooLarge},
		{"nested 10^5 deep", gh, githubHeaders(gh.Secret, "t-7", deep), deep, 400, inbound.ReasonTooDeep},
		{"not JSON", gh, githubHeaders(gh.Secret, "t-8", []byte("Hello, World!")), []byte("Hello, World!"), 400, inbound.ReasonBadJSON},
		{"pointer to nowhere", nowhere, githubHeaders(nowhere.Secret, "t-9", other), other, 422, inbound.ReasonUnmapped},
		{"disabled hook", disabled, githubHeaders(disabled.Secret, "t-10", other), other, 403, inbound.ReasonDisabled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := hookCount(t, h.Metrics.HookDeliveries.WithLabelValues(store.HookRefused, tc.reason))
			code, raw := h.deliver(tc.hook.ID, tc.hdr, tc.body)
			require.Equal(t, tc.code, code, string(raw))
			d := h.lastDelivery(tc.hook.ID)
			require.Equal(t, store.HookRefused, d.Outcome)
			require.Equal(t, tc.reason, d.Reason, d.Detail)
			require.Equal(t, runs, h.runs(), "a refused delivery started a run")
			require.Equal(t, before+1, hookCount(t, h.Metrics.HookDeliveries.WithLabelValues(store.HookRefused, tc.reason)))
			if tc.code == http.StatusOK {
				var replay struct {
					RunID    string `json:"run_id"`
					Replayed bool   `json:"replayed"`
				}
				require.NoError(t, json.Unmarshal(raw, &replay))
				require.True(t, replay.Replayed)
				require.NotEmpty(t, replay.RunID)
				require.Equal(t, replay.RunID, d.RunID)
			}
		})
	}
	// The replays of GitHub's first delivery name the first run.
	ds, err := h.Store.ListHookDeliveries(context.Background(), gh.ID, 0, 100)
	require.NoError(t, err)
	replays := 0
	for _, d := range ds {
		if d.Reason == inbound.ReasonReplayed {
			replays++
			require.Equal(t, first.RunID, d.RunID)
		}
	}
	require.Equal(t, 2, replays)

	// A forged delivery must not hold its id: the genuine one with that id still starts its run.
	fresh := []byte(`{"issue":{"title":"V","number":3}}`)
	code, _ = h.deliver(gh.ID, githubHeaders("not-the-secret-at-all", "genuine", fresh), fresh)
	require.Equal(t, http.StatusUnauthorized, code)
	code, raw = h.deliver(gh.ID, githubHeaders(gh.Secret, "genuine", fresh), fresh)
	require.Equal(t, http.StatusAccepted, code, string(raw))
	require.Equal(t, runs+1, h.runs())

	// Unknown hooks are a 404, counted but recorded nowhere.
	code, _ = h.deliver("hk_00000000000000000000000000000000", githubHeaders("x", "y", good), good)
	require.Equal(t, http.StatusNotFound, code)
	require.Equal(t, 1.0, hookCount(t, h.Metrics.HookDeliveries.WithLabelValues(store.HookRefused, api.ReasonUnknownHook)))
}

// TestHookOwnerGone: a hook whose owner's token is no longer configured
// refuses its deliveries, with the reason recorded.
func TestHookOwnerGone(t *testing.T) {
	t.Parallel()
	h := setupHooks(t)
	hk, err := h.Store.CreateHook(context.Background(), store.Hook{Owner: "carol", Name: "gone", Scheme: inbound.SchemeGitHub,
		Secret: "a-secret-of-carols-hook", Template: "demo", Prompt: "x", Variables: map[string]string{"topic": "/t"}, Enabled: true})
	require.NoError(t, err)
	body := []byte(`{"t":"x"}`)
	code, raw := h.deliver(hk.ID, githubHeaders(hk.Secret, "d", body), body)
	require.Equal(t, http.StatusForbidden, code, string(raw))
	d := h.lastDelivery(hk.ID)
	require.Equal(t, inbound.ReasonOwnerGone, d.Reason)
	require.Contains(t, d.Detail, "carol")
	require.Equal(t, 0, h.runs())
}

// TestHookConcurrentRedelivery: the same delivery sent 20 times at once
// starts one run; every answer names it.
func TestHookConcurrentRedelivery(t *testing.T) {
	t.Parallel()
	h := setupHooks(t)
	hook := h.createHook("alice", demoHook(inbound.SchemeGitHub))
	body := []byte(`{"issue":{"title":"Twenty times","number":20}}`)
	hdr := githubHeaders(hook.Secret, "same", body)
	var wg sync.WaitGroup
	var mu sync.Mutex
	runIDs, codes := map[string]int{}, map[int]int{}
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, raw := h.deliver(hook.ID, hdr, body)
			var out struct {
				RunID string `json:"run_id"`
			}
			_ = json.Unmarshal(raw, &out)
			mu.Lock()
			defer mu.Unlock()
			codes[code]++
			runIDs[out.RunID]++
		}()
	}
	wg.Wait()
	require.Equal(t, 1, h.runs())
	require.Equal(t, 1, codes[http.StatusAccepted], "codes: %v", codes)
	require.Equal(t, 19, codes[http.StatusOK], "codes: %v", codes)
	require.Len(t, runIDs, 1, "every answer names the one run: %v", runIDs)
}

// TestHookManagement: creation validates the mapping against the template,
// the secret is answered only on creation and rotation, hooks are scoped to
// their owner like projects, and rotation retires the old secret.
func TestHookManagement(t *testing.T) {
	t.Parallel()
	h := setupHooks(t)
	hook := h.createHook("alice", demoHook(inbound.SchemeGitHub))
	require.True(t, strings.HasPrefix(hook.Secret, "whsec_"))

	bad := []struct {
		name   string
		edit   func(map[string]any)
		code   int
		detail string
	}{
		{"unknown scheme", func(m map[string]any) { m["scheme"] = "gitlab" }, 400, "scheme"},
		{"variable the template does not use", func(m map[string]any) {
			m["variables"] = map[string]string{"topic": "/a", "number": "/b", "colour": "/c"}
		}, 422, "colour"},
		{"template variable left unmapped", func(m map[string]any) {
			m["variables"] = map[string]string{"number": "/b"}
			m["prompt"] = "{{.number}}"
		}, 422, "topic"},
		{"not a JSON pointer", func(m map[string]any) { m["variables"] = map[string]string{"topic": "issue/title", "number": "/b"} }, 400, "pointer"},
		{"bad escape", func(m map[string]any) { m["variables"] = map[string]string{"topic": "/a~2", "number": "/b"} }, 400, "pointer"},
		{"prompt placeholder unmapped", func(m map[string]any) { m["prompt"] = "{{.title}}"; m["variables"] = map[string]string{"topic": "/a"} }, 400, "title"},
		{"prompt with a template action", func(m map[string]any) {
			m["prompt"] = "{{.topic}} {{range .x}}{{end}}"
			m["variables"] = map[string]string{"topic": "/a"}
		}, 400, "placeholders"},
		{"unknown template", func(m map[string]any) { m["template"] = "nope" }, 404, "nope"},
		{"template and team", func(m map[string]any) { m["team"] = map[string]any{"name": "x"} }, 400, "exactly one"},
		{"short secret", func(m map[string]any) { m["secret"] = "short" }, 400, "secret"},
		{"someone else's project", func(m map[string]any) { m["project"] = "bobs" }, 404, "bobs"},
	}
	require.Equal(t, http.StatusCreated, h.call("bob", "POST", "/api/projects", map[string]any{"slug": "bobs"}, nil))
	for _, tc := range bad {
		req := demoHook(inbound.SchemeGitHub)
		tc.edit(req)
		code := h.call("alice", "POST", "/api/hooks", req, nil)
		require.Equal(t, tc.code, code, tc.name)
	}

	// Read back: no secret in any answer but creation's.
	req, err := http.NewRequest("GET", h.URL+"/api/hooks/"+hook.ID, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer alice-secret")
	resp, err := h.Client().Do(req)
	require.NoError(t, err)
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, 200, resp.StatusCode)
	require.NotContains(t, string(raw), hook.Secret)
	require.NotContains(t, string(raw), `"secret"`)

	// Owner-scoped: bob neither sees nor changes alice's hook; root (admin) does.
	var list struct {
		Hooks []struct {
			ID string `json:"id"`
		} `json:"hooks"`
	}
	require.Equal(t, 200, h.call("bob", "GET", "/api/hooks", nil, &list))
	require.Empty(t, list.Hooks)
	require.Equal(t, 200, h.call("alice", "GET", "/api/hooks", nil, &list))
	require.Len(t, list.Hooks, 1)
	require.Equal(t, 404, h.call("bob", "GET", "/api/hooks/"+hook.ID, nil, nil))
	require.Equal(t, 404, h.call("bob", "GET", "/api/hooks/"+hook.ID+"/deliveries", nil, nil))
	require.Equal(t, 404, h.call("bob", "POST", "/api/hooks/"+hook.ID+"/rotate", nil, nil))
	require.Equal(t, 404, h.call("bob", "DELETE", "/api/hooks/"+hook.ID, nil, nil))

	// Rotation: the old secret stops verifying at once, the new one works.
	var rotated createdHook
	require.Equal(t, 200, h.call("alice", "POST", "/api/hooks/"+hook.ID+"/rotate", nil, &rotated))
	require.NotEqual(t, hook.Secret, rotated.Secret)
	body := []byte(`{"issue":{"title":"after rotation","number":7}}`)
	code, _ := h.deliver(hook.ID, githubHeaders(hook.Secret, "r-1", body), body)
	require.Equal(t, http.StatusUnauthorized, code)
	code, raw = h.deliver(hook.ID, githubHeaders(rotated.Secret, "r-2", body), body)
	require.Equal(t, http.StatusAccepted, code, string(raw))
	var chosen createdHook
	require.Equal(t, 200, h.call("alice", "POST", "/api/hooks/"+hook.ID+"/rotate", map[string]any{"secret": "my-own-secret-from-github"}, &chosen))
	require.Equal(t, "my-own-secret-from-github", chosen.Secret)

	// GitHub's form content type: the signature covers the raw form body.
	form := []byte("payload=" + strings.ReplaceAll(`{"issue":{"title":"form","number":8}}`, `"`, "%22"))
	hdr := githubHeaders(chosen.Secret, "f-1", form)
	hdr.Set("Content-Type", "application/x-www-form-urlencoded")
	code, raw = h.deliver(hook.ID, hdr, form)
	require.Equal(t, http.StatusAccepted, code, string(raw))

	var ds struct {
		Deliveries []store.HookDelivery `json:"deliveries"`
	}
	require.Equal(t, 200, h.call("alice", "GET", "/api/hooks/"+hook.ID+"/deliveries?limit=10", nil, &ds))
	require.Len(t, ds.Deliveries, 3)
	require.Equal(t, "f-1", ds.Deliveries[0].DeliveryID)
	require.Equal(t, inbound.ReasonBadSignature, ds.Deliveries[2].Reason)

	require.Equal(t, 204, h.call("alice", "DELETE", "/api/hooks/"+hook.ID, nil, nil))
	require.Equal(t, 404, h.call("alice", "GET", "/api/hooks/"+hook.ID, nil, nil))
	code, _ = h.deliver(hook.ID, githubHeaders(chosen.Secret, "after-delete", body), body)
	require.Equal(t, http.StatusNotFound, code)
}

func hookCount(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, c.Write(&m))
	return m.Counter.GetValue()
}
