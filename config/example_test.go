package config_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/aetherium-engine/aetherium/config"
)

// Loading a configuration: the packages' defaults, then the file, then the
// AETHERIUM_* environment, then Validate, whose errors name the key at fault.
func ExampleLoadFrom() {
	dir, err := os.MkdirTemp("", "aetherium-config")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "aetherium.yaml")
	if err := os.WriteFile(file, []byte("worker:\n  concurrency: 8\nscheduler:\n  period: 30s\n"), 0o600); err != nil {
		fmt.Println(err)
		return
	}
	env := map[string]string{"AETHERIUM_API_ADDR": "127.0.0.1:9090"}
	cfg, err := config.LoadFrom(file, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	fmt.Println(err)
	fmt.Println(cfg.Worker.Concurrency, cfg.Scheduler.Period, cfg.API.Addr, cfg.RedisURL)

	// Validate names the key: an unreadable value stops start-up.
	cfg.DatabaseURL = "mysql://db"
	fmt.Println(cfg.Validate())
	// Output:
	// <nil>
	// 8 30s 127.0.0.1:9090 redis://127.0.0.1:6379/0
	// config: database_url (AETHERIUM_DATABASE_URL): want postgres://user@host:port/db, got "mysql://db"
}
