package egress

import "time"

// Connection is one connection a sandbox's egress proxy allowed or refused (an
// egress_connections row: store.EgressConnection is this type).
type Connection struct {
	ID    int64     `json:"id"`
	RunID string    `json:"run_id"`
	Agent string    `json:"agent"`
	At    time.Time `json:"at"`
	// Method is CONNECT for a tunnel, else the HTTP method of a plaintext request.
	Method string `json:"method"`
	Host   string `json:"host"`
	Port   int    `json:"port"`
	// Remote is the address dialed; empty when the proxy refused before dialing.
	Remote  string `json:"remote"`
	Allowed bool   `json:"allowed"`
	Reason  string `json:"reason"`
	// Status is the upstream HTTP status of a plaintext request (0 for a tunnel).
	Status     int   `json:"status"`
	BytesOut   int64 `json:"bytes_out"`
	BytesIn    int64 `json:"bytes_in"`
	DurationMS int64 `json:"duration_ms"`
}
