#!/bin/sh
# failover.sh kills one of a fleet's 'morphlab serve' replicas behind HAProxy under a steady load, starts it again,
# and has 'morphlab failover' account for every request and set the simulator's prediction of the same run beside
# it. The script starts, kills and restarts the processes and notes when; every figure is morphlab's.
#
#   tools/loadbench/failover.sh RESULTS_DIR
#
# 1. Start $REPLICAS 'morphlab serve' processes (each --threads $THREADS, --kv-blocks $KV_BLOCKS, --steps) on
#    loopback ports $PORT+1.., HAProxy servers r1.., and HAProxy (Debian's haproxy package) on 127.0.0.1:$PORT in
#    front of them as operators run it for LLM backends: 'balance leastconn'; health checks (option httpchk GET
#    /health) every $INTER, a server down after $FALL failures and up after $RISE passes; 'retry-on conn-failure
#    empty-response response-timeout' with 'retries 3' and 'option redispatch 1', so that a request that got no
#    byte of its response goes to another server (a stream that has begun cannot be retried); 'option
#    http-no-delay' (streamed tokens go out as they come); connect, client, server and check timeouts; the server
#    that answered in an X-Served-By response header; and a log line a request (experiments/failover.LogFormat)
#    beside the server state changes, timestamped ("log stdout format iso").
# 2. Send a steady load through HAProxy: 'morphlab loadtest --rate $RATE --duration $DURATION --timeout $TIMEOUT'
#    (synthetic prompts of about $PROMPT token ids, about $OUTPUT output tokens, each drawn within $RANGE_RATIO of
#    it, --ignore-eos, Poisson arrivals, seeded), every request's outcome kept (--outcomes, --server-header
#    X-Served-By). $KILL_AT after starting it, kill -9 replica $KILLED; $DOWN later start it again on its port.
#    events.txt holds when (date +%s.%N): the kill, the restart, and its /health answering again (polled every
#    50 ms).
# 3. Calibrate the simulator on the steps the replicas that were not killed ran ('morphlab calibrate --steps',
#    wall clock, as fleet.sh does) and run 'morphlab failover', which accounts for the run and simulates the same
#    fleet serving the same requests with the same fault; failover.md holds both.
#
# The environment overrides the setup: MORPHLAB (binary; built when missing), MODEL (default: stories15M with
# seeded random weights, synthesized into RESULTS_DIR), REPLICAS, KILLED, KV_BLOCKS, THREADS, RATE, DURATION,
# PROMPT, OUTPUT, RANGE_RATIO, TIMEOUT, KILL_AT and DOWN (seconds), INTER, FALL, RISE, PORT. Everything listens on
# 127.0.0.1 only; every process is started in the background, its PID kept, and stopped on exit; the load is
# bounded by --duration and --timeout, and a process that does not come up within 60 s fails the script.
set -eu

if [ $# -ne 1 ]; then
	echo "usage: tools/loadbench/failover.sh RESULTS_DIR" >&2
	exit 2
fi
command -v haproxy >/dev/null || { echo "failover.sh: haproxy is not installed (apt-get install haproxy)" >&2; exit 1; }
out=$1
root=$(cd "$(dirname "$0")/../.." && pwd)

MORPHLAB=${MORPHLAB:-$root/morphlab}
REPLICAS=${REPLICAS:-3}
KILLED=${KILLED:-2}
KV_BLOCKS=${KV_BLOCKS:-256}
THREADS=${THREADS:-1}
RATE=${RATE:-5}
DURATION=${DURATION:-40s}
PROMPT=${PROMPT:-64}
OUTPUT=${OUTPUT:-96}
RANGE_RATIO=${RANGE_RATIO:-0.5}
TIMEOUT=${TIMEOUT:-30s}
KILL_AT=${KILL_AT:-12}
DOWN=${DOWN:-10}
INTER=${INTER:-1s}
FALL=${FALL:-3}
RISE=${RISE:-2}
PORT=${PORT:-18600}
if [ "$KILLED" -lt 1 ] || [ "$KILLED" -gt "$REPLICAS" ]; then
	echo "failover.sh: KILLED=$KILLED, want a replica from 1 to REPLICAS=$REPLICAS" >&2
	exit 2
fi

. "$root/tools/loadbench/lib.sh"
setup_bench

stop_all_on_exit

# start_replica I LOG: start replica I on its port, writing its steps to LOG's steps file; its PID in pid.
start_replica() {
	"$MORPHLAB" serve --model "$MODEL" --served-model-name "$name" --addr "127.0.0.1:$((PORT + $1))" \
		--kv-blocks "$KV_BLOCKS" --threads "$THREADS" --steps "$out/steps-$2.jsonl" >"$out/replica-$2.log" 2>&1 &
	pid=$!
	pids="$pids $pid"
}

# 1. The replicas and HAProxy.
cat >"$out/haproxy.cfg" <<EOF
global
    maxconn 4096
    log stdout format iso local0
defaults
    mode http
    log global
    option http-no-delay
    timeout connect 1s
    timeout client 60s
    timeout server 60s
    timeout check 1s
    retries 3
    option redispatch 1
    retry-on conn-failure empty-response response-timeout
frontend fleet
    bind 127.0.0.1:$PORT
    log-format "request path=%HP server=%s status=%ST retries=%rc term=%tsc"
    default_backend replicas
backend replicas
    balance leastconn
    option httpchk GET /health
    http-response set-header X-Served-By %s
    default-server check inter $INTER fall $FALL rise $RISE
EOF
servers=
i=1
while [ $i -le "$REPLICAS" ]; do
	start_replica $i $i
	wait_up "http://127.0.0.1:$((PORT + i))/health" "$pid" "$out/replica-$i.log"
	eval "pid_$i=$pid"
	echo "    server r$i 127.0.0.1:$((PORT + i))" >>"$out/haproxy.cfg"
	servers=${servers:+$servers,}r$i
	i=$((i + 1))
done
haproxy -c -f "$out/haproxy.cfg" >/dev/null
haproxy -db -f "$out/haproxy.cfg" >"$out/haproxy.log" 2>"$out/haproxy.err" &
pids="$pids $!"
wait_up "http://127.0.0.1:$PORT/health" "$!" "$out/haproxy.err"
echo "failover.sh: $REPLICAS replicas of $MODEL behind HAProxy on 127.0.0.1:$PORT; r$KILLED dies ${KILL_AT}s into the load, for ${DOWN}s" >&2

# 2. The load, the kill and the restart.
"$MORPHLAB" loadtest --url "http://127.0.0.1:$PORT" --model "$name" --prompt-tokens "$PROMPT" --output-tokens "$OUTPUT" \
	--range-ratio "$RANGE_RATIO" --ignore-eos --vocab 32000 --timeout "$TIMEOUT" --seed 1 --rate "$RATE" \
	--duration "$DURATION" --outcomes "$out/outcomes.jsonl" --server-header X-Served-By --json \
	>"$out/loadtest.json" 2>"$out/loadtest.log" &
load=$!
pids="$pids $load"
sleep "$KILL_AT"
eval "victim=\$pid_$KILLED"
echo "kill $(date +%s.%N)" >"$out/events.txt"
kill -9 "$victim"
sleep "$DOWN"
echo "restart $(date +%s.%N)" >>"$out/events.txt"
start_replica "$KILLED" "$KILLED-restarted"
wait_up "http://127.0.0.1:$((PORT + KILLED))/health" "$pid" "$out/replica-$KILLED-restarted.log" 0.05
echo "up $(date +%s.%N)" >>"$out/events.txt"
wait "$load"
stop_all

# 3. The accounting and the simulator's prediction of the same run.
steps=
i=1
while [ $i -le "$REPLICAS" ]; do
	[ $i -eq "$KILLED" ] || steps=${steps:+$steps,}$out/steps-$i.jsonl
	i=$((i + 1))
done
"$MORPHLAB" calibrate --model "$MODEL" --threads "$THREADS" --clock wall --steps "$steps" --out "$out/calibration.json" \
	>"$out/calibration.txt" 2>&1
"$MORPHLAB" failover --outcomes "$out/outcomes.jsonl" --haproxy-log "$out/haproxy.log" --events "$out/events.txt" \
	--servers "$servers" --killed "r$KILLED" --check-inter "$INTER" --check-fall "$FALL" --check-rise "$RISE" \
	--model "$MODEL" --device cpu --calibration "$out/calibration.json" --kv-blocks "$KV_BLOCKS" --out "$out"
