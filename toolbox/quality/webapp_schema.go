package quality

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi2"
	"github.com/getkin/kin-openapi/openapi2conv"
	"github.com/getkin/kin-openapi/openapi3"
	"gopkg.in/yaml.v3"

	"github.com/aetherium-engine/aetherium/egress"
	"github.com/aetherium-engine/aetherium/toolbox/workspace"
	"github.com/aetherium-engine/aetherium/tools"
)

// APISchemaArgs are capture_api_schema's arguments.
type APISchemaArgs struct {
	BaseURL string `json:"base_url" jsonschema:"description=Base URL of the running app (http or https), e.g. http://localhost:8000"`
	// Paths are probed (GET) when the app publishes no OpenAPI document.
	Paths []string `json:"paths,omitempty" jsonschema:"description=Paths to probe with GET when the app publishes no OpenAPI document (e.g. /api/users); their JSON responses are turned into schemas"`
	// CompareTo is a schema file in the workspace (what this tool saved before,
	// or an agreed OpenAPI document) to report breaking differences against.
	CompareTo string `json:"compare_to,omitempty" jsonschema:"description=Workspace path of an earlier schema (OpenAPI JSON or YAML) to compare with: breaking differences are reported"`
	Out       string `json:"out,omitempty" jsonschema:"description=Workspace path the schema is saved to (default api-schema.json)"`
}

// APIProbe is one request capture_api_schema made.
type APIProbe struct {
	Path        string `json:"path"`
	Status      int    `json:"status,omitempty"`
	ContentType string `json:"content_type,omitempty"`
	// Used says the response became (part of) the schema.
	Used  bool   `json:"used"`
	Error string `json:"error,omitempty"`
}

// APISchemaReport is capture_api_schema's answer.
type APISchemaReport struct {
	// Source is "openapi" (the app's own document) or "inferred" (from probes).
	Source string `json:"source"`
	// Via is the route the requests took: ViaSandbox or ViaEgress.
	Via         string `json:"via"`
	DocumentURL string `json:"document_url,omitempty"`
	// SpecVersion is the published document's version ("3.0.3", "2.0" — a
	// Swagger 2 document is saved converted to OpenAPI 3).
	SpecVersion     string     `json:"spec_version"`
	Valid           bool       `json:"valid"`
	ValidationError string     `json:"validation_error,omitempty"`
	Saved           string     `json:"saved"`
	Paths           int        `json:"paths"`
	Operations      int        `json:"operations"`
	Probes          []APIProbe `json:"probes"`
	ComparedTo      string     `json:"compared_to,omitempty"`
	// Breaking is set (possibly empty) when compare_to was given.
	Breaking []APIBreak `json:"breaking,omitempty"`
	Notes    []string   `json:"notes,omitempty"`
}

// openAPICandidates are where frameworks publish their document (FastAPI,
// Express/swagger-jsdoc, springdoc, Swashbuckle, drf-spectacular…), tried in order
// under the base URL.
var openAPICandidates = []string{
	"/openapi.json", "/swagger.json", "/api-docs", "/v3/api-docs", "/openapi.yaml", "/openapi.yml",
	"/swagger.yaml", "/api/openapi.json", "/swagger/v1/swagger.json", "/v2/api-docs", "/api/schema/",
}

// SchemaOut is where capture_api_schema saves without an out argument.
const SchemaOut = "api-schema.json"

func registerAPISchema(reg *tools.Registry, d WebAppDeps, cfg WebAppConfig) {
	tools.Register(reg, "capture_api_schema", "Capture a running app's API schema: fetch its published OpenAPI/Swagger document (/openapi.json, /swagger.json, /api-docs, …) and validate it, "+
		"or else GET the given paths and infer JSON Schemas from their JSON responses (types; required = present and not null). "+
		"Saves an OpenAPI 3 document into the workspace (default api-schema.json); with compare_to (an earlier schema file) lists the changes that break a client: "+
		"missing paths/operations/responses, missing response fields, changed types, newly required request fields.",
		func(ctx context.Context, call tools.Call, a APISchemaArgs) (tools.Result, error) {
			rep, err := captureAPISchema(ctx, call, d, cfg, a)
			if err != nil {
				return tools.Result{}, fmt.Errorf("capture_api_schema: %w", explainQuota(call, err))
			}
			b, err := json.MarshalIndent(rep, "", "  ")
			if err != nil {
				return tools.Result{}, fmt.Errorf("capture_api_schema: %w", err)
			}
			return tools.Result{Content: string(b)}, nil
			// Idempotent: GETs only, and the file is rewritten from a fresh capture;
			// running it again is the recovery after a crash.
		}, tools.Outbound(), tools.Idempotent(), tools.LoopbackInSandbox(d.Sandbox != nil), tools.Reads(tools.Untrusted), tools.WritesPath("out", SchemaOut), tools.InGroup("quality"))
}

func captureAPISchema(ctx context.Context, call tools.Call, d WebAppDeps, cfg WebAppConfig, a APISchemaArgs) (APISchemaReport, error) {
	base, err := parseAppURL(a.BaseURL)
	if err != nil {
		return APISchemaReport{}, fmt.Errorf("base_url: %w", err)
	}
	if len(a.Paths) > cfg.MaxPaths {
		return APISchemaReport{}, fmt.Errorf("paths: %d paths, the limit is %d", len(a.Paths), cfg.MaxPaths)
	}
	for _, p := range a.Paths {
		if _, err := joinAppPath(base, p); err != nil {
			return APISchemaReport{}, fmt.Errorf("paths: %w", err)
		}
	}
	out := cmp.Or(a.Out, SchemaOut)
	outRel, err := cleanPathArg(out)
	if err != nil {
		return APISchemaReport{}, fmt.Errorf("out: %w", err)
	}
	if !strings.EqualFold(path.Ext(outRel), ".json") {
		return APISchemaReport{}, fmt.Errorf("out: %q must be a .json file (the schema is saved as OpenAPI JSON)", out)
	}
	var cmpRel string
	if a.CompareTo != "" {
		if cmpRel, err = cleanPathArg(a.CompareTo); err != nil {
			return APISchemaReport{}, fmt.Errorf("compare_to: %w", err)
		}
	}
	root, _, err := openSessionRoot(call)
	if err != nil {
		return APISchemaReport{}, err
	}
	defer root.Close()
	// The earlier schema is read first: out may name the same file.
	var old *openapi3.T
	if cmpRel != "" {
		data, err := readRootFile(root, cmpRel, cfg.MaxSchemaBytes)
		if err != nil {
			return APISchemaReport{}, fmt.Errorf("compare_to: %w", err)
		}
		if old, _, err = loadAPIDocument(ctx, data); err != nil {
			return APISchemaReport{}, fmt.Errorf("compare_to: %s: %w", cmpRel, err)
		}
	}
	client, via, err := appClient(call.Session, d, base)
	if err != nil {
		return APISchemaReport{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.CallTimeout)
	defer cancel()

	rep := APISchemaReport{Via: via, Probes: []APIProbe{}}
	doc, err := discoverAPIDocument(ctx, client, cfg, base, &rep)
	if err != nil {
		return APISchemaReport{}, err
	}
	if doc == nil {
		if len(a.Paths) == 0 {
			return APISchemaReport{}, fmt.Errorf("%s publishes no OpenAPI document (tried %s); give paths to probe and their JSON responses become the schema",
				originOf(base), strings.Join(openAPICandidates, ", "))
		}
		if doc, err = inferAPIDocument(ctx, client, cfg, base, a.Paths, &rep); err != nil {
			return APISchemaReport{}, err
		}
	} else if len(a.Paths) > 0 {
		rep.Notes = append(rep.Notes, "paths were not probed: the app publishes its own document")
	}
	if verr := doc.Validate(ctx); verr != nil {
		rep.ValidationError = verr.Error()
	} else {
		rep.Valid = true
	}
	for _, item := range pathMap(doc) {
		rep.Paths++
		rep.Operations += len(item.Operations())
	}
	data, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return APISchemaReport{}, fmt.Errorf("encode the schema: %w", err)
	}
	data = append(data, '\n')
	if int64(len(data)) > cfg.MaxSchemaBytes {
		return APISchemaReport{}, fmt.Errorf("%w: the schema would be %d bytes, the limit is %d", workspace.ErrTooLarge, len(data), cfg.MaxSchemaBytes)
	}
	if err := writeRootFile(root, outRel, data, d.Workspace.Owner); err != nil {
		return APISchemaReport{}, fmt.Errorf("out: %w", err)
	}
	rep.Saved = outRel
	if old != nil {
		rep.ComparedTo = cmpRel
		rep.Breaking = breakingChanges(old, doc)
		if rep.Breaking == nil {
			rep.Breaking = []APIBreak{}
		}
	}
	return rep, nil
}

// discoverAPIDocument tries the well-known places; nil when none holds a
// document. A refusal of the egress policy ends the call (it would refuse every
// candidate); an unreachable app too, with its reason.
func discoverAPIDocument(ctx context.Context, client *http.Client, cfg WebAppConfig, base *url.URL, rep *APISchemaReport) (*openapi3.T, error) {
	var transportErrs int
	for _, c := range openAPICandidates {
		u, _ := joinAppPath(base, c) // constant paths
		resp, err := getApp(ctx, client, u, "application/json, application/yaml;q=0.9, */*;q=0.5", cfg.RequestTimeout, cfg.MaxBodyBytes)
		if err != nil {
			if errors.Is(err, egress.ErrEgressDenied) || ctx.Err() != nil {
				return nil, err
			}
			if !errors.Is(err, errResponseTooLarge) {
				transportErrs++
				if transportErrs == 1 && len(rep.Probes) == 0 {
					// The first request could not even connect: nothing will.
					return nil, fmt.Errorf("the app does not answer: %w", err)
				}
			}
			rep.Probes = append(rep.Probes, APIProbe{Path: c, Error: err.Error()})
			continue
		}
		probe := APIProbe{Path: c, Status: resp.Status, ContentType: resp.ContentType}
		if resp.Status/100 != 2 {
			rep.Probes = append(rep.Probes, probe)
			continue
		}
		doc, version, err := loadAPIDocument(ctx, resp.Body)
		if err != nil {
			probe.Error = "not an OpenAPI document: " + err.Error()
			rep.Probes = append(rep.Probes, probe)
			continue
		}
		probe.Used = true
		rep.Probes = append(rep.Probes, probe)
		rep.Source, rep.DocumentURL, rep.SpecVersion = "openapi", u.String(), version
		if strings.HasPrefix(version, "2") {
			rep.Notes = append(rep.Notes, "Swagger 2.0 document saved converted to OpenAPI 3")
		}
		return doc, nil
	}
	return nil, nil
}

// inferAPIDocument GETs each path and builds an OpenAPI 3 document whose GET
// operations answer the inferred schemas. Paths answering no JSON success are
// listed in the probes and left out.
func inferAPIDocument(ctx context.Context, client *http.Client, cfg WebAppConfig, base *url.URL, paths []string, rep *APISchemaReport) (*openapi3.T, error) {
	doc := &openapi3.T{
		OpenAPI: "3.0.3",
		Info:    &openapi3.Info{Title: "API of " + originOf(base) + " (inferred from responses)", Version: "inferred"},
		Paths:   openapi3.NewPaths(),
	}
	var failed []string
	for _, p := range paths {
		u, _ := joinAppPath(base, p) // validated by the caller
		probe := APIProbe{Path: p}
		resp, err := getApp(ctx, client, u, "application/json", cfg.RequestTimeout, cfg.MaxBodyBytes)
		switch {
		case err != nil:
			if errors.Is(err, egress.ErrEgressDenied) || ctx.Err() != nil {
				return nil, err
			}
			probe.Error = err.Error()
		case resp.Status/100 != 2:
			probe.Status, probe.ContentType = resp.Status, resp.ContentType
			probe.Error = "not a success status"
		case !isJSONMedia(resp.ContentType) && resp.ContentType != "":
			probe.Status, probe.ContentType = resp.Status, resp.ContentType
			probe.Error = "not a JSON response"
		default:
			probe.Status, probe.ContentType = resp.Status, resp.ContentType
			sch, err := inferFromJSON(resp.Body)
			if err != nil {
				probe.Error = err.Error()
				break
			}
			probe.Used = true
			key := u.Path
			if base.Path != "" && base.Path != "/" {
				// The document's paths are relative to its server (base_url).
				key = "/" + strings.TrimPrefix(strings.TrimPrefix(u.Path, strings.TrimSuffix(base.Path, "/")), "/")
			}
			item := doc.Paths.Value(key)
			if item == nil {
				item = &openapi3.PathItem{}
				doc.Paths.Set(key, item)
			}
			if item.Get == nil {
				item.Get = &openapi3.Operation{Responses: openapi3.NewResponses()}
				// NewResponses starts with a "default" entry; only what was seen is kept.
				item.Get.Responses.Delete("default")
			}
			code := strconv.Itoa(resp.Status)
			if prev := item.Get.Responses.Value(code); prev != nil {
				// Two probes of one path (different queries): widen, never narrow.
				sch = mergeInferred(responseSchema(prev), sch)
			}
			item.Get.Responses.Set(code, &openapi3.ResponseRef{Value: openapi3.NewResponse().
				WithDescription("observed response of GET " + p).WithJSONSchema(sch)})
		}
		if !probe.Used {
			failed = append(failed, fmt.Sprintf("%s (%s)", p, probeText(probe)))
		}
		rep.Probes = append(rep.Probes, probe)
	}
	if doc.Paths.Len() == 0 {
		return nil, fmt.Errorf("no OpenAPI document published, and no path answered JSON with a success status: %s", strings.Join(failed, "; "))
	}
	if base.Path != "" && base.Path != "/" {
		doc.Servers = openapi3.Servers{{URL: base.Path}}
	}
	rep.Source, rep.SpecVersion = "inferred", doc.OpenAPI
	return doc, nil
}

func probeText(p APIProbe) string {
	if p.Status != 0 {
		return fmt.Sprintf("HTTP %d %s: %s", p.Status, orNone(p.ContentType), p.Error)
	}
	return p.Error
}

// loadAPIDocument parses an OpenAPI 3 or Swagger 2 document, JSON or YAML, and
// returns it as OpenAPI 3 with its original version. External $refs are not
// followed (the loader's default): a document cannot make the tool fetch more.
func loadAPIDocument(ctx context.Context, data []byte) (*openapi3.T, string, error) {
	// YAML is a superset of JSON: one decoder reads both, and the JSON form is
	// what both kin-openapi models unmarshal.
	var generic any
	if err := yaml.Unmarshal(data, &generic); err != nil {
		return nil, "", fmt.Errorf("neither JSON nor YAML: %w", err)
	}
	top, ok := generic.(map[string]any)
	if !ok {
		return nil, "", errors.New("the document is not an object")
	}
	js, err := json.Marshal(top)
	if err != nil {
		return nil, "", fmt.Errorf("re-encode: %w", err)
	}
	oa, _ := top["openapi"].(string)
	sw, _ := top["swagger"].(string)
	switch {
	case strings.HasPrefix(oa, "3."):
		loader := openapi3.NewLoader()
		loader.Context = ctx
		doc, err := loader.LoadFromData(js)
		if err != nil {
			return nil, "", fmt.Errorf("OpenAPI %s: %w", oa, err)
		}
		return doc, oa, nil
	case strings.HasPrefix(sw, "2."):
		var d2 openapi2.T
		if err := json.Unmarshal(js, &d2); err != nil {
			return nil, "", fmt.Errorf("Swagger %s: %w", sw, err)
		}
		doc, err := openapi2conv.ToV3(&d2)
		if err != nil {
			return nil, "", fmt.Errorf("Swagger %s: converting to OpenAPI 3: %w", sw, err)
		}
		return doc, sw, nil
	}
	return nil, "", errors.New("no openapi: 3.x or swagger: 2.0 field")
}
