package api_test

import (
	"context"
	"io"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/api"
	"github.com/aetherium-engine/aetherium/config"
	"github.com/aetherium-engine/aetherium/fleettest"
)

// routeDiff compares the routes app registers with the operations of doc, as
// "METHOD /openapi/{path}": missing are registered but not documented, extra
// documented but not registered. HEAD routes are Fiber's twins of GET routes
// and routes under api.NotInOpenAPI are left out; so are middleware mounts, of
// which mounts lists the prefixes.
func routeDiff(app *fiber.App, doc *openapi3.T) (missing, extra, mounts []string) {
	registered := map[string]bool{}
	heads := map[string]bool{}
	for _, r := range app.GetRoutes(true) {
		if notInOpenAPI(r.Path) {
			continue
		}
		key := r.Method + " " + api.OpenAPIPathOf(r.Path)
		if r.Method == http.MethodHead {
			heads[key] = true
			continue
		}
		registered[key] = true
	}
	for key := range heads {
		if !registered["GET"+strings.TrimPrefix(key, "HEAD")] {
			missing = append(missing, key) // a HEAD route of its own
		}
	}
	withUse := map[string]bool{}
	for _, r := range app.GetRoutes(false) {
		withUse[r.Method+" "+r.Path] = true
	}
	for _, r := range app.GetRoutes(true) {
		delete(withUse, r.Method+" "+r.Path)
	}
	for key := range withUse {
		_, path, _ := strings.Cut(key, " ")
		if !slices.Contains(mounts, path) {
			mounts = append(mounts, path)
		}
	}
	documented := map[string]bool{}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented[method+" "+path] = true
		}
	}
	for key := range registered {
		if !documented[key] {
			missing = append(missing, key)
		}
	}
	for key := range documented {
		if !registered[key] {
			extra = append(extra, key)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	sort.Strings(mounts)
	return missing, extra, mounts
}

func notInOpenAPI(path string) bool {
	for prefix := range api.NotInOpenAPI {
		if path == prefix || strings.HasPrefix(path, prefix+"/") {
			return true
		}
	}
	return false
}

func TestRoutesMatchOpenAPI(t *testing.T) {
	t.Parallel()
	f := setup(t)
	doc := fleettest.OpenAPI(t).Doc

	// A copy of the document naming one more operation than the app serves.
	raw, err := api.OpenAPI()
	require.NoError(t, err)
	bigger, err := openapi3.NewLoader().LoadFromData(raw)
	require.NoError(t, err)
	bigger.Paths.Set("/api/ghost/{id}", &openapi3.PathItem{Get: bigger.Paths.Find("/api/runs/{id}").Get})

	cases := []struct {
		name           string
		addRoute       bool // register a route the document lacks
		doc            *openapi3.T
		missing, extra []string
	}{
		{name: "the app and its document", doc: doc},
		{name: "a route the document lacks", addRoute: true, doc: doc, missing: []string{"GET /api/runs/{id}/secret"}},
		{name: "an operation the app lacks", doc: bigger, extra: []string{"GET /api/ghost/{id}"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			app := f.API.App
			if tc.addRoute {
				// Another app: routes added to the fleet's would leak into the other cases.
				app = fiber.New()
				for _, r := range f.API.App.GetRoutes(true) {
					app.Add(r.Method, r.Path, func(c *fiber.Ctx) error { return nil })
				}
				app.Get("/api/runs/:id/secret", func(c *fiber.Ctx) error { return nil })
			}
			missing, extra, _ := routeDiff(app, tc.doc)
			require.Equal(t, tc.missing, missing, "registered routes the document lacks")
			require.Equal(t, tc.extra, extra, "documented operations no route serves")
		})
	}

	t.Run("mounts", func(t *testing.T) {
		// "/" is the app-wide middleware (metrics, the JSON 404); anything else
		// mounted must be named in api.NotInOpenAPI with its reason.
		_, _, mounts := routeDiff(f.API.App, doc)
		for _, m := range mounts {
			require.True(t, m == "/" || api.NotInOpenAPI[m] != "", "mount %s is neither documented nor in api.NotInOpenAPI", m)
		}
	})
}

func TestOpenAPIDocument(t *testing.T) {
	t.Parallel()
	d := fleettest.OpenAPI(t) // loaded and validated by kin-openapi
	require.Equal(t, "3.1.0", d.Doc.OpenAPI)
	require.True(t, d.Doc.IsOpenAPI31OrLater())
	require.NoError(t, d.Doc.Validate(context.Background()))
	require.Contains(t, d.Doc.Components.SecuritySchemes, "bearer")
	for path, item := range d.Doc.Paths.Map() {
		for method, op := range item.Operations() {
			name := method + " " + path
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				require.NotEmpty(t, op.Summary)
				require.NotEmpty(t, op.OperationID)
				roles, hasRoles := op.Extensions["x-roles"]
				require.NotNil(t, op.Security, "security is explicit")
				if strings.HasPrefix(path, "/api/") && path != api.OpenAPIPath {
					require.True(t, hasRoles, "every /api operation but the document asks a token")
				}
				require.Equal(t, hasRoles, len(*op.Security) > 0, "x-roles and security agree")
				if hasRoles {
					require.NotEmpty(t, roles)
				}
				errRes := op.Responses.Default()
				require.NotNil(t, errRes, "every operation documents its errors")
				require.Equal(t, "#/components/schemas/ErrorResponse", errRes.Value.Content.Get("application/json").Schema.Ref)
				for status, res := range op.Responses.Map() {
					if status[0] == '2' && res.Value.Content != nil {
						for media, mt := range res.Value.Content {
							require.NotNil(t, mt.Schema, "%s %s", status, media)
						}
					}
				}
			})
		}
	}
}

func TestOpenAPIIsServedWithoutAToken(t *testing.T) {
	t.Parallel()
	f := fleettest.Start(t, fleettest.Options{NoWorker: true, Configure: func(c *config.Config) {
		c.API.Tokens = []api.Token{{Name: "alice", SHA256: api.HashToken("alice-secret"), Roles: []string{api.RoleRead}}}
	}})
	want, err := api.OpenAPI()
	require.NoError(t, err)
	cases := []struct {
		name, path string
		code       int
	}{
		{"the document", api.OpenAPIPath, http.StatusOK},
		{"a read still asks a token", "/api/runs", http.StatusUnauthorized},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req, err := http.NewRequest("GET", f.URL+tc.path, nil)
			require.NoError(t, err)
			resp, err := f.Client().Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			raw, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.Equal(t, tc.code, resp.StatusCode, string(raw))
			if tc.code == http.StatusOK {
				require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
				require.Equal(t, string(want), string(raw), "the served document is the one the tests validate against")
			}
		})
	}
}
