#!/bin/sh
# batching.sh compares batching through the HTTP server and checks its behaviour under overload.
#
#   tools/loadbench/batching.sh RESULTS_DIR
#
# 1. Sweep: for each of static, dynamic and continuous batching in turn, start 'morphlab serve --scheduler S' on
#    its own loopback port, run the same 'morphlab loadtest --sweep' against it (synthetic prompts of about
#    $PROMPT token ids and about $OUTPUT output tokens, each length drawn uniformly within $RANGE_RATIO of it as
#    vLLM's random dataset draws them, every request generating its max_tokens (--ignore-eos), Poisson arrivals,
#    seeded), save the sweep as S.json and stop the server.
#    Then 'morphlab loadtest --compare' draws the three P95 curves on one plot (batching.png, batching.svg) and
#    tabulates, for every target in $KNEES, each scheduler's knee with its ratio to static's and dynamic's, and the
#    P95 at every rate (batching.md, batching-KNEE.json).
# 2. Overload: a continuous-batching server with --max-queue $MAX_QUEUE takes $OVERLOAD_X times the continuous
#    knee's rate (under the first of $KNEES: 'loadtest --at-knee continuous.json --times $OVERLOAD_X') for
#    $OVERLOAD_S seconds while the server's peak RSS is sampled and, every few seconds, a streaming client
#    disconnects mid-stream. Then /health, one new request and the KV usage metric are checked. overload.json is
#    the load test's report, overload.md the verdict. With KNEE_RATE set, step 1 is skipped and the overload takes
#    $OVERLOAD_X times KNEE_RATE.
#
# The environment overrides the setup: MORPHLAB (binary; built with go build when missing), MODEL (default:
# stories15M with seeded random weights, synthesized into RESULTS_DIR), MEMORY, THREADS, RATES, DURATION,
# PROMPT, OUTPUT, RANGE_RATIO, BATCH and MAX_DELAY (static and dynamic batching), KNEES, PORT (the first of four), TIMEOUT,
# MAX_QUEUE, OVERLOAD_X, OVERLOAD_S. Everything listens on 127.0.0.1 only; every run is bounded by
# --duration and --timeout, and a server that does not come up within 60 s fails the script.
set -eu

if [ $# -ne 1 ]; then
	echo "usage: tools/loadbench/batching.sh RESULTS_DIR" >&2
	exit 2
fi
out=$1
root=$(cd "$(dirname "$0")/../.." && pwd)

MORPHLAB=${MORPHLAB:-$root/morphlab}
MEMORY=${MEMORY:-256MiB}
THREADS=${THREADS:-2}
RATES=${RATES:-2,4,8,12,16,20,24,28,32,40,48,56,64}
DURATION=${DURATION:-20s}
PROMPT=${PROMPT:-64}
OUTPUT=${OUTPUT:-64}
RANGE_RATIO=${RANGE_RATIO:-0.9}
BATCH=${BATCH:-16}
MAX_DELAY=${MAX_DELAY:-50ms}
KNEES=${KNEES:-ttft=1s e2el=4s}
PORT=${PORT:-18300}
TIMEOUT=${TIMEOUT:-60s}
MAX_QUEUE=${MAX_QUEUE:-32}
OVERLOAD_X=${OVERLOAD_X:-4}
OVERLOAD_S=${OVERLOAD_S:-60}

. "$root/tools/loadbench/lib.sh"
setup_bench

server=
stop_server() {
	if [ -n "$server" ]; then
		kill "$server" 2>/dev/null || true
		wait "$server" 2>/dev/null || true
		server=
	fi
}
trap stop_server EXIT
trap 'stop_server; exit 1' INT TERM

# start_server PORT LOG FLAGS...: start 'morphlab serve' in the background and wait until /health answers.
start_server() {
	port=$1
	log=$2
	shift 2
	"$MORPHLAB" serve --model "$MODEL" --served-model-name "$name" --addr "127.0.0.1:$port" \
		--max-process-memory "$MEMORY" --threads "$THREADS" "$@" >"$log" 2>&1 &
	server=$!
	wait_up "http://127.0.0.1:$port/health" "$server" "$log"
}

# metric PORT NAME: the value of the first series of morphlab:NAME.
metric() {
	curl -fsS "http://127.0.0.1:$1/metrics" | awk -v m="morphlab:$2" '!found && index($1, m) == 1 { print $2; found = 1 }'
}

# peak_rss PID: the process's peak resident set (VmHWM), in KiB.
peak_rss() {
	awk '/^VmHWM:/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0
}

loadflags="--model $name --prompt-tokens $PROMPT --output-tokens $OUTPUT --range-ratio $RANGE_RATIO --ignore-eos"
loadflags="$loadflags --vocab 32000 --timeout $TIMEOUT --seed 1"

# 1. The sweep, one scheduler after another.
p=$PORT
schedulers="static dynamic continuous"
[ -z "${KNEE_RATE:-}" ] || schedulers=
for s in $schedulers; do
	case $s in
	static) flags="--scheduler static --batch-size $BATCH" ;;
	dynamic) flags="--scheduler dynamic --batch-size $BATCH --max-delay $MAX_DELAY" ;;
	continuous) flags="--scheduler continuous" ;;
	esac
	echo "batching.sh: $s batching ($flags) on port $p, rates $RATES for $DURATION each" >&2
	# shellcheck disable=SC2086 # flags are words
	start_server "$p" "$out/$s.server.log" $flags
	# shellcheck disable=SC2086
	"$MORPHLAB" loadtest --url "http://127.0.0.1:$p" $loadflags --sweep "$RATES" --duration "$DURATION" \
		--plot "$out/$s" --json >"$out/$s.json" 2>"$out/$s.log"
	curl -fsS "http://127.0.0.1:$p/metrics" >"$out/$s.metrics.txt"
	echo "$s $flags peak_rss_kib=$(peak_rss "$server")" >>"$out/servers.txt"
	stop_server
	p=$((p + 1))
done

# sweep_report tabulates the three sweeps' knees (batching.md).
sweep_report() {
	curves="static=$out/static.json,dynamic=$out/dynamic.json,continuous=$out/continuous.json"
	{
		echo "# Batching through the server"
		echo
		echo "Model $MODEL, --max-process-memory $MEMORY, --threads $THREADS; static --batch-size $BATCH; dynamic --batch-size"
		echo "$BATCH --max-delay $MAX_DELAY; continuous as default. Loadtest: $loadflags, Poisson arrivals,"
		echo "--sweep $RATES --duration $DURATION. Machine: $(nproc) CPUs, $(uname -sm)."
		echo
	} >"$out/batching.md"
	for k in $KNEES; do
		echo "## Knee at P95 $k" >>"$out/batching.md"
		echo >>"$out/batching.md"
		"$MORPHLAB" loadtest --compare "$curves" --knee "$k" --plot "$out/batching" >>"$out/batching.md"
		echo >>"$out/batching.md"
		"$MORPHLAB" loadtest --compare "$curves" --knee "$k" --plot "$out/batching" --json >"$out/batching-${k%%=*}.json"
	done
}

[ -n "${KNEE_RATE:-}" ] || sweep_report

# 2. Overload.
if [ -n "${KNEE_RATE:-}" ]; then
	at="--rate $KNEE_RATE"
else
	at="--at-knee $out/continuous.json --knee ${KNEES%% *}"
fi
p=$((PORT + 3))
echo "batching.sh: overload at $OVERLOAD_X x the continuous knee ($at) for ${OVERLOAD_S}s on port $p" >&2
start_server "$p" "$out/overload.server.log" --scheduler continuous --max-queue "$MAX_QUEUE"
url=http://127.0.0.1:$p
# shellcheck disable=SC2086
"$MORPHLAB" loadtest --url "$url" $loadflags $at --times "$OVERLOAD_X" --duration "${OVERLOAD_S}s" --json \
	>"$out/overload.json" 2>"$out/overload.log" &
load=$!
# Streaming clients that hang up after 2 s (a request wants 180 tokens: mid-stream, if it was admitted).
cut=0
midstream=0
i=0
while kill -0 "$load" 2>/dev/null; do
	if [ $((i % 5)) -eq 0 ] && [ $i -lt "$OVERLOAD_S" ]; then
		cut=$((cut + 1))
		curl -sN --max-time 2 "$url/v1/completions" -H 'Content-Type: application/json' \
			-d "{\"model\":\"$name\",\"prompt\":[1,2,3,4,5,6,7,8],\"max_tokens\":180,\"stream\":true}" \
			>"$out/disconnect.$cut.txt" 2>/dev/null || true
		if grep -q '^data: {' "$out/disconnect.$cut.txt" && ! grep -q '\[DONE\]' "$out/disconnect.$cut.txt"; then
			midstream=$((midstream + 1))
		fi
		i=$((i + 2))
	else
		sleep 1
		i=$((i + 1))
	fi
done
wait "$load" || true
if [ ! -s "$out/overload.json" ]; then
	echo "batching.sh: the overload load test wrote no report; its log:" >&2
	cat "$out/overload.log" >&2
	exit 1
fi
sleep 1
health=$(curl -sS "$url/health" || echo unreachable)
after=$(curl -sS -o /dev/null -w '%{http_code}' "$url/v1/completions" -H 'Content-Type: application/json' \
	-d "{\"model\":\"$name\",\"prompt\":[1,2,3],\"max_tokens\":16}" || echo 000)
kv=$(metric "$p" kv_cache_usage_perc)
running=$(metric "$p" num_requests_running)
waiting=$(metric "$p" num_requests_waiting)
aborts=$(curl -fsS "$url/metrics" | awk '/^morphlab:request_success_total\{finished_reason="abort"/ { print $2 }')
rss=$(peak_rss "$server")
curl -fsS "$url/metrics" >"$out/overload.metrics.txt"
stop_server
budget_kib=$(awk -v m="$MEMORY" 'BEGIN {
	n = m + 0; u = substr(m, length(n "") + 1)
	f = (u == "KiB") ? 1 : (u == "MiB") ? 1024 : (u == "GiB") ? 1048576 : 1 / 1024
	print int(n * f) }')
num() { awk -v k="\"$1\":" '$1 == k { gsub(/,/, "", $2); print $2; exit }' "$out/overload.json"; }
rate=$(num rate)
requests=$(num requests)
completed=$(num completed)
rejected=$(num rejected)
failed=$(num failed)
verdict=pass
[ "$failed" = 0 ] && [ $((completed + rejected)) -eq "$requests" ] || verdict=fail
[ "$health" = '{"status":"ok"}' ] && [ "$after" = 200 ] || verdict=fail
[ "$kv" = 0 ] && [ "$running" = 0 ] && [ "$waiting" = 0 ] || verdict=fail
[ "$rss" -le "$budget_kib" ] || verdict=fail
{
	echo "# Overload: $rate req/s ($OVERLOAD_X x the continuous knee) for ${OVERLOAD_S}s, --max-queue $MAX_QUEUE"
	echo
	echo "| check | value |"
	echo "|:--|:--|"
	echo "| requests | $requests |"
	echo "| completed (full response) | $completed |"
	echo "| rejected (429) | $rejected |"
	echo "| failed (5xx, broken, timed out) | $failed |"
	echo "| lost (requests - completed - rejected - failed) | $((requests - completed - rejected - failed)) |"
	echo "| clients disconnected after 2 s / of them mid-stream | $cut / $midstream |"
	echo "| aborted requests (server metric) | $aborts |"
	echo "| after: KV usage, running, waiting | $kv, $running, $waiting |"
	echo "| after: /health | $health |"
	echo "| after: a new request | HTTP $after |"
	echo "| server peak RSS / --max-process-memory | $((rss / 1024)) MiB / $((budget_kib / 1024)) MiB |"
	echo "| verdict | $verdict |"
} >"$out/overload.md"
[ -n "${KNEE_RATE:-}" ] || cat "$out/batching.md"
cat "$out/overload.md"
[ "$verdict" = pass ]
