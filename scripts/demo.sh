#!/usr/bin/env bash
# Runs the fleet (api + worker + scheduler in one process), submits the demo run,
# follows it to completion, prints the result and exits with the run's outcome.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p data
export AETHERIUM_API_ADDR="${AETHERIUM_API_ADDR:-127.0.0.1:8080}"
export AETHERIUM_WORKER_METRICS_ADDR="${AETHERIUM_WORKER_METRICS_ADDR:-}"
export AETHERIUM_SCHEDULER_METRICS_ADDR="${AETHERIUM_SCHEDULER_METRICS_ADDR:-}"
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
./bin/aetherium run --template demo --prompt "Greet the user in a file" --var topic=greetings --follow
rc=$?
set -e
run_dir=$(ls -td data/workspaces/*/ 2>/dev/null | head -1)
if [ -n "$run_dir" ] && [ -f "$run_dir/hello.txt" ]; then
  echo "workspace file ${run_dir}hello.txt:"; sed 's/^/  /' "$run_dir/hello.txt"
fi
exit $rc
