package wsquota_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/aetherium-engine/aetherium/wsquota"
	"github.com/aetherium-engine/aetherium/wsquota/wsquotatest"
)

// The cost of a workspace (docs/quota.md): go test ./wsquota -run '^$' -bench .
// -benchtime 50x. New is a sparse image, mkfs.ext4 and the mount; Mounted is the
// check every agent step makes; Remount is a sweep's unmount and the next Open.
func BenchmarkOpen(b *testing.B) {
	for _, quota := range []wsquota.Size{16 << 20, wsquota.DefaultQuota, 10 << 30} {
		b.Run("New/"+quota.String(), func(b *testing.B) {
			m := wsquotatest.Manager(b, quota)
			ctx := context.Background()
			b.ResetTimer()
			for i := range b.N {
				if _, err := m.Open(ctx, fmt.Sprintf("ws-%d", i)); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if err := wsquota.UnmountAll(m.Root()); err != nil {
				b.Fatal(err)
			}
		})
	}
	// From a spare: the rename and the mount, the refill off the clock's path
	// (it runs beside the loop, as it does beside a worker's steps).
	b.Run("NewFromSpare/"+wsquota.DefaultQuota.String(), func(b *testing.B) {
		m, err := wsquota.New(wsquotatest.Root(b), wsquota.Config{Quota: wsquota.DefaultQuota, Spares: b.N + 1})
		if err != nil {
			b.Fatal(err)
		}
		defer m.Close()
		ctx := context.Background()
		if _, err := m.Open(ctx, "warm"); err != nil {
			b.Fatal(err)
		}
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
			got, _ := filepath.Glob(filepath.Join(m.Root(), wsquota.ImagesDir, wsquota.SparesDir, "*.ext4"))
			if len(got) >= b.N+1 {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("%d of %d spares after a minute", len(got), b.N+1)
			}
		}
		b.ResetTimer()
		for i := range b.N {
			if _, err := m.Open(ctx, fmt.Sprintf("ws-%d", i)); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		m.Close()
		if err := wsquota.UnmountAll(m.Root()); err != nil {
			b.Fatal(err)
		}
	})
	b.Run("Mounted", func(b *testing.B) {
		m, ctx := mountedOne(b)
		for range b.N {
			if _, err := m.Open(ctx, "ws"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Remount", func(b *testing.B) {
		m, ctx := mountedOne(b)
		for range b.N {
			if err := m.Unmount(ctx, "ws"); err != nil {
				b.Fatal(err)
			}
			if _, err := m.Open(ctx, "ws"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// mountedOne returns a Manager with workspace "ws" mounted, the timer reset.
func mountedOne(b *testing.B) (*wsquota.Manager, context.Context) {
	m := wsquotatest.Manager(b, wsquota.DefaultQuota)
	ctx := context.Background()
	if _, err := m.Open(ctx, "ws"); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	return m, ctx
}
