// Package wsquotatest gives tests quota workspaces on real loop mounts. Without
// what they need (root, loop devices, mkfs.ext4) a test fails under CI=true and
// skips otherwise.
package wsquotatest

import (
	"os"
	"testing"

	"github.com/aetherium-engine/aetherium/wsquota"
)

// Require fails (CI=true) or skips the test when this host cannot make quota
// workspaces, with the reason.
func Require(t testing.TB) {
	t.Helper()
	m, err := wsquota.New(t.TempDir(), wsquota.Config{Quota: wsquota.MinQuota})
	if err == nil {
		err = m.Check()
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%v (CI=true: quota workspaces are required)", err)
		}
		t.Skip(err)
	}
}

// Root returns a fresh workspaces root whose mounts are all gone at cleanup.
func Root(t testing.TB) string {
	t.Helper()
	root := t.TempDir()
	// Registered after TempDir's removal, so it runs first.
	t.Cleanup(func() {
		if err := wsquota.UnmountAll(root); err != nil {
			t.Errorf("unmount the test's workspaces: %v", err)
		}
	})
	return root
}

// Manager returns a Manager with the given quota on a fresh root (Require first).
func Manager(t testing.TB, quota wsquota.Size) *wsquota.Manager {
	t.Helper()
	Require(t)
	m, err := wsquota.New(Root(t), wsquota.Config{Quota: quota})
	if err != nil {
		t.Fatal(err)
	}
	return m
}
