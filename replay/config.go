package replay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aetherium-engine/aetherium/internal/defaults"
	"github.com/aetherium-engine/aetherium/store"
)

// Defaults of Config.
const (
	// DefaultMaxMessages bounds the history messages a replay (or a fork)
	// walks over all of a run's sessions: well above a long run (a
	// thousand-step session holds about 2 000), far below what would keep a
	// worker busy for minutes.
	DefaultMaxMessages = 20_000
	// DefaultWait is how long an API process without the engine waits for a
	// worker to run the replay it handed over before it answers 503.
	DefaultWait = 2 * time.Minute
	// DefaultKeep is how long a worker's report stays in Redis, where the
	// API process collects it (and a repeated request finds it).
	DefaultKeep = 10 * time.Minute
)

// Config bounds replays and forks (the configuration's replay section).
type Config struct {
	// MaxMessages bounds the history messages of all the run's sessions that a
	// replay or a fork reads; a larger run is refused (ErrTooLarge) before
	// its record is read. Default DefaultMaxMessages.
	MaxMessages int `yaml:"max_messages"`
	// Wait is how long an API process without the worker's engine waits for
	// the worker that runs the replay or the fork; past it the answer is 503
	// and the same request collects the result later. Default DefaultWait.
	Wait time.Duration `yaml:"wait"`
	// Keep is how long a result a worker computed for an API process is kept:
	// the same request within it is answered from it. Default DefaultKeep.
	Keep time.Duration `yaml:"keep"`
}

// WithDefaults returns c with every unset field at its default.
func (c Config) WithDefaults() Config {
	c.MaxMessages = cmp.Or(c.MaxMessages, DefaultMaxMessages)
	c.Wait = cmp.Or(c.Wait, DefaultWait)
	c.Keep = cmp.Or(c.Keep, DefaultKeep)
	return c
}

// Validate reports every invalid field, naming its key.
func (c Config) Validate() error {
	return errors.Join(defaults.NotNegative("replay.max_messages", c.MaxMessages),
		defaults.NotNegative("replay.wait", c.Wait), defaults.NotNegative("replay.keep", c.Keep))
}

// ErrTooLarge refuses a run whose record is over replay.max_messages: a reader
// of the run cannot make the engine walk an unbounded record.
var ErrTooLarge = errors.New("run too large to replay")

// ErrPending is the answer of an API process that waited replay.wait for the
// worker it handed a replay or a fork to: the task goes on, and the same
// request collects its result.
var ErrPending = errors.New("the replay is still running on a worker")

// CheckSize refuses (ErrTooLarge, naming the limit) a run whose sessions hold
// more than max history messages together (max ≤ 0: DefaultMaxMessages). It
// reads the counts only, not the messages: the check costs one query whatever
// the run's size.
func CheckSize(runID string, sessions []store.SessionSummary, max int) error {
	max = defaults.Positive(max, DefaultMaxMessages)
	n := 0
	for _, s := range sessions {
		n += s.Messages
	}
	if n > max {
		return fmt.Errorf("%w: run %s holds %d messages in %d sessions, over replay.max_messages (%d): "+
			"a replay walks every message; raise replay.max_messages to replay it", ErrTooLarge, runID, n, len(sessions), max)
	}
	return nil
}

// Check is what Load refuses before it reads a message: a run that does not
// exist (store.ErrNotFound), has not ended (ErrNotFinished) or is over max
// messages (ErrTooLarge). An API process without the engine checks with it
// before it hands the replay to a worker.
func Check(ctx context.Context, r Reader, runID string, max int) (store.Run, []store.SessionSummary, error) {
	run, err := r.GetRun(ctx, runID)
	if err != nil {
		return store.Run{}, nil, err
	}
	if !store.Terminal(run.Status) {
		return store.Run{}, nil, fmt.Errorf("%w: run %s is %s; replay reads a finished run's record", ErrNotFinished, runID, run.Status)
	}
	sums, err := r.RunSessions(ctx, runID)
	if err != nil {
		return store.Run{}, nil, err
	}
	if err := CheckSize(runID, sums, max); err != nil {
		return store.Run{}, nil, err
	}
	return run, sums, nil
}
