// Package webhook delivers run events to configured endpoints as signed POSTs. Each
// delivery is an asynq task (deterministic id per event and endpoint, retried with
// backoff), so a slow or failing endpoint never slows a run and nothing is lost.
//
// The body is the event as JSON, signed per Standard Webhooks (sign.go):
// webhook-id (stable across retries, for dedupe), webhook-timestamp and
// webhook-signature, which covers both; X-Aetherium-Event is the event type.
// Receivers check a delivery with Verify.
package webhook

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/hibiken/asynq"

	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/queue"
	"github.com/aetherium-engine/aetherium/store"
)

// Hook is an endpoint that receives run events as signed POSTs (an entry of
// api.webhooks).
type Hook struct {
	URL string `yaml:"url"`
	// Secret keys the webhook-signature HMAC-SHA256: whsec_<base64> (the
	// Standard Webhooks format; the key is the decoded bytes) or any other
	// string of at least MinSecretLen characters (the key is its bytes).
	Secret string `yaml:"secret"`
	// Events filters by event type; empty means all.
	Events []string `yaml:"events"`
}

// MinSecretLen is the shortest Hook.Secret accepted.
const MinSecretLen = 16

// ValidateHooks reports every invalid hook, naming its key (api.webhooks[i]).
func ValidateHooks(hooks []Hook) error {
	var errs []error
	for i, h := range hooks {
		if u, err := url.Parse(h.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("api.webhooks[%d].url: want an http(s) URL, got %q", i, h.URL))
		}
		if key, err := Key(h.Secret); err != nil {
			errs = append(errs, fmt.Errorf("api.webhooks[%d].secret: %w", i, err))
		} else if len(h.Secret) < MinSecretLen || len(key) < MinSecretLen {
			errs = append(errs, fmt.Errorf("api.webhooks[%d].secret: must be at least %d characters, or whsec_ and the base64 of at least %d bytes (it keys the HMAC signature)", i, MinSecretLen, MinSecretLen))
		}
	}
	return errors.Join(errs...)
}

// Deliverer fans events out to hooks.
type Deliverer struct {
	Hooks []Hook
	Store *store.Store
	Queue *queue.Enqueuer
	HTTP  *http.Client
}

// OnEvent enqueues one delivery per matching hook (events.Recorder.OnEvent).
func (d *Deliverer) OnEvent(ctx context.Context, e events.Stored) error {
	for i, h := range d.Hooks {
		if !wants(h, e.Type) {
			continue
		}
		if err := d.Queue.DeliverWebhook(ctx, i, h.Digest(), e.ID); err != nil {
			return fmt.Errorf("enqueue webhook: %w", err)
		}
	}
	return nil
}

// SweepGrace is how old an event must be before Sweep reads past it. The
// path that stores an event enqueues its deliveries right after the commit,
// and an event is stored by one short statement, so once an event is this old
// every event with a lower id is committed (or rolled back) and any delivery
// still missing will not come from that path.
const SweepGrace = time.Minute

// sweepPage is how many events Sweep reads at once; sweepBudget how long one
// Sweep goes on reading before it leaves the rest to the next tick.
const (
	sweepPage   = 2000
	sweepBudget = 20 * time.Second
)

// Digest names the hook's receiver without holding its URL: a receiver's URL
// often is its credential (a token in the path), and neither the database nor
// the queue is where it lives. A delivery carries it (its payload and task id),
// so one enqueued under an older configuration reaches the receiver it was
// for, or none.
func (h Hook) Digest() string {
	sum := sha256.Sum256([]byte(h.URL))
	return fmt.Sprintf("sha256:%x", sum[:12])
}

// Key names hook number i of the configuration in the sweep's cursor: its
// place and its Digest, so a hook moved, added or pointed elsewhere starts a
// cursor of its own (at the events of the last moments: store.WebhookCursor).
func (h Hook) Key(i int) string { return fmt.Sprintf("%d %s", i, h.Digest()) }

// redacted is a hook's URL as errors may show it (they end up in the queue's
// record of the task and in logs): the scheme and host, not the path or query
// that may be its credential.
func redacted(h Hook) string {
	u, err := url.Parse(h.URL)
	if err != nil || u.Host == "" {
		return "(an unparsable URL)"
	}
	return u.Scheme + "://" + u.Host + "/…"
}

// Sweep enqueues the deliveries that storing their events never enqueued:
// OnEvent runs after the event's commit, so a process that dies in between,
// or a Redis that refuses the enqueue, loses the delivery there (a step's
// save cannot take its events back, and its retry finds them stored). For
// each hook it reads the events after the hook's cursor, up to the first one
// younger than SweepGrace, enqueues a delivery for each it wants, and moves
// the cursor past them. An enqueue of a delivery that was already enqueued is
// a no-op (the task id is the hook's and the event's, kept for the queue's
// retention, 24 h by default), so a sweep sends nothing twice; several
// schedulers' sweeps enqueue the same ids. It returns the deliveries it
// enqueued: the ones that would have been lost.
func (d *Deliverer) Sweep(ctx context.Context) (int, error) {
	start := time.Now()
	enqueued := 0
	for i, h := range d.Hooks {
		key := h.Key(i)
		cur, err := d.Store.WebhookCursor(ctx, key, SweepGrace)
		if err != nil {
			return enqueued, err
		}
		for time.Since(start) < sweepBudget {
			evs, err := d.Store.EventsAfterID(ctx, cur, SweepGrace, sweepPage)
			if err != nil {
				return enqueued, err
			}
			next := cur
			for _, e := range evs {
				if !e.Settled {
					break
				}
				if wants(h, e.Type) {
					made, err := d.Queue.DeliverWebhookOnce(ctx, i, h.Digest(), e.ID)
					if err != nil {
						return enqueued, fmt.Errorf("webhook sweep of api.webhooks[%d]: %w", i, err)
					}
					if made {
						enqueued++
					}
				}
				next = e.ID
			}
			if next == cur {
				break
			}
			moved, err := d.Store.AdvanceWebhookCursor(ctx, key, cur, next)
			if err != nil {
				return enqueued, err
			}
			if !moved || next != evs[len(evs)-1].ID || len(evs) < sweepPage {
				break // another sweep is ahead, a young event stopped this one, or caught up
			}
			cur = next
		}
	}
	return enqueued, nil
}

func wants(h Hook, typ string) bool {
	if len(h.Events) == 0 {
		return true
	}
	for _, t := range h.Events {
		if t == typ {
			return true
		}
	}
	return false
}

// Handle delivers one event (asynq handler) to the receiver it was enqueued
// for: the configuration may have changed since (a restart, the processes of a
// rolling one), and an event must not go to whichever receiver took the hook's
// place, nor to one that no longer takes its type.
func (d *Deliverer) Handle(ctx context.Context, t *asynq.Task) error {
	p, err := queue.Decode[queue.WebhookPayload](t)
	if err != nil {
		return err
	}
	e, err := d.Store.GetEvent(ctx, p.EventID)
	if err != nil {
		return err
	}
	i, h, err := d.hookOf(p, e.Type)
	if err != nil {
		return err
	}
	body, _ := json.Marshal(map[string]any{"id": e.ID, "run_id": e.RunID, "type": e.Type, "agent": e.Agent, "data": e.Data, "time": e.CreatedAt})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%w: api.webhooks[%d].url does not make a request", asynq.SkipRetry, i)
	}
	// The id is the same on every retry; the timestamp is this attempt's, so a
	// retry is signed afresh and a captured delivery ages out of the window.
	id, now := fmt.Sprintf("%d-%d", i, e.ID), time.Now()
	sig, err := Sign(h.Secret, id, now, body)
	if err != nil {
		return fmt.Errorf("%w: api.webhooks[%d].secret: %v", asynq.SkipRetry, i, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Aetherium-Event", e.Type)
	req.Header.Set(HeaderID, id)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(HeaderSignature, sig)
	client := d.HTTP
	if client == nil {
		client = &http.Client{Timeout: 15 * time.Second}
	}
	resp, err := client.Do(req)
	if err != nil {
		// url.Error quotes the whole URL; its cause names the host at most.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("webhook api.webhooks[%d] %s: %w", i, redacted(h), err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("webhook api.webhooks[%d] %s: HTTP %d", i, redacted(h), resp.StatusCode)
	}
	return nil
}

// hookOf is the hook a delivery of an event of type typ was enqueued for: the
// one at its index if the URL there is still the one it was enqueued for and
// takes typ, else the first with that URL that takes it (moved, or listed twice
// with other filters). A delivery of a build before digests names its hook by
// index alone.
func (d *Deliverer) hookOf(p queue.WebhookPayload, typ string) (int, Hook, error) {
	changed := func(i int) error {
		return fmt.Errorf("%w: api.webhooks[%d] no longer takes %s events (the configuration changed after this delivery was enqueued)", asynq.SkipRetry, i, typ)
	}
	if p.Digest == "" {
		if p.Hook < 0 || p.Hook >= len(d.Hooks) {
			return 0, Hook{}, fmt.Errorf("%w: webhook %d is not configured (%d are)", asynq.SkipRetry, p.Hook, len(d.Hooks))
		}
		if h := d.Hooks[p.Hook]; !wants(h, typ) {
			return 0, Hook{}, changed(p.Hook)
		}
		return p.Hook, d.Hooks[p.Hook], nil
	}
	if p.Hook >= 0 && p.Hook < len(d.Hooks) && d.Hooks[p.Hook].Digest() == p.Digest && wants(d.Hooks[p.Hook], typ) {
		return p.Hook, d.Hooks[p.Hook], nil
	}
	refusing := -1
	for i, h := range d.Hooks {
		if h.Digest() != p.Digest {
			continue
		}
		if wants(h, typ) {
			return i, h, nil
		}
		if refusing < 0 {
			refusing = i
		}
	}
	if refusing >= 0 {
		return 0, Hook{}, changed(refusing)
	}
	return 0, Hook{}, fmt.Errorf("%w: the receiver of this delivery (api.webhooks[%d] when it was enqueued, %s) is no longer configured", asynq.SkipRetry, p.Hook, p.Digest)
}
