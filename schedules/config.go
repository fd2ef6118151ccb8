package schedules

import (
	"errors"
	"fmt"
	"time"

	"github.com/aetherium-engine/aetherium/internal/defaults"
)

// Defaults of Config.
const (
	// DefaultPeriod is how often a scheduler process looks for due ticks.
	DefaultPeriod = time.Second
	// DefaultMinInterval is the shortest gap between two ticks a schedule may
	// have; a cron expression with a seconds field is refused unless MinInterval
	// is under a minute.
	DefaultMinInterval = time.Minute
	// DefaultMaxJitter caps a schedule's jitter.
	DefaultMaxJitter = time.Hour
	// DefaultMaxCatchUp caps N of catch-up policy "all" (and the missed ticks
	// recorded one by one after a downtime).
	DefaultMaxCatchUp = 100
	// DefaultLateAfter is how late a tick may be found and still count as on
	// time; a tick found later was missed (the schedulers were down) and the
	// schedule's catch-up policy decides.
	DefaultLateAfter = time.Minute
	// DefaultResubmitAfter is how long a claimed tick may stay unsubmitted
	// before another scheduler resubmits it (same idempotency key).
	DefaultResubmitAfter = 30 * time.Second
	// DefaultBatch is how many due schedules one claim transaction takes.
	DefaultBatch = 100
	// DefaultMaxAttempts is how often a tick's submit may fail with an error
	// that is not a refusal (the database, Redis) before it is recorded failed.
	DefaultMaxAttempts = 5
)

// Config is the `schedules` section of aetherium.yaml: the bounds the API checks
// a schedule against and the loop of the scheduler role that fires them. Zero
// fields take the defaults (WithDefaults).
type Config struct {
	// Period is how often each scheduler process claims due ticks. Default
	// DefaultPeriod.
	Period time.Duration `yaml:"period"`
	// MinInterval is the shortest gap between two ticks of a schedule; under a
	// minute, cron expressions may have a seconds field (six fields). Default
	// DefaultMinInterval.
	MinInterval time.Duration `yaml:"min_interval"`
	// MaxJitter caps a schedule's jitter. Default DefaultMaxJitter.
	MaxJitter time.Duration `yaml:"max_jitter"`
	// MaxCatchUp caps a schedule's catch_up_limit (catch-up policy all). Default
	// DefaultMaxCatchUp.
	MaxCatchUp int `yaml:"max_catch_up"`
	// LateAfter is how late a tick may fire and still be on time; older ticks
	// were missed and the catch-up policy decides. Default DefaultLateAfter.
	LateAfter time.Duration `yaml:"late_after"`
	// ResubmitAfter is how long a claimed tick may stay unsubmitted (its
	// scheduler died between claim and submit) before another scheduler
	// submits it with the same idempotency key. Default DefaultResubmitAfter.
	ResubmitAfter time.Duration `yaml:"resubmit_after"`
	// Batch is how many due schedules one claim takes. Default DefaultBatch.
	// Not a configuration key.
	Batch int `yaml:"-"`
	// MaxAttempts bounds a tick's failed submits. Default DefaultMaxAttempts.
	// Not a configuration key.
	MaxAttempts int `yaml:"-"`
}

// WithDefaults returns c with every zero field filled in.
func (c Config) WithDefaults() Config {
	c.Period = defaults.Positive(c.Period, DefaultPeriod)
	c.MinInterval = defaults.Positive(c.MinInterval, DefaultMinInterval)
	c.MaxJitter = defaults.Positive(c.MaxJitter, DefaultMaxJitter)
	c.MaxCatchUp = defaults.Positive(c.MaxCatchUp, DefaultMaxCatchUp)
	c.LateAfter = defaults.Positive(c.LateAfter, DefaultLateAfter)
	c.ResubmitAfter = defaults.Positive(c.ResubmitAfter, DefaultResubmitAfter)
	c.Batch = defaults.Positive(c.Batch, DefaultBatch)
	c.MaxAttempts = defaults.Positive(c.MaxAttempts, DefaultMaxAttempts)
	return c
}

// MaxCatchUpLimit bounds schedules.max_catch_up.
const MaxCatchUpLimit = 1000

// Validate reports every invalid field, naming its key.
func (c Config) Validate() error {
	errs := []error{
		defaults.NotNegative("schedules.period", c.Period),
		defaults.NotNegative("schedules.max_jitter", c.MaxJitter),
		defaults.NotNegative("schedules.late_after", c.LateAfter),
		defaults.NotNegative("schedules.resubmit_after", c.ResubmitAfter),
	}
	if c.MinInterval < 0 || (c.MinInterval > 0 && (c.MinInterval < time.Second || c.MinInterval%time.Second != 0)) {
		errs = append(errs, fmt.Errorf("schedules.min_interval: want a whole number of seconds, at least 1s, got %s", c.MinInterval))
	}
	if c.MaxCatchUp < 0 || c.MaxCatchUp > MaxCatchUpLimit {
		errs = append(errs, fmt.Errorf("schedules.max_catch_up: want 1 to %d, got %d", MaxCatchUpLimit, c.MaxCatchUp))
	}
	return errors.Join(errs...)
}
