package dashboards_test

import (
	"encoding/json"
	"flag"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	gdash "github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/aetherium-engine/aetherium/dashboards/gen"
)

var update = flag.Bool("update", false, "rewrite the dashboard JSON files from package gen")

// TestDashboardsAreGenerated: the committed JSON is what package gen builds with
// the SDK (-update rewrites it), so a hand edit of a file cannot drift from the
// generator.
func TestDashboardsAreGenerated(t *testing.T) {
	files, err := gen.Files()
	require.NoError(t, err)
	var names []string
	for _, f := range files {
		names = append(names, f.Name)
		if *update {
			require.NoError(t, os.WriteFile(f.Name, f.JSON, 0o644))
			continue
		}
		raw, err := os.ReadFile(f.Name)
		require.NoError(t, err)
		require.Equal(t, string(f.JSON), string(raw), "%s differs from package gen: go test ./dashboards -run TestDashboardsAreGenerated -update", f.Name)
	}
	require.ElementsMatch(t, wantDashboards, names)
}

// TestFilter checks the matchers the generator adds to every selector.
func TestFilter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"sum(aetherium_worker_up)", `sum(aetherium_worker_up{job=~"$job", instance=~"$instance"})`},
		{`max by (queue) (aetherium_queue_tasks{state="active"})`, `max by (queue) (aetherium_queue_tasks{job=~"$job", instance=~"$instance", queue=~"$queue", state="active"})`},
		{"rate(aetherium_task_duration_seconds_bucket[5m]) / rate(aetherium_runs_submitted_total[5m])",
			`rate(aetherium_task_duration_seconds_bucket{job=~"$job", instance=~"$instance", queue=~"$queue"}[5m]) / rate(aetherium_runs_submitted_total{job=~"$job", instance=~"$instance"}[5m])`},
	} {
		require.Equal(t, tc.want, gen.Filter(tc.in), tc.in)
	}
}

// The dashboards are parsed with Grafana's own Go SDK (grafana-foundation-sdk): no
// Grafana server runs here, so its dashboard types are the closest check that
// Grafana reads the panels, datasources and variables as these tests do.
func init() {
	// Targets of a prometheus panel unmarshal into prometheus.Dataquery; without
	// the variant they would be an untyped bag and a typo in "expr" would pass.
	cog.NewRuntime().RegisterDataqueryVariant(prometheus.VariantConfig())
}

// The one datasource reference every panel, target and query variable carries:
// the dashboard's variable, so an import picks any Prometheus, whatever its uid.
const (
	dsVar   = gen.DatasourceVar
	dsInput = gen.DatasourceInput
)

// sdkDashboard is one dashboard file as the SDK reads it, plus the import
// sections (the SDK models the dashboard, not the export envelope).
type sdkDashboard struct {
	File   string
	Raw    []byte
	D      gdash.Dashboard
	Inputs []struct {
		Name     string `json:"name"`
		Type     string `json:"type"`
		PluginID string `json:"pluginId"`
	} `json:"__inputs"`
	Requires []struct {
		Type string `json:"type"`
		ID   string `json:"id"`
	} `json:"__requires"`
}

func loadSDKDashboards(t *testing.T) []sdkDashboard {
	t.Helper()
	var out []sdkDashboard
	for _, d := range loadDashboards(t) {
		raw, err := os.ReadFile(d.File)
		require.NoError(t, err)
		s := sdkDashboard{File: d.File, Raw: raw}
		require.NoError(t, json.Unmarshal(raw, &s.D), d.File)
		require.NoError(t, json.Unmarshal(raw, &s), d.File)
		out = append(out, s)
	}
	return out
}

// sdkPanels flattens rows: their panels are panels like the others.
func sdkPanels(d gdash.Dashboard) []gdash.Panel {
	var out []gdash.Panel
	for _, p := range d.Panels {
		switch {
		case p.Panel != nil:
			out = append(out, *p.Panel)
		case p.RowPanel != nil:
			out = append(out, p.RowPanel.Panels...)
		}
	}
	return out
}

// promTargets returns a panel's targets as Prometheus queries.
func promTargets(t *testing.T, where string, p gdash.Panel) []*prometheus.Dataquery {
	t.Helper()
	var out []*prometheus.Dataquery
	for i, tg := range p.Targets {
		q, ok := tg.(*prometheus.Dataquery)
		require.True(t, ok, "%s: target %d is a %T, not a Prometheus query", where, i, tg)
		out = append(out, q)
	}
	return out
}

func refString(r *common.DataSourceRef) string {
	if r == nil {
		return "<nil>"
	}
	var typ, uid string
	if r.Type != nil {
		typ = *r.Type
	}
	if r.Uid != nil {
		uid = *r.Uid
	}
	return typ + "/" + uid
}

// variables returns the dashboard's variables by name.
func variables(d gdash.Dashboard) map[string]gdash.VariableModel {
	out := map[string]gdash.VariableModel{}
	for _, v := range d.Templating.List {
		out[v.Name] = v
	}
	return out
}

func queryString(v gdash.VariableModel) string {
	if v.Query == nil || v.Query.String == nil {
		return ""
	}
	return *v.Query.String
}

// grafanaVarRef finds $name, ${name} and ${name:format} in a query.
var grafanaVarRef = regexp.MustCompile(`\$\{?(\w+)`)

// builtinVars are Grafana's own variables (and $__all, the All option's value).
var builtinVars = map[string]bool{"__rate_interval": true, "__range": true, "__interval": true, "__all": true}

// selectorHas reports whether every selector of metric name in expr carries the
// matcher m (a metric written twice must be filtered twice).
func selectorHas(expr, name, m string) bool {
	all := regexp.MustCompile(`\b`+regexp.QuoteMeta(name)+`\b`).FindAllStringIndex(expr, -1)
	with := regexp.MustCompile(`\b`+regexp.QuoteMeta(name)+`\{[^}]*`+regexp.QuoteMeta(m)+`[^}]*\}`).FindAllStringIndex(expr, -1)
	return len(all) > 0 && len(all) == len(with)
}

// TestDashboardsImportWithAnyDatasource: the dashboards carry no datasource uid of
// their own, so an import into a Grafana whose Prometheus has any uid (not the
// compose one, `prometheus`) draws every panel.
func TestDashboardsImportWithAnyDatasource(t *testing.T) {
	t.Parallel()
	labels := registeredLabels(t)
	for _, d := range loadSDKDashboards(t) {
		t.Run(d.File, func(t *testing.T) {
			t.Parallel()
			vars := variables(d.D)

			// The datasource variable, defaulting to what the import dialog picks.
			ds, ok := vars["datasource"]
			require.True(t, ok, "a datasource variable")
			require.Equal(t, gdash.VariableTypeDatasource, ds.Type)
			require.Equal(t, "prometheus", queryString(ds), "the variable lists Prometheus datasources")
			require.NotNil(t, ds.Current)
			require.NotNil(t, ds.Current.Value.String)
			require.Equal(t, dsInput, *ds.Current.Value.String, "the import input sets the default")

			// The import envelope: Grafana's import UI asks for DS_PROMETHEUS, and
			// every input is used somewhere.
			require.Len(t, d.Inputs, 1)
			require.Equal(t, "DS_PROMETHEUS", d.Inputs[0].Name)
			require.Equal(t, "datasource", d.Inputs[0].Type)
			require.Equal(t, "prometheus", d.Inputs[0].PluginID)
			require.Contains(t, string(d.Raw), dsInput)
			required := map[string]bool{}
			for _, r := range d.Requires {
				required[r.Type+"/"+r.ID] = true
			}
			require.True(t, required["datasource/prometheus"], "__requires names the prometheus datasource")
			require.True(t, required["grafana/grafana"], "__requires names Grafana")

			// Query variables read the chosen datasource too.
			for _, v := range d.D.Templating.List {
				if v.Type != gdash.VariableTypeQuery {
					continue
				}
				require.Equal(t, "prometheus/"+dsVar, refString(v.Datasource), "variable %s", v.Name)
				require.True(t, v.IncludeAll != nil && *v.IncludeAll && v.AllValue != nil, "variable %s has All with a regex value", v.Name)
			}
			for _, name := range []string{"job", "instance"} {
				require.Contains(t, vars, name)
			}

			panels := sdkPanels(d.D)
			require.NotEmpty(t, panels)
			usesQueue := false
			for _, p := range panels {
				where := d.File + " / " + deref(p.Title)
				require.Equal(t, "prometheus/"+dsVar, refString(p.Datasource), where)
				targets := promTargets(t, where, p)
				require.NotEmpty(t, targets, where)
				for _, q := range targets {
					where := where + " / " + deref(q.RefId)
					require.Equal(t, "prometheus/"+dsVar, refString(q.Datasource), where)
					for _, m := range grafanaVarRef.FindAllStringSubmatch(q.Expr, -1) {
						_, defined := vars[m[1]]
						require.True(t, defined || builtinVars[m[1]], "%s: $%s is not a variable of the dashboard", where, m[1])
					}
					names, err := metricNames(q.Expr)
					require.NoError(t, err, where)
					for _, n := range names {
						require.True(t, selectorHas(q.Expr, n, `job=~"$job"`), "%s: %s filtered by $job", where, n)
						require.True(t, selectorHas(q.Expr, n, `instance=~"$instance"`), "%s: %s filtered by $instance", where, n)
						if labels[baseName(labels, n)]["queue"] {
							usesQueue = true
							require.Contains(t, vars, "queue", "%s: %s is per queue", where, n)
							require.True(t, selectorHas(q.Expr, n, `queue=~"$queue"`), "%s: %s filtered by $queue", where, n)
						}
					}
				}
			}
			if _, ok := vars["queue"]; ok {
				require.True(t, usesQueue, "a queue variable on a dashboard with no per-queue metric")
			}

			// No literal uid anywhere: every "datasource" object in the file names the
			// variable (a raw walk, so panel kinds the SDK keeps untyped count too).
			var generic any
			require.NoError(t, json.Unmarshal(d.Raw, &generic))
			for _, ref := range datasourceRefs(generic) {
				require.Equal(t, dsVar, ref, "a datasource reference with a literal uid")
			}
			require.NotContains(t, string(d.Raw), `"uid": "prometheus"`)
		})
	}
}

// datasourceRefs returns the uid of every "datasource" object in a JSON tree.
func datasourceRefs(v any) []string {
	var out []string
	switch x := v.(type) {
	case map[string]any:
		for k, c := range x {
			if ref, ok := c.(map[string]any); ok && k == "datasource" {
				uid, _ := ref["uid"].(string)
				out = append(out, uid)
				continue
			}
			out = append(out, datasourceRefs(c)...)
		}
	case []any:
		for _, c := range x {
			out = append(out, datasourceRefs(c)...)
		}
	}
	return out
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

var variableLabels = regexp.MustCompile(`variableLabels: \{([^}]*)\}`)

// registeredLabels returns each registered metric's variable labels.
func registeredLabels(t *testing.T) map[string]map[string]bool {
	t.Helper()
	out := map[string]map[string]bool{}
	for d := range registeredDescs(t) {
		name := fqName.FindStringSubmatch(d.String())[1]
		out[name] = map[string]bool{}
		if m := variableLabels.FindStringSubmatch(d.String()); m != nil {
			for _, l := range strings.Split(m[1], ",") {
				out[name][strings.TrimSpace(l)] = true
			}
		}
	}
	require.NotEmpty(t, out["aetherium_queue_tasks"]["queue"], "labels parsed from the descriptors")
	return out
}

// baseName maps a histogram's series name to the histogram.
func baseName(labels map[string]map[string]bool, name string) string {
	if _, ok := labels[name]; ok {
		return name
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if _, ok := labels[base]; ok {
				return base
			}
		}
	}
	return name
}

// TestProvisionedDatasourceResolvesTheVariable: compose's Grafana loads the files
// as they are (file provisioning does not fill import inputs), so the datasource
// variable's default must find the provisioned Prometheus on its own: Grafana
// matches the current value, then its text (the datasource's name), and falls
// back to the first datasource of the type, so the provisioned one must be the
// only Prometheus and carry that name.
func TestProvisionedDatasourceResolvesTheVariable(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("provisioning/datasources/prometheus.yml")
	require.NoError(t, err)
	var prov struct {
		Datasources []struct {
			Name      string `yaml:"name"`
			Type      string `yaml:"type"`
			IsDefault bool   `yaml:"isDefault"`
		} `yaml:"datasources"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &prov))
	var proms []string
	for _, ds := range prov.Datasources {
		if ds.Type == "prometheus" {
			proms = append(proms, ds.Name)
			require.True(t, ds.IsDefault, "the provisioned Prometheus is the default datasource")
		}
	}
	require.Len(t, proms, 1, "one provisioned Prometheus: the variable's fallback is unambiguous")
	for _, d := range loadSDKDashboards(t) {
		ds := variables(d.D)["datasource"]
		require.NotNil(t, ds.Current, d.File)
		require.NotNil(t, ds.Current.Text.String, d.File)
		require.Equal(t, proms[0], *ds.Current.Text.String, "%s: the variable's default text names the provisioned datasource", d.File)
	}
}

// TestSelectorHas checks the matcher check itself.
func TestSelectorHas(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		expr, name, m string
		want          bool
	}{
		{`sum(a{job=~"$job"})`, "a", `job=~"$job"`, true},
		{`sum(a)`, "a", `job=~"$job"`, false},
		{`a{job=~"$job"} / a`, "a", `job=~"$job"`, false},
		{`a_bucket{x="1", job=~"$job"}`, "a_bucket", `job=~"$job"`, true},
		{`ab{job=~"$job"} + a`, "a", `job=~"$job"`, false},
	} {
		require.Equal(t, tc.want, selectorHas(tc.expr, tc.name, tc.m), tc.expr)
	}
}
