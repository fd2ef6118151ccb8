package research_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/aetherium-engine/aetherium/toolbox/research"
)

func TestRemoteChange(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args research.RequestArgs
		want string
	}{
		{name: "GET reads", args: research.RequestArgs{Method: "GET", URL: "https://api.example.com/items/7"}},
		{name: "POST creates: data, not destruction", args: research.RequestArgs{Method: "POST", URL: "https://api.example.com/items", Body: `{"a":1}`}},
		{name: "HEAD", args: research.RequestArgs{Method: "head", URL: "https://api.example.com/"}},
		{name: "DELETE", args: research.RequestArgs{Method: "DELETE", URL: "https://api.example.com/items/7"}, want: "DELETE"},
		{name: "put in lower case", args: research.RequestArgs{Method: " put ", URL: "https://api.example.com/items/7"}, want: "PUT"},
		{name: "PATCH", args: research.RequestArgs{Method: "PATCH", URL: "https://api.example.com/items/7"}, want: "PATCH"},
		{name: "an override header", args: research.RequestArgs{Method: "POST", URL: "https://api.example.com/items/7", Headers: map[string]string{"X-HTTP-Method-Override": "delete"}}, want: "POST overridden to DELETE"},
		{name: "another override header's spelling", args: research.RequestArgs{Method: "GET", URL: "https://api.example.com/items/7", Headers: map[string]string{" x-method-override": "PUT"}}, want: "GET overridden to PUT"},
		{name: "an override to a read", args: research.RequestArgs{Method: "POST", URL: "https://api.example.com/q", Headers: map[string]string{"X-HTTP-Method-Override": "GET"}}},
		{name: "_method in the query", args: research.RequestArgs{Method: "POST", URL: "https://api.example.com/items/7?_METHOD=Delete"}, want: "POST with _method=DELETE"},
		{name: "_method in a form body", args: research.RequestArgs{Method: "POST", URL: "https://api.example.com/items/7", Body: "name=x&_method=patch"}, want: "POST with _method=PATCH"},
		{name: "a body that merely mentions DELETE", args: research.RequestArgs{Method: "POST", URL: "https://api.example.com/notes", Body: "please DELETE nothing"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			raw, err := json.Marshal(tc.args)
			require.NoError(t, err)
			require.Equal(t, tc.want, research.RemoteChange(raw))
		})
	}
	require.Empty(t, research.RemoteChange(json.RawMessage(`[1]`)), "arguments that do not parse are the tool's to refuse")
}
