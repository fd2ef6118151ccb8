package fair_test

import (
	"fmt"
	"testing"

	"github.com/aetherium-engine/aetherium/internal/testdb"
	"github.com/aetherium-engine/aetherium/queue/fair"
)

// BenchmarkSubmitStartDone is one task's whole life: Submit (dispatched at
// once), Started, Done — three scripts, on a private single node.
func BenchmarkSubmitStartDone(b *testing.B) {
	d, err := fair.New(testdb.Connect(b, testdb.Redis(b)), fair.Config{})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := d.Heartbeat(ctx, "w", 1_000_000, nil); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		id := fmt.Sprintf("t%d", i)
		got, err := d.Submit(ctx, fair.Task{ID: id, Key: fmt.Sprintf("k%d", i%100), Weight: 1, Priority: 3, Spec: []byte("spec")})
		if err != nil || len(got) != 1 {
			b.Fatal(got, err)
		}
		if err := d.Started(ctx, "w", id, got[0].Key); err != nil {
			b.Fatal(err)
		}
		if _, err := d.Done(ctx, id); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPing is a plain round trip to the same kind of server, for scale.
func BenchmarkPing(b *testing.B) {
	rdb := testdb.Connect(b, testdb.Redis(b))
	for range b.N {
		if err := rdb.Ping(ctx).Err(); err != nil {
			b.Fatal(err)
		}
	}
}
