package sandbox

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// Image purposes: which image of sandbox.docker.image a container runs.
const (
	// PurposeDefault is the project sandbox run_shell executes in.
	PurposeDefault = "default"
	// PurposeToolchain is the linters and test runners of the quality tools
	// (sandbox/images/toolchain.packages).
	PurposeToolchain = "toolchain"
	// PurposeMedia is ffmpeg, espeak-ng and sox of the audio tools
	// (sandbox/images/media.packages).
	PurposeMedia = "media"
)

// Default images by purpose.
const (
	DefaultImage          = "aetherium-sandbox:latest"
	DefaultToolchainImage = "aetherium-toolchain:latest"
	DefaultMediaImage     = "aetherium-media:latest"
)

// ImageSet is sandbox.docker.image: the image each purpose runs. In YAML a plain
// string is the project sandbox's image (purpose "default", the setting's
// original form); a map names images by purpose:
//
//	image: {default: aetherium-sandbox:latest, toolchain: aetherium-toolchain:latest}
//
// Purposes left out take their defaults (DefaultImage, DefaultToolchainImage,
// DefaultMediaImage).
// One key, not one per purpose, so an image is configured where the sandbox's
// always was.
type ImageSet map[string]string

// UnmarshalYAML accepts a string or a map of purpose to image.
func (s *ImageSet) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		var v string
		if err := n.Decode(&v); err != nil {
			return fmt.Errorf("sandbox.docker.image: %w", err)
		}
		*s = ImageSet{PurposeDefault: v}
		return nil
	case yaml.MappingNode:
		m := map[string]string{}
		if err := n.Decode(&m); err != nil {
			return fmt.Errorf("sandbox.docker.image: want an image or a map of purpose to image: %w", err)
		}
		*s = m
		return nil
	default:
		return fmt.Errorf("sandbox.docker.image (line %d): want an image or a map of purpose to image", n.Line)
	}
}

// For is the image of purpose ("" when the set has none).
func (s ImageSet) For(purpose string) string { return s[purpose] }

var purposeRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)

// withDefaults returns a copy with the default purposes filled in (the caller's
// map is never changed).
func (s ImageSet) withDefaults() ImageSet {
	out := ImageSet{PurposeDefault: DefaultImage, PurposeToolchain: DefaultToolchainImage, PurposeMedia: DefaultMediaImage}
	for k, v := range s {
		if v != "" {
			out[k] = v
		}
	}
	return out
}

// Validate checks purpose names and image references.
func (s ImageSet) Validate() error {
	keys := make([]string, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !purposeRE.MatchString(k) {
			return fmt.Errorf("sandbox.docker.image: purpose %q: want a lower-case name such as %q or %q", k, PurposeDefault, PurposeToolchain)
		}
		if v := s[k]; strings.ContainsAny(v, " \t\r\n") {
			return fmt.Errorf("sandbox.docker.image.%s: %q is not an image reference", k, v)
		}
	}
	return nil
}
