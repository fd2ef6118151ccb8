package tracing

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Exporters (Config.Exporter).
const (
	// ExporterHTTP is OTLP over HTTP/protobuf (port 4318 by default).
	ExporterHTTP = "otlp-http"
	// ExporterGRPC is OTLP over gRPC (port 4317 by default).
	ExporterGRPC = "otlp-grpc"
)

const (
	// DefaultExporter is the exporter when none is configured.
	DefaultExporter = ExporterHTTP
	// DefaultServiceName is the service.name resource attribute when neither
	// YAML nor OTEL_SERVICE_NAME names one.
	DefaultServiceName = "aetherium"
	// DefaultSampleRatio (0) leaves sampling to OTEL_TRACES_SAMPLER, whose own
	// default is parentbased_always_on.
	DefaultSampleRatio = 0.0
	// DefaultShutdownTimeout bounds the flush of Shutdown.
	DefaultShutdownTimeout = 5 * time.Second
	// MaxTraceparent is the longest traceparent Remote reads; a longer one is
	// ignored (a version-00 traceparent has 55 characters, later versions may
	// append fields).
	MaxTraceparent = 512
	// MaxContentBytes caps each captured message attribute
	// (gen_ai.input.messages, gen_ai.output.messages; Config.CaptureContent):
	// a longer one keeps its first MaxContentBytes bytes (cut at a character
	// boundary) and ends with a marker saying how much was cut (CapContent).
	// A model call's context can be megabytes; a span is not the place for it.
	MaxContentBytes = 16 << 10
)

// ScopeName is the instrumentation scope of the fleet's spans.
const ScopeName = "github.com/aetherium-engine/aetherium"

// Config is the tracing configuration (yaml key `tracing:`).
type Config struct {
	// Enabled turns tracing on. Off (the default) costs nothing: no SDK, no
	// exporter, no-op spans. Env AETHERIUM_TRACING (true or false).
	Enabled bool `yaml:"enabled"`
	// Exporter is otlp-http or otlp-grpc. Default DefaultExporter.
	Exporter string `yaml:"exporter"`
	// Endpoint is the collector's URL (http://host:4318, https://host:4317).
	// Empty leaves it to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT /
	// OTEL_EXPORTER_OTLP_ENDPOINT, and then the exporter's default (localhost).
	// Headers (authentication) come from OTEL_EXPORTER_OTLP_HEADERS only, never
	// from the YAML file.
	Endpoint string `yaml:"endpoint"`
	// ServiceName is the service.name resource attribute. OTEL_SERVICE_NAME
	// wins over it. Default DefaultServiceName.
	ServiceName string `yaml:"service_name"`
	// SampleRatio, between 0 and 1, samples that share of new traces (a child
	// follows its parent's decision). 0 leaves the sampler to
	// OTEL_TRACES_SAMPLER (default parentbased_always_on). Default DefaultSampleRatio.
	SampleRatio float64 `yaml:"sample_ratio"`
	// ShutdownTimeout bounds the flush of spans when the process stops.
	// Default DefaultShutdownTimeout.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// TraceURL is the URL of a trace in the deployment's trace viewer, with
	// {trace_id} where the trace id goes, e.g.
	// http://jaeger:16686/trace/{trace_id}: the Studio's run page links a run
	// to its trace (GET /api/runs/:id answers trace_url). Empty: no link.
	TraceURL string `yaml:"trace_url"`
	// CaptureContent puts each model call's messages and answer on its chat
	// span (gen_ai.input.messages, gen_ai.output.messages), masked by the
	// fleet's DLP redaction (the audit trail's). Off (the default), no content
	// is recorded; without the permission gate (no DLP), none either.
	CaptureContent bool `yaml:"capture_content"`
}

// WithDefaults fills the zero values.
func (c Config) WithDefaults() Config {
	if c.Exporter == "" {
		c.Exporter = DefaultExporter
	}
	if c.ServiceName == "" {
		c.ServiceName = DefaultServiceName
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = DefaultShutdownTimeout
	}
	return c
}

// Validate reports a config that cannot work.
func (c Config) Validate() error {
	switch {
	case c.Exporter != "" && c.Exporter != ExporterHTTP && c.Exporter != ExporterGRPC:
		return fmt.Errorf("tracing: exporter %q is not %s or %s", c.Exporter, ExporterHTTP, ExporterGRPC)
	case c.Endpoint != "" && !strings.HasPrefix(c.Endpoint, "http://") && !strings.HasPrefix(c.Endpoint, "https://"):
		return fmt.Errorf("tracing: endpoint %q is not an http:// or https:// URL", c.Endpoint)
	case c.SampleRatio < 0 || c.SampleRatio > 1:
		return fmt.Errorf("tracing: sample ratio %v is not between 0 and 1", c.SampleRatio)
	case c.ShutdownTimeout < 0:
		return fmt.Errorf("tracing: shutdown timeout %s is negative", c.ShutdownTimeout)
	case c.TraceURL != "" && !strings.HasPrefix(c.TraceURL, "http://") && !strings.HasPrefix(c.TraceURL, "https://"):
		return fmt.Errorf("tracing: trace_url %q is not an http:// or https:// URL", c.TraceURL)
	case c.TraceURL != "" && !strings.Contains(c.TraceURL, TraceURLPlaceholder):
		return fmt.Errorf("tracing: trace_url %q has no %s", c.TraceURL, TraceURLPlaceholder)
	}
	return nil
}

// TraceURLPlaceholder is where Config.TraceURL takes the trace id.
const TraceURLPlaceholder = "{trace_id}"

// TraceLink is the URL of the trace whose W3C traceparent is given (a run's
// stored trace context) by a Config.TraceURL template; "" when there is no
// template or no valid traceparent.
func TraceLink(template, traceparent string) string {
	id := TraceIDOf(traceparent)
	if template == "" || id == "" {
		return ""
	}
	return strings.ReplaceAll(template, TraceURLPlaceholder, id)
}

// Provider makes the fleet's spans. The nil *Provider is valid and off.
type Provider struct {
	tracer  trace.Tracer
	sdk     *sdktrace.TracerProvider // nil when off
	timeout time.Duration
	enabled bool
}

// Noop returns a provider that is off.
func Noop() *Provider { return nil }

// Option adjusts New.
type Option func(*options)

type options struct {
	exporter sdktrace.SpanExporter
}

// WithSpanExporter sends the spans to exp, synchronously as each ends,
// instead of the configured OTLP exporter, and turns tracing on whatever
// Config.Enabled says. It is the tests' seam (tracetest.InMemoryExporter).
func WithSpanExporter(exp sdktrace.SpanExporter) Option {
	return func(o *options) { o.exporter = exp }
}

// New returns the provider cfg asks for: Noop when tracing is off. ctx bounds
// the exporter's setup only.
func New(ctx context.Context, cfg Config, opts ...Option) (*Provider, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if !cfg.Enabled && o.exporter == nil {
		return Noop(), nil
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", cfg.ServiceName)),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil && res == nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	tpOpts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	if cfg.SampleRatio > 0 {
		tpOpts = append(tpOpts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio))))
	}
	if o.exporter != nil {
		tpOpts = append(tpOpts, sdktrace.WithSyncer(o.exporter))
	} else {
		exp, err := newExporter(ctx, cfg)
		if err != nil {
			return nil, err
		}
		tpOpts = append(tpOpts, sdktrace.WithBatcher(exp))
	}
	sdk := sdktrace.NewTracerProvider(tpOpts...)
	return &Provider{tracer: sdk.Tracer(ScopeName), sdk: sdk, timeout: cfg.ShutdownTimeout, enabled: true}, nil
}

func newExporter(ctx context.Context, cfg Config) (sdktrace.SpanExporter, error) {
	switch cfg.Exporter {
	case ExporterGRPC:
		var opts []otlptracegrpc.Option
		if cfg.Endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(cfg.Endpoint))
		}
		exp, err := otlptracegrpc.New(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("tracing: otlp grpc exporter: %w", err)
		}
		return exp, nil
	default:
		var opts []otlptracehttp.Option
		if cfg.Endpoint != "" {
			endpoint, err := httpTracesURL(cfg.Endpoint)
			if err != nil {
				return nil, err
			}
			opts = append(opts, otlptracehttp.WithEndpointURL(endpoint))
		}
		exp, err := otlptracehttp.New(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("tracing: otlp http exporter: %w", err)
		}
		return exp, nil
	}
}

// httpTracesURL is the URL the OTLP/HTTP exporter posts to for endpoint, the
// collector's base URL as the docs and OTEL_EXPORTER_OTLP_ENDPOINT give it
// (http://collector:4318): the exporter takes a URL as-is, so a bare one
// would post to "/" and every collector answer 404 (found against a real
// Jaeger: no span arrived). A URL with a path of its own is kept.
func httpTracesURL(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", fmt.Errorf("tracing.endpoint: want http(s)://host:port[/path], got %q", endpoint)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	return u.String(), nil
}

// Enabled reports whether spans are recorded and exported.
func (p *Provider) Enabled() bool { return p != nil && p.enabled }

// TracerProvider is the provider's OTel TracerProvider (a no-op one when off),
// for libraries that take one.
func (p *Provider) TracerProvider() trace.TracerProvider {
	if !p.Enabled() {
		return noop.NewTracerProvider()
	}
	return p.sdk
}

// disabled is the span of a provider that is off: non-recording, invalid, and
// never put on a context (a caller's parent span stays the context's span).
var disabled = trace.SpanFromContext(context.Background())

// Start starts a span as a child of ctx's span. Off, it returns ctx as it is
// and a no-op span.
func (p *Provider) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !p.Enabled() {
		return ctx, disabled
	}
	return p.tracer.Start(ctx, name, opts...)
}

// StartRemote starts a span as a child of the W3C traceparent (a run's stored
// trace context, a client's header; see Remote), or as a new root when it is
// empty or not valid.
func (p *Provider) StartRemote(ctx context.Context, traceparent, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !p.Enabled() {
		return ctx, disabled
	}
	return p.tracer.Start(Remote(ctx, traceparent), name, opts...)
}

// Shutdown flushes the spans not yet exported and stops the exporter, within
// Config.ShutdownTimeout. Safe on a provider that is off.
func (p *Provider) Shutdown(ctx context.Context) error {
	if !p.Enabled() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	if err := p.sdk.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: shutdown: %w", err)
	}
	return nil
}

// ForceFlush exports the ended spans not yet exported.
func (p *Provider) ForceFlush(ctx context.Context) error {
	if !p.Enabled() {
		return nil
	}
	return p.sdk.ForceFlush(ctx)
}

// Propagator is the fleet's only propagator: W3C tracecontext, no baggage.
func Propagator() propagation.TextMapPropagator { return propagation.TraceContext{} }

const headerTraceparent = "traceparent"

// Traceparent is the W3C traceparent of ctx's span, "" when it has no valid
// span (tracing off, or no span).
func Traceparent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c[headerTraceparent]
}

// TraceID is the hex trace id of ctx's span, "" when it has no valid span
// (tracing off, or no span): what run events and audit rows record.
func TraceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return sc.TraceID().String()
}

// TraceIDOf is the hex trace id of a W3C traceparent, "" when it is empty,
// oversized or malformed (as Remote reads it).
func TraceIDOf(traceparent string) string {
	sc := trace.SpanContextFromContext(Remote(context.Background(), traceparent))
	if !sc.IsValid() {
		return ""
	}
	return sc.TraceID().String()
}

// Remote returns ctx with the span context of a W3C traceparent as its remote
// parent. An empty, oversized (over MaxTraceparent) or malformed traceparent
// leaves ctx as it is: the span started from it is a new root. Only the
// traceparent is read: no tracestate, no baggage.
func Remote(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" || len(traceparent) > MaxTraceparent {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{headerTraceparent: traceparent})
}

// Fail marks span failed with err (nil: nothing).
func Fail(span trace.Span, err error) {
	if err == nil || !span.IsRecording() {
		return
	}
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
}

// StartChild starts a span as a child of ctx's span, with that span's own
// provider: a package with no Provider of its own (the sandbox, the gate)
// traces its work inside a step's or a tool call's span. Without a recording
// span on ctx (tracing off, or the trace not sampled) it returns ctx as it
// is and a no-op span.
func StartChild(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return ctx, disabled
	}
	return parent.TracerProvider().Tracer(ScopeName).Start(ctx, name, opts...)
}

// Link is a span link to the span of a W3C traceparent (a stored one: the
// turn whose result a resume reads, the call that asked for an approval);
// false when it is empty or not valid.
func Link(traceparent string, attrs ...attribute.KeyValue) (trace.Link, bool) {
	sc := trace.SpanContextFromContext(Remote(context.Background(), traceparent))
	if !sc.IsValid() {
		return trace.Link{}, false
	}
	return trace.Link{SpanContext: sc, Attributes: attrs}, true
}

// CapContent caps captured content at MaxContentBytes: a longer s keeps its
// first MaxContentBytes bytes, cut back to a character boundary, followed by
// "…[truncated: N of M bytes]". Cap after masking: a secret cut in two would
// escape the DLP patterns.
func CapContent(s string) string {
	if len(s) <= MaxContentBytes {
		return s
	}
	cut := MaxContentBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("…[truncated: %d of %d bytes]", len(s)-cut, len(s))
}
