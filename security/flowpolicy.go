package security

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
)

// FlowPolicy is the `flow:` section of the permissions file: the flow rules'
// settings, hot-reloaded with the rules, overriding security.flow and
// security.flow_instruction_files, with per-team overrides. A file that fails
// to parse keeps the last good section, as it keeps the last good rules.
type FlowPolicy struct {
	// Mode is FlowAsk or FlowOff for every team without an override. Empty:
	// security.flow.
	Mode string `yaml:"mode"`
	// PrivateContent is what an outbound call of an untrusted session that
	// carries private content read in the session gets: FlowContentRefuse or
	// FlowContentAsk. Empty: security.flow_private_content.
	PrivateContent string `yaml:"private_content"`
	// InstructionFiles are added to security.flow_instruction_files for every
	// team (a file cannot take a name off the list: a later run reads the
	// fleet's list whoever edits this file).
	InstructionFiles []string `yaml:"instruction_files"`
	// Teams are per-team overrides; the first that matches a run's team wins.
	Teams []FlowTeam `yaml:"teams"`
}

// FlowTeam overrides the flow settings for one team.
type FlowTeam struct {
	// Team is the team's name. Empty matches every team of Source.
	Team string `yaml:"team"`
	// Source is SourceTemplate (default) or SourceInline. A team's name proves
	// nothing for an inline team (the submitter chose it), so an override by
	// name applies to the template team only unless it says inline: an inline
	// team named like a relaxed template team does not inherit its FlowOff.
	Source string `yaml:"source"`
	// Mode is FlowAsk or FlowOff for this team. Empty: the file's Mode.
	Mode string `yaml:"mode"`
	// PrivateContent overrides the file's PrivateContent for this team.
	PrivateContent string `yaml:"private_content"`
	// InstructionFiles are added for this team.
	InstructionFiles []string `yaml:"instruction_files"`
}

func (p *FlowPolicy) validate() error {
	if p == nil {
		return nil
	}
	var errs []error
	mode := func(where, m string) {
		if m != "" && m != FlowAsk && m != FlowOff {
			errs = append(errs, fmt.Errorf("%s: %q is neither %s nor %s", where, m, FlowAsk, FlowOff))
		}
	}
	content := func(where, c string) {
		if c != "" && c != FlowContentRefuse && c != FlowContentAsk {
			errs = append(errs, fmt.Errorf("%s: %q is neither %s nor %s", where, c, FlowContentRefuse, FlowContentAsk))
		}
	}
	files := func(where string, list []string) {
		for _, f := range list {
			if strings.Trim(f, "/ ") == "" || strings.Contains(f, "..") {
				errs = append(errs, fmt.Errorf("%s: %q is not a file or folder name", where, f))
			}
		}
	}
	mode("flow.mode", p.Mode)
	content("flow.private_content", p.PrivateContent)
	files("flow.instruction_files", p.InstructionFiles)
	for i, t := range p.Teams {
		where := fmt.Sprintf("flow.teams[%d]", i)
		switch t.Source {
		case "", SourceTemplate, SourceInline:
		default:
			errs = append(errs, fmt.Errorf("%s.source: %q is not template or inline", where, t.Source))
		}
		if t.Team == "" && t.Source != SourceInline {
			errs = append(errs, fmt.Errorf("%s: names no team (an entry for every inline team says source: inline)", where))
		}
		if t.Mode == "" && t.PrivateContent == "" && len(t.InstructionFiles) == 0 {
			errs = append(errs, fmt.Errorf("%s: overrides nothing (give mode, private_content or instruction_files)", where))
		}
		mode(where+".mode", t.Mode)
		content(where+".private_content", t.PrivateContent)
		files(where+".instruction_files", t.InstructionFiles)
	}
	return errors.Join(errs...)
}

// FlowSettings are the flow rules in force for one call.
type FlowSettings struct {
	// Mode is FlowAsk or FlowOff.
	Mode string `json:"mode"`
	// PrivateContent is FlowContentRefuse or FlowContentAsk.
	PrivateContent string `json:"private_content"`
	// Instructions are instruction files added to the fleet's, lowercased.
	Instructions []string `json:"instructions,omitempty"`
}

// flowFor is the settings for a call of team (submitted as source), def being
// the fleet's (security.flow, security.flow_private_content).
func (p *FlowPolicy) flowFor(team, source string, def FlowSettings) FlowSettings {
	out := def
	if p == nil {
		return out
	}
	out.Mode = cmp.Or(p.Mode, out.Mode)
	out.PrivateContent = cmp.Or(p.PrivateContent, out.PrivateContent)
	extra := p.InstructionFiles
	if source == "" {
		source = SourceInline
	}
	for _, t := range p.Teams {
		want := cmp.Or(t.Source, SourceTemplate)
		if want != source || (t.Team != "" && t.Team != team) {
			continue
		}
		out.Mode = cmp.Or(t.Mode, out.Mode)
		out.PrivateContent = cmp.Or(t.PrivateContent, out.PrivateContent)
		extra = append(extra[:len(extra):len(extra)], t.InstructionFiles...)
		break
	}
	if len(extra) > 0 {
		out.Instructions = append(out.Instructions[:len(out.Instructions):len(out.Instructions)], lowered(extra)...)
	}
	return out
}

// Flow is the flow rules' settings for a call of team (submitted as source),
// def being the fleet's: the file's flow: section, then the team's override.
func (rs *RuleSet) Flow(team, source string, def FlowSettings) FlowSettings {
	if rs == nil {
		return def
	}
	return rs.flow.flowFor(team, source, def)
}
