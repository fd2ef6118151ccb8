package defaults

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPositive(t *testing.T) {
	t.Parallel()
	type size int64
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{name: "int zero", got: Positive(0, 7), want: 7},
		{name: "int negative", got: Positive(-1, 7), want: 7},
		{name: "int positive", got: Positive(3, 7), want: 3},
		{name: "int32 negative", got: Positive(int32(-5), 9), want: int32(9)},
		{name: "int64 positive", got: Positive(int64(1)<<40, 1), want: int64(1) << 40},
		{name: "named int64 zero", got: Positive(size(0), 512<<20), want: size(512 << 20)},
		{name: "duration zero", got: Positive(time.Duration(0), time.Minute), want: time.Minute},
		{name: "duration negative", got: Positive(-time.Second, time.Minute), want: time.Minute},
		{name: "duration positive", got: Positive(time.Nanosecond, time.Minute), want: time.Nanosecond},
		{name: "float zero", got: Positive(0.0, 0.5), want: 0.5},
		{name: "float negative zero", got: Positive(math.Copysign(0, -1), 0.5), want: 0.5},
		{name: "float negative", got: Positive(-0.1, 0.5), want: 0.5},
		{name: "float positive", got: Positive(0.25, 0.5), want: 0.25},
		{name: "float infinity", got: Positive(math.Inf(1), 0.5), want: math.Inf(1)},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, c.want, c.got)
		})
	}
}

func TestNotNegative(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{name: "int zero", err: NotNegative("api.max_streams", 0)},
		{name: "int positive", err: NotNegative("api.max_streams", 3)},
		{name: "int negative", err: NotNegative("api.max_streams", -1),
			want: "api.max_streams: must not be negative (0 takes the default), got -1"},
		{name: "duration zero", err: NotNegative("api.sse_poll", time.Duration(0))},
		{name: "duration negative", err: NotNegative("api.sse_poll", -1500*time.Millisecond),
			want: "api.sse_poll: must not be negative (0 takes the default), got -1.5s"},
		{name: "float negative", err: NotNegative("x.weight", -0.5),
			want: "x.weight: must not be negative (0 takes the default), got -0.5"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if c.want == "" {
				require.NoError(t, c.err)
				return
			}
			require.EqualError(t, c.err, c.want)
		})
	}
}
