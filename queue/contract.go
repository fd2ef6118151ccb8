package queue

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/hibiken/asynq"
)

// Contract versions of the task payloads (docs/how-to/upgrade.md).
//
// Every payload this package writes carries its contract version in the field
// "v" (absent: version 1, the payloads of every build before versions existed).
// A worker reads MinContractVersion through ContractVersion; it writes
// ContractVersion only once every process of the fleet reads it (Config.Contract
// says which version the fleet agrees on), else the older one, so a worker of
// the previous build never receives a payload it cannot read during a rolling
// upgrade.
//
// Version 2 adds only the field itself (a version-1 reader ignores it). A later
// change a version-1 reader cannot read raises ContractVersion, lifts
// MinContractVersion to the old ContractVersion, and writes the old form in
// versioned() while the fleet is behind.
const (
	// ContractVersion is the newest payload contract this build reads and writes.
	ContractVersion = 2
	// MinContractVersion is the oldest payload contract this build reads (N−1).
	MinContractVersion = 1
)

// versionKey is the payload field of the contract version.
const versionKey = `"v":`

// ErrFutureContract is wrapped by the error of a task whose payload is of a
// contract newer than this build reads. The error is not asynq.SkipRetry: the
// task is retried (an upgraded worker may take it) and, once its retries are
// spent, archived with the error as its last error (asynqmon's Archived tab,
// `aetherium` dead letters) — never dropped.
var ErrFutureContract = errors.New("task payload contract is newer than this worker reads")

// ContractOf is the contract version of t's payload: its "v" field, 1 when it
// has none (payloads before versions, maintenance ticks' empty payloads). An
// error for a "v" that is not a positive integer.
func ContractOf(t *asynq.Task) (int, error) {
	p := t.Payload()
	if !bytes.Contains(p, []byte(versionKey)) {
		return 1, nil
	}
	var s struct {
		V *json.RawMessage `json:"v"`
	}
	if err := json.Unmarshal(p, &s); err != nil {
		return 0, fmt.Errorf("%s: bad payload: %v", t.Type(), err)
	}
	if s.V == nil {
		return 1, nil // "v": inside a string value, not a field
	}
	v, err := strconv.Atoi(string(*s.V))
	if err != nil || v < 1 {
		return 0, fmt.Errorf("%s: bad payload: contract version %s is not a positive integer", t.Type(), *s.V)
	}
	return v, nil
}

// CheckContract refuses a task this build cannot read: a malformed version is
// a bad payload (asynq.SkipRetry: archived at once), a version older than
// MinContractVersion too (no build of this fleet writes it any more), and a
// newer one wraps ErrFutureContract (retried, then archived with the reason).
func CheckContract(t *asynq.Task) error {
	v, err := ContractOf(t)
	switch {
	case err != nil:
		return fmt.Errorf("%w: %v", asynq.SkipRetry, err)
	case v > ContractVersion:
		return fmt.Errorf("%w: %s payload is contract v%d, this worker reads v%d to v%d; "+
			"retried so that an upgraded worker takes it, archived with this reason once its retries are spent "+
			"(upgrade the workers, then run it again from asynqmon)",
			ErrFutureContract, t.Type(), v, MinContractVersion, ContractVersion)
	case v < MinContractVersion:
		return fmt.Errorf("%w: %s payload is contract v%d, older than this worker reads (v%d to v%d)",
			asynq.SkipRetry, t.Type(), v, MinContractVersion, ContractVersion)
	}
	return nil
}

// ContractMiddleware refuses, before its handler runs, every task whose
// payload contract this build cannot read (CheckContract): the task types that
// do not go through Decode (maintenance ticks) included.
func ContractMiddleware(next asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		if err := CheckContract(t); err != nil {
			return err
		}
		return next.ProcessTask(ctx, t)
	})
}

// writeVersion is the contract version the Enqueuer writes now: the fleet's
// (Config.Contract), never above ContractVersion nor below MinContractVersion.
func (e *Enqueuer) writeVersion() int {
	if e.cfg.Contract == nil {
		return ContractVersion
	}
	return min(max(e.cfg.Contract(), MinContractVersion), ContractVersion)
}

// versioned returns t with contract version v at the head of its JSON object
// payload. Version 1 is the absence of the field (what a build before versions
// wrote and reads), so a v of 1 leaves t as it is; so does a payload that is
// not an object or already carries a version.
func versioned(t *asynq.Task, v int) *asynq.Task {
	p := t.Payload()
	if v <= 1 || len(p) < 2 || p[0] != '{' || bytes.Contains(p, []byte(versionKey)) {
		return t
	}
	out := make([]byte, 0, len(p)+len(versionKey)+4)
	out = append(out, '{')
	out = append(out, versionKey...)
	out = strconv.AppendInt(out, int64(v), 10)
	if rest := bytes.TrimSpace(p[1:]); len(rest) > 0 && rest[0] != '}' {
		out = append(out, ',')
	}
	out = append(out, p[1:]...)
	return asynq.NewTask(t.Type(), out)
}
