#!/usr/bin/env bash
# Runs every Go fuzz target in the module, FUZZJOBS (default 2) at a time, for FUZZTIME each
# (default 1m; anything `go test -fuzztime` takes: 30s, 5m, 10000x), or within
# FUZZBUDGET for the whole sweep (see below). Targets are found
# by scanning the *_test.go files for `func FuzzXxx(`, so new ones are picked up
# without touching this script. `go test` fuzzes one target per invocation, hence the
# loop. Keeps going after a failure, prints a summary and exits non-zero if any
# target failed; a crasher Go found is under <pkg>/testdata/fuzz/<Name>/ — commit it
# as a regression seed once the bug is fixed.
#
# Go 1.26's fuzz coordinator can fail a healthy run at the -fuzztime deadline with a
# bare "context deadline exceeded" and no input written (a race in internal/fuzz
# between the deadline and the workers' cancellation, likelier on a loaded machine).
# A failure with exactly that signature is run once more and counts only if it
# repeats; a count budget (FUZZTIME=20000x) has no deadline and cannot hit it.
#
#   scripts/fuzz.sh                 all targets, FUZZTIME each
#   scripts/fuzz.sh security        only targets whose "<pkg> <Name>" matches the regexp
#   FUZZTIME=5s scripts/fuzz.sh     a quick pass (two or three minutes, builds included)
#   FUZZBUDGET=150s scripts/fuzz.sh all targets within 150 s of fuzzing (CI)
#   FUZZWARM=1 scripts/fuzz.sh      only build every package's fuzz binary (see below)
#
# The api target runs a fleet on Redis and PostgreSQL (scripts/services.sh, which
# `make fuzz` runs first); without them it skips, or fails under CI=true.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
GO="${GO:-go}"
FUZZTIME="${FUZZTIME:-1m}"
filter="${1:-}"

# "<dir> <Name>" for every fuzz target, sorted by package then name.
mapfile -t targets < <(
  grep -rEo --include='*_test.go' --exclude-dir=testdata --exclude-dir=vendor --exclude-dir=.git \
    '^func Fuzz[A-Za-z0-9_]*\(' . |
    sed -E 's#^\./##; s#^(.*)/[^/]*_test\.go:func (Fuzz[A-Za-z0-9_]*)\($#\1 \2#; s#^[^/ ]*_test\.go:func (Fuzz[A-Za-z0-9_]*)\($#. \1#' |
    LC_ALL=C sort -u |
    { if [ -n "$filter" ]; then grep -E -- "$filter" || true; else cat; fi }
)
total=${#targets[@]}
if [ "$total" -eq 0 ]; then
  echo "fuzz: no fuzz targets${filter:+ match '$filter'}" >&2
  exit 1
fi
jobs_max="${FUZZJOBS:-2}"
if ! [[ "$jobs_max" =~ ^[1-9][0-9]*$ ]]; then
  echo "fuzz: FUZZJOBS=$jobs_max: want a positive number" >&2
  exit 2
fi

# FUZZBUDGET (150s, 3m, or seconds): the sweep's fuzzing as a whole, wall clock, so
# that a new target shares the budget instead of adding its own minutes (CI sets
# it; `make fuzz` people get FUZZTIME each). It replaces FUZZTIME: the first target
# runs alone (see the loop below), the others FUZZJOBS at a time, so the sweep is
# 1 + ceil((targets-1)/FUZZJOBS) rounds of FUZZTIME = FUZZBUDGET / rounds (at
# least 1s). The instrumented builds and links are on top of it: cached (FUZZWARM
# below), a few seconds a target.
budget=""
if [ -n "${FUZZBUDGET:-}" ]; then
  if [[ "$FUZZBUDGET" =~ ^([0-9]+)(s?)$ ]]; then
    budget=${BASH_REMATCH[1]}
  elif [[ "$FUZZBUDGET" =~ ^([0-9]+)m$ ]]; then
    budget=$((BASH_REMATCH[1] * 60))
  fi
  if [ -z "$budget" ] || [ "$budget" -eq 0 ]; then
    echo "fuzz: FUZZBUDGET=$FUZZBUDGET: want seconds (150, 150s) or minutes (3m)" >&2
    exit 2
  fi
  rounds=$((1 + (total - 1 + jobs_max - 1) / jobs_max))
  share=$((budget / rounds))
  if [ "$share" -lt 1 ]; then
    echo "fuzz: FUZZBUDGET=$FUZZBUDGET is less than 1s for each of $rounds rounds: 1s each (${rounds}s)" >&2
    share=1
  fi
  FUZZTIME="${share}s"
fi

# FUZZWARM=1: build each package's instrumented test binary once (go test -c -fuzz)
# and fuzz nothing, filling the build cache a later sweep reuses. .ci/run runs it
# niced while the compose test and the drills mostly wait: on a cold cache the api
# target's build alone took 458 s of a 5 s target (fresh-clone run, 2026-12-03).
if [ "${FUZZWARM:-}" = 1 ]; then
  bins=$(mktemp -d "${TMPDIR:-/tmp}/aetherium-fuzzwarm.XXXXXX")
  trap 'rm -rf "$bins"' EXIT
  declare -A warmed=()
  for t in "${targets[@]}"; do
    dir=${t% *} name=${t#* }
    [ -n "${warmed[$dir]:-}" ] && continue
    warmed[$dir]=1
    s=$SECONDS
    if "$GO" test -c -ldflags=-w -o "$bins/t.test" -fuzz "^${name}\$" "./$dir" >"$bins/log" 2>&1; then
      echo "fuzz warm: $dir built ($((SECONDS - s))s)"
    else
      # Not a failure here: the sweep builds it again and reports why.
      echo "fuzz warm: $dir did not build ($((SECONDS - s))s): $(tail -1 "$bins/log")"
    fi
  done
  exit 0
fi

logs=$(mktemp -d "${TMPDIR:-/tmp}/aetherium-fuzz.XXXXXX")
# ^C stops the whole sweep, not just the target being fuzzed.
trap 'echo; echo "fuzz: interrupted (logs in $logs)"; exit 130' INT
if [ -n "$budget" ]; then
  echo "fuzz: $total targets, $FUZZTIME each: a budget of ${budget}s in $rounds rounds ($jobs_max at a time, the first alone)"
else
  echo "fuzz: $total targets, $FUZZTIME each"
fi

# fuzz_once DIR NAME LOG: one go test run; its exit status.
fuzz_once() {
  # -v so that a target which skips (the api one, without its services) says so.
  "$GO" test -v -ldflags=-w -run '^$' -fuzz "^${2}\$" -fuzztime "$FUZZTIME" "./$1" >"$3" 2>&1
}

# deadline_race LOG: the run failed only with the coordinator's bare deadline error.
deadline_race() {
  grep -qE '^[[:space:]]+context deadline exceeded$' "$1" &&
    ! grep -q 'Failing input written to' "$1" &&
    [ "$(sed -n '/^--- FAIL/,/^FAIL$/p' "$1" | grep -cvE '^(--- FAIL|[[:space:]]+context deadline exceeded$|=== NAME|FAIL$)')" -eq 0 ]
}

# run_target I DIR NAME: fuzzes one target; prints its report to $logs/I.out and
# its outcome ("passed|failed|skipped [retried] [short] [crasher PATH]") to
# $logs/I.res, so targets can run side by side and report in order.
run_target() {
  local i=$1 dir=$2 name=$3
  local log="$logs/$i-${dir//\//_}-$name.log" out="$logs/$i.out" res="$logs/$i.res"
  local start=$SECONDS rc note="" extra=""
  {
    printf 'fuzz %d/%d %s %s (%s)… ' "$i" "$total" "$dir" "$name" "$FUZZTIME"
    fuzz_once "$dir" "$name" "$log"
    rc=$?
    if [ "$rc" -ne 0 ] && deadline_race "$log"; then
      mv "$log" "$log.first"
      printf 'bare "context deadline exceeded" (Go'"'"'s fuzztime race), once more… '
      fuzz_once "$dir" "$name" "$log"
      rc=$?
      note=", retried"
      extra+=" retried"
    fi
    local took=$((SECONDS - start))s
    if [ "$rc" -eq 0 ] && ! grep -qE '^fuzz: elapsed: .*execs:' "$log" &&
      grep -q 'gathering baseline coverage' "$log"; then
      # FUZZTIME ran out while the corpus was still being replayed: nothing new was tried.
      local base
      base=$(grep -oE 'gathering baseline coverage: [0-9]+/[0-9]+' "$log" | tail -1 | grep -oE '[0-9]+/[0-9]+$')
      echo "ok ($took$note), but only replayed ${base:-part} of its corpus: too short a FUZZTIME to fuzz it"
      echo "passed$extra short" >"$res"
      rm -f "$log" "$log.first"
    elif [ "$rc" -eq 0 ] && ! grep -qE '^fuzz: elapsed: .*execs:' "$log"; then
      local why
      why=$(grep -B1 -- "--- SKIP: $name" "$log" | head -1 | sed -E 's/^[[:space:]]+//')
      echo "SKIP ($took): ${why:-did not fuzz}"
      echo "skipped$extra" >"$res"
    elif [ "$rc" -eq 0 ]; then
      # From the coordinator's last progress line, "fuzz: elapsed: 5s, execs: 1234
      # (0/sec), new interesting: 3 (total: 10)": the totals (the rate is the last tick's).
      local stats
      stats=$(grep -E '^fuzz: elapsed:' "$log" | tail -1 |
        sed -E 's/^fuzz: elapsed: [^,]*, execs: ([0-9]+) \([^)]*\)/\1 execs/')
      echo "ok ($took$note${stats:+, $stats})"
      echo "passed$extra" >"$res"
      rm -f "$log" "$log.first"
    else
      if grep -qE '\[(build|setup) failed\]' "$log"; then
        echo "FAIL ($took$note): did not build"
      else
        echo "FAIL ($took$note)"
      fi
      # The failure itself: the log without the progress lines (a build failure's
      # errors are at its end, a test's message and stack at its start).
      if grep -q -- '--- FAIL' "$log"; then
        grep -vE '^(fuzz: |=== (RUN|NAME))' "$log" | head -60
      else
        grep -vE '^fuzz: ' "$log" | tail -40
      fi | sed 's/^/    | /'
      local crasher
      crasher=$(sed -nE 's/.*Failing input written to (testdata\/fuzz\/[^[:space:]]+).*/\1/p' "$log" | tail -1)
      if [ -n "$crasher" ]; then
        crasher="$dir/$crasher"
        [ "$dir" = "." ] && crasher=${crasher#./}
        extra+=" crasher $crasher"
        echo "    crasher: $crasher"
        echo "    re-run:  $GO test -run '^$name/${crasher##*/}\$' ./$dir"
      elif grep -qE "^[[:space:]]+--- FAIL: $name " "$log"; then
        echo "    a seed fails (an f.Add one, or one already under $dir/testdata/fuzz/$name/)"
      fi
      echo "    log:     $log"
      echo "failed$extra" >"$res"
    fi
  } >"$out" 2>&1
}

# FUZZJOBS targets at a time (default 2): a target's instrumented build and link
# (most of a short FUZZTIME's wall time) overlaps another's fuzzing.
start_all=$SECONDS
next_print=1
# print_done: prints, in target order, every finished target not yet printed.
print_done() {
  while [ "$next_print" -le "$total" ] && [ -f "$logs/$next_print.res" ]; do
    cat "$logs/$next_print.out"
    next_print=$((next_print + 1))
  done
}
i=0
for t in "${targets[@]}"; do
  i=$((i + 1))
  if [ "$i" -eq 2 ]; then
    # The first target (api, whose test binary links most of the module) runs
    # alone: on a cold build cache its instrumented build of the shared packages
    # fills the cache the others reuse. Side by side, two cold builds compiled the
    # same packages at once (CI, 2026-12-03: 492 s and 433 s for two 5 s targets).
    wait
    print_done
  fi
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do
    wait -n 2>/dev/null || true
    print_done
  done
  run_target "$i" "${t% *}" "${t#* }" &
done
wait
print_done

passed=() failed=() skipped=() crashers=() retried=() short=()
i=0
for t in "${targets[@]}"; do
  i=$((i + 1))
  read -r outcome rest <"$logs/$i.res" || outcome=failed
  case "$outcome" in
    passed) passed+=("$t") ;;
    skipped) skipped+=("$t") ;;
    *) failed+=("$t") ;;
  esac
  [[ " $rest " == *" retried "* ]] && retried+=("$t")
  [[ " $rest " == *" short "* ]] && short+=("$t")
  [[ "$rest" == *"crasher "* ]] && crashers+=("${rest##*crasher }")
done
[ "${#failed[@]}" -eq 0 ] && rm -rf "$logs"

echo
echo "fuzz summary: ${#passed[@]} passed, ${#failed[@]} failed, ${#skipped[@]} skipped of $total ($FUZZTIME each${budget:+ from a ${budget}s budget}, $((SECONDS - start_all))s in all)"
for t in "${retried[@]}"; do echo "  retried after Go's fuzztime deadline race: $t"; done
for t in "${short[@]}"; do echo "  not fuzzed (FUZZTIME ended during its corpus replay): $t"; done
for t in "${skipped[@]}"; do echo "  skipped: $t"; done
for t in "${failed[@]}"; do echo "  FAILED:  $t"; done
if [ "${#crashers[@]}" -gt 0 ]; then
  echo "crashers (commit them with the fix, as regression seeds):"
  for c in "${crashers[@]}"; do echo "  $c"; done
fi
[ "${#failed[@]}" -eq 0 ]
