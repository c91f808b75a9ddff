#!/bin/sh
# fleet.sh serves a fleet of 'morphlab serve' replicas behind HAProxy on this machine, finds its knee with
# 'morphlab loadtest', and sets it beside the simulator's prediction of the same fleet serving the same requests.
# The script starts the processes; every figure (knees included) is morphlab's.
#
#   tools/loadbench/fleet.sh RESULTS_DIR
#
# 1. Start $REPLICAS 'morphlab serve' processes (each --threads $THREADS, --max-process-memory $MEMORY) on loopback ports
#    $PORT+1.., and HAProxy (Debian's haproxy package) on 127.0.0.1:$PORT in front of them with 'balance
#    leastconn', health checks on /health and 'option http-no-delay' (without it HAProxy holds streamed tokens
#    back for the kernel to coalesce: 100-200 ms more TTFT). Every process is started in the background, its PID
#    kept, and stopped on exit.
# 2. Sweep the fleet through HAProxy: 'morphlab loadtest --sweep $RATES --knee $KNEE' (synthetic prompts of about
#    $PROMPT token ids, about $OUTPUT output tokens, each drawn within $RANGE_RATIO of it, --ignore-eos, Poisson
#    arrivals, seeded) into fleet.json. The knee is the highest rate below the first rate whose P95 misses the
#    target (loadtest.Knee).
# 3. Calibrate the simulator on the steps the replicas ran during the sweep ('morphlab serve --steps', then
#    'morphlab calibrate --steps', wall clock: the steps' times include what the replicas, HAProxy and the load
#    tester took from each other on this machine, which a grid timed alone does not) and simulate the same fleet
#    ('morphlab simulate --loadtest fleet.json --replicas $REPLICAS --router least-outstanding --device cpu', the
#    pool each replica reported) serving the requests the sweep sent, rate by rate, into sim/ (sim/loadtest.json
#    is its curve and knee, under the same target). 'morphlab loadtest --compare' puts both curves and knees in
#    fleet.md and on fleet.png.
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

stop_all_on_exit

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
"$MORPHLAB" simulate --loadtest "$out/fleet.json" --model "$MODEL" --device cpu --calibration "$out/calibration.json" \
	--kv-blocks "$blocks" --replicas "$REPLICAS" --router least-outstanding --out "$out/sim" >"$out/sim.txt" 2>"$out/sim.log"
{
	echo "# A fleet of $REPLICAS replicas behind HAProxy (leastconn)"
	echo
	echo "$MODEL, --max-process-memory $MEMORY ($blocks KV blocks), --threads $THREADS each; loadtest prompts ~$PROMPT, outputs ~$OUTPUT"
	echo "(range ratio $RANGE_RATIO), Poisson, $DURATION a rate; the simulator serves the same requests. Knee under $KNEE:"
	echo "the highest rate below the first rate whose P95 misses it."
	echo "Machine: $(nproc) CPUs."
	echo
	"$MORPHLAB" loadtest --compare "measured=$out/fleet.json,simulated=$out/sim/loadtest.json" --knee "$KNEE" \
		--plot "$out/fleet"
} >"$out/fleet.md"
cat "$out/fleet.md"
