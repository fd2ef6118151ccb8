#!/usr/bin/env bash
# Runs the fleet (api + worker + scheduler in one process), submits the demo run,
# follows it to completion, prints the result and exits with the run's outcome.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p data
export AETHERIUM_API_ADDR="${AETHERIUM_API_ADDR:-127.0.0.1:8080}"
export AETHERIUM_WORKER_METRICS_ADDR="${AETHERIUM_WORKER_METRICS_ADDR:-}"
export AETHERIUM_SCHEDULER_METRICS_ADDR="${AETHERIUM_SCHEDULER_METRICS_ADDR:-}"
# TRACE=1 (make demo TRACE=1): the run's trace goes to the local Jaeger that
# `make services` started (scripts/jaeger.sh), and the demo prints its URL.
trace=""
case "${TRACE:-}" in 1 | true | yes) trace=1 ;; esac
if [ -n "$trace" ]; then
  cat > data/demo-trace.yaml <<YAML
tracing:
  enabled: true
  exporter: otlp-http
  endpoint: http://127.0.0.1:4318
  service_name: aetherium-demo
  trace_url: http://127.0.0.1:16686/trace/{trace_id}
YAML
  export AETHERIUM_CONFIG="${AETHERIUM_CONFIG:-data/demo-trace.yaml}"
  export OTEL_BSP_SCHEDULE_DELAY="${OTEL_BSP_SCHEDULE_DELAY:-200}"
fi
./bin/aetherium dev > data/dev.log 2>&1 &
fleet=$!
trap 'kill -TERM $fleet 2>/dev/null; wait $fleet 2>/dev/null || true' EXIT
echo "demo: fleet starting (logs in data/dev.log)"
for _ in $(seq 1 100); do
  if curl -fsS "http://$AETHERIUM_API_ADDR/readyz" >/dev/null 2>&1; then break; fi
  if ! kill -0 $fleet 2>/dev/null; then echo "demo: the fleet exited:"; tail -20 data/dev.log; exit 1; fi
  sleep 0.1
done
curl -fsS "http://$AETHERIUM_API_ADDR/readyz" >/dev/null || { echo "demo: API not ready"; tail -20 data/dev.log; exit 1; }
set +e
./bin/aetherium run --template demo --prompt "Greet the user in a file" --var topic=greetings --follow | tee data/demo-run.log
rc=${PIPESTATUS[0]}
set -e
if [ -n "$trace" ]; then
  run_id=$(sed -nE 's/^run ([^ ]+) queued.*/\1/p' data/demo-run.log | head -1)
  url=""
  if [ -n "$run_id" ]; then
    url=$(curl -fsS "http://$AETHERIUM_API_ADDR/api/runs/$run_id" | grep -o '"trace_url":"[^"]*"' | cut -d'"' -f4 || true)
    # The last spans reach Jaeger with the exporter's next batch (OTEL_BSP_SCHEDULE_DELAY above).
    sleep 1
  fi
  if [ -n "$url" ]; then echo "trace of run $run_id: $url"; else echo "demo: no trace URL for the run (see data/dev.log)"; fi
fi
run_dir=$(ls -td data/workspaces/*/ 2>/dev/null | head -1)
if [ -n "$run_dir" ] && [ -f "$run_dir/hello.txt" ]; then
  echo "workspace file ${run_dir}hello.txt:"; sed 's/^/  /' "$run_dir/hello.txt"
fi
exit $rc
