package lease

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Layout is the version of the lease key family's layout (package doc, "Keys
// and Redis Cluster"), kept in {<prefix>}:layout. Layout 1 was the family
// before the shared hash tag (<prefix>:{<service>}:…), which wrote no layout
// key; 2 is the shared tag. Adding a key or a hash field that older processes
// ignore keeps the layout; renaming or re-shaping a key raises it, and such an
// upgrade is not rolling (docs/how-to/upgrade.md).
const Layout = 2

// ErrFutureLayout is wrapped by CheckLayout's error when a newer build's
// layout is in Redis.
var ErrFutureLayout = errors.New("lease keys are of a newer layout than this build knows")

// CheckLayout records Layout in {<prefix>}:layout when no layout (or an older
// one) is recorded, and refuses a newer one: a process that granted from other
// keys than its peers could exceed a service's capacity, so it must not start.
func (m *Manager) CheckLayout(ctx context.Context) error {
	return checkLayout(ctx, m.rdb, m.tag()+":layout", Layout)
}

func checkLayout(ctx context.Context, rdb redis.UniversalClient, key string, mine int) error {
	if err := rdb.SetNX(ctx, key, mine, 0).Err(); err != nil {
		return fmt.Errorf("lease layout %s: %w", key, err)
	}
	raw, err := rdb.Get(ctx, key).Result()
	if err != nil {
		return fmt.Errorf("lease layout %s: %w", key, err)
	}
	got, err := strconv.Atoi(raw)
	switch {
	case err != nil:
		return fmt.Errorf("lease layout %s: %q is not a version", key, raw)
	case got > mine:
		return fmt.Errorf("%w: %s is layout %d, this build knows %d: processes of a newer build use these keys; "+
			"roll forward, or stop every worker and delete the family before starting this build (docs/how-to/upgrade.md)",
			ErrFutureLayout, key, got, mine)
	case got < mine:
		return rdb.Set(ctx, key, mine, 0).Err()
	}
	return nil
}
