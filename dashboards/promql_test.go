package dashboards_test

import (
	"fmt"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/require"
)

// promqlKeywords are identifiers that are never metric names. by, without, on,
// ignoring, group_left and group_right take a label list in parentheses, which
// metricNames skips.
var promqlKeywords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "atan2": true,
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"inf": true, "nan": true, "start": true, "end": true,
}

// aggregations may put their by/without clause before the parentheses.
var aggregations = map[string]bool{
	"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true, "count": true,
	"count_values": true, "bottomk": true, "topk": true, "quantile": true, "limitk": true, "limit_ratio": true,
}

var labelListKeywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
}

// metricNames returns the metric names a PromQL expression selects: identifiers
// that are not function or aggregation calls, keywords, label matchers (inside {}),
// label lists (after by, without, on, ...), ranges and durations (inside []),
// strings, numbers or Grafana variables. A selector by {__name__=...} is refused:
// its name could not be checked.
func metricNames(expr string) ([]string, error) {
	var names []string
	rs := []rune(expr)
	i, depth := 0, 0
	skipSpace := func(j int) int {
		for j < len(rs) && unicode.IsSpace(rs[j]) {
			j++
		}
		return j
	}
	// closing returns the index after the bracket that closes the one at j,
	// skipping strings.
	closing := func(j int, open, close rune) (int, error) {
		depth := 0
		for ; j < len(rs); j++ {
			switch rs[j] {
			case '"', '\'', '`':
				end, err := skipString(rs, j)
				if err != nil {
					return 0, err
				}
				j = end - 1
			case open:
				depth++
			case close:
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, fmt.Errorf("unbalanced %c in %q", open, expr)
	}
	for i < len(rs) {
		c := rs[i]
		switch {
		case unicode.IsSpace(c):
			i++
		case c == '"' || c == '\'' || c == '`':
			end, err := skipString(rs, i)
			if err != nil {
				return nil, err
			}
			i = end
		case c == '{':
			end, err := closing(i, '{', '}')
			if err != nil {
				return nil, err
			}
			if strings.Contains(string(rs[i:end]), "__name__") {
				return nil, fmt.Errorf("selector by __name__ in %q: name the metric instead", expr)
			}
			i = end
		case c == '[':
			end, err := closing(i, '[', ']')
			if err != nil {
				return nil, err
			}
			i = end
		case c == '$':
			// A Grafana variable: $name or ${name}.
			i++
			if i < len(rs) && rs[i] == '{' {
				end, err := closing(i, '{', '}')
				if err != nil {
					return nil, err
				}
				i = end
				continue
			}
			for i < len(rs) && isIdent(rs[i]) {
				i++
			}
		case unicode.IsDigit(c) || (c == '.' && i+1 < len(rs) && unicode.IsDigit(rs[i+1])):
			// Numbers and durations (5m, 1.5, 1e3, 0x1f).
			for i < len(rs) && (isIdent(rs[i]) || rs[i] == '.') {
				i++
			}
		case isIdentStart(c):
			start := i
			for i < len(rs) && isIdent(rs[i]) {
				i++
			}
			word := string(rs[start:i])
			next := skipSpace(i)
			lower := strings.ToLower(word)
			switch {
			case labelListKeywords[lower]:
				if next < len(rs) && rs[next] == '(' {
					end, err := closing(next, '(', ')')
					if err != nil {
						return nil, err
					}
					i = end
				}
			case promqlKeywords[lower]:
			case next < len(rs) && rs[next] == '(':
				// A function or aggregation call.
			case aggregations[lower] && nextWordIs(rs, next, "by", "without"):
			default:
				names = append(names, word)
			}
		case c == '(':
			depth++
			i++
		case c == ')':
			depth--
			if depth < 0 {
				return nil, fmt.Errorf("unbalanced ( in %q", expr)
			}
			i++
		default:
			i++
		}
	}
	if depth != 0 {
		return nil, fmt.Errorf("unbalanced ( in %q", expr)
	}
	return names, nil
}

func nextWordIs(rs []rune, j int, words ...string) bool {
	end := j
	for end < len(rs) && isIdent(rs[end]) {
		end++
	}
	w := strings.ToLower(string(rs[j:end]))
	for _, x := range words {
		if w == x {
			return true
		}
	}
	return false
}

func skipString(rs []rune, i int) (int, error) {
	q := rs[i]
	for j := i + 1; j < len(rs); j++ {
		if rs[j] == '\\' && q != '`' {
			j++
			continue
		}
		if rs[j] == q {
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("unterminated string in %q", string(rs))
}

func isIdentStart(r rune) bool { return r == '_' || r == ':' || unicode.IsLetter(r) }
func isIdent(r rune) bool      { return isIdentStart(r) || unicode.IsDigit(r) }

func TestMetricNames(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		expr string
		want []string
		err  string
	}{
		{expr: "up", want: []string{"up"}},
		{expr: `sum by (queue, outcome) (rate(aetherium_tasks_processed_total{queue=~"a|b", type!="x"}[$__rate_interval]))`, want: []string{"aetherium_tasks_processed_total"}},
		{expr: `histogram_quantile(0.95, sum by (le) (rate(a_seconds_bucket[5m] offset 1h)))`, want: []string{"a_seconds_bucket"}},
		{expr: `1 - sum(rate(x_total{outcome="ok"}[1m])) / sum without (instance) (rate(x_total[1m]))`, want: []string{"x_total", "x_total"}},
		{expr: `a and on (job) group_left (version) b or c unless bool d`, want: []string{"a", "b", "c", "d"}},
		{expr: `max by (queue) (q{state="by (x)"}) > 0.5e3`, want: []string{"q"}},
		{expr: `topk(10, sum by (tool) (rate(t_total[${__range}])))`, want: []string{"t_total"}},
		{expr: `max_over_time(g[10m:1m]) @ start()`, want: []string{"g"}},
		{expr: `label_replace(m, "dst", "$1", "src", "(.*)")`, want: []string{"m"}},
		{expr: `sum(rate(x{a="}"}[1m]))`, want: []string{"x"}},
		{expr: `{__name__="hidden"}`, err: "__name__"},
		{expr: `sum(rate(x[1m])`, err: "unbalanced"},
		{expr: `x{a="open}`, err: "unterminated"},
	} {
		t.Run(tc.expr, func(t *testing.T) {
			t.Parallel()
			got, err := metricNames(tc.expr)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}
