# lib.sh: what the load-bench scripts share. Source it after setting out (the results directory), root (the
# module root) and MORPHLAB (the binary's path).

# setup_bench: make the results directory (out becomes its absolute path), build morphlab when it is missing, and
# when MODEL is unset synthesize stories15M with seeded weights into the results directory; the model is served
# as "bench".
setup_bench() {
	mkdir -p "$out"
	out=$(cd "$out" && pwd)
	if [ ! -x "$MORPHLAB" ]; then
		(cd "$root" && go build -o "$MORPHLAB" ./tools/morphlab)
	fi
	if [ -z "${MODEL:-}" ]; then
		MODEL=$out/stories15M.gguf
		[ -f "$MODEL" ] || "$MORPHLAB" synth --shape stories15M --out "$MODEL" >/dev/null
	fi
	name=bench
}

# wait_up URL PID LOG [POLL]: wait until URL answers, asking every POLL seconds (0.5), failing (with LOG) when PID
# is gone or 60 s have passed.
wait_up() {
	deadline=$(($(date +%s) + 60))
	until curl -fsS "$1" >/dev/null 2>&1; do
		if [ "$(date +%s)" -gt $deadline ] || ! kill -0 "$2" 2>/dev/null; then
			echo "${0##*/}: $1 did not come up; the log:" >&2
			cat "$3" >&2
			exit 1
		fi
		sleep "${4:-0.5}"
	done
}

# stop_all_on_exit: the processes whose PIDs the script adds to $pids are stopped (stop_all) when it exits or is
# interrupted.
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
stop_all_on_exit() {
	trap stop_all EXIT
	trap 'stop_all; exit 1' INT TERM
}
