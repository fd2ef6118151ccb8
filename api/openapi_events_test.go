package api

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/events"
)

// The document's StreamEvent is a union with one member per declared event
// type: its type a const, its data the type's payload schema, mapped by the
// discriminator.
func TestStreamEventIsAUnionOfEveryDeclaredType(t *testing.T) {
	t.Parallel()
	raw, err := OpenAPI()
	require.NoError(t, err)
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				OneOf         []map[string]string `json:"oneOf"`
				Discriminator struct {
					PropertyName string            `json:"propertyName"`
					Mapping      map[string]string `json:"mapping"`
				} `json:"discriminator"`
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	schemas := doc.Components.Schemas
	union := schemas["StreamEvent"]
	require.Equal(t, "type", union.Discriminator.PropertyName)
	require.Len(t, union.OneOf, len(events.Types()))
	require.Len(t, union.Discriminator.Mapping, len(events.Types()))
	for _, d := range events.Types() {
		name := EventSchemaName(d.Type)
		require.Equal(t, "#/components/schemas/"+name, union.Discriminator.Mapping[d.Type])
		require.Contains(t, union.OneOf, map[string]string{"$ref": "#/components/schemas/" + name})
		member, ok := schemas[name]
		require.True(t, ok, "no component %s", name)
		var typ struct {
			Const string `json:"const"`
		}
		var data struct {
			Ref string `json:"$ref"`
		}
		require.NoError(t, json.Unmarshal(member.Properties["type"], &typ))
		require.NoError(t, json.Unmarshal(member.Properties["data"], &data))
		require.Equal(t, d.Type, typ.Const)
		require.Equal(t, "#/components/schemas/"+schemaName(reflect.TypeOf(d.Payload)), data.Ref)
	}
	require.Equal(t, "ToolCallEvent", EventSchemaName(events.ToolCall))
	require.Equal(t, "PostrunFinishImageEvent", EventSchemaName(events.PostRunFinishImage))
}

// One status may carry two representations of different media types (the
// event stream and its JSON page); the same media type twice is a mistake.
func TestOneStatusTwoMediaTypes(t *testing.T) {
	t.Parallel()
	h := (&Server{}).healthz
	cases := []struct {
		name    string
		r       route
		wantErr string
	}{
		{"a stream and a JSON page", get("/x", "x", h).returnsStream(200, "text/event-stream", "s", streamEvent{}).returns(200, eventPage{}), ""},
		{"JSON twice", get("/x", "x", h).returns(200, eventPage{}).returns(200, healthStatus{}), "status 200 twice"},
		{"a body and none", get("/x", "x", h).returns(200, eventPage{}).returns(200, nil), "status 200 twice"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			raw, err := buildOpenAPI([]route{tc.r})
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			var doc struct {
				Paths map[string]map[string]struct {
					Responses map[string]struct {
						Content map[string]any `json:"content"`
					} `json:"responses"`
				} `json:"paths"`
			}
			require.NoError(t, json.Unmarshal(raw, &doc))
			content := doc.Paths["/x"]["get"].Responses["200"].Content
			require.Contains(t, content, "text/event-stream")
			require.Contains(t, content, "application/json")
		})
	}
}
