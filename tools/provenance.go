package tools

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/aetherium-engine/aetherium/llm"
)

// Provenance is where what a tool returns comes from, as the flow rules judge it
// (issue 49): the gate judges a call by what its session has read, not by the call
// alone, because a model obeys what it reads.
type Provenance int

// The provenances a registration declares (Reads). Trusted is what nobody outside
// the deployment wrote: the submitted prompt, the team's configuration, a human's
// answers, a tool's own bookkeeping.
const (
	Trusted Provenance = iota
	// Private is the owner's data: workspace files, logs, the knowledge base,
	// recalled memory. An outbound call must not carry it out on a stranger's
	// word.
	Private
	// Untrusted is content a stranger can write: web pages and search results,
	// downloaded documents, what a browser rendered, the answers of remote APIs.
	Untrusted
)

func (p Provenance) String() string {
	switch p {
	case Private:
		return "private"
	case Untrusted:
		return "untrusted"
	default:
		return "trusted"
	}
}

// ParseProvenance reads a provenance's name as String writes it ("" is trusted).
func ParseProvenance(s string) (Provenance, error) {
	switch s {
	case "", "trusted":
		return Trusted, nil
	case "private":
		return Private, nil
	case "untrusted":
		return Untrusted, nil
	}
	return Trusted, fmt.Errorf("tools: unknown provenance %q (trusted, private or untrusted)", s)
}

// Reads declares the provenance of what a tool returns: a session that reads it
// carries the label (Session.Label) for the rest of its life.
func Reads(p Provenance) Option { return func(s *Spec) { s.Reads = p } }

// Persists marks a tool that writes where later runs will read it as instructions
// or facts (the knowledge base): the flow rules ask a human before a session that
// read untrusted content plants something there.
func Persists() Option { return func(s *Spec) { s.Persists = true } }

// WritesPath declares that the tool writes the workspace path in argument arg
// (def when the argument is empty): the flow rules ask before a session that
// read untrusted content writes a file later runs read as instructions
// (AGENTS.md, a CI workflow, the knowledge folder; security.flow_instruction_files).
func WritesPath(arg, def string) Option {
	return func(s *Spec) { s.WritesPath, s.WritesDefault = arg, def }
}

// WrittenPath is the workspace path a call of a WritesPath tool writes ("" for
// another tool, or arguments that do not parse: the tool refuses those itself).
func (s *Spec) WrittenPath(args json.RawMessage) string {
	if s.WritesPath == "" {
		return ""
	}
	var a map[string]any
	if json.Unmarshal(args, &a) != nil {
		return ""
	}
	if p, ok := a[s.WritesPath].(string); ok && p != "" {
		return p
	}
	return s.WritesDefault
}

// ChangesRemote declares how to tell a call that changes or destroys state on a
// remote service (an HTTP DELETE, PUT or PATCH, however spelled): the flow rules
// ask before a session that read untrusted content makes one.
func ChangesRemote(change func(args json.RawMessage) string) Option {
	return func(s *Spec) { s.ChangesRemote = change }
}

// MaxLabelSources bounds the sources a label names per provenance: the first ones
// read are kept (the ones an approver most needs to see), the rest only counted.
const MaxLabelSources = 4

// Label is the join of what a session has read: which private and untrusted
// sources, in the order read. The worker derives it from the session's durable
// history (every tool result is saved with the session), so it survives a crash
// and a redelivery without a store of its own.
type Label struct {
	private, untrusted       []string
	morePrivate, moreUntrust int
	// Content holds the fingerprints of the private content read, when the
	// flow rules need them (an untrusted session that read private data); nil
	// otherwise.
	Content PrivateContent
}

// Add joins one read into the label; a Trusted read changes nothing.
func (l *Label) Add(p Provenance, source string) {
	switch p {
	case Private:
		l.private, l.morePrivate = addSource(l.private, l.morePrivate, source)
	case Untrusted:
		l.untrusted, l.moreUntrust = addSource(l.untrusted, l.moreUntrust, source)
	}
}

func addSource(list []string, more int, source string) ([]string, int) {
	for _, s := range list {
		if s == source {
			return list, more
		}
	}
	if len(list) >= MaxLabelSources {
		return list, more + 1
	}
	return append(list, source), more
}

// Record is the label as a message carries it onward (llm.Provenance): nil when
// the session read nothing private or untrusted.
func (l *Label) Record() *llm.Provenance {
	if l == nil || (len(l.private) == 0 && len(l.untrusted) == 0) {
		return nil
	}
	return &llm.Provenance{Private: record(l.private, l.morePrivate), Untrusted: record(l.untrusted, l.moreUntrust)}
}

func record(list []string, more int) []string {
	out := slices.Clone(list)
	if more > 0 {
		out = append(out, fmt.Sprintf("and %d more", more))
	}
	return out
}

// AddRecord joins what a message carries (Record's output, saved with it), each
// source prefixed with where it came through ("via writer: web_fetch …").
func (l *Label) AddRecord(p *llm.Provenance, via string) {
	if p == nil {
		return
	}
	for _, s := range p.Private {
		l.Add(Private, via+s)
	}
	for _, s := range p.Untrusted {
		l.Add(Untrusted, via+s)
	}
}

// Private reports whether the session has read the owner's data.
func (l *Label) Private() bool { return l != nil && len(l.private) > 0 }

// Untrusted reports whether the session has read content a stranger can write.
func (l *Label) Untrusted() bool { return l != nil && len(l.untrusted) > 0 }

// UntrustedCount is how many untrusted sources the label holds, counted ones
// included.
func (l *Label) UntrustedCount() int {
	if l == nil {
		return 0
	}
	return len(l.untrusted) + l.moreUntrust
}

// Level is the label's highest provenance.
func (l *Label) Level() Provenance {
	switch {
	case l.Untrusted():
		return Untrusted
	case l.Private():
		return Private
	}
	return Trusted
}

// PrivateSources and UntrustedSources name what was read ("web_fetch
// https://example.com/a (turn 3)"), with "and N more" when the list was cut.
func (l *Label) PrivateSources() string {
	if l == nil {
		return ""
	}
	return joinSources(l.private, l.morePrivate)
}

// UntrustedSources: see PrivateSources.
func (l *Label) UntrustedSources() string {
	if l == nil {
		return ""
	}
	return joinSources(l.untrusted, l.moreUntrust)
}

func joinSources(list []string, more int) string {
	s := strings.Join(list, "; ")
	if more > 0 {
		s += fmt.Sprintf("; and %d more", more)
	}
	return s
}

// Carried is private content an outbound text carries, as the session's
// fingerprints found it (egress/fingerprint).
type Carried struct {
	// Source names the private read the content came from ("read_file
	// notes/customers.md (turn 2)").
	Source string
	// Form is how it was sent: "plain", "spaced", "reversed", or the decodings
	// ("base64", "hex", "url", "base64+reversed", …).
	Form string
	// Chars is the run's length in normalized characters.
	Chars int
	// Boilerplate marks a run the private reads hold in several places (an
	// import block, a license header): a hint that it may be shared by chance.
	Boilerplate bool
}

// PrivateContent finds what of a session's private reads an outbound text
// carries, whole, split over the session's earlier outbound calls, or encoded.
// The worker keeps one per session beside its Label (Label.Content).
type PrivateContent interface {
	Carried(text string) (Carried, bool)
}
