package sandbox

import (
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

func TestImageSetYAML(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, yaml string
		want       ImageSet
		err        string
	}{
		{name: "a plain string is the project sandbox's image", yaml: "image: my-sandbox:1",
			want: ImageSet{PurposeDefault: "my-sandbox:1", PurposeToolchain: DefaultToolchainImage, PurposeMedia: DefaultMediaImage}},
		{name: "a map by purpose", yaml: "image: {default: a:1, toolchain: b:2}",
			want: ImageSet{PurposeDefault: "a:1", PurposeToolchain: "b:2", PurposeMedia: DefaultMediaImage}},
		{name: "a map naming one purpose keeps the others' defaults", yaml: "image: {toolchain: b:2}",
			want: ImageSet{PurposeDefault: DefaultImage, PurposeToolchain: "b:2", PurposeMedia: DefaultMediaImage}},
		{name: "absent", yaml: "user: '10001'",
			want: ImageSet{PurposeDefault: DefaultImage, PurposeToolchain: DefaultToolchainImage, PurposeMedia: DefaultMediaImage}},
		{name: "a list is refused", yaml: "image: [a, b]", err: "want an image or a map of purpose to image"},
		{name: "a bad purpose is refused", yaml: "image: {Tool Chain: b:2}", err: `purpose "Tool Chain"`},
		{name: "a bad reference is refused", yaml: "image: {toolchain: 'b 2'}", err: "not an image reference"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var c DockerConfig
			err := yaml.Unmarshal([]byte(tc.yaml), &c)
			if err == nil {
				err = c.Image.Validate()
			}
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			c.defaults()
			require.Equal(t, tc.want, c.Image)
			require.Equal(t, tc.want[PurposeToolchain], c.Image.For(PurposeToolchain))
		})
	}
}

func TestImageSetDefaultsDoNotChangeTheCallersMap(t *testing.T) {
	t.Parallel()
	mine := ImageSet{PurposeDefault: "a:1"}
	c := DockerConfig{Image: mine}
	c.defaults()
	require.Equal(t, ImageSet{PurposeDefault: "a:1"}, mine)
	require.Equal(t, DefaultToolchainImage, c.Image.For(PurposeToolchain))
}
