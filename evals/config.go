package evals

import (
	"errors"
	"fmt"
	"time"

	"github.com/aetherium-engine/aetherium/internal/defaults"
)

// Defaults of Config.
const (
	// DefaultParallel is how many of a suite's runs go at once.
	DefaultParallel = 4
	// DefaultTaskTimeout is how long a task's run may take, from its
	// submission to its terminal event, unless the suite or the task says.
	DefaultTaskTimeout = 5 * time.Minute
	// DefaultMaxSuiteBytes caps a suite file: a suite is prompts and
	// assertions, and a file larger than this is a mistake or an attack on
	// the parser.
	DefaultMaxSuiteBytes = 1 << 20
	// DefaultMaxTasks caps a suite's tasks (each is a run on the fleet).
	DefaultMaxTasks = 500
	// DefaultMaxAssertions caps one task's assertions.
	DefaultMaxAssertions = 100
)

// MaxParallel bounds Config.Parallel: each run in flight holds one of the
// principal's event streams on the API.
const MaxParallel = 64

// Config bounds a suite and how it runs. It is the eval command's, not a
// section of aetherium.yaml: the flags set it. Zero fields take the defaults
// (WithDefaults).
type Config struct {
	// Parallel is how many runs of a suite go at once. Default DefaultParallel.
	Parallel int
	// TaskTimeout is a task's default timeout. Default DefaultTaskTimeout.
	TaskTimeout time.Duration
	// MaxSuiteBytes caps the suite file. Default DefaultMaxSuiteBytes.
	MaxSuiteBytes int
	// MaxTasks caps the suite's tasks. Default DefaultMaxTasks.
	MaxTasks int
	// MaxAssertions caps a task's assertions. Default DefaultMaxAssertions.
	MaxAssertions int
}

// WithDefaults returns c with every zero field filled in.
func (c Config) WithDefaults() Config {
	c.Parallel = defaults.Positive(c.Parallel, DefaultParallel)
	c.TaskTimeout = defaults.Positive(c.TaskTimeout, DefaultTaskTimeout)
	c.MaxSuiteBytes = defaults.Positive(c.MaxSuiteBytes, DefaultMaxSuiteBytes)
	c.MaxTasks = defaults.Positive(c.MaxTasks, DefaultMaxTasks)
	c.MaxAssertions = defaults.Positive(c.MaxAssertions, DefaultMaxAssertions)
	return c
}

// Validate reports every invalid field.
func (c Config) Validate() error {
	errs := []error{
		defaults.NotNegative("task timeout", c.TaskTimeout),
		defaults.NotNegative("max suite bytes", c.MaxSuiteBytes),
		defaults.NotNegative("max tasks", c.MaxTasks),
		defaults.NotNegative("max assertions", c.MaxAssertions),
	}
	if c.Parallel < 0 || c.Parallel > MaxParallel {
		errs = append(errs, fmt.Errorf("parallel: want 1 to %d, got %d", MaxParallel, c.Parallel))
	}
	return errors.Join(errs...)
}
