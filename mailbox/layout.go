package mailbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"
)

// Layout is the version of the mailbox key family's layout
// (<prefix>:{<run>}:q:<agent>, :agents, :ids, :closed, <prefix>:runs and
// <prefix>:dead), kept in <prefix>:layout. Adding a key or a field older
// processes ignore keeps the layout; renaming or re-shaping a key raises it
// (docs/how-to/upgrade.md).
const Layout = 1

// ErrFutureLayout is wrapped by CheckLayout's error when a newer build's
// layout is in Redis.
var ErrFutureLayout = errors.New("mailbox keys are of a newer layout than this build knows")

// LayoutKey is where the family's layout version is kept.
func (mb *Mailbox) LayoutKey() string { return mb.cfg.Prefix + ":layout" }

// CheckLayout records Layout when no layout (or an older one) is recorded, and
// refuses a newer one: this build would read and write other keys than its
// peers and lose their messages.
func (mb *Mailbox) CheckLayout(ctx context.Context) error {
	key := mb.LayoutKey()
	if err := mb.rdb.SetNX(ctx, key, Layout, 0).Err(); err != nil {
		return fmt.Errorf("mailbox layout %s: %w", key, err)
	}
	raw, err := mb.rdb.Get(ctx, key).Result()
	if err != nil {
		return fmt.Errorf("mailbox layout %s: %w", key, err)
	}
	got, err := strconv.Atoi(raw)
	switch {
	case err != nil:
		return fmt.Errorf("mailbox layout %s: %q is not a version", key, raw)
	case got > Layout:
		return fmt.Errorf("%w: %s is layout %d, this build knows %d: processes of a newer build use these keys; "+
			"roll forward, or drain the runs and delete the family before starting this build (docs/how-to/upgrade.md)",
			ErrFutureLayout, key, got, Layout)
	case got < Layout:
		return mb.rdb.Set(ctx, key, Layout, 0).Err()
	}
	return nil
}
