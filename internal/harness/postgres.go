package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/aetherium-engine/aetherium/internal/testinfra"
)

// Postgres is a PostgreSQL server the drills may restart: a private cluster (initdb in
// a temporary directory, on a free port) or the machine's local Debian cluster.
type Postgres struct {
	// Admin is the URL of the server's postgres database (to create databases on).
	Admin string
	// restart and stop act on the server.
	restart func(ctx context.Context, down time.Duration) error
	stop    func()
}

// Restart stops the server (fast mode: every client is disconnected), keeps it down
// for down, starts it again and waits until it accepts connections.
func (p *Postgres) Restart(ctx context.Context, down time.Duration) error {
	return p.restart(ctx, down)
}

// Stop stops a private server (a no-op for the local cluster).
func (p *Postgres) Stop() { p.stop() }

// pgBin returns the newest installed PostgreSQL's bin directory.
func pgBin() (string, string, error) {
	vers, err := filepath.Glob("/usr/lib/postgresql/*/bin/postgres")
	if err != nil || len(vers) == 0 {
		return "", "", errors.New("no PostgreSQL installed under /usr/lib/postgresql (run scripts/services.sh)")
	}
	sort.Slice(vers, func(i, j int) bool {
		a, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(vers[i]))))
		b, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(vers[j]))))
		return a < b
	})
	bin := filepath.Dir(vers[len(vers)-1])
	return bin, filepath.Base(filepath.Dir(bin)), nil
}

// asPostgres runs a PostgreSQL tool as the postgres user when this process is root
// (initdb and postgres refuse to run as root).
func asPostgres(name string, args ...string) *exec.Cmd {
	if os.Geteuid() == 0 {
		return exec.Command("runuser", append([]string{"-u", "postgres", "--", name}, args...)...)
	}
	return exec.Command(name, args...)
}

// StartPrivatePostgres initialises a cluster in dir and starts it on a free port.
func StartPrivatePostgres(dir string) (*Postgres, error) {
	return StartPrivatePostgresOn(dir, nil, nil)
}

// StartPrivatePostgresOn is StartPrivatePostgres listening on 127.0.0.1 and the
// addresses listen too, trusting clients from the networks trust (CIDRs) as it
// trusts loopback: a drill's worker in a network namespace reaches it through
// its veth.
func StartPrivatePostgresOn(dir string, listen, trust []string) (*Postgres, error) {
	bin, _, err := pgBin()
	if err != nil {
		return nil, err
	}
	port, err := testinfra.FreePort()
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "pgdata")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root needs the postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, err
		}
	}
	if raw, err := asPostgres(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb: %v\n%s", err, raw)
	}
	if err := trustNets(data, trust); err != nil {
		return nil, err
	}
	addrs := strings.Join(append([]string{"127.0.0.1"}, listen...), ",")
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=%s -c max_connections=300", port, dir, addrs)
	logFile := filepath.Join(dir, "postgres.log")
	pgctl := func(args ...string) error {
		if raw, err := asPostgres(filepath.Join(bin, "pg_ctl"), append([]string{"-D", data, "-l", logFile, "-o", opts, "-w", "-t", "60"}, args...)...).CombinedOutput(); err != nil {
			return fmt.Errorf("pg_ctl %v: %v\n%s", args, err, raw)
		}
		return nil
	}
	if err := pgctl("start"); err != nil {
		return nil, err
	}
	admin := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	p := &Postgres{Admin: admin}
	p.restart = func(ctx context.Context, down time.Duration) error {
		if err := pgctl("stop", "-m", "fast"); err != nil {
			return err
		}
		time.Sleep(down)
		if err := pgctl("start"); err != nil {
			return err
		}
		return waitPostgres(ctx, admin)
	}
	p.stop = func() { _ = pgctl("stop", "-m", "immediate") }
	return p, waitPostgres(context.Background(), admin)
}

// trustNets lets clients from nets in without a password (as initdb --auth=trust
// does for loopback).
func trustNets(data string, nets []string) error {
	if len(nets) == 0 {
		return nil
	}
	f, err := os.OpenFile(filepath.Join(data, "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("pg_hba.conf: %w", err)
	}
	defer f.Close()
	for _, n := range nets {
		if _, err := fmt.Fprintf(f, "host all all %s trust\n", n); err != nil {
			return fmt.Errorf("pg_hba.conf: %w", err)
		}
	}
	return nil
}

// LocalPostgres is the machine's local cluster (scripts/services.sh); Restart runs
// pg_ctlcluster, which disturbs everyone using it.
func LocalPostgres() (*Postgres, error) {
	_, ver, err := pgBin()
	if err != nil {
		return nil, err
	}
	admin := testinfra.AdminURL()
	p := &Postgres{Admin: admin, stop: func() {}}
	p.restart = func(ctx context.Context, down time.Duration) error {
		for i, action := range []string{"stop", "start"} {
			if i == 1 {
				time.Sleep(down)
			}
			if raw, err := exec.CommandContext(ctx, "pg_ctlcluster", "--skip-systemctl-redirect", ver, "main", action).CombinedOutput(); err != nil {
				return fmt.Errorf("pg_ctlcluster %s main %s: %v\n%s", ver, action, err, raw)
			}
		}
		return waitPostgres(ctx, admin)
	}
	return p, waitPostgres(context.Background(), admin)
}

func waitPostgres(ctx context.Context, url string) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(cctx, url)
		if err == nil {
			err = conn.Ping(cctx)
			conn.Close(cctx)
		}
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("postgres %s did not come up: %w", url, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
