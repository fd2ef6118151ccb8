package wsquota_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/aetherium-engine/aetherium/wsquota"
)

// tiered is a Manager whose Temp tier has the 16 MiB test quota and whose
// Production tier has 48 MiB in a location of its own.
func tiered(t *testing.T) *wsquota.Manager {
	t.Helper()
	return manager(t, wsquota.Config{Spares: 1, Tiers: wsquota.TiersConfig{
		Production: wsquota.TierConfig{Quota: 48 << 20, Location: "production"},
		Staging:    wsquota.TierConfig{Location: "staging"},
	}})
}

// fill writes n MiB into dir/name and returns the first error (a Sync's too).
func fill(dir, name string, n int) error {
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		return err
	}
	chunk := make([]byte, 1<<20)
	for range n {
		if _, err := f.Write(chunk); err != nil {
			_ = f.Close()
			return err
		}
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func TestTierOfAndIDShapes(t *testing.T) {
	t.Parallel()
	u := uuid.NewString()
	cases := []struct {
		id   string
		tier wsquota.Tier
		// shape: IsTierID(tier, id)
		shape bool
	}{
		{id: u, tier: wsquota.TierTemp, shape: true},
		{id: "project-" + u, tier: wsquota.TierProduction, shape: true},
		{id: "staging-" + u, tier: wsquota.TierStaging, shape: true},
		{id: "production", tier: wsquota.TierTemp},              // a tier's location under the root
		{id: "project-x", tier: wsquota.TierProduction},         // not a project id
		{id: strings.ToUpper(u), tier: wsquota.TierTemp},        // not canonical
		{id: "staging-project-" + u, tier: wsquota.TierStaging}, // not a run id
	}
	for _, c := range cases {
		require.Equal(t, c.tier, wsquota.TierOf(c.id), c.id)
		require.Equal(t, c.shape, wsquota.IsTierID(c.tier, c.id), c.id)
	}
}

func TestTierConfigRefusesHostileLocations(t *testing.T) {
	t.Parallel()
	bad := []string{"../elsewhere", "a/../../etc", "..", "/srv/../etc", "a//b", "a/./b", "a/", "/", ".", ".images", ".hidden/x", "a\x00b", `a\..\b`}
	for _, loc := range bad {
		cfg := wsquota.Defaults()
		cfg.Tiers.Temp.Location = loc
		err := cfg.Validate()
		require.Error(t, err, "%q", loc)
		require.Contains(t, err.Error(), "workspace_tiers.temp.location", loc)
		_, err = wsquota.New(t.TempDir(), cfg)
		require.Error(t, err, "New refuses %q too", loc)
	}
	for _, loc := range []string{"", "temp", "tiers/temp", "/srv/aetherium/temp"} {
		cfg := wsquota.Defaults()
		cfg.Tiers.Temp.Location = loc
		require.NoError(t, cfg.Validate(), "%q", loc)
	}
	cfg := wsquota.Defaults()
	cfg.Tiers.Production.Quota = 1 << 20
	cfg.Tiers.Staging.Retention = -1
	err := cfg.Validate()
	require.ErrorContains(t, err, "workspace_tiers.production.quota")
	require.ErrorContains(t, err, "workspace_tiers.staging.retention")

	var fromYAML wsquota.Config
	require.NoError(t, yaml.Unmarshal([]byte("workspace_quota: 1GiB\nworkspace_tiers:\n  production: {quota: 8GiB, retention: 0s, location: prod}\n  temp: {retention: 72h}\n"), &fromYAML))
	require.Equal(t, wsquota.Size(8<<30), fromYAML.Tiers.Production.Quota)
	require.Equal(t, "prod", fromYAML.Tiers.Production.Location)
	require.Equal(t, "72h0m0s", fromYAML.Tiers.Temp.Retention.String())
}

// The check: a Temp workspace over its quota fails with the quota
// error; a Production one given the same bytes does not.
func TestTempOverQuotaFailsProductionOfSameSizeDoesNot(t *testing.T) {
	t.Parallel()
	m := tiered(t)
	ctx := context.Background()
	temp, prod := uuid.NewString(), "project-"+uuid.NewString()

	tempDir, err := m.Open(ctx, temp)
	require.NoError(t, err)
	prodDir, err := m.Open(ctx, prod)
	require.NoError(t, err)
	require.Equal(t, filepath.Join(m.Root(), temp), tempDir)
	require.Equal(t, filepath.Join(m.Root(), "production", prod), prodDir, "Production has its location")
	require.Equal(t, prodDir, m.Dir(prod))
	require.Equal(t, filepath.Join(m.Root(), "production", wsquota.ImagesDir, prod+".ext4"), m.Image(prod))

	const size = 24 // MiB: over Temp's 16, within Production's 48
	werr := fill(tempDir, "big.bin", size)
	require.ErrorIs(t, werr, syscall.ENOSPC)
	qerr := wsquota.Explain(tempDir, werr)
	require.ErrorIs(t, qerr, wsquota.ErrExceeded)
	require.Regexp(t, `^workspace quota exceeded: 1[56]\.\d MiB of 16\.0 MiB`, qerr.Error())

	require.NoError(t, fill(prodDir, "big.bin", size), "Production's quota takes it")
	u, ok := wsquota.UsageOf(prodDir)
	require.True(t, ok)
	require.Equal(t, int64(48<<20), u.Limit)
	require.False(t, u.Full())

	// Both are mounted and listed; the sweep unmounts in every location.
	mounted, err := m.Mounted()
	require.NoError(t, err)
	require.ElementsMatch(t, []string{temp, prod}, mounted)
	swept, err := m.Sweep(ctx, func(context.Context, string) bool { return true })
	require.NoError(t, err)
	require.ElementsMatch(t, []string{temp, prod}, swept)
	// Reopened, Production still has its file: its tier is the id's, not a guess.
	prodDir, err = m.Open(ctx, prod)
	require.NoError(t, err)
	fi, err := os.Stat(filepath.Join(prodDir, "big.bin"))
	require.NoError(t, err)
	require.Equal(t, int64(size<<20), fi.Size())
}

func TestListAndRemoveTierWorkspaces(t *testing.T) {
	t.Parallel()
	m := tiered(t)
	ctx := context.Background()
	temp, kept, prod := uuid.NewString(), uuid.NewString(), "project-"+uuid.NewString()
	for _, id := range []string{temp, kept, prod} {
		dir, err := m.Open(ctx, id)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "f"), []byte(id), 0o644))
	}
	// Not a workspace of the tier's shape: never listed, so never removed.
	require.NoError(t, os.MkdirAll(filepath.Join(m.Root(), "operator-notes"), 0o755))

	ids := func(tier wsquota.Tier) []string {
		es, err := m.List(tier)
		require.NoError(t, err)
		var out []string
		for _, e := range es {
			require.False(t, e.Modified.IsZero())
			out = append(out, e.ID)
		}
		return out
	}
	require.ElementsMatch(t, []string{temp, kept}, ids(wsquota.TierTemp))
	require.ElementsMatch(t, []string{prod}, ids(wsquota.TierProduction))
	require.Empty(t, ids(wsquota.TierStaging))

	removed, err := m.Remove(ctx, kept, func(context.Context, string) bool { return true })
	require.NoError(t, err)
	require.False(t, removed, "keep said keep")
	image := m.Image(temp)
	removed, err = m.Remove(ctx, temp, nil)
	require.NoError(t, err)
	require.True(t, removed)
	for _, p := range []string{m.Dir(temp), image, filepath.Join(m.Root(), wsquota.ImagesDir, temp+".lock")} {
		_, err := os.Lstat(p)
		require.ErrorIs(t, err, os.ErrNotExist, p)
	}
	require.ElementsMatch(t, []string{kept}, ids(wsquota.TierTemp))
	removed, err = m.Remove(ctx, temp, nil)
	require.NoError(t, err)
	require.False(t, removed, "nothing left to remove")

	// A workspace in use stays, with an error saying so.
	f, err := os.Open(filepath.Join(m.Dir(kept), "f"))
	require.NoError(t, err)
	_, err = m.Remove(ctx, kept, nil)
	require.ErrorContains(t, err, "in use")
	require.NoError(t, f.Close())
	data, err := os.ReadFile(filepath.Join(m.Dir(kept), "f"))
	require.NoError(t, err)
	require.Equal(t, kept, string(data))
}

func TestPromoteReplacesProductionWithStaging(t *testing.T) {
	t.Parallel()
	m := tiered(t)
	ctx := context.Background()
	staging, prod := "staging-"+uuid.NewString(), "project-"+uuid.NewString()

	prodDir, err := m.Open(ctx, prod)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(prodDir, "old.txt"), []byte("old"), 0o644))
	sdir, err := m.Open(ctx, staging)
	require.NoError(t, err)
	require.Equal(t, filepath.Join(m.Root(), "staging", staging), sdir)
	require.NoError(t, os.MkdirAll(filepath.Join(sdir, "src", "deep"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(sdir, "src", "deep", "main.go"), []byte("package main"), 0o640))
	require.NoError(t, os.WriteFile(filepath.Join(sdir, "run.sh"), []byte("#!/bin/sh"), 0o4755))
	require.NoError(t, os.Chown(filepath.Join(sdir, "run.sh"), 10001, 10001))
	// Links are copied as links, never followed: the host's files stay out.
	require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(sdir, "passwd")))
	require.NoError(t, os.Symlink("../../../../..", filepath.Join(sdir, "up")))
	require.NoError(t, syscall.Mkfifo(filepath.Join(sdir, "fifo"), 0o644))

	require.NoError(t, m.Promote(ctx, staging, prod))

	// Production was unmounted and its image replaced: Open mounts the new one.
	prodDir, err = m.Open(ctx, prod)
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(prodDir, "old.txt"))
	require.ErrorIs(t, err, os.ErrNotExist, "promotion replaces, it does not merge")
	data, err := os.ReadFile(filepath.Join(prodDir, "src", "deep", "main.go"))
	require.NoError(t, err)
	require.Equal(t, "package main", string(data))
	fi, err := os.Stat(filepath.Join(prodDir, "run.sh"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o755), fi.Mode().Perm())
	require.Zero(t, fi.Mode()&os.ModeSetuid, "set-id bits dropped")
	require.Equal(t, uint32(10001), fi.Sys().(*syscall.Stat_t).Uid, "owner kept")
	target, err := os.Readlink(filepath.Join(prodDir, "passwd"))
	require.NoError(t, err)
	require.Equal(t, "/etc/passwd", target)
	li, err := os.Lstat(filepath.Join(prodDir, "passwd"))
	require.NoError(t, err)
	require.NotZero(t, li.Mode()&os.ModeSymlink)
	_, err = os.Lstat(filepath.Join(prodDir, "fifo"))
	require.ErrorIs(t, err, os.ErrNotExist, "a pipe is not workspace content")
	u, ok := wsquota.UsageOf(prodDir)
	require.True(t, ok)
	require.Equal(t, int64(48<<20), u.Limit, "Production's quota, not Staging's")
	// The staging workspace is as it was.
	_, err = os.Stat(filepath.Join(sdir, "src", "deep", "main.go"))
	require.NoError(t, err)

	// A Production workspace in use is not replaced.
	f, err := os.Open(filepath.Join(prodDir, "run.sh"))
	require.NoError(t, err)
	err = m.Promote(ctx, staging, prod)
	require.ErrorContains(t, err, "in use")
	require.NoError(t, f.Close())

	// Nothing to promote; ids that are paths.
	require.ErrorIs(t, m.Promote(ctx, "staging-"+uuid.NewString(), prod), wsquota.ErrNoWorkspace)
	require.Error(t, m.Promote(ctx, "../"+staging, prod))
	require.Error(t, m.Promote(ctx, staging, "project-x/../../etc"))
}

func TestPromoteOverProductionQuotaLeavesItAsItWas(t *testing.T) {
	t.Parallel()
	// Staging larger than Production: the copy does not fit.
	m := manager(t, wsquota.Config{Tiers: wsquota.TiersConfig{Staging: wsquota.TierConfig{Quota: 48 << 20}}})
	ctx := context.Background()
	staging, prod := "staging-"+uuid.NewString(), "project-"+uuid.NewString()
	prodDir, err := m.Open(ctx, prod)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(prodDir, "keep.txt"), []byte("v1"), 0o644))
	sdir, err := m.Open(ctx, staging)
	require.NoError(t, err)
	require.NoError(t, fill(sdir, "big.bin", 24))

	err = m.Promote(ctx, staging, prod)
	require.ErrorIs(t, err, wsquota.ErrExceeded)
	require.Regexp(t, `workspace quota exceeded: .* of 16\.0 MiB`, err.Error())
	var qe *wsquota.ExceededError
	require.True(t, errors.As(err, &qe))

	data, err := os.ReadFile(filepath.Join(prodDir, "keep.txt"))
	require.NoError(t, err, "Production untouched (still mounted)")
	require.Equal(t, "v1", string(data))
	leftovers, err := filepath.Glob(filepath.Join(m.Root(), wsquota.ImagesDir, "*promote*"))
	require.NoError(t, err)
	require.Empty(t, leftovers)
}

func TestPromoteWithoutQuotas(t *testing.T) {
	t.Parallel()
	m, err := wsquota.New(t.TempDir(), wsquota.Config{})
	require.NoError(t, err)
	ctx := context.Background()
	staging, prod := "staging-"+uuid.NewString(), "project-"+uuid.NewString()
	prodDir, err := m.Open(ctx, prod)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(prodDir, "old"), nil, 0o644))
	sdir, err := m.Open(ctx, staging)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(sdir, "new"), []byte("n"), 0o644))
	require.NoError(t, m.Promote(ctx, staging, prod))
	_, err = os.Stat(filepath.Join(prodDir, "old"))
	require.ErrorIs(t, err, os.ErrNotExist)
	data, err := os.ReadFile(filepath.Join(prodDir, "new"))
	require.NoError(t, err)
	require.Equal(t, "n", string(data))
	left, err := filepath.Glob(filepath.Join(m.Root(), ".*"+prod+"*"))
	require.NoError(t, err)
	require.Empty(t, left, "no copy or old directory left beside them")
}
