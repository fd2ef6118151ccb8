// Package llmtest is the shared conformance suite for llm.Provider implementations
// that speak to an HTTP API. A provider package supplies a Fake that renders and
// parses its vendor's wire format; the suite runs the same table of behaviours
// (answers, tool calls, retries, errors, cancellation) against every provider.
package llmtest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// Reply is one scripted answer of a Server.
type Reply struct {
	// Status defaults to 200.
	Status int
	// ContentType defaults to application/json.
	ContentType string
	Body        []byte
	// Block holds the request open until the client gives up, to exercise
	// cancellation.
	Block bool
}

// JSON is a 200 reply with a JSON body.
func JSON(body []byte) Reply { return Reply{Body: body} }

// Status is a reply with the given status and JSON body.
func Status(status int, body []byte) Reply { return Reply{Status: status, Body: body} }

// Request is what a Server received.
type Request struct {
	Method string
	Path   string
	Header http.Header
	Body   []byte
}

// Server is an httptest server that answers requests with a script of replies,
// in order, repeating the last one once the script runs out, and records every
// request it sees.
type Server struct {
	URL string

	path    string
	replies []Reply

	mu       sync.Mutex
	requests []Request
	done     chan struct{}
}

// NewServer starts a Server answering POST requests on path. It is closed when the
// test ends.
func NewServer(t testing.TB, path string, replies ...Reply) *Server {
	t.Helper()
	if len(replies) == 0 {
		t.Fatal("llmtest: NewServer needs at least one reply")
	}
	s := &Server{path: path, replies: replies, done: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = srv.URL
	// Cleanups run last-in first-out: blocked handlers must be released before
	// srv.Close, which waits for them.
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(s.done) })
	return s
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.requests = append(s.requests, Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
	n := len(s.requests)
	s.mu.Unlock()

	// A wrong route answers 404 (which the providers do not retry) so the test fails on
	// its status assertions with the offending path visible in Requests.
	if r.Method != http.MethodPost || r.URL.Path != s.path {
		http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusNotFound)
		return
	}

	reply := s.replies[min(n, len(s.replies))-1]
	if reply.Block {
		select {
		case <-r.Context().Done():
		case <-s.done:
		}
		return
	}
	status := reply.Status
	if status == 0 {
		status = http.StatusOK
	}
	contentType := reply.ContentType
	if contentType == "" {
		contentType = "application/json"
	}
	w.Header().Set("Content-Type", contentType)
	if status >= 400 {
		// Both providers honour retry-after-ms over their exponential backoff, which
		// keeps retry tests in the millisecond range.
		w.Header().Set("Retry-After-Ms", "1")
	}
	w.WriteHeader(status)
	_, _ = w.Write(reply.Body)
}

// Requests returns a copy of the requests received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Count is the number of requests received so far.
func (s *Server) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.requests)
}

// Last returns the most recent request; the test fails if there is none.
func (s *Server) Last(t testing.TB) Request {
	t.Helper()
	reqs := s.Requests()
	if len(reqs) == 0 {
		t.Fatal("llmtest: server received no request")
	}
	return reqs[len(reqs)-1]
}
