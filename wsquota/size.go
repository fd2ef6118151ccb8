package wsquota

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Size is a number of bytes, written in configuration as a plain integer or with a
// unit: 1GiB, 512MiB, 16M (K, M, G, T and KiB, MiB, GiB, TiB are powers of 1024;
// KB, MB, GB, TB powers of 1000). Case does not matter.
type Size int64

var units = []struct {
	suffix string
	mult   float64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40},
	{"b", 1},
}

// ParseSize reads a Size: "1GiB", "512MiB", "1.5G", "1048576", "0".
func ParseSize(s string) (Size, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	if t == "" {
		return 0, errors.New("empty size")
	}
	mult := 1.0
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseFloat(t, 64)
	if err != nil || n < 0 || math.IsInf(n, 0) || math.IsNaN(n) {
		return 0, fmt.Errorf("size %q: want bytes or a number with a unit such as 512MiB or 1GiB", s)
	}
	v := n * mult
	if v >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return Size(math.Round(v)), nil
}

// String renders the size for people: "1.0 GiB", "16.0 MiB", "512 B".
func (s Size) String() string { return HumanBytes(int64(s)) }

// UnmarshalYAML reads an integer (bytes) or a string with a unit.
func (s *Size) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return errors.New("want a size such as 1GiB")
	}
	v, err := ParseSize(n.Value)
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// HumanBytes renders n bytes with one decimal in the largest binary unit that fits.
func HumanBytes(n int64) string { return inUnitOf(n, n) }

// inUnitOf renders n bytes in the unit HumanBytes picks for ref, so that "used of
// limit" reads "1.0 GiB of 1.0 GiB", not "1023.9 MiB of 1.0 GiB".
func inUnitOf(n, ref int64) string {
	if n < 0 {
		return "-" + inUnitOf(-n, ref)
	}
	ref = max(ref, 0)
	if ref < 1<<10 {
		return fmt.Sprintf("%d B", n)
	}
	v, div, unit := float64(ref)/(1<<10), float64(1<<10), "KiB"
	for _, u := range []string{"MiB", "GiB", "TiB", "PiB"} {
		if v < 1<<10 {
			break
		}
		v, div, unit = v/(1<<10), div*(1<<10), u
	}
	return fmt.Sprintf("%.1f %s", float64(n)/div, unit)
}

// MinFree is the free space the workspaces' filesystem must keep: an absolute Size
// or a percentage of the filesystem ("5%"). The zero value turns the guard off.
type MinFree struct {
	Bytes   Size
	Percent float64
}

// ParseMinFree reads "5%", "2GiB" or "0" (off).
func ParseMinFree(s string) (MinFree, error) {
	t := strings.TrimSpace(s)
	if p, ok := strings.CutSuffix(t, "%"); ok {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || v < 0 || v >= 100 || math.IsNaN(v) {
			return MinFree{}, fmt.Errorf("min free %q: want a percentage from 0 to below 100", s)
		}
		return MinFree{Percent: v}, nil
	}
	b, err := ParseSize(t)
	if err != nil {
		return MinFree{}, fmt.Errorf("min free %q: want a size such as 2GiB or a percentage such as 5%%", s)
	}
	return MinFree{Bytes: b}, nil
}

// Of is the number of bytes to keep free on a filesystem of total bytes.
func (m MinFree) Of(total int64) int64 {
	if m.Percent > 0 {
		return int64(float64(total) * m.Percent / 100)
	}
	return int64(m.Bytes)
}

// Off reports whether the guard is off.
func (m MinFree) Off() bool { return m.Percent == 0 && m.Bytes == 0 }

// String renders the setting as it is written: "5%" or "2.0 GiB".
func (m MinFree) String() string {
	if m.Percent > 0 {
		return strconv.FormatFloat(m.Percent, 'f', -1, 64) + "%"
	}
	return m.Bytes.String()
}

// UnmarshalYAML reads "5%", a size, or an integer of bytes.
func (m *MinFree) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return errors.New("want a size such as 2GiB or a percentage such as 5%")
	}
	v, err := ParseMinFree(n.Value)
	if err != nil {
		return err
	}
	*m = v
	return nil
}
