package wsquota_test

import (
	"context"
	"fmt"
	"testing"

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
