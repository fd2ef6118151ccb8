package tools

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

// groupOf is the static tool → server-group map for the whole 44-tool design,
// including tools a given build may not register yet.
var groupOf = map[string]string{
	"read_file": "workspace", "write_file": "workspace", "edit_file": "workspace",
	"list_files": "workspace", "revert_file": "workspace", "search_files": "workspace",
	"run_shell": "shell", "read_logs": "shell",
	"search_knowledge": "knowledge", "write_knowledge": "knowledge",
	"web_search": "research", "web_fetch": "research", "http_request": "research",
	"http_health_check": "research", "download_pdf": "research", "capture_reference": "research",
	"create_plan": "planning", "read_plan": "planning", "update_plan": "planning", "todo": "planning",
	"notify_user": "comms", "report_progress": "comms",
	"delegate": "orchestration", "reply": "orchestration", "spawn_subagents": "orchestration",
	"send_message_to": "team",
	"analyze_code":    "quality", "code_review": "quality", "run_tests": "quality",
	"validate_web_app": "quality", "capture_api_schema": "quality", "record_style": "quality",
	"check_finishing": "quality", "play_test": "quality",
	"comfyui_generate": "comfyui", "comfyui_status": "comfyui", "finish_image": "comfyui",
	"comfyui_video": "video",
	"tts_render":    "audio", "tts_status": "audio",
	"frame_status": "device", "frame_install": "device", "frame_run": "device", "frame_grab": "device",
}

// tierOf lists only the non-Standard tools; anything absent is Standard.
var tierOf = map[string]Tier{
	"web_search": Elevated, "web_fetch": Elevated, "http_request": Elevated,
	"http_health_check": Elevated, "capture_reference": Elevated, "run_shell": Elevated,
	"read_logs": Elevated, "spawn_subagents": Elevated,
	"download_pdf": Restricted, "frame_install": Restricted, "frame_run": Restricted, "frame_grab": Restricted,
}

// GroupOf returns the server group of a tool of the design.
func GroupOf(tool string) (string, bool) {
	g, ok := groupOf[tool]
	return g, ok
}

// TierOf returns a tool's security tier (Standard when unlisted).
func TierOf(tool string) Tier { return tierOf[tool] }

// IsGroup reports whether g is one of the thirteen server groups.
func IsGroup(g string) bool {
	for _, x := range Groups {
		if x == g {
			return true
		}
	}
	return false
}

// DesignTools returns every tool name of the design (44).
func DesignTools() []string {
	out := make([]string, 0, len(groupOf))
	for k := range groupOf {
		out = append(out, k)
	}
	return out
}

// NeverFallsBack reports whether a tool always needs a human decision: its expiring
// approval times out whatever the supervisor fallback lists (the seed's
// download_pdf, and the headset tools, which act on a device a person wears).
func NeverFallsBack(tool string) bool {
	switch tool {
	case "download_pdf", "frame_status", "frame_install", "frame_run", "frame_grab":
		return true
	}
	return false
}
