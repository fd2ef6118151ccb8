// Package harness is the shared machinery of the benchmark (cmd/bench) and the
// reliability drills (cmd/drills): databases, private redis-server and PostgreSQL
// instances, the aetherium binary and its processes, a small API client, and the
// teams whose tool calls and delegations the two programs count.
package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/aetherium-engine/aetherium/internal/testinfra"
	"github.com/aetherium-engine/aetherium/store"
)

// CreateDatabase (re)creates database name on the server of admin, migrates it with
// the store package and returns its URL. An existing database of that name is
// dropped first: the name is dedicated to the caller.
func CreateDatabase(ctx context.Context, admin, name string) (string, error) {
	url, err := CreateEmptyDatabase(ctx, admin, name)
	if err != nil {
		return "", err
	}
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

// CreateEmptyDatabase is CreateDatabase without the migrations (a drill
// migrates it with another build's binary: Migrate).
func CreateEmptyDatabase(ctx context.Context, admin, name string) (string, error) {
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
	return testinfra.WithDB(admin, name), nil
}

// Migrate runs `bin migrate up` on the database of config (an AETHERIUM_CONFIG
// file): the schema of that build.
func Migrate(ctx context.Context, bin, config string) error {
	cmd := exec.CommandContext(ctx, bin, "migrate", "up")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AETHERIUM_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "AETHERIUM_CONFIG="+config)
	if raw, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s migrate up: %v\n%s", bin, err, raw)
	}
	return nil
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

// Build compiles ./cmd/aetherium into dir and returns the binary's path. It is
// built like `make build` (static, -trimpath), so the compiled packages are shared
// with it and with the images' builds.
func Build(ctx context.Context, root, dir string) (string, error) {
	out := filepath.Join(dir, "aetherium")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, "./cmd/aetherium")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
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
	// Bind are the addresses it listens on; empty means 127.0.0.1 only. The
	// first is the one URL and Addr name.
	Bind []string
	// Args are extra redis-server arguments (e.g. --replicaof host port).
	Args []string
	cmd  *exec.Cmd
	done chan struct{}
}

// StartRedis starts redis-server on a free port with its data in dir; aof turns on
// the append-only file (a restart keeps the queues).
func StartRedis(dir string, aof bool) (*RedisServer, error) {
	return StartRedisWith(&RedisServer{Dir: dir, AOF: aof})
}

// StartRedisWith starts r (Dir, AOF, Bind, Args set by the caller) on a free port.
func StartRedisWith(r *RedisServer) (*RedisServer, error) {
	port, err := testinfra.FreePort()
	if err != nil {
		return nil, err
	}
	r.Port = port
	return r, r.Start()
}

// host is the address clients use: the first bound one.
func (r *RedisServer) host() string {
	if len(r.Bind) == 0 {
		return "127.0.0.1"
	}
	return r.Bind[0]
}

// Addr is host:port of the server.
func (r *RedisServer) Addr() string { return fmt.Sprintf("%s:%d", r.host(), r.Port) }

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
	bind := r.Bind
	if len(bind) == 0 {
		bind = []string{"127.0.0.1"}
	}
	args := append([]string{"--port", fmt.Sprint(r.Port), "--bind"}, bind...)
	args = append(args, "--save", "", "--appendonly", aof,
		"--appendfsync", "everysec", "--dir", r.Dir, "--daemonize", "no", "--logfile", filepath.Join(r.Dir, "redis.log"))
	if len(r.Bind) > 0 {
		// Protected mode turns away every client not on loopback when no
		// password is set: a drill binding other addresses wants them in.
		args = append(args, "--protected-mode", "no")
	}
	r.cmd = exec.Command(bin, append(args, r.Args...)...)
	if err := r.cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	r.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) { _ = cmd.Wait(); close(done) }(r.cmd, r.done)
	c := redis.NewClient(&redis.Options{Addr: r.Addr()})
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
func (r *RedisServer) URL(db int) string { return fmt.Sprintf("redis://%s/%d", r.Addr(), db) }

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

// Kill ends the server with SIGKILL (nothing flushed, as a crash) and waits.
func (r *RedisServer) Kill() {
	if r.cmd == nil || r.cmd.Process == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	<-r.done
}

// Pause stops the server in its tracks (SIGSTOP); Resume lets it go on.
func (r *RedisServer) Pause() { _ = r.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (r *RedisServer) Resume() { _ = r.cmd.Process.Signal(syscall.SIGCONT) }

// Pid is the server's process id.
func (r *RedisServer) Pid() int {
	if r.cmd == nil || r.cmd.Process == nil {
		return 0
	}
	return r.cmd.Process.Pid
}
