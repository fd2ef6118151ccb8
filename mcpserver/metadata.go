package mcpserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/aetherium-engine/aetherium/tools"
)

// toolMeta is what an outside client is told about one tool: everything is
// derived from its registration (tools.Register and its options), so a tool
// cannot be described one way to the model and another way to an MCP client,
// and a new tool needs nothing here.
type toolMeta struct {
	Name        string
	Title       string
	Description string
	InputSchema map[string]any
	Annotations mcp.ToolAnnotations
	// OutputSchema is the tool's tools.Returns: nil for the tools whose result is
	// text (most of them), as MCP leaves outputSchema out then. Where it is set,
	// the result text of a successful call is that JSON object (structured).
	OutputSchema map[string]any
	// Meta names the tool's tier and server group (aetherium/tier,
	// aetherium/group), the facts the gate judges it by.
	Meta map[string]any
}

// describe derives a tool's metadata from its registration and compiles its
// input schema for validateArgs (once per registration: New describes every
// tool of every profile).
func describe(spec *tools.Spec) (toolMeta, error) {
	var in map[string]any
	if err := json.Unmarshal(spec.Schema, &in); err != nil || in["type"] != "object" {
		return toolMeta{}, fmt.Errorf("tool %s has no object schema", spec.Name)
	}
	m := toolMeta{
		Name: spec.Name, Title: title(spec.Name), Description: spec.Description, InputSchema: in,
		Annotations: annotations(spec),
		Meta:        map[string]any{"aetherium/tier": spec.Tier.String(), "aetherium/group": spec.Group},
	}
	m.Annotations.Title = m.Title
	if len(spec.Output) > 0 {
		if err := json.Unmarshal(spec.Output, &m.OutputSchema); err != nil || m.OutputSchema["type"] != "object" {
			// MCP requires an object: a result schema of another type would be a
			// registration mistake, caught at boot rather than by a client.
			return toolMeta{}, fmt.Errorf("tool %s declares a result schema that is not an object", spec.Name)
		}
	}
	return m, nil
}

// annotations are the MCP hints (advisory to a client, never trusted by the
// fleet: the gate decides). Read-only is the registration's tools.ReadOnly.
// Destructive (meaningful only when not read-only) is what may delete or
// overwrite: a Restricted tool (the tier says a human must look first), one that
// escalates its own calls (run_shell: rm -rf), one that writes a workspace path
// (write_file overwrites), changes a remote service (http_request's PUT/DELETE) or
// persists what later runs read. Idempotent is the crash-recovery declaration
// tools/intents.go relies on (tools.Idempotent). Open world is anything reaching
// past the fleet: the research group, an outbound tool, a tool that reaches the
// network in some sessions (run_shell), and the devices a person wears.
func annotations(spec *tools.Spec) mcp.ToolAnnotations {
	destructive := !spec.ReadOnly && (spec.Tier == tools.Restricted || spec.Escalate != nil || spec.WritesPath != "" ||
		spec.ChangesRemote != nil || spec.Persists)
	openWorld := spec.Group == "research" || spec.Group == "device" || spec.Outbound || spec.OutboundWhen != nil
	return mcp.ToolAnnotations{
		ReadOnlyHint:    spec.ReadOnly,
		DestructiveHint: &destructive,
		IdempotentHint:  spec.Idempotent,
		OpenWorldHint:   &openWorld,
	}
}

// acronyms keep their capitals in a title.
var acronyms = map[string]string{"api": "API", "http": "HTTP", "pdf": "PDF", "tts": "TTS", "url": "URL", "comfyui": "ComfyUI", "mcp": "MCP"}

// title is the human title of a tool, from its name: write_file is "Write file",
// download_pdf "Download PDF". Registrations have no title of their own, and the
// names are already the words a person would use.
func title(name string) string {
	words := strings.Split(name, "_")
	for i, w := range words {
		if a, ok := acronyms[w]; ok {
			words[i] = a
		} else if i == 0 && w != "" {
			words[i] = strings.ToUpper(w[:1]) + w[1:]
		}
	}
	return strings.Join(words, " ")
}

// sdkTool is the tool as both generations list it (the 2026-07-28 layer
// writes the same go-sdk value).
func (m toolMeta) sdkTool() *mcp.Tool {
	ann := m.Annotations
	t := &mcp.Tool{Name: m.Name, Title: m.Title, Description: m.Description, InputSchema: m.InputSchema,
		Annotations: &ann, Meta: mcp.Meta(m.Meta)}
	if m.OutputSchema != nil {
		t.OutputSchema = m.OutputSchema
	}
	return t
}

// toolMeta is the metadata of a registered tool (by name).
func (s *Server) toolMeta(tool string) (toolMeta, error) {
	spec, ok := s.d.Registry.Spec(tool)
	if !ok {
		return toolMeta{}, fmt.Errorf("unknown tool %q", tool)
	}
	return describe(spec)
}

// structured is the structured content of a successful result of a tool that
// declares a result schema (tools.Returns): its text parsed as the JSON object it
// is, or nil (no schema, an error, or a text that is not one object: a result
// shortened by the worker).
func structured(spec *tools.Spec, isError bool, text string) map[string]any {
	if spec == nil || len(spec.Output) == 0 || isError {
		return nil
	}
	var v map[string]any
	if json.Unmarshal([]byte(text), &v) != nil {
		return nil
	}
	return v
}

// argSchema is the compiled input schema of a registration, compiled once (New
// compiles every served tool's) and kept by the server (Server.schemas): a
// registration's schema never changes, and a test that stands another tool in
// for a shipped one registers a new Spec.
func (s *Server) argSchema(spec *tools.Spec) (*jsonschema.Schema, error) {
	if v, ok := s.schemas.Load(spec); ok {
		return v.(*jsonschema.Schema), nil
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(spec.Schema))
	if err != nil {
		return nil, fmt.Errorf("tool %s: input schema: %w", spec.Name, err)
	}
	c := jsonschema.NewCompiler()
	// The reflected schemas name no draft and refer to nothing outside themselves.
	c.DefaultDraft(jsonschema.Draft2020)
	loc := "mem://tools/" + spec.Name + ".json"
	if err := c.AddResource(loc, doc); err != nil {
		return nil, fmt.Errorf("tool %s: input schema: %w", spec.Name, err)
	}
	sch, err := c.Compile(loc)
	if err != nil {
		return nil, fmt.Errorf("tool %s: input schema: %w", spec.Name, err)
	}
	v, _ := s.schemas.LoadOrStore(spec, sch)
	return v.(*jsonschema.Schema), nil
}

// validateArgs checks a call's arguments against the tool's input schema before
// anything is queued, so a malformed call costs no task or approval, and the
// client (a model, often) reads what to fix: "invalid arguments for write_file:
// missing property \"path\"" (submit audits the refusal). Empty arguments are
// {}. The profile's tool_defaults are merged by the caller (withDefaults).
func (s *Server) validateArgs(tool string, args json.RawMessage) error {
	spec, ok := s.d.Registry.Spec(tool)
	if !ok {
		return fmt.Errorf("unknown tool %q", tool)
	}
	sch, err := s.argSchema(spec)
	if err != nil {
		return err
	}
	raw := bytes.TrimSpace(args)
	if len(raw) == 0 || string(raw) == "null" {
		raw = []byte("{}")
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return fmt.Errorf("invalid arguments for %s: not JSON: %v", tool, err)
	}
	err = sch.Validate(inst)
	var ve *jsonschema.ValidationError
	if errors.As(err, &ve) {
		return fmt.Errorf("invalid arguments for %s: %s", tool, causes(ve))
	}
	if err != nil {
		return fmt.Errorf("invalid arguments for %s: %w", tool, err)
	}
	return nil
}

// causes flattens a validation error to its leaf causes, each naming where in
// the arguments it is (at /tasks/0: ...; nothing at the top level) and what is
// wrong, in the words a model acts on. Capped: one wrong call should not fill a
// context window.
func causes(ve *jsonschema.ValidationError) string {
	pr := message.NewPrinter(language.English)
	var leaves []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		var what string
		switch k := e.ErrorKind.(type) {
		case *kind.Required:
			what = "missing propert" + plural(len(k.Missing), "y", "ies") + " " + quoted(k.Missing)
		case *kind.AdditionalProperties:
			what = "unknown propert" + plural(len(k.Properties), "y", "ies") + " " + quoted(k.Properties) + " (not in the tool's schema)"
		case *kind.Type:
			what = fmt.Sprintf("got %s, want %s", k.Got, strings.Join(k.Want, " or "))
		default:
			what = e.ErrorKind.LocalizedString(pr)
		}
		if len(e.InstanceLocation) > 0 {
			what = "at /" + strings.Join(e.InstanceLocation, "/") + ": " + what
		}
		leaves = append(leaves, what)
	}
	walk(ve)
	const maxLeaves = 8
	if len(leaves) > maxLeaves {
		leaves = append(leaves[:maxLeaves], fmt.Sprintf("… %d more", len(leaves)-maxLeaves))
	}
	return strings.Join(leaves, "; ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func quoted(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = fmt.Sprintf("%q", x)
	}
	return strings.Join(q, ", ")
}
