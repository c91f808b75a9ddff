#!/usr/bin/env bash
# fidelity.sh: the simulator against the real CPU engine on one trace.
#
# It calibrates the simulator on this CPU, draws a synthetic Poisson trace at each rate, replays it on the CPU
# engine ('morphlab run --clock cpu') and in the simulator ('morphlab simulate --gpu cpu --calibration') under each
# policy with the same KV budget, step token budget and block size, and prints for each run the P50 and P95 TTFT,
# the mean TPOT and the output throughput, real beside simulated, with the simulator's error. It exits 1 when an
# error is over LIMIT percent.
#
# The calibration is fitted to the steps of more real runs ('calibrate --steps'): traces of the same kind drawn
# with another seed, each served as CAL_RUNS says (policy@rate; default fp16 and static:int4 at 1 req/s, so that
# both layer formats are timed, and morph:default at 2.5 req/s, whose freed KV blocks let it decode 9-17 sequences
# a step, which the kernels run by other loops than the 2-4 of the others). Their steps are timed as the compared
# runs' are, with the engine's own work between them, sequences of every length side by side and KV blocks
# wherever the pool had them. CALIBRATE=grid times 'morphlab calibrate's grid instead (each step's median over
# REPS rounds, default 10).
#
# Kernels run on THREADS threads (default 1, GOMAXPROCS too). The calibration and the real runs all run at once,
# so that the calibration is timed over the same minutes, under the same load, as the runs it predicts: a step's CPU
# time moves by a tenth and more with what else the machine runs (calibrations of the same grid 15 minutes apart
# differed by 10%; the processes share caches and memory bandwidth). And the load stays until the last run ends:
# as each finishes, a ballast run takes its place (a trace of the same kind at BALLAST_RATE req/s, default 1, seed
# 3, replayed under fp16, its results thrown away). Without it (BALLAST=0) the longest run, the overloaded fp16
# one, runs its last minute with the CPU to itself, its steps faster than the calibration timed beside the others
# predicts, and the simulated queue's tail comes out longer than the real one.
#
# Usage: tools/fidelity.sh [OUTDIR]   (default /tmp/morphlab-fidelity)
# Settings (environment): SHAPE, RATES, POLICIES, DURATION, PROMPT, OUTPUT, MAX_OUTPUT, KV_BLOCKS, MAX_TOKENS,
# BLOCK_SIZE, THREADS, BALLAST, BALLAST_RATE, REPS (calibration rounds), LIMIT (percent), MORPHLAB (a built binary;
# default: build one), CALIBRATION (use this calibration file instead of calibrating), CALIBRATE (grid or steps),
# CAL_RUNS, REUSE=1 (keep real runs already in OUTDIR).
# The defaults (0.6, 1.5 and 2.5 req/s) take about 16 minutes on two cores (more when they are busy with other work).
set -euo pipefail

out=${1:-/tmp/morphlab-fidelity}
SHAPE=${SHAPE:-stories110M}
RATES=${RATES:-0.6 1.5 2.5}
POLICIES=${POLICIES:-fp16 morph:default}
DURATION=${DURATION:-120s}
PROMPT=${PROMPT:-lognormal:120:0.6}
OUTPUT=${OUTPUT:-lognormal:48:0.6}
MAX_OUTPUT=${MAX_OUTPUT:-192}
KV_BLOCKS=${KV_BLOCKS:-48}
MAX_TOKENS=${MAX_TOKENS:-512}
BLOCK_SIZE=${BLOCK_SIZE:-16}
REPS=${REPS:-10}
LIMIT=${LIMIT:-10}
THREADS=${THREADS:-1}
CALIBRATE=${CALIBRATE:-steps}
BALLAST=${BALLAST:-1}
BALLAST_RATE=${BALLAST_RATE:-1}
CAL_RUNS=${CAL_RUNS:-fp16@1 static:int4@1 morph:default@2.5}
export GOMAXPROCS=$THREADS

[[ $CALIBRATE == steps || $CALIBRATE == grid ]] || { echo "fidelity.sh: CALIBRATE=$CALIBRATE, want steps or grid" >&2; exit 2; }
for run in $CAL_RUNS; do
	[[ $run == ?*@?* ]] || { echo "fidelity.sh: CAL_RUNS: $run, want policy@rate" >&2; exit 2; }
done
command -v jq >/dev/null || { echo "fidelity.sh: jq is required" >&2; exit 1; }
mkdir -p "$out"
if [[ -z ${MORPHLAB:-} ]]; then
	MORPHLAB=$out/morphlab
	go build -o "$MORPHLAB" "$(dirname "$0")/morphlab"
fi
ml() { "$MORPHLAB" "$@"; }
# gen draws a trace of the settings' kind at $1 req/s with seed $2 into $3.
gen() {
	ml trace gen --process "poisson:$1" --duration "$DURATION" --prompt "$PROMPT" --output "$OUTPUT" \
		--clip 1024 --max-output "$MAX_OUTPUT" --seed "$2" --out "$3" 2>/dev/null
}

calib=${CALIBRATION:-$out/cpu-$SHAPE.json}
budget=(--kv-type f16 --kv-blocks "$KV_BLOCKS" --max-tokens "$MAX_TOKENS" --block-size "$BLOCK_SIZE")
# serve replays a trace on the CPU engine with the settings' shape, budget and threads, on the CPU-time clock.
serve() { ml run --threads "$THREADS" --shape "$SHAPE" --format f16 "${budget[@]}" --clock cpu "$@"; }
pids=()  # the calibration and the compared runs
bpids=() # the ballast
start() {
	local log=$1
	shift
	"$@" >"$log" 2>&1 &
	pids+=($!)
}
# ballast replays the ballast trace under fp16, again and again, until $out/ballast.stop exists.
ballast() {
	while [[ ! -e $out/ballast.stop ]]; do
		serve --trace "$out/trace-ballast.csv" --policy fp16 --out "$out/ballast-$1" >/dev/null 2>&1 || true
	done
}
stop_ballast() {
	touch "$out/ballast.stop"
	pkill -f -- "--out $out/ballast-" || true
	if ((${#bpids[@]})); then wait "${bpids[@]}" || true; fi
	bpids=()
	rm -rf "$out"/ballast-* "$out/ballast.stop"
}
trap stop_ballast EXIT
if ((BALLAST)); then gen "$BALLAST_RATE" 3 "$out/trace-ballast.csv"; fi
calsteps=()
if [[ -z ${CALIBRATION:-} && $CALIBRATE == steps ]]; then
	echo "calibration runs: $SHAPE, $CAL_RUNS (policy@req/s, seed 2), CPU-time clock, $THREADS threads" >&2
	for run in $CAL_RUNS; do
		policy=${run%@*} rate=${run##*@}
		gen "$rate" 2 "$out/trace-calibration-$rate.csv"
		dir=$out/calibration-${policy//:/-}-$rate
		start "$dir.txt" serve --trace "$out/trace-calibration-$rate.csv" --policy "$policy" --steps --out "$dir"
		calsteps+=("$dir/steps.jsonl")
	done
elif [[ -z ${CALIBRATION:-} ]]; then
	echo "calibrating $SHAPE (f16 and int4 layers, f16 KV, CPU-time clock, $THREADS threads, $REPS rounds)" >&2
	calibrate_grid() {
		ml calibrate --threads "$THREADS" --model "$SHAPE" --format f16,int4 --kv-type f16 --clock cpu --reps "$REPS" \
			--out "$calib" >"$out/calibration.txt"
	}
	start "$out/calibration.err" calibrate_grid
fi
for rate in $RATES; do
	gen "$rate" 1 "$out/trace-$rate.csv"
	for policy in $POLICIES; do
		name=$rate-${policy//:/-}
		if [[ ${REUSE:-} != 1 || ! -s $out/real-$name/results.json ]]; then
			echo "run $name" >&2
			start "$out/real-$name.txt" serve --trace "$out/trace-$rate.csv" --policy "$policy" --steps --out "$out/real-$name"
		fi
	done
done
rm -f "$out/ballast.stop"
while ((${#pids[@]})); do
	wait -n -p ended "${pids[@]}" || {
		echo "fidelity.sh: a calibration or run failed; see $out/*.txt and $out/calibration.err" >&2
		exit 1
	}
	left=()
	for pid in "${pids[@]}"; do
		if ((pid != ended)); then left+=("$pid"); fi
	done
	pids=("${left[@]}")
	if ((${#pids[@]} && BALLAST)); then
		ballast "${#bpids[@]}" &
		bpids+=($!)
	fi
done
stop_ballast
if ((${#calsteps[@]})); then
	ml calibrate --threads "$THREADS" --model "$SHAPE" --kv-type f16 --clock cpu --steps "$(IFS=,; echo "${calsteps[*]}")" \
		--out "$calib" >"$out/calibration.txt" 2>"$out/calibration.err"
fi
if [[ -z ${CALIBRATION:-} ]]; then cat "$out/calibration.txt" >&2; fi

fail=0
for rate in $RATES; do
	trace=$out/trace-$rate.csv
	for policy in $POLICIES; do
		name=$rate-${policy//:/-}
		real=$out/real-$name sim=$out/sim-$name
		ml simulate --model "$SHAPE" --gpu cpu --calibration "$calib" "${budget[@]}" --trace "$trace" --policy "$policy" --out "$sim" >/dev/null
		echo
		echo "$SHAPE, poisson:$rate for $DURATION, $policy, $KV_BLOCKS KV blocks: $(jq -r '"\(.aggregates.requests) requests, real \(.aggregates.swap_actions) swaps / \(.aggregates.preemptions) preemptions"' "$real/results.json"), sim $(jq -r '"\(.aggregates.swap_actions) / \(.aggregates.preemptions)"' "$sim/results.json")"
		echo
		echo "| metric | real | sim | error |"
		echo "|:--|--:|--:|--:|"
		while IFS='|' read -r label path; do
			r=$(jq "$path" "$real/results.json")
			s=$(jq "$path" "$sim/results.json")
			row=$(awk -v l="$label" -v r="$r" -v s="$s" -v lim="$LIMIT" 'BEGIN {
				e = (s - r) / r * 100; a = e < 0 ? -e : e
				printf "| %s | %.4g | %.4g | %+.1f%%%s |\n", l, r, s, e, (a > lim ? " (over)" : "")
			}')
			if [[ $row == *"(over)"* ]]; then fail=1; fi
			echo "$row"
		done <<'EOF'
P50 TTFT (ms)|.aggregates.ttft.median_ms
P95 TTFT (ms)|.aggregates.ttft.p95_ms
mean TPOT (ms)|.aggregates.tpot.mean_ms
output throughput (tok/s)|.aggregates.output_throughput
EOF
	done
done
exit $fail
