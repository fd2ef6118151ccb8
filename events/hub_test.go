package events_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/events"
	"github.com/aetherium-engine/aetherium/internal/testdb"
	"github.com/aetherium-engine/aetherium/store"
)

// The Redis Cluster of the test matrix is shared by the binary and stopped here.
func TestMain(m *testing.M) { os.Exit(testdb.Main(m)) }

// An announcement published by one process (the Recorder) wakes the watchers of
// that run in another (the Hub). On a cluster the hub holds one pub/sub
// connection to one node while the runs' channels hash to slots of every master:
// classic PUBLISH is broadcast to the whole cluster, so one connection still
// hears them all. A run nobody announced stays asleep.
// With an Announcer the publishes leave the caller's path and still arrive.
func TestHubWakesWatchersOfAnnouncedRunsOnly(t *testing.T) {
	t.Parallel()
	for _, async := range []bool{false, true} {
		t.Run(fmt.Sprintf("announcer %v", async), func(t *testing.T) {
			t.Parallel()
			testHubWakes(t, async)
		})
	}
}

func testHubWakes(t *testing.T, async bool) {
	testdb.EachRedis(t, func(t *testing.T, tg testdb.RedisTarget) {
		ctx := context.Background()
		hub := events.NewHub(testdb.Connect(t, tg.URL), nil)
		t.Cleanup(func() { _ = hub.Close() })
		rdb := testdb.Connect(t, tg.URL)
		rec := &events.Recorder{Redis: rdb}
		if async {
			rec.Announcer = events.NewAnnouncer(rdb, nil)
			t.Cleanup(rec.Announcer.Close)
		}

		runs := make([]string, 12)
		wakes := make([]<-chan struct{}, len(runs))
		for i := range runs {
			runs[i] = fmt.Sprintf("%s-run-%d", tg.Prefix, i)
			w, stop, err := hub.Watch(ctx, runs[i])
			require.NoError(t, err)
			t.Cleanup(stop)
			wakes[i] = w
		}
		quiet, stopQuiet, err := hub.Watch(ctx, tg.Prefix+"-quiet")
		require.NoError(t, err)
		t.Cleanup(stopQuiet)
		require.Equal(t, len(runs)+1, hub.Watchers())

		// The subscribe confirmations wake each watcher once (re-read after
		// subscribing); drain them so only announcements count below.
		drain := func(w <-chan struct{}) {
			select {
			case <-w:
			case <-time.After(2 * time.Second):
			}
		}
		for _, w := range wakes {
			drain(w)
		}
		drain(quiet)

		for i, run := range runs {
			require.NoError(t, rec.Announce(ctx, run, []store.Event{{ID: int64(i + 1), Type: "x"}}))
		}
		for i, w := range wakes {
			select {
			case <-w:
			case <-time.After(5 * time.Second):
				t.Fatalf("the watcher of %s was not woken", runs[i])
			}
		}
		select {
		case <-quiet:
			t.Fatal("a run nobody announced was woken")
		case <-time.After(100 * time.Millisecond):
		}
	})
}

// Close publishes what is pending: nothing announced before a clean shutdown
// waits for a watcher's safety tick.
func TestAnnouncerCloseFlushes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testdb.Redis(t)
	hub := events.NewHub(testdb.Connect(t, url), nil)
	t.Cleanup(func() { _ = hub.Close() })
	id := time.Now().UnixNano()
	runs := []string{fmt.Sprintf("flush-a-%d", id), fmt.Sprintf("flush-b-%d", id)}
	var wakes []<-chan struct{}
	for _, run := range runs {
		w, stop, err := hub.Watch(ctx, run)
		require.NoError(t, err)
		t.Cleanup(stop)
		select { // the subscription's own wake-up
		case <-w:
		case <-time.After(2 * time.Second):
		}
		wakes = append(wakes, w)
	}
	rdb := testdb.Connect(t, url)
	a := events.NewAnnouncer(rdb, nil)
	rec := &events.Recorder{Redis: rdb, Announcer: a}
	for i, run := range runs {
		for j := range 50 { // one channel's many announcements: one PUBLISH or a few
			require.NoError(t, rec.Announce(ctx, run, []store.Event{{ID: int64(100*i + j + 1), Type: "x"}}))
		}
	}
	a.Close()
	a.Close() // twice is fine
	for i, w := range wakes {
		select {
		case <-w:
		case <-time.After(5 * time.Second):
			t.Fatalf("the watcher of %s was not woken", runs[i])
		}
	}
	// After Close an announcement is published on the caller's path.
	require.NoError(t, rec.Announce(ctx, runs[0], []store.Event{{ID: 999, Type: "x"}}))
	select {
	case <-wakes[0]:
	case <-time.After(5 * time.Second):
		t.Fatal("an announcement after Close was not published")
	}
}
