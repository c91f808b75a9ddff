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

# wait_up URL PID LOG: wait until URL answers, failing (with LOG) when PID is gone or 60 s have passed.
wait_up() {
	tries=0
	until curl -fsS "$1" >/dev/null 2>&1; do
		tries=$((tries + 1))
		if [ $tries -gt 120 ] || ! kill -0 "$2" 2>/dev/null; then
			echo "${0##*/}: $1 did not come up; the log:" >&2
			cat "$3" >&2
			exit 1
		fi
		sleep 0.5
	done
}
