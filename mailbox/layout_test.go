package mailbox_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/internal/testdb"
	"github.com/aetherium-engine/aetherium/mailbox"
)

// The mailbox family records its layout; a process refuses keys of a newer
// layout.
func TestMailboxLayoutIsRecordedAndANewerOneRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb := testdb.Connect(t, testdb.Redis(t))
	mb := mailbox.New(rdb, mailbox.Config{Prefix: "mt"}, mailbox.Options{})
	require.NoError(t, mb.CheckLayout(ctx))
	got, err := rdb.Get(ctx, mb.LayoutKey()).Result()
	require.NoError(t, err)
	require.Equal(t, "1", got)
	require.NoError(t, rdb.Set(ctx, mb.LayoutKey(), 2, 0).Err())
	err = mb.CheckLayout(ctx)
	require.ErrorIs(t, err, mailbox.ErrFutureLayout)
	require.ErrorContains(t, err, "mt:layout is layout 2, this build knows 1")
}
