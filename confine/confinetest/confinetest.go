// Package confinetest plants the hostile files an agent can leave in a
// workspace (a FIFO, a unix socket, a symlink loop, a symlink out of the
// workspace, a 10 GiB sparse file) so each host-side reader's tests can check
// that it refuses them promptly and reads nothing outside the workspace.
package confinetest

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Kind is one hostile file.
type Kind string

const (
	FIFO    Kind = "fifo"
	Socket  Kind = "socket"
	Loop    Kind = "symlink loop"
	Outside Kind = "symlink outside"
	Sparse  Kind = "10 GiB sparse file"
)

// Kinds is every hostile file, for a table-driven test.
var Kinds = []Kind{FIFO, Socket, Loop, Outside, Sparse}

// Secret is the content of the file an Outside symlink leads to: a reader's
// output must never contain it.
const Secret = "confinetest-secret-outside-the-workspace"

// Plant creates a hostile file of kind k at dir/rel (parents created).
func Plant(t testing.TB, dir, rel string, k Kind) {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	var err error
	switch k {
	case FIFO:
		err = syscall.Mkfifo(p, 0o644)
	case Socket:
		// mknod makes a socket inode without a listener (and without the
		// 108-byte limit of a unix socket address).
		err = syscall.Mknod(p, syscall.S_IFSOCK|0o644, 0)
	case Loop:
		if err = os.Symlink(filepath.Base(p)+".b", p); err == nil {
			err = os.Symlink(filepath.Base(p), p+".b")
		}
	case Outside:
		secret := filepath.Join(t.TempDir(), filepath.Base(p))
		if err = os.WriteFile(secret, []byte(Secret), 0o644); err == nil {
			err = os.Symlink(secret, p)
		}
	case Sparse:
		var f *os.File
		if f, err = os.Create(p); err == nil {
			err = f.Truncate(10 << 30)
			_ = f.Close()
		}
	default:
		t.Fatalf("confinetest: unknown kind %q", k)
	}
	if err != nil {
		t.Fatalf("plant %s at %s: %v", k, rel, err)
	}
}

// Timeout is how long Prompt waits for a call.
const Timeout = 10 * time.Second

// Prompt runs call in a goroutine and fails the test if it has not returned
// within Timeout (a reader blocked opening a FIFO never returns); it returns
// call's result. A call that fails its test (t.FailNow in the goroutine) ends
// the wait too.
func Prompt[T any](t testing.TB, call func() T) T {
	t.Helper()
	var v T
	done := make(chan struct{})
	go func() {
		defer close(done)
		v = call()
	}()
	select {
	case <-done:
		return v
	case <-time.After(Timeout):
		t.Fatalf("the call did not return within %s: it hangs", Timeout)
		panic("unreachable")
	}
}
