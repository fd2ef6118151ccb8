package mcpserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
)

// The protocol revisions the endpoint speaks. Modern is the stateless
// generation (a thin layer of our own, modern.go); the others are the go-sdk's
// session protocol.
const (
	// Version20260728 is the stateless revision.
	Version20260728 = "2026-07-28"
)

// SupportedVersions are every revision served, newest first (server/discover's
// supportedVersions).
var SupportedVersions = []string{Version20260728, "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}

// Meta keys of the 2026-07-28 revision.
const (
	metaVersion      = "io.modelcontextprotocol/protocolVersion"
	metaCapabilities = "io.modelcontextprotocol/clientCapabilities"
	metaClientInfo   = "io.modelcontextprotocol/clientInfo"
	metaServerInfo   = "io.modelcontextprotocol/serverInfo"
	metaLogLevel     = "io.modelcontextprotocol/logLevel"
	extensionTasks   = "io.modelcontextprotocol/tasks"
	// metaSession names the fleet run a call belongs to (see docs/mcp.md).
	metaSession = "aetherium/session"
)

// JSON-RPC error codes.
const (
	codeParse          = -32700
	codeInvalidRequest = -32600
	codeNoMethod       = -32601
	codeInvalidParams  = -32602
	codeInternal       = -32603
	codeHeaderMismatch = -32020
	codeMissingCap     = -32021
	codeUnsupportedVer = -32022
)

// maxBody bounds a request body read at the edge (the go-sdk's own limit is
// larger; a tool call's arguments beyond this are refused as a whole).
const maxBody = 8 << 20

// modern reports whether v names the stateless generation (dates compare as
// strings): a future revision is modern too, and refused as unsupported.
func modern(v string) bool { return v >= Version20260728 && len(v) == len(Version20260728) }

// legacyMethods are the methods the go-sdk's server answers; any other request
// is answered -32601 at the edge (the SDK answers HTTP 400 text).
var legacyMethods = []string{"initialize", "ping", "tools/list", "tools/call", "logging/setLevel", "completion/complete",
	"resources/list", "resources/read", "resources/templates/list", "resources/subscribe", "resources/unsubscribe",
	"prompts/list", "prompts/get"}

// origin refuses a browser request from a foreign origin before anything else
// (the transport spec's MUST, against DNS rebinding): an Origin header is
// accepted when it names the machine itself (localhost or a loopback address:
// a page the user opened locally) or one of mcp.allowed_origins. The Host
// header proves nothing: a rebound name (evil.example resolving to 127.0.0.1)
// sends Origin and Host of the same attacker domain. Requests without Origin
// (every non-browser client) pass.
func (s *Server) origin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o := r.Header.Get("Origin")
		if o == "" || s.originAllowed(o) {
			next.ServeHTTP(w, r)
			return
		}
		writeRPCError(w, nil, codeInvalidRequest, fmt.Sprintf("origin %q may not use this MCP server (mcp.allowed_origins)", o), nil, http.StatusForbidden)
	})
}

func (s *Server) originAllowed(o string) bool {
	u, err := url.Parse(o)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return false // "null", file:, opaque and malformed origins
	}
	if slices.ContainsFunc(s.cfg.AllowedOrigins, func(a string) bool {
		return strings.EqualFold(strings.TrimSuffix(a, "/"), u.Scheme+"://"+u.Host)
	}) {
		return true
	}
	host := u.Hostname()
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// rpcMessage is one JSON-RPC message as the edge reads it.
type rpcMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params,omitempty"`
}

func (m rpcMessage) isRequest() bool {
	return m.Method != "" && len(m.ID) > 0 && string(m.ID) != "null"
}

// edge routes an authenticated request to its generation: the stateless layer
// (modern.go) or the go-sdk's sessions, fixing two of the latter's answers on
// the way (an unknown method, a request without a session).
func (s *Server) edge(name string, p Profile, legacy http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hv := r.Header.Get("Mcp-Protocol-Version")
		if r.Method != http.MethodPost {
			if modern(hv) {
				w.Header().Set("Allow", http.MethodPost)
				http.Error(w, r.Method+" is not part of protocol "+hv+": server-to-client messages use subscriptions/listen", http.StatusMethodNotAllowed)
				return
			}
			legacy.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			writeRPCError(w, nil, codeInvalidRequest, fmt.Sprintf("request body: %v (limit %d bytes)", err, maxBody), nil, http.StatusRequestEntityTooLarge)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		var msg rpcMessage
		single := json.Unmarshal(body, &msg) == nil
		if single {
			var params struct {
				Meta map[string]json.RawMessage `json:"_meta"`
			}
			_ = json.Unmarshal(msg.Params, &params)
			var mv string
			_ = json.Unmarshal(params.Meta[metaVersion], &mv)
			if modern(hv) || modern(mv) || msg.Method == "server/discover" {
				s.serveModern(w, r, name, p, msg, hv, mv, params.Meta)
				return
			}
		}
		if single && msg.isRequest() {
			if !slices.Contains(legacyMethods, msg.Method) {
				writeRPCError(w, msg.ID, codeNoMethod, "method not found: "+msg.Method, nil, http.StatusOK)
				return
			}
			if msg.Method != "initialize" && r.Header.Get("Mcp-Session-Id") == "" {
				writeRPCError(w, msg.ID, codeInvalidRequest, "no Mcp-Session-Id: send initialize first, or speak protocol "+Version20260728+" (stateless)", nil, http.StatusBadRequest)
				return
			}
		}
		legacy.ServeHTTP(w, r)
	})
}

// rpcError is a JSON-RPC error object.
type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

func writeRPCError(w http.ResponseWriter, id json.RawMessage, code int, msg string, data any, status int) {
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"jsonrpc": "2.0", "id": id, "error": rpcError{code, msg, data}})
}
