package api

import (
	"encoding/json"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/aetherium-engine/aetherium/tools"
)

type schemaView struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Group       string          `json:"group"`
	Tier        string          `json:"tier"`
	Outbound    bool            `json:"outbound,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// schemas serves the catalog filtered exactly as the router filters it for an agent
// with the given servers, tools and role; with no filter, the whole catalog.
func (s *Server) schemas(c *fiber.Ctx) error {
	servers, toolList, role := splitList(c.Query("servers")), splitList(c.Query("tools")), c.Query("role")
	if role != "" && role != "supervisor" && role != "worker" {
		return badRequest("role", "role %q is not supervisor or worker", role)
	}
	for _, g := range servers {
		if !tools.IsGroup(g) {
			return badRequest("servers", "unknown server group %q", g)
		}
	}
	for _, t := range toolList {
		if _, ok := tools.GroupOf(t); !ok {
			return badRequest("tools", "unknown tool %q", t)
		}
	}
	reg := s.d.Registry
	names := reg.Names()
	var access tools.Access
	if len(servers) > 0 || len(toolList) > 0 || role != "" {
		if role == "" {
			role = "worker"
		}
		access = reg.Resolve(tools.Node{Role: role, MCPServers: servers, Tools: toolList})
		names = access.Tools
	}
	out := make([]schemaView, 0, len(names))
	for _, n := range names {
		sp, _ := reg.Spec(n)
		out = append(out, schemaView{Name: sp.Name, Description: sp.Description, Group: sp.Group, Tier: sp.Tier.String(), Outbound: sp.Outbound, Parameters: sp.Schema})
	}
	return c.JSON(toolCatalog{Tools: out, Groups: access.Groups, Count: len(out)})
}

type toolCatalog struct {
	Tools []schemaView `json:"tools"`
	// Groups are the server groups the filter resolved to; null without a filter.
	Groups []string `json:"groups" jsonschema:"nullable"`
	Count  int      `json:"count"`
}
