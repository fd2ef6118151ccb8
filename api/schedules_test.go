package api_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/api"
)

func scheduleBody(edit func(map[string]any)) map[string]any {
	b := map[string]any{"name": "nightly", "cron": "0 3 * * *", "time_zone": "Europe/Paris", "template": "demo",
		"prompt": "x", "variables": map[string]any{"topic": "t"}}
	if edit != nil {
		edit(b)
	}
	return b
}

// Hostile schedules are refused at creation with a 400 naming the field, and
// nothing is stored.
func TestCreateScheduleRefusesHostileInput(t *testing.T) {
	t.Parallel()
	o := setupOwners(t, 1)
	for _, c := range []struct {
		name  string
		edit  func(map[string]any)
		field string
	}{
		{"cron that never fires", func(b map[string]any) { b["cron"] = "0 0 30 2 *" }, "cron"},
		{"seconds field where the minimum interval is a minute", func(b map[string]any) { b["cron"] = "* * * * * *" }, "cron"},
		{"under the minimum interval", func(b map[string]any) { b["cron"] = "@every 10s" }, "cron"},
		{"malformed cron", func(b map[string]any) { b["cron"] = "61 * * * *" }, "cron"},
		{"unknown time zone", func(b map[string]any) { b["time_zone"] = "Mars/Olympus" }, "time_zone"},
		{"huge jitter", func(b map[string]any) { b["jitter"] = "2562047h" }, "jitter"},
		{"jitter past the next tick", func(b map[string]any) { b["cron"], b["jitter"] = "*/5 * * * *", "5m" }, "jitter"},
		{"jitter not a duration", func(b map[string]any) { b["jitter"] = "soon" }, "jitter"},
		{"unknown template", func(b map[string]any) { b["template"] = "no-such-template" }, "template"},
		{"neither template nor team", func(b map[string]any) { delete(b, "template") }, "template"},
		{"template and team", func(b map[string]any) { b["team"] = map[string]any{"name": "x"} }, "team"},
		{"a variable missing", func(b map[string]any) { b["variables"] = map[string]any{} }, "variables"},
		{"unknown overlap", func(b map[string]any) { b["overlap"] = "sometimes" }, "overlap"},
		{"catch-up all without a limit", func(b map[string]any) { b["catch_up"] = "all" }, "catch_up_limit"},
		{"catch-up over the maximum", func(b map[string]any) { b["catch_up"], b["catch_up_limit"] = "all", 100000 }, "catch_up_limit"},
		{"priority out of range", func(b map[string]any) { b["priority"] = 9 }, "priority"},
		{"no prompt", func(b map[string]any) { b["prompt"] = " " }, "prompt"},
		{"unknown field", func(b map[string]any) { b["every"] = "day" }, "every"},
		{"unknown project", func(b map[string]any) { b["project"] = "nope" }, "project"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			code, _, raw := o.call(t, "alice", "POST", "/api/schedules", scheduleBody(c.edit))
			wantCode := http.StatusBadRequest
			if c.field == "project" {
				wantCode = http.StatusNotFound
			}
			require.Equal(t, wantCode, code, string(raw))
			var e struct{ Error, Field string }
			require.NoError(t, json.Unmarshal(raw, &e))
			require.Equal(t, c.field, e.Field, e.Error)
			require.NotEmpty(t, e.Error)
		})
	}
	code, _, raw := o.call(t, "alice", "GET", "/api/schedules", nil)
	require.Equal(t, http.StatusOK, code)
	require.JSONEq(t, `{"schedules":[]}`, string(raw))
}

// Schedules are owner-scoped like projects: another submitter's is a 404, a
// reader of everything sees it but may not change it, its owner pauses,
// resumes and deletes it; GET shows the next fire times.
func TestSchedulesAreOwnerScoped(t *testing.T) {
	t.Parallel()
	o := setupOwners(t, 1)
	code, _, raw := o.call(t, "alice", "POST", "/api/schedules", scheduleBody(func(b map[string]any) { b["jitter"] = "10m" }))
	require.Equal(t, http.StatusCreated, code, string(raw))
	var sc struct {
		ID        string `json:"id"`
		Owner     string `json:"owner"`
		Paused    bool   `json:"paused"`
		NextFires []struct {
			Tick   string `json:"tick"`
			FireAt string `json:"fire_at"`
		} `json:"next_fires"`
	}
	require.NoError(t, json.Unmarshal(raw, &sc))
	require.Equal(t, "alice", sc.Owner)
	require.Len(t, sc.NextFires, 5)
	path := "/api/schedules/" + sc.ID

	code, _, _ = o.call(t, "alice", "POST", "/api/schedules", scheduleBody(nil))
	require.Equal(t, http.StatusConflict, code, "one name per owner")
	code, _, _ = o.call(t, "bob", "POST", "/api/schedules", scheduleBody(nil))
	require.Equal(t, http.StatusCreated, code, "bob's own nightly")

	for _, c := range []struct {
		token, method, path string
		want                int
	}{
		{"bob", "GET", path, http.StatusNotFound},
		{"bob", "GET", path + "/fires", http.StatusNotFound},
		{"bob", "POST", path + "/pause", http.StatusNotFound},
		{"bob", "DELETE", path, http.StatusNotFound},
		{"auditor", "GET", path, http.StatusOK},
		{"auditor", "GET", path + "/fires", http.StatusOK},
		{"oncall", "POST", path + "/pause", http.StatusForbidden},
		{"alice", "GET", path + "?next=20", http.StatusOK},
		{"alice", "GET", path + "?next=500", http.StatusBadRequest},
		{"alice", "GET", "/api/schedules/sch_nope", http.StatusNotFound},
		{"alice", "POST", path + "/pause", http.StatusOK},
		{"alice", "POST", path + "/resume", http.StatusOK},
		{"root", "POST", path + "/pause", http.StatusOK},
	} {
		code, _, raw := o.call(t, c.token, c.method, c.path, nil)
		require.Equal(t, c.want, code, "%s %s %s: %s", c.token, c.method, c.path, raw)
	}
	code, _, raw = o.call(t, "alice", "GET", path, nil)
	require.Equal(t, http.StatusOK, code)
	require.NoError(t, json.Unmarshal(raw, &sc))
	require.True(t, sc.Paused)
	require.Empty(t, sc.NextFires, "a paused schedule shows no next fire")

	code, _, raw = o.call(t, "alice", "PATCH", path, map[string]any{"cron": "0 0 30 2 *"})
	require.Equal(t, http.StatusBadRequest, code, string(raw))
	code, _, raw = o.call(t, "alice", "PATCH", path, map[string]any{"cron": "30 6 * * 1-5", "overlap": "cancel_previous"})
	require.Equal(t, http.StatusOK, code, string(raw))

	var list struct {
		Schedules []struct{ Owner string } `json:"schedules"`
	}
	code, _, raw = o.call(t, "bob", "GET", "/api/schedules", nil)
	require.Equal(t, http.StatusOK, code)
	require.NoError(t, json.Unmarshal(raw, &list))
	require.Len(t, list.Schedules, 1)
	code, _, raw = o.call(t, "auditor", "GET", "/api/schedules", nil)
	require.Equal(t, http.StatusOK, code)
	require.NoError(t, json.Unmarshal(raw, &list))
	require.Len(t, list.Schedules, 2)

	code, _, _ = o.call(t, "alice", "DELETE", path, nil)
	require.Equal(t, http.StatusNoContent, code)
	code, _, _ = o.call(t, "alice", "GET", path, nil)
	require.Equal(t, http.StatusNotFound, code)
}

// An Idempotency-Key on POST /api/schedules: the same key and body answer
// with the first schedule (Idempotent-Replayed), the key with another body is
// a 422, another principal's same key is its own; without a key a second
// create of the name is a 409.
func TestCreateScheduleIdempotencyKey(t *testing.T) {
	t.Parallel()
	o := setupOwners(t, 1)
	post := func(token, key string, body map[string]any) (int, http.Header, string) {
		t.Helper()
		raw, err := json.Marshal(body)
		require.NoError(t, err)
		req, err := http.NewRequest("POST", o.URL+"/api/schedules", bytes.NewReader(raw))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token+"-secret")
		if key != "" {
			req.Header.Set(api.IdempotencyKeyHeader, key)
		}
		resp, err := o.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		out, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		var sc struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(out, &sc)
		return resp.StatusCode, resp.Header, sc.ID
	}
	code, hdr, first := post("alice", "k1", scheduleBody(nil))
	require.Equal(t, http.StatusCreated, code)
	require.Empty(t, hdr.Get(api.IdempotentReplayedHeader))
	code, hdr, again := post("alice", "k1", scheduleBody(nil))
	require.Equal(t, http.StatusCreated, code)
	require.Equal(t, "true", hdr.Get(api.IdempotentReplayedHeader))
	require.Equal(t, first, again)
	code, _, _ = post("alice", "k1", scheduleBody(func(b map[string]any) { b["prompt"] = "other" }))
	require.Equal(t, http.StatusUnprocessableEntity, code)
	code, _, _ = post("alice", "", scheduleBody(nil))
	require.Equal(t, http.StatusConflict, code)
	code, hdr, bobs := post("bob", "k1", scheduleBody(nil))
	require.Equal(t, http.StatusCreated, code)
	require.Empty(t, hdr.Get(api.IdempotentReplayedHeader))
	require.NotEqual(t, first, bobs)
}
