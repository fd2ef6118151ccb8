package egress

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"regexp"
	"strings"

	"github.com/aetherium-engine/aetherium/egress/shell"
)

// ApprovalView is what a human decides on: for a shell tool the simple commands
// it would run, for a URL tool the URL, and always the arguments, each string with
// only its secret spans masked ([REDACTED:rule]) and the hash the approval binds.
type ApprovalView struct {
	// Commands are the simple commands of a shell command line, in order.
	Commands []string `json:"commands,omitempty"`
	// ParseError says why the command line could not be split (it is shown whole).
	ParseError string `json:"parse_error,omitempty"`
	// URL is the target of a URL tool.
	URL string `json:"url,omitempty"`
}

// ApproverView builds the view and the masked arguments of a call. It keys on
// the arguments' shape, not the tool's name: a "command" string is a shell
// command line (run_shell's, the only tool that takes one), a "url" string a URL.
func (d *DLP) ApproverView(args json.RawMessage) (ApprovalView, json.RawMessage) {
	var v ApprovalView
	var decoded any
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	if err := dec.Decode(&decoded); err != nil {
		// Not JSON: the tool will refuse it; still show it, masked, as a string.
		decoded = string(args)
	}
	masked := d.maskValue(decoded)
	if obj, ok := decoded.(map[string]any); ok {
		if cmd, ok := obj["command"].(string); ok {
			cmds, err := shell.ShellCommands(cmd)
			if err != nil {
				v.ParseError = d.MaskSecrets(err.Error())
				cmds = []string{cmd}
			}
			for _, c := range cmds {
				v.Commands = append(v.Commands, d.MaskSecrets(c))
			}
		}
		if u, ok := obj["url"].(string); ok {
			v.URL = d.MaskSecrets(u)
		}
	}
	out, err := json.Marshal(masked)
	if err != nil {
		out = []byte(`{}`)
	}
	// jsonb refuses the NUL escape; the row must land whatever the model sent.
	return v, json.RawMessage(bytes.ReplaceAll(out, []byte(`\u0000`), []byte(`\ufffd`)))
}

func (d *DLP) maskValue(v any) any {
	switch x := v.(type) {
	case string:
		return d.MaskSecrets(x)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[d.MaskSecrets(k)] = d.maskValue(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = d.maskValue(e)
		}
		return out
	}
	return v
}

// encodedToken is a run of base64 (standard or URL alphabet) or hex characters long
// enough to carry a credential.
var encodedToken = regexp.MustCompile(`[A-Za-z0-9+/_-]{16,}={0,2}`)

// MaskSecrets replaces each secret in s by [REDACTED:rule] where it stands: as
// written, percent-encoded, or inside a base64 or hex token (the whole token is
// masked). Unlike Redact it never withholds the rest of s: a human must see what
// they approve. Only a secret none of these forms can locate leaves the part of
// s it hides in: then s is withheld after all, as the last resort.
func (d *DLP) MaskSecrets(s string) string {
	fs := d.Scan(s)
	if len(fs) == 0 {
		return s
	}
	var unlocated []Finding
	for _, f := range fs {
		if len(f.Secret) < 4 {
			continue
		}
		mark := "[REDACTED:" + f.Rule + "]"
		switch {
		case strings.Contains(s, f.Secret):
			s = strings.ReplaceAll(s, f.Secret, mark)
		case encodedForm(f.Secret).MatchString(s):
			s = encodedForm(f.Secret).ReplaceAllLiteralString(s, mark)
		default:
			unlocated = append(unlocated, f)
		}
	}
	if len(unlocated) > 0 {
		s = encodedToken.ReplaceAllStringFunc(s, func(tok string) string {
			for _, dec := range decodeToken(tok) {
				for _, f := range unlocated {
					if strings.Contains(dec, f.Secret) || len(d.Scan(dec)) > 0 {
						return "[REDACTED:" + f.Rule + "]"
					}
				}
			}
			return tok
		})
	}
	// Whatever the scanner still finds could not be located: withhold s rather
	// than show a secret (each string is masked on its own, so this withholds one
	// value or one command, never the whole call).
	if rest := d.Scan(s); len(rest) > 0 && !onlyMarks(s, rest) {
		return "[REDACTED:" + strings.Join(RuleIDs(rest), ",") + "] (withheld: an encoded credential)"
	}
	return s
}

// onlyMarks reports whether every finding left is one of our own marks (a rule may
// match the text around a mark; that is no secret).
func onlyMarks(s string, fs []Finding) bool {
	for _, f := range fs {
		if !strings.Contains(f.Secret, "[REDACTED:") {
			return false
		}
	}
	return true
}

// decodeToken returns what a token decodes to as hex and as base64 (any alphabet,
// padded or not): a hex token is valid base64 too, so both are tried.
func decodeToken(tok string) []string {
	var out []string
	if b, err := hex.DecodeString(tok); err == nil {
		out = append(out, string(b))
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(tok); err == nil {
			out = append(out, string(b))
			break
		}
	}
	return out
}
