// Package redisconn turns the one redis_url setting into the clients a fleet
// process needs: a go-redis client for our own keys (leases, mailboxes, events,
// the headset lock) and the matching asynq option for the queue. Both come from
// the same parse so the two can never disagree about which Redis they talk to.
//
// Three shapes are accepted:
//
//	redis://[user:password@]host:port[/db]      one node (rediss:// for TLS, unix:// a socket)
//	redis-sentinel://[user:password@]host:port[,host:port…]/master-name[/db][?sentinel_password=…&sentinel_username=…]
//	redis-cluster://[user:password@]host:port[,host:port…]
//
// In the Sentinel URL the hosts are the sentinels and the user/password
// authenticate to the data nodes (the master and its replicas), as with every
// Redis client; sentinels that require their own auth take it from the query.
// A cluster has only database 0, so a path in a cluster URL is refused rather
// than silently ignored.
package redisconn

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// ErrInvalid is wrapped by every parse error, so callers can tell a bad setting
// from an unreachable server.
var ErrInvalid = errors.New("invalid redis url")

// Shape is the deployment shape a URL names.
type Shape int

const (
	Single Shape = iota
	Sentinel
	Cluster
)

func (s Shape) String() string {
	switch s {
	case Sentinel:
		return "sentinel"
	case Cluster:
		return "cluster"
	default:
		return "single"
	}
}

// Conn is a parsed redis_url.
type Conn struct {
	Shape Shape
	// single is set for Single (it keeps everything redis.ParseURL understands:
	// TLS, unix sockets, timeouts in the query).
	single *redis.Options
	// uni is set for Sentinel and Cluster.
	uni *redis.UniversalOptions
}

// Parse reads a redis_url. Errors wrap ErrInvalid and never echo a password.
func Parse(raw string) (*Conn, error) {
	raw = strings.TrimSpace(raw)
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok || raw == "" {
		return nil, invalid(raw, "want redis://, rediss://, unix://, redis-sentinel:// or redis-cluster://")
	}
	switch scheme {
	case "redis", "rediss", "unix":
		// go-redis would quietly turn an empty host into localhost.
		if u, err := url.Parse(raw); err == nil && scheme != "unix" && u.Hostname() == "" {
			return nil, invalid(raw, "no host: want %s://host:port[/db]", scheme)
		}
		o, err := redis.ParseURL(raw)
		if err != nil {
			return nil, invalid(raw, "%v", err)
		}
		if o.Network != "unix" {
			if err := checkHostPort(o.Addr); err != nil {
				return nil, invalid(raw, "%v", err)
			}
		}
		return &Conn{Shape: Single, single: o}, nil
	case "redis-sentinel":
		return parseMulti(raw, rest, Sentinel, "26379")
	case "redis-cluster":
		return parseMulti(raw, rest, Cluster, "6379")
	default:
		return nil, invalid(raw, "unknown scheme %q: want redis, rediss, unix, redis-sentinel or redis-cluster", scheme)
	}
}

func parseMulti(raw, rest string, shape Shape, defPort string) (*Conn, error) {
	rest, query, _ := strings.Cut(rest, "?")
	authority, path, _ := strings.Cut(rest, "/")
	o := &redis.UniversalOptions{}
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		user, pass, hasPass := strings.Cut(authority[:i], ":")
		var err error
		if o.Username, err = url.PathUnescape(user); err != nil {
			return nil, invalid(raw, "user name: %v", err)
		}
		if hasPass {
			if o.Password, err = url.PathUnescape(pass); err != nil {
				return nil, invalid(raw, "password is not URL-escaped correctly")
			}
		}
		authority = authority[i+1:]
	}
	if authority == "" {
		return nil, invalid(raw, "no host: want host:port[,host:port…]")
	}
	for _, h := range strings.Split(authority, ",") {
		if _, _, err := net.SplitHostPort(h); err != nil && strings.Contains(err.Error(), "missing port") {
			h = net.JoinHostPort(strings.Trim(h, "[]"), defPort)
		}
		if err := checkHostPort(h); err != nil {
			return nil, invalid(raw, "%v", err)
		}
		o.Addrs = append(o.Addrs, h)
	}
	segs := []string{}
	if path != "" {
		segs = strings.Split(path, "/")
	}
	switch shape {
	case Sentinel:
		if len(segs) == 0 || segs[0] == "" {
			return nil, invalid(raw, "no master name: want redis-sentinel://host:port[,host:port…]/master-name[/db]")
		}
		if len(segs) > 2 {
			return nil, invalid(raw, "path %q has more than master-name and db", path)
		}
		o.MasterName = segs[0]
		if len(segs) == 2 && segs[1] != "" {
			db, err := strconv.Atoi(segs[1])
			if err != nil || db < 0 {
				return nil, invalid(raw, "database %q is not a number ≥ 0", segs[1])
			}
			o.DB = db
		}
	case Cluster:
		if path != "" {
			return nil, invalid(raw, "a cluster has only database 0: drop %q from the URL (isolate by key prefix instead)", "/"+path)
		}
	}
	if query != "" {
		q, err := url.ParseQuery(query)
		if err != nil {
			return nil, invalid(raw, "query: %v", err)
		}
		for k, v := range q {
			switch {
			case shape == Sentinel && k == "sentinel_password":
				o.SentinelPassword = v[len(v)-1]
			case shape == Sentinel && k == "sentinel_username":
				o.SentinelUsername = v[len(v)-1]
			default:
				return nil, invalid(raw, "unknown parameter %q for a %s URL", k, shape)
			}
		}
	}
	return &Conn{Shape: shape, uni: o}, nil
}

func checkHostPort(hp string) error {
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		return fmt.Errorf("address %q: %v", hp, err)
	}
	if host == "" {
		return fmt.Errorf("address %q has no host", hp)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("address %q: port %q is not in 1..65535", hp, port)
	}
	return nil
}

func invalid(raw, format string, args ...any) error {
	return fmt.Errorf("%w %q: %s", ErrInvalid, Redact(raw), fmt.Sprintf(format, args...))
}

// Redact hides the password of a URL so it can go into errors and logs.
func Redact(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return raw
	}
	authority, tail, hasTail := strings.Cut(rest, "/")
	i := strings.LastIndex(authority, "@")
	if i < 0 {
		return raw
	}
	user, _, hasPass := strings.Cut(authority[:i], ":")
	if hasPass {
		user += ":xxxxx"
	}
	out := scheme + "://" + user + authority[i:]
	if hasTail {
		out += "/" + tail
	}
	return out
}

// Addrs are the addresses the URL names: the node, the sentinels, or the
// cluster's seed nodes (the cluster's other nodes are learnt at run time).
func (c *Conn) Addrs() []string {
	if c.single != nil {
		return []string{c.single.Addr}
	}
	return append([]string(nil), c.uni.Addrs...)
}

// DB is the database our keys and the queue live in (always 0 for a cluster).
func (c *Conn) DB() int {
	if c.single != nil {
		return c.single.DB
	}
	return c.uni.DB
}

// Client opens a new client for our own keys. Every call makes a new pool (the
// worker server needs one of its own that carries the wake hook).
func (c *Conn) Client() redis.UniversalClient {
	switch c.Shape {
	case Sentinel:
		return redis.NewFailoverClient(c.uni.Failover())
	case Cluster:
		// Built explicitly: NewUniversalClient would make a one-seed cluster URL
		// a plain client that then fails on the first MOVED.
		o := c.uni.Cluster()
		o.ClusterStateReloadInterval = SlotMapReload
		return redis.NewClusterClient(o)
	default:
		o := *c.single
		return redis.NewClient(&o)
	}
}

// SlotMapReload is how old a Cluster client's slot map may get before a command
// makes it read the map again. go-redis re-reads it on MOVED, but not when a
// master is dead: every command for the dead master's slots then fails with
// "connection refused" — after its replica took the slots over — until the map
// is re-read, by default once a minute (drill 7 saw runs fail on it). A re-read
// is one CLUSTER SLOTS, and only a client in use makes it.
const SlotMapReload = 2 * time.Second

// ClusterOpt is asynq's connection option for a Cluster. asynq's own
// RedisClusterClientOpt cannot set SlotMapReload, so the queue would keep
// dialing a dead master for up to a minute after its failover.
type ClusterOpt struct {
	Addrs              []string
	Username, Password string
}

// MakeRedisClient implements asynq.RedisConnOpt.
func (o ClusterOpt) MakeRedisClient() any {
	return redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: o.Addrs, Username: o.Username, Password: o.Password, ClusterStateReloadInterval: SlotMapReload,
	})
}

// Asynq is the queue's connection option for the same Redis.
func (c *Conn) Asynq() asynq.RedisConnOpt {
	switch c.Shape {
	case Sentinel:
		return asynq.RedisFailoverClientOpt{
			MasterName: c.uni.MasterName, SentinelAddrs: c.uni.Addrs,
			SentinelUsername: c.uni.SentinelUsername, SentinelPassword: c.uni.SentinelPassword,
			Username: c.uni.Username, Password: c.uni.Password, DB: c.uni.DB,
		}
	case Cluster:
		return ClusterOpt{Addrs: c.uni.Addrs, Username: c.uni.Username, Password: c.uni.Password}
	default:
		o := c.single
		return asynq.RedisClientOpt{
			Network: o.Network, Addr: o.Addr, Username: o.Username, Password: o.Password, DB: o.DB,
			DialTimeout: o.DialTimeout, ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout,
			PoolSize: o.PoolSize, TLSConfig: o.TLSConfig,
		}
	}
}
