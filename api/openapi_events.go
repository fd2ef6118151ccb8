package api

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"

	"github.com/aetherium-engine/aetherium/events"
)

// streamEventName is the component of a run's event (streamEvent): in the
// document, a union of one schema per event type, discriminated by type.
const streamEventName = "StreamEvent"

// EventSchemaName is the component of the events of type typ: tool.call is
// ToolCallEvent, postrun.finish_image PostrunFinishImageEvent.
func EventSchemaName(typ string) string {
	var b strings.Builder
	for _, w := range strings.FieldsFunc(typ, func(r rune) bool { return r == '.' || r == '_' }) {
		r := []rune(w)
		r[0] = unicode.ToUpper(r[0])
		b.WriteString(string(r))
	}
	return b.String() + "Event"
}

// eventUnion turns the StreamEvent component (reflected from streamEvent,
// whose data is any JSON) into a discriminated union: per declared event type
// (events.Types) a component like it whose type is that constant and whose
// data is the type's payload schema, and StreamEvent the oneOf of them with a
// discriminator on type, so a generated client gets a typed payload per event.
func (s *schemaSet) eventUnion() error {
	base, ok := s.components[streamEventName]
	if !ok {
		return nil // no route returns events
	}
	var generic map[string]any
	if err := json.Unmarshal(base, &generic); err != nil {
		return fmt.Errorf("schema %s: %w", streamEventName, err)
	}
	props, _ := generic["properties"].(map[string]any)
	typeProp, _ := props["type"].(map[string]any)
	if typeProp == nil || props["data"] == nil {
		return fmt.Errorf("schema %s: no type or data property to discriminate on", streamEventName)
	}
	mapping := map[string]string{}
	oneOf := make([]map[string]any, 0, len(events.Types()))
	for _, d := range events.Types() {
		name := EventSchemaName(d.Type)
		payload := s.schemaOf(d.Payload, false)
		var one map[string]any
		if err := json.Unmarshal(base, &one); err != nil {
			return fmt.Errorf("schema %s: %w", name, err)
		}
		p := one["properties"].(map[string]any)
		p["type"] = map[string]any{"type": "string", "const": d.Type, "description": typeProp["description"]}
		var dataRef map[string]any
		if err := json.Unmarshal(payload, &dataRef); err != nil {
			return fmt.Errorf("schema %s: %w", name, err)
		}
		p["data"] = dataRef
		one["description"] = fmt.Sprintf("A %s event of a run.", d.Type)
		raw, err := json.Marshal(one)
		if err != nil {
			return fmt.Errorf("schema %s: %w", name, err)
		}
		if _, dup := s.components[name]; dup {
			return fmt.Errorf("schema %s: the event type %s's name is taken", name, d.Type)
		}
		s.components[name] = raw
		mapping[d.Type] = "#/components/schemas/" + name
		oneOf = append(oneOf, ref(name))
	}
	union, err := json.Marshal(map[string]any{
		"description":   fmt.Sprint(generic["description"], " Its data's schema is its type's: one schema per event type, discriminated by type."),
		"oneOf":         oneOf,
		"discriminator": map[string]any{"propertyName": "type", "mapping": mapping},
	})
	if err != nil {
		return fmt.Errorf("schema %s: %w", streamEventName, err)
	}
	s.components[streamEventName] = union
	return nil
}
