#!/bin/sh
# fleet.sh serves a fleet of 'morphlab serve' replicas behind HAProxy on this machine, finds its knee with
# 'morphlab loadtest', and sets it beside the simulator's prediction of the same fleet.
#
#   tools/loadbench/fleet.sh RESULTS_DIR
#
# 1. Start $REPLICAS 'morphlab serve' processes (each --threads $THREADS, --max-process-memory $MEMORY) on loopback ports
#    $PORT+1.., and HAProxy (Debian's haproxy package) on 127.0.0.1:$PORT in front of them with 'balance
#    leastconn', health checks on /health and 'option http-no-delay' (without it HAProxy holds streamed tokens
#    back for the kernel to coalesce: 100-200 ms more TTFT). Every process is started in the background, its PID
#    kept, and stopped on exit.
# 2. Sweep the fleet through HAProxy: 'morphlab loadtest --sweep $RATES' (synthetic prompts of about $PROMPT
#    token ids, about $OUTPUT output tokens, each drawn within $RANGE_RATIO of it, --ignore-eos, Poisson arrivals,
#    seeded) into fleet.json; the knee is the rate, of those with the P95 of $KNEE within its limit, that serves
#    the most requests a second.
# 3. Calibrate the simulator on the steps the replicas ran during the sweep ('morphlab serve --steps', then
#    'morphlab calibrate --steps', wall clock: the steps' times include what the replicas, HAProxy and the load
#    tester took from each other on this machine, which a grid timed alone does not) and simulate the same fleet
#    ('morphlab simulate --replicas $REPLICAS --router least-outstanding --device cpu', the pool each replica
#    reported) on the same kind of traces at every rate; the predicted knee is found the same way (of the rates
#    that meet the target, the one with the most requests served a second).
#    fleet.md holds both curves and knees.
#
# The environment overrides the setup: MORPHLAB (binary; built when missing), MODEL (default: stories15M with
# seeded random weights, synthesized into RESULTS_DIR), REPLICAS, MEMORY, THREADS, RATES, DURATION, PROMPT, OUTPUT,
# RANGE_RATIO, KNEE, PORT, TIMEOUT. Everything listens on 127.0.0.1 only and every run is bounded by --duration
# and --timeout; a process that does not come up within 60 s fails the script.
set -eu

if [ $# -ne 1 ]; then
	echo "usage: tools/loadbench/fleet.sh RESULTS_DIR" >&2
	exit 2
fi
command -v haproxy >/dev/null || { echo "fleet.sh: haproxy is not installed (apt-get install haproxy)" >&2; exit 1; }
command -v jq >/dev/null || { echo "fleet.sh: jq is not installed (apt-get install jq)" >&2; exit 1; }
out=$1
root=$(cd "$(dirname "$0")/../.." && pwd)

MORPHLAB=${MORPHLAB:-$root/morphlab}
REPLICAS=${REPLICAS:-2}
MEMORY=${MEMORY:-256MiB}
THREADS=${THREADS:-1}
RATES=${RATES:-26,30,34,38,42,46,50,54}
DURATION=${DURATION:-20s}
PROMPT=${PROMPT:-64}
OUTPUT=${OUTPUT:-64}
RANGE_RATIO=${RANGE_RATIO:-0.9}
KNEE=${KNEE:-ttft=1s}
PORT=${PORT:-18400}
TIMEOUT=${TIMEOUT:-60s}

. "$root/tools/loadbench/lib.sh"
setup_bench

pids=
stop_all() {
	for p in $pids; do
		kill "$p" 2>/dev/null || true
	done
	for p in $pids; do
		wait "$p" 2>/dev/null || true
	done
	pids=
}
trap stop_all EXIT
trap 'stop_all; exit 1' INT TERM

# 1. The replicas and HAProxy.
{
	echo "global"
	echo "    maxconn 4096"
	echo "defaults"
	echo "    mode http"
	echo "    option http-no-delay"
	echo "    timeout connect 5s"
	echo "    timeout client 300s"
	echo "    timeout server 300s"
	echo "frontend fleet"
	echo "    bind 127.0.0.1:$PORT"
	echo "    default_backend replicas"
	echo "backend replicas"
	echo "    balance leastconn"
	echo "    option httpchk GET /health"
} >"$out/haproxy.cfg"
i=1
while [ $i -le "$REPLICAS" ]; do
	port=$((PORT + i))
	"$MORPHLAB" serve --model "$MODEL" --served-model-name "$name" --addr "127.0.0.1:$port" --max-process-memory "$MEMORY" \
		--threads "$THREADS" --steps "$out/steps-$i.jsonl" >"$out/replica-$i.log" 2>&1 &
	pids="$pids $!"
	wait_up "http://127.0.0.1:$port/health" "$!" "$out/replica-$i.log"
	echo "    server r$i 127.0.0.1:$port check inter 1s" >>"$out/haproxy.cfg"
	i=$((i + 1))
done
haproxy -c -f "$out/haproxy.cfg" >/dev/null
haproxy -db -f "$out/haproxy.cfg" >"$out/haproxy.log" 2>&1 &
pids="$pids $!"
wait_up "http://127.0.0.1:$PORT/health" "$!" "$out/haproxy.log"
blocks=$(sed -n 's/.* \([0-9][0-9]*\) KV blocks of .*/\1/p' "$out/replica-1.log" | head -n 1)
echo "fleet.sh: $REPLICAS replicas of $MODEL ($blocks KV blocks each) behind HAProxy on 127.0.0.1:$PORT" >&2

# 2. The sweep through HAProxy.
"$MORPHLAB" loadtest --url "http://127.0.0.1:$PORT" --model "$name" --prompt-tokens "$PROMPT" --output-tokens "$OUTPUT" \
	--range-ratio "$RANGE_RATIO" --ignore-eos --vocab 32000 --timeout "$TIMEOUT" --seed 1 --sweep "$RATES" \
	--duration "$DURATION" --knee "$KNEE" --json >"$out/fleet.json" 2>"$out/loadtest.log"
stop_all

# 3. The simulator's prediction of the same fleet.
steps=$out/steps-1.jsonl
i=2
while [ $i -le "$REPLICAS" ]; do
	steps=$steps,$out/steps-$i.jsonl
	i=$((i + 1))
done
"$MORPHLAB" calibrate --model "$MODEL" --threads "$THREADS" --clock wall --steps "$steps" --out "$out/calibration.json" \
	>"$out/calibration.txt" 2>&1
metric=${KNEE%%=*}
limit_ms=$(echo "${KNEE#*=}" | awk '/ms$/ { sub("ms", ""); print; next } /s$/ { sub("s", ""); print $1 * 1000; next } { print }')
lo_p=$(awk -v l="$PROMPT" -v r="$RANGE_RATIO" 'BEGIN { printf "%d", l * (1 - r) }')
hi_p=$(awk -v l="$PROMPT" -v r="$RANGE_RATIO" 'BEGIN { printf "%d", l * (1 + r) }')
lo_o=$(awk -v l="$OUTPUT" -v r="$RANGE_RATIO" 'BEGIN { printf "%d", l * (1 - r) }')
hi_o=$(awk -v l="$OUTPUT" -v r="$RANGE_RATIO" 'BEGIN { printf "%d", l * (1 + r) }')
sim_knee=0
best=0
: >"$out/sim.txt"
for rate in $(echo "$RATES" | tr ',' ' '); do
	"$MORPHLAB" trace gen --process "poisson:$rate" --duration "$DURATION" --prompt "uniform:$lo_p:$hi_p" \
		--output "uniform:$lo_o:$hi_o" --seed 1 --out "$out/trace-$rate.csv" 2>/dev/null
	"$MORPHLAB" simulate --model "$MODEL" --device cpu --calibration "$out/calibration.json" --kv-blocks "$blocks" \
		--replicas "$REPLICAS" --router least-outstanding --trace "$out/trace-$rate.csv" --out "$out/sim-$rate" >/dev/null
	read -r p95 ok thr <<EOT
$(jq -r "[.aggregates.${metric}.p95_ms, .aggregates.completed == .aggregates.requests, .aggregates.request_throughput] | @tsv" \
		"$out/sim-$rate/results.json")
EOT
	echo "$rate $p95 $ok $thr" >>"$out/sim.txt"
	if [ "$ok" = true ] && awk -v p="$p95" -v l="$limit_ms" -v t="$thr" -v b="$best" 'BEGIN { exit !(p <= l && t > b) }'; then
		sim_knee=$rate best=$thr
	fi
done
real_knee=$(jq '.knee.rate // 0' "$out/fleet.json")
{
	echo "# A fleet of $REPLICAS replicas behind HAProxy (leastconn)"
	echo
	echo "$MODEL, --max-process-memory $MEMORY ($blocks KV blocks), --threads $THREADS each; loadtest prompts ~$PROMPT, outputs ~$OUTPUT"
	echo "(range ratio $RANGE_RATIO), Poisson, $DURATION a rate; knee: of the rates with the P95 $metric within ${KNEE#*=}, the"
	echo "one that serves the most requests a second."
	echo "Machine: $(nproc) CPUs."
	echo
	echo "| rate (req/s) | measured P95 $metric ms | simulated P95 $metric ms |"
	echo "|--:|--:|--:|"
	for rate in $(echo "$RATES" | tr ',' ' '); do
		m=$(jq -r --argjson r "$rate" ".runs[] | select(.rate == \$r) | .metrics.${metric}.p95_ms" "$out/fleet.json")
		s=$(awk -v r="$rate" '$1 == r { print $2 }' "$out/sim.txt")
		printf '| %s | %.1f | %.1f |\n' "$rate" "${m:-0}" "${s:-0}"
	done
	echo
	echo "Knee: measured $real_knee req/s, simulated $sim_knee req/s."
} >"$out/fleet.md"
cat "$out/fleet.md"
