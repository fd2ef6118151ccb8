// Package gen builds the fleet's Grafana dashboards with Grafana's Go SDK for
// dashboards as code (grafana-foundation-sdk). The JSON files in dashboards/ are
// its output, committed so compose provisions them and anyone can import them;
// `go test ./dashboards -run TestDashboardsAreGenerated -update` rewrites them
// and the same test fails when they differ from what this package builds.
//
// What the package adds to every dashboard, so an import into any Grafana works
// (not only the compose one, whose Prometheus has the uid "prometheus"):
//   - a datasource variable, used by every panel, target and query variable, whose
//     default is the import input ${DS_PROMETHEUS};
//   - job and instance variables (and queue where panels are per queue), matched in
//     every selector of every query;
//   - __inputs and __requires, which Grafana's import form reads to ask for the
//     datasource (the SDK models the dashboard, not this export envelope).
package gen

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/barchart"
	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/heatmap"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

const (
	// DatasourceVar is what every datasource reference names.
	DatasourceVar = "${datasource}"
	// DatasourceInput is the import input: Grafana's import form replaces it with
	// the datasource picked, everywhere in the file.
	DatasourceInput = "${DS_PROMETHEUS}"
	// ProvisionedName is the datasource the compose Grafana provisions
	// (provisioning/datasources/prometheus.yml): the variable's default text, which
	// file provisioning (that fills no inputs) can match.
	ProvisionedName = "Prometheus"
)

// File is one generated dashboard.
type File struct {
	Name string
	JSON []byte
}

// Files builds every dashboard, in file name order.
func Files() ([]File, error) {
	boards := map[string]func() *dashboard.DashboardBuilder{
		"fleet-overview.json": fleetOverview,
		"tool-gate.json":      toolGate,
		"streams-leases.json": streamsLeases,
		"headset.json":        headset,
		"llm-usage.json":      llmUsage,
	}
	var out []File
	for name, build := range boards {
		d, err := build().Build()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		raw, err := envelope(d)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out = append(out, File{Name: name, JSON: raw})
	}
	slices.SortFunc(out, func(a, b File) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func ds() common.DataSourceRef {
	return common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr(DatasourceVar)}
}

// board is a dashboard with the settings and variables every one shares; queue
// adds the queue variable (for dashboards with per-queue panels).
func board(uid, title, description string, queue bool) *dashboard.DashboardBuilder {
	b := dashboard.NewDashboardBuilder(title).
		Uid(uid).
		Description(description).
		Tags([]string{"aetherium"}).
		Timezone("browser").
		Editable().
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		Refresh("10s").
		Time("now-1h", "now").
		Version(1).
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").
			Label("Data source").
			Description("The Prometheus that scrapes the fleet: picked at import (DS_PROMETHEUS); the compose Grafana provisions one named " + ProvisionedName + ".").
			Type("prometheus").
			Current(dashboard.VariableOption{Text: str(ProvisionedName), Value: str(DatasourceInput)})).
		// Every process of every role exports aetherium_runs_submitted_total (an
		// unlabelled counter of package metrics), so these list the fleet's jobs and
		// processes, not everything the Prometheus scrapes.
		WithVariable(listVariable("job", "Job", "label_values(aetherium_runs_submitted_total, job)",
			"Scrape jobs of the fleet's processes.")).
		WithVariable(listVariable("instance", "Instance", `label_values(aetherium_runs_submitted_total{job=~"$job"}, instance)`,
			"Processes of the selected jobs."))
	if queue {
		// Not filtered by job: the queue collector runs in the api role only, and a
		// worker job's panels are per queue too.
		b = b.WithVariable(listVariable("queue", "Queue", "label_values(aetherium_queue_tasks, queue)",
			"asynq queues."))
	}
	return b
}

// listVariable is a multi-value query variable with All, sent as ".*" (every
// series has the label, and a regex matcher takes Grafana's (a|b) selections).
func listVariable(name, label, query, description string) *dashboard.QueryVariableBuilder {
	return dashboard.NewQueryVariableBuilder(name).
		Label(label).
		Description(description).
		Datasource(ds()).
		Query(dashboard.StringOrMap{String: cog.ToPtr(query)}).
		Definition(query).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
		Sort(dashboard.VariableSortAlphabeticalAsc).
		Multi(true).
		IncludeAll(true).
		AllValue(".*").
		Current(dashboard.VariableOption{Text: strs("All"), Value: strs("$__all")})
}

func str(s string) dashboard.StringOrArrayOfString {
	return dashboard.StringOrArrayOfString{String: cog.ToPtr(s)}
}

func strs(s ...string) dashboard.StringOrArrayOfString {
	return dashboard.StringOrArrayOfString{ArrayOfString: s}
}

func pos(x, y, w, h uint32) dashboard.GridPos {
	return dashboard.GridPos{X: x, Y: y, W: w, H: h}
}

func ptr(v float64) *float64 { return &v }

func step(color string, value *float64) dashboard.Threshold {
	return dashboard.Threshold{Color: color, Value: value}
}

func thresholds(steps ...dashboard.Threshold) *dashboard.ThresholdsConfigBuilder {
	return dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).Steps(steps)
}

func thresholdsStyle(mode string) *common.GraphThresholdsStyleConfigBuilder {
	return common.NewGraphThresholdsStyleConfigBuilder().Mode(common.GraphThresholdsStyleMode(mode))
}

func ts(id uint32, title, description string, gp dashboard.GridPos, unit string) *timeseries.PanelBuilder {
	return timeseries.NewPanelBuilder().Id(id).Title(title).Description(description).GridPos(gp).Datasource(ds()).Unit(unit).
		Legend(legend()).
		Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeMulti).Sort(common.SortOrderNone))
}

// legend is Grafana's default legend: the SDK's zero value hides it.
func legend() *common.VizLegendOptionsBuilder {
	return common.NewVizLegendOptionsBuilder().ShowLegend(true).DisplayMode(common.LegendDisplayModeList).Placement(common.LegendPlacementBottom)
}

func number(id uint32, title, description string, gp dashboard.GridPos) *stat.PanelBuilder {
	return stat.NewPanelBuilder().Id(id).Title(title).Description(description).GridPos(gp).Datasource(ds()).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}).Fields("").Values(false)).
		ColorMode(common.BigValueColorModeValue).
		GraphMode(common.BigValueGraphModeArea).
		Orientation(common.VizOrientationAuto)
}

func bars(id uint32, title, description string, gp dashboard.GridPos, unit string) *barchart.PanelBuilder {
	return barchart.NewPanelBuilder().Id(id).Title(title).Description(description).GridPos(gp).Datasource(ds()).Unit(unit).
		Orientation(common.VizOrientationHorizontal).
		ShowValue(common.VisibilityModeAuto).
		Legend(legend()).
		Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeSingle).Sort(common.SortOrderNone))
}

func heat(id uint32, title, description string, gp dashboard.GridPos, yUnit string) *heatmap.PanelBuilder {
	return heatmap.NewPanelBuilder().Id(id).Title(title).Description(description).GridPos(gp).Datasource(ds()).
		Calculate(false).
		YAxis(heatmap.NewYAxisConfigBuilder().Unit(yUnit)).
		CellGap(1).
		Color(heatmap.NewHeatmapColorOptionsBuilder().Mode(heatmap.HeatmapColorModeScheme).Scheme("Oranges").Exponent(0.5).Steps(64)). // 64: Grafana's default
		Tooltip(heatmap.NewHeatmapTooltipBuilder().Mode(common.TooltipDisplayModeSingle).YHistogram(true))
}

// query is a Prometheus target on the datasource variable, its selectors
// filtered by the dashboard's variables.
func query(ref, expr, legend string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().RefId(ref).Expr(Filter(expr)).LegendFormat(legend).Datasource(ds())
}

// heatmapQuery is a query whose buckets a heatmap draws.
func heatmapQuery(ref, expr, legend string) *prometheus.DataqueryBuilder {
	return query(ref, expr, legend).Format(prometheus.PromQueryFormatHeatmap)
}

var (
	selector = regexp.MustCompile(`\b(aetherium_[a-z0-9_]+)(\{([^}]*)\})?`)
	// perQueue are the metrics with a queue label (the dashboards test checks this
	// against the registered descriptors).
	perQueue = regexp.MustCompile(`^aetherium_(queue_|tasks_processed_total|task_duration_seconds|task_queue_wait_seconds)`)
)

// Filter adds the job and instance matchers (and queue's, for metrics with a
// queue label) to every selector of expr.
func Filter(expr string) string {
	return selector.ReplaceAllStringFunc(expr, func(s string) string {
		m := selector.FindStringSubmatch(s)
		matchers := []string{`job=~"$job"`, `instance=~"$instance"`}
		if perQueue.MatchString(m[1]) {
			matchers = append(matchers, `queue=~"$queue"`)
		}
		if m[3] != "" {
			matchers = append(matchers, m[3])
		}
		return m[1] + "{" + strings.Join(matchers, ", ") + "}"
	})
}

// envelope marshals d with __inputs and __requires in front, as Grafana's
// "Export for sharing externally" writes them.
func envelope(d dashboard.Dashboard) ([]byte, error) {
	raw, err := json.Marshal(d)
	if err != nil {
		return nil, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, err
	}
	type req struct {
		Type    string `json:"type"`
		ID      string `json:"id"`
		Name    string `json:"name"`
		Version string `json:"version"`
	}
	requires := []req{
		{Type: "grafana", ID: "grafana", Name: "Grafana", Version: "10.0.0"},
		{Type: "datasource", ID: "prometheus", Name: "Prometheus", Version: "1.0.0"},
	}
	panelNames := map[string]string{"barchart": "Bar chart", "heatmap": "Heatmap", "stat": "Stat", "timeseries": "Time series"}
	var types []string
	for _, p := range d.Panels {
		if p.Panel != nil && !slices.Contains(types, p.Panel.Type) {
			types = append(types, p.Panel.Type)
		}
	}
	slices.Sort(types)
	for _, t := range types {
		requires = append(requires, req{Type: "panel", ID: t, Name: panelNames[t]})
	}
	inputs := []map[string]string{{
		"name": "DS_PROMETHEUS", "label": "Prometheus", "description": "The Prometheus that scrapes the Aetherium fleet",
		"type": "datasource", "pluginId": "prometheus", "pluginName": "Prometheus",
	}}
	if fields["__inputs"], err = json.Marshal(inputs); err != nil {
		return nil, err
	}
	if fields["__requires"], err = json.Marshal(requires); err != nil {
		return nil, err
	}
	out, err := json.MarshalIndent(fields, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}
