// Package harness is the shared machinery of the benchmark (bench/) and the
// reliability drills (drills/): databases, private redis-server and PostgreSQL
// instances, the aetherium binary and its processes, a small API client, and the
// teams whose tool calls and delegations the two programs count.
package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/aetherium-engine/aetherium/store"
)

// AdminURL is the PostgreSQL server the local-cluster mode creates databases on.
// Env AETHERIUM_TEST_DATABASE_URL; default the local Debian cluster (scripts/services.sh).
func AdminURL() string {
	if u := os.Getenv("AETHERIUM_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// WithDB returns url with the database name replaced.
func WithDB(url, db string) string {
	base, query, _ := strings.Cut(url, "?")
	i := strings.LastIndex(base, "/")
	out := base[:i+1] + db
	if query != "" {
		out += "?" + query
	}
	return out
}

// CreateDatabase (re)creates database name on the server of admin, migrates it with
// the store package and returns its URL. An existing database of that name is
// dropped first: the name is dedicated to the caller.
func CreateDatabase(ctx context.Context, admin, name string) (string, error) {
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", fmt.Errorf("postgres %s: %w", admin, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return "", fmt.Errorf("drop database %s: %w", name, err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	url := WithDB(admin, name)
	st, err := store.Open(ctx, url)
	if err != nil {
		return "", err
	}
	defer st.Close()
	if err := st.MigrateUp(ctx); err != nil {
		return "", fmt.Errorf("migrate %s: %w", name, err)
	}
	return url, nil
}

// DropDatabase removes a database made by CreateDatabase (errors are ignored: it is
// cleanup).
func DropDatabase(admin, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
}

// FreePort returns a loopback TCP port nobody listens on right now.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// RepoRoot finds the module root (the directory holding go.mod) above the working
// directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// Build compiles ./cmd/aetherium into dir and returns the binary's path.
func Build(ctx context.Context, root, dir string) (string, error) {
	out := filepath.Join(dir, "aetherium")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/aetherium")
	cmd.Dir = root
	if raw, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/aetherium: %v\n%s", err, raw)
	}
	return out, nil
}

// RedisServer is a private redis-server process on a loopback port.
type RedisServer struct {
	Port int
	Dir  string
	AOF  bool
	cmd  *exec.Cmd
	done chan struct{}
}

// StartRedis starts redis-server on a free port with its data in dir; aof turns on
// the append-only file (a restart keeps the queues).
func StartRedis(dir string, aof bool) (*RedisServer, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	r := &RedisServer{Port: port, Dir: dir, AOF: aof}
	return r, r.Start()
}

// Start (re)starts the server on its port and directory and waits until it answers.
func (r *RedisServer) Start() error {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return errors.New("redis-server is not installed (run scripts/services.sh)")
	}
	aof := "no"
	if r.AOF {
		aof = "yes"
	}
	r.cmd = exec.Command(bin, "--port", fmt.Sprint(r.Port), "--bind", "127.0.0.1", "--save", "", "--appendonly", aof,
		"--appendfsync", "everysec", "--dir", r.Dir, "--daemonize", "no", "--logfile", filepath.Join(r.Dir, "redis.log"))
	if err := r.cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	r.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(r.cmd, r.done)
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", r.Port)})
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := c.Ping(context.Background()).Err()
		if err == nil {
			// With AOF on, a restarted server answers LOADING until the file is read.
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %d did not answer: %w", r.Port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// URL is the server's redis:// URL for database db.
func (r *RedisServer) URL(db int) string { return fmt.Sprintf("redis://127.0.0.1:%d/%d", r.Port, db) }

// Stop shuts the server down gracefully (SIGTERM: the AOF is flushed) and waits.
func (r *RedisServer) Stop() {
	if r.cmd == nil || r.cmd.Process == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(15 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.done
	}
}

// Pid is the server's process id.
func (r *RedisServer) Pid() int {
	if r.cmd == nil || r.cmd.Process == nil {
		return 0
	}
	return r.cmd.Process.Pid
}
