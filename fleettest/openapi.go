package fleettest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/aetherium-engine/aetherium/api"
)

// OpenAPIDoc is the API's OpenAPI document (the bytes GET /api/openapi.json
// serves, TestOpenAPIIsServed), loaded and validated by kin-openapi once per
// test binary.
type OpenAPIDoc struct {
	Doc    *openapi3.T
	Router routers.Router
}

var loadOpenAPI = sync.OnceValues(func() (*OpenAPIDoc, error) {
	raw, err := api.OpenAPI()
	if err != nil {
		return nil, fmt.Errorf("build the openapi document: %w", err)
	}
	return LoadOpenAPI(raw)
})

// LoadOpenAPI parses and validates an OpenAPI document and builds its router.
func LoadOpenAPI(raw []byte) (*OpenAPIDoc, error) {
	doc, err := openapi3.NewLoader().LoadFromData(raw)
	if err != nil {
		return nil, fmt.Errorf("load the openapi document: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("validate the openapi document: %w", err)
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("route the openapi document: %w", err)
	}
	return &OpenAPIDoc{Doc: doc, Router: router}, nil
}

// OpenAPI returns the loaded document; a test fails if it does not load or validate.
func OpenAPI(t testing.TB) *OpenAPIDoc {
	t.Helper()
	d, err := loadOpenAPI()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// ValidateResponse checks one answer of the API against its OpenAPI document:
// its route and method are documented, a success status is one the operation
// lists (an error status may fall to the operation's default), and its content
// type and body match that response. A path under api.NotInOpenAPI is not
// checked. An event stream's body is checked event by event by Client instead:
// pass it with a nil body.
func ValidateResponse(req *http.Request, status int, header http.Header, body []byte) error {
	d, err := loadOpenAPI()
	if err != nil {
		return err
	}
	return d.ValidateResponse(req, status, header, body)
}

// ValidateResponse is the package's ValidateResponse on d.
func (d *OpenAPIDoc) ValidateResponse(req *http.Request, status int, header http.Header, body []byte) error {
	for prefix := range api.NotInOpenAPI {
		if req.URL.Path == prefix || strings.HasPrefix(req.URL.Path, prefix+"/") {
			return nil
		}
	}
	if req.Method == http.MethodHead {
		// Fiber answers HEAD for every GET route; the document lists the GET.
		get := req.Clone(context.Background())
		get.Method = http.MethodGet
		if _, _, err := d.Router.FindRoute(get); err != nil && status != http.StatusNotFound {
			return fmt.Errorf("HEAD %s answered %d but its GET is not in the document: %w", req.URL.Path, status, err)
		}
		return nil
	}
	route, params, err := d.Router.FindRoute(req)
	if err != nil {
		// An unknown route is the app's 404 (or a 405), still in the error shape.
		if status == http.StatusNotFound || status == http.StatusMethodNotAllowed {
			return d.validateSchema("ErrorResponse", header, body)
		}
		return fmt.Errorf("%s %s answered %d but is not in the document: %w", req.Method, req.URL.Path, status, err)
	}
	res := route.Operation.Responses.Status(status)
	if res == nil && status < 400 {
		return fmt.Errorf("%s %s answered %d, which the document does not list", req.Method, route.Path, status)
	}
	if res == nil {
		res = route.Operation.Responses.Default()
	}
	if res == nil || res.Value == nil {
		return fmt.Errorf("%s %s: no response %d nor default in the document", req.Method, route.Path, status)
	}
	if len(res.Value.Content) == 0 {
		if len(body) > 0 {
			return fmt.Errorf("%s %s: response %d has no content in the document but a body %.200q", req.Method, route.Path, status, body)
		}
		return nil
	}
	ct := header.Get("Content-Type")
	media := res.Value.Content.Get(ct)
	if media == nil {
		return fmt.Errorf("%s %s: response %d has content type %q, not one the document lists", req.Method, route.Path, status, ct)
	}
	if _, stream := media.Extensions["x-event-data"]; stream || body == nil {
		return nil // the events are checked as they are read (Client)
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 status,
		Header:                 header,
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	in.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		return fmt.Errorf("%s %s: response %d %.300s: %w", req.Method, route.Path, status, body, err)
	}
	return nil
}

// ValidateAcceptedRequest checks a request the API answered with a success
// against the document: its parameters and body match the operation's, and it
// sends no query parameter the operation does not list. A request the API
// accepts but the document refuses is a document stricter than the handler, or
// missing a parameter. (Refused requests are not checked: tests send bad ones on
// purpose.)
func (d *OpenAPIDoc) ValidateAcceptedRequest(req *http.Request, body []byte) error {
	if req.Method == http.MethodHead {
		req = req.Clone(context.Background())
		req.Method = http.MethodGet // HEAD is Fiber's twin of the documented GET
	}
	for prefix := range api.NotInOpenAPI {
		if req.URL.Path == prefix || strings.HasPrefix(req.URL.Path, prefix+"/") {
			return nil
		}
	}
	route, params, err := d.Router.FindRoute(req)
	if err != nil {
		return fmt.Errorf("%s %s is not in the document: %w", req.Method, req.URL.Path, err)
	}
	listed := map[string]bool{}
	for _, p := range route.Operation.Parameters {
		if p.Value != nil && p.Value.In == openapi3.ParameterInQuery {
			listed[p.Value.Name] = true
		}
	}
	for name := range req.URL.Query() {
		if !listed[name] {
			return fmt.Errorf("%s %s: query parameter %q is not in the document", req.Method, route.Path, name)
		}
	}
	r := req.Clone(context.Background())
	r.Body = io.NopCloser(bytes.NewReader(body))
	in := &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: route, Options: &openapi3filter.Options{
		AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, SkipSettingDefaults: true, MultiError: true}}
	if err := openapi3filter.ValidateRequest(context.Background(), in); err != nil {
		return fmt.Errorf("%s %s was accepted but does not match the document: %w", req.Method, route.Path, err)
	}
	return nil
}

func (d *OpenAPIDoc) validateSchema(name string, header http.Header, body []byte) error {
	ref := d.Doc.Components.Schemas[name]
	if ref == nil {
		return fmt.Errorf("the document has no schema %s", name)
	}
	if ct := header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		return fmt.Errorf("an error answer has content type %q, not application/json", ct)
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		return fmt.Errorf("an error answer is not JSON: %.200q: %w", body, err)
	}
	if err := ref.Value.VisitJSON(v, openapi3.EnableJSONSchema2020(), openapi3.VisitAsResponse()); err != nil {
		return fmt.Errorf("%.300s does not match %s: %w", body, name, err)
	}
	return nil
}

// streamSchema is the schema of each event's data of a documented stream
// (x-event-data of its media type).
func (d *OpenAPIDoc) streamSchema(req *http.Request, status int, ct string) (*openapi3.Schema, error) {
	route, _, err := d.Router.FindRoute(req)
	if err != nil {
		return nil, fmt.Errorf("event stream %s: %w", req.URL.Path, err)
	}
	res := route.Operation.Responses.Status(status)
	if res == nil || res.Value == nil || res.Value.Content.Get(ct) == nil {
		return nil, fmt.Errorf("event stream %s %s: no %d %s response in the document", req.Method, route.Path, status, ct)
	}
	ext, ok := res.Value.Content.Get(ct).Extensions["x-event-data"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("event stream %s: no x-event-data schema", route.Path)
	}
	refStr, _ := ext["$ref"].(string)
	name, ok := strings.CutPrefix(refStr, "#/components/schemas/")
	if !ok || d.Doc.Components.Schemas[name] == nil {
		return nil, fmt.Errorf("event stream %s: x-event-data %v names no component schema", route.Path, ext)
	}
	return d.Doc.Components.Schemas[name].Value, nil
}

// Client is an HTTP client whose every answer from the API is checked against
// the OpenAPI document (ValidateResponse), failing t on a mismatch; an event
// stream is checked event by event as it is read. base nil is
// http.DefaultTransport.
func Client(t testing.TB, base http.RoundTripper) *http.Client {
	if base == nil {
		base = http.DefaultTransport
	}
	return &http.Client{Transport: checkingTransport{t: t, base: base}}
}

type checkingTransport struct {
	t    testing.TB
	base http.RoundTripper
}

func (c checkingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	var sent []byte
	if req.Body != nil && req.Body != http.NoBody {
		var err error
		if sent, err = io.ReadAll(req.Body); err != nil {
			return nil, fmt.Errorf("%s %s: read the request body: %w", req.Method, req.URL.Path, err)
		}
		_ = req.Body.Close()
		r := req.Clone(req.Context())
		r.Body = io.NopCloser(bytes.NewReader(sent))
		req = r
	}
	resp, err := c.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	d, err := loadOpenAPI()
	if err != nil {
		c.t.Errorf("openapi: %v", err)
		return resp, nil
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if err := d.ValidateAcceptedRequest(req, sent); err != nil {
			c.t.Errorf("openapi: %v", err)
		}
	}
	ct := resp.Header.Get("Content-Type")
	if strings.HasPrefix(ct, "text/event-stream") {
		if err := d.ValidateResponse(req, resp.StatusCode, resp.Header, nil); err != nil {
			c.t.Errorf("openapi: %v", err)
			return resp, nil
		}
		schema, err := d.streamSchema(req, resp.StatusCode, ct)
		if err != nil {
			c.t.Errorf("openapi: %v", err)
			return resp, nil
		}
		resp.Body = &eventChecker{ReadCloser: resp.Body, t: c.t, schema: schema, path: req.URL.Path}
		return resp, nil
	}
	raw, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("%s %s: read the answer: %w", req.Method, req.URL.Path, err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(raw))
	if err := d.ValidateResponse(req, resp.StatusCode, resp.Header, raw); err != nil {
		c.t.Errorf("openapi: %v", err)
	}
	return resp, nil
}

// eventChecker checks each complete event of a stream as the test reads it:
// its data matches the documented schema, and its id and event fields are the
// data's id and type.
type eventChecker struct {
	io.ReadCloser
	t      testing.TB
	schema *openapi3.Schema
	path   string
	buf    []byte
}

func (e *eventChecker) Read(p []byte) (int, error) {
	n, err := e.ReadCloser.Read(p)
	e.buf = append(e.buf, p[:n]...)
	for {
		i := bytes.Index(e.buf, []byte("\n\n"))
		if i < 0 {
			break
		}
		if cerr := e.check(e.buf[:i]); cerr != nil {
			e.t.Errorf("openapi: event stream %s: %v", e.path, cerr)
		}
		e.buf = e.buf[i+2:]
	}
	return n, err
}

func (e *eventChecker) check(block []byte) error {
	var id, typ string
	var data []string
	for _, line := range strings.Split(string(block), "\n") {
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "": // a comment (keepalive)
		case "id":
			id = value
		case "event":
			typ = value
		case "data":
			data = append(data, value)
		default:
			return fmt.Errorf("unknown field in %q", line)
		}
	}
	if len(data) == 0 {
		if id != "" || typ != "" {
			return fmt.Errorf("an event without data: %q", block)
		}
		return nil
	}
	raw := []byte(strings.Join(data, "\n"))
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return fmt.Errorf("data is not JSON: %q: %w", block, err)
	}
	if err := e.schema.VisitJSON(v, openapi3.EnableJSONSchema2020(), openapi3.VisitAsResponse()); err != nil {
		return fmt.Errorf("data %.300q does not match the document: %w", block, err)
	}
	// Decoded again for the id: a float64 would print a large one as 1e+06.
	var head struct {
		ID   json.Number `json:"id"`
		Type string      `json:"type"`
	}
	if err := json.Unmarshal(raw, &head); err != nil || head.ID.String() != id || head.Type != typ {
		return errors.New("id and event fields differ from the data's id and type: " + string(block))
	}
	return nil
}
