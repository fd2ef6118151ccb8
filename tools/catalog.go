package tools

import "fmt"

// Tier is a tool's runtime security tier. It is code, not configuration: a tool's
// blast radius does not change per deployment.
type Tier int

// The three tiers. Standard runs at once; Elevated runs with full arguments and
// result audited; Restricted waits for a human.
const (
	Standard Tier = iota
	Elevated
	Restricted
)

func (t Tier) String() string {
	switch t {
	case Elevated:
		return "elevated"
	case Restricted:
		return "restricted"
	default:
		return "standard"
	}
}

// Groups are the thirteen server-group keys a node's mcp_servers may name.
var Groups = []string{
	"workspace", "shell", "research", "knowledge", "quality", "planning", "comms",
	"orchestration", "team", "comfyui", "video", "audio", "device",
}

// A tool's group and tier are declared once, by the options of its registration
// (InGroup, WithTier). tools/catalog.yaml documents the design's tools; every
// process compares it with the registrations at boot (CheckCatalog), so GroupOf
// and TierOf, which answer from it for code that has no registry at hand (template
// and configuration validation, metrics labels), agree with the registrations.

// GroupOf returns the server group of a documented tool (tools/catalog.yaml).
func GroupOf(tool string) (string, bool) {
	d, ok := documented()[tool]
	return d.Group, ok
}

// TierOf returns a documented tool's security tier (Standard for any other name).
func TierOf(tool string) Tier {
	d, ok := documented()[tool]
	if !ok {
		return Standard
	}
	t, _ := ParseTier(d.Tier)
	return t
}

// AgentOnly reports whether a documented tool only means something to a team's
// agents: the orchestration of a run and messages between teammates
// (tools/catalog.yaml's agent_only), never an outside MCP client's tool.
func AgentOnly(tool string) bool { return documented()[tool].AgentOnly }

// ParseTier reads a tier's name as String writes it.
func ParseTier(s string) (Tier, error) {
	for _, t := range []Tier{Standard, Elevated, Restricted} {
		if t.String() == s {
			return t, nil
		}
	}
	return Standard, fmt.Errorf("tools: unknown tier %q (standard, elevated or restricted)", s)
}

// IsGroup reports whether g is one of the thirteen server groups.
func IsGroup(g string) bool {
	for _, x := range Groups {
		if x == g {
			return true
		}
	}
	return false
}

// DesignTools returns every tool name of the design (46: the seed's 44,
// read_result and ask_user): the documented catalog's.
func DesignTools() []string {
	out := make([]string, 0, len(documented()))
	for k := range documented() {
		out = append(out, k)
	}
	return out
}

// NeverFallsBack reports whether a documented tool always needs a human decision
// (its registration's AlwaysHuman, tools/catalog.yaml's always_human): its
// expiring approval times out whatever the supervisor fallback lists.
func NeverFallsBack(tool string) bool { return documented()[tool].AlwaysHuman }
