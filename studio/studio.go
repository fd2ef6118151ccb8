package studio

import (
	"bytes"
	"embed"
	"html/template"
	"io/fs"
	"net/http"
	"path"

	"github.com/gofiber/fiber/v2"
	"github.com/google/uuid"
)

//go:embed static templates
var files embed.FS

// Prefix is where the Studio is mounted.
const Prefix = "/app"

// CSP is the Studio pages' Content-Security-Policy. Scripts and styles come only
// from the embedded files (no inline code, no eval), so text an agent wrote can
// never become code even if it reached the DOM as markup. blob: images and media
// are the workspace pictures the script fetched with the token and recognised
// from their bytes; connect-src 'self' is the API.
const CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' blob:; media-src 'self' blob:; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

var shell = template.Must(template.ParseFS(files, "templates/shell.html"))

// pages are the Studio's pages: their path under Prefix, title and nav entry.
var pages = []struct{ Route, Page, Title string }{
	{"", "runs", "Runs"},
	{"/runs", "runs", "Runs"},
	{"/runs/:id", "run", "Run"},
	{"/runs/:id/files", "files", "Workspace"},
	{"/inbox", "inbox", "Inbox"},
	// The inbox's former address, kept for links and bookmarks to it.
	{"/approvals", "inbox", "Inbox"},
	{"/audit", "audit", "Audit"},
	{"/leases", "leases", "Leases"},
	{"/tools", "tools", "Tools"},
	{"/fleet", "fleet", "Fleet"},
	{"/triggers", "triggers", "Triggers"},
}

type shellData struct {
	Page, Title, RunID string
}

// Mount adds the Studio to app: GET / redirects to /app, the pages, and their
// static files under /app/static/.
func Mount(app fiber.Router) {
	app.Get("/", func(c *fiber.Ctx) error { return c.Redirect(Prefix, http.StatusFound) })
	g := app.Group(Prefix, headers)
	static, _ := fs.Sub(files, "static")
	g.Get("/static/:name", func(c *fiber.Ctx) error { return serveStatic(c, static) })
	for _, p := range pages {
		g.Get(p.Route, func(c *fiber.Ctx) error {
			d := shellData{Page: p.Page, Title: p.Title}
			if id := c.Params("id"); id != "" {
				u, err := uuid.Parse(id)
				if err != nil {
					return c.Status(http.StatusNotFound).SendString("not a run id")
				}
				d.RunID = u.String()
			}
			var b bytes.Buffer
			if err := shell.Execute(&b, d); err != nil {
				return err
			}
			c.Set("Content-Type", "text/html; charset=utf-8")
			c.Set("Cache-Control", "no-store")
			return c.Send(b.Bytes())
		})
	}
}

// headers are the security headers of every Studio response.
func headers(c *fiber.Ctx) error {
	c.Set("Content-Security-Policy", CSP)
	c.Set("X-Content-Type-Options", "nosniff")
	c.Set("X-Frame-Options", "DENY")
	c.Set("Referrer-Policy", "no-referrer")
	c.Set("Cross-Origin-Opener-Policy", "same-origin")
	c.Set("Permissions-Policy", "camera=(), microphone=(), geolocation=()")
	return c.Next()
}

var staticTypes = map[string]string{
	".js":  "text/javascript; charset=utf-8",
	".css": "text/css; charset=utf-8",
	".svg": "image/svg+xml",
}

func serveStatic(c *fiber.Ctx, static fs.FS) error {
	name := c.Params("name")
	typ, ok := staticTypes[path.Ext(name)]
	if !ok {
		return c.SendStatus(http.StatusNotFound)
	}
	b, err := fs.ReadFile(static, name)
	if err != nil {
		return c.SendStatus(http.StatusNotFound)
	}
	c.Set("Content-Type", typ)
	c.Set("Cache-Control", "no-cache")
	return c.Send(b)
}
