// Package tracing is the fleet's OpenTelemetry tracing (issue 42): one trace
// per run, from the API's submit span through every worker task of the run.
//
// It is off by default: Noop (and New with Config.Enabled false) returns a
// provider whose spans are the API's no-op spans, so an instrumented code path
// costs a nil check and an interface call. When on, New builds the OTel SDK
// with an OTLP exporter (HTTP or gRPC) that honours the standard OTEL_*
// environment variables (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_HEADERS,
// OTEL_TRACES_SAMPLER, OTEL_SERVICE_NAME, …); the YAML keys, when set, win.
//
// The only propagator is W3C tracecontext: baggage is never extracted or
// injected (it may carry secrets, and nothing of it must reach the sandbox or a
// tool's outbound request). A run's trace context travels as a traceparent
// string (Traceparent, Remote) stored with the run, so every task of the run,
// in any worker process, starts its span as a child of the run's root.
//
// A Provider is passed explicitly (worker.Deps, submit.Deps); nothing here sets
// the otel package's globals. Shutdown flushes the spans not yet exported.
//
// This package is a leaf: it imports no package of the module.
package tracing
