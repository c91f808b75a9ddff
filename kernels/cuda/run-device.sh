#!/usr/bin/env bash
# run-device.sh [--serving] [--dry-run] [RESULTS_DIR]: the whole GPU run of morphlab's CUDA kernels, or with
# --serving the CUDA executor's, on a machine with an NVIDIA GPU (sm_80 or newer), no network and no Go
# toolchain. It runs from a copy of the repository that carries the device bundle, build/device/ (ignored by git;
# `make device-bundle` builds it on any machine with Go and the CUDA toolkit's stub libcuda): cuda.test, the
# cuda-tagged test binary of kernels/cuda with the PTX embedded, executor.test, that of engine/executor (the CUDA
# executor), morphlab built with -tags cuda, BUILD-INFO (how and from what they were built) and, when the build
# machine had one, a compute-sanitizer. Each run fits one 10-minute command.
#
# Steps, each under a time limit; a run's limits add up to at most 540 s (checked before anything runs):
#   preflight   the bundle is there, its libraries resolve, the machine's libcuda.so.1 has every driver function
#               the binaries import, and the sources are those they were built from (a stale bundle is
#               reported, and still run on a GPU; the dry run fails on it)
#   nvidia-smi  the GPU, driver and clocks                                  -> nvidia-smi.txt
# The kernels' run (the default):
#   test        every test of kernels/cuda: the shared conformance suite in f32, f16 and bf16, the golden
#               files, quantized GEMMs, split-K and split-KV                -> test.txt
#   executor    the CUDA executor (engine/executor): the exectest suite and its logits against the CPU
#               executor's, each layer format in turn                      -> executor.txt
#   bench       every benchmark (CUDA events, L2 flushed before each run)   -> bench.txt, bench.json
#   ceilings    a device-to-device copy and bf16/f16 matmuls through PyTorch -> ceilings.txt, ceilings.json
#   sanitizer   compute-sanitizer memcheck on a short subset of the tests   -> sanitizer.txt
#   figures     the BENCH.md table from bench.json and ceilings.json       -> figures.json, figures.md
# The serving run (--serving):
#   steps       the CUDA executor on Llama-2-7B's shape: prefill and decode step times, a layer's swap copy
#               each way, and what an overlapped swap adds to decode steps  -> executor-bench.txt
#   serving     morphlab device-fidelity: a bursty trace served by fp16 and morph:default on the GPU beside the
#               simulator's predictions for the catalog's H200 and fitted to the measured steps
#                                                                           -> serving.txt, serving/
# Everything lands in RESULTS_DIR (default $OUT, else results/cuda-device), with run.log (this script's output),
# env.txt and status.txt (each step's exit status and seconds). The exit status is 0 when every step passed.
#
# --dry-run does the same on a machine without a GPU, up to the first device call: the first test binary's
# cuInit (gorgonia.org/cu calls it in its package init) must fail with a one-line reason, after which the device
# steps are listed, not run, and the figures script checks itself on synthetic input. It exits 0 when all of that
# happened as expected; `make cuda-check` runs it both ways.
set -uo pipefail

dry=0
mode=kernels
while [ $# -gt 0 ]; do
	case "$1" in
	--dry-run) dry=1 ;;
	--serving) mode=serving ;;
	*) break ;;
	esac
	shift
done
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cd "$root"
bundle=${MORPHLAB_DEVICE_BUNDLE:-$root/build/device}
out=${1:-${OUT:-results/cuda-device}}
mkdir -p "$out"
out=$(cd "$out" && pwd)
exec > >(tee "$out/run.log") 2>&1
: >"$out/status.txt"

# Step time limits in seconds, in the order the steps run.
declare -A limit=([preflight]=15 [nvidia-smi]=15 [test]=170 [executor]=40 [bench]=160 [ceilings]=75 [sanitizer]=50 [figures]=15
	[steps]=200 [serving]=310)
order=(preflight nvidia-smi test executor bench ceilings sanitizer figures)
if [ "$mode" = serving ]; then
	order=(preflight nvidia-smi steps serving)
fi
budget=540
total=0
for s in "${order[@]}"; do total=$((total + limit[$s])); done
if [ "$total" -gt "$budget" ]; then
	echo "run-device.sh: step limits add up to $total s, over the $budget s budget" >&2
	exit 2
fi
echo "== run-device.sh ($mode): $(date -u +%FT%TZ), bundle $bundle, results $out, step limits $total s of $budget s"

failed=0
step() { # step NAME CMD...: run CMD (a command or an exported function) under NAME's time limit, record its status
	local name=$1
	shift
	echo "== $name (limit ${limit[$name]} s)"
	local start=$SECONDS
	timeout -k 5 "${limit[$name]}" bash -c '"$@"' "$name" "$@"
	local rc=$?
	[ "$rc" = 124 ] && echo "$name: timed out after ${limit[$name]} s"
	echo "$name rc=$rc seconds=$((SECONDS - start))" | tee -a "$out/status.txt"
	[ "$rc" = 0 ] || failed=1
	return "$rc"
}
skip() { # skip NAME REASON
	echo "== $1: skipped: $2"
	echo "$1 skipped: $2" >>"$out/status.txt"
}

bin=$bundle/cuda.test
# bins are the binaries this run needs: the serving run does without cuda.test and the sanitizer, so that its
# carry (executor.test, morphlab and the bundle's three text files) stays well within the 64 MiB a call takes.
bins=("$bin" "$bundle/executor.test")
[ "$mode" = serving ] && bins=("$bundle/executor.test" "$bundle/morphlab")
py=$(command -v python3 || true)
# The sanitizer's short subset: the bf16 suite of the kernels whose indexing changed most, and split-KV.
sanitize_run='TestReduced/bf16/(GEMMTensorCores|PagedAttention|KVAppend|RMSNorm)|TestPagedSplit|TestLauncherErrors'

preflight() {
	local ok=0
	local b
	for b in "${bins[@]}"; do
		if [ ! -x "$b" ]; then
			echo "preflight: no $b: build the bundle with make device-bundle and carry build/device (or the files the run needs)"
			return 1
		fi
	done
	cat "$bundle/BUILD-INFO"
	# Freshness: the bundle records the sha256 of every source file that went into the binary.
	local stale=0
	if ! (cd "$root" && sha256sum --quiet -c "$bundle/SOURCES.sha256"); then
		echo "preflight: STALE BUNDLE: the sources changed since it was built (files above); rebuild with make device-bundle"
		stale=1
	fi
	for b in "${bins[@]}"; do
		if ldd "$b" | grep -q 'not found'; then
			echo "preflight: libraries of $b not found:"
			ldd "$b" | grep 'not found'
			ok=1
		fi
	done
	# The driver functions the binary imports must all exist in this machine's libcuda.so.1.
	if [ -n "$py" ] && [ -f "$bundle/cuda-symbols.txt" ]; then
		"$py" - "$bundle/cuda-symbols.txt" <<'PY' || ok=1
import ctypes, sys
names = [l.strip() for l in open(sys.argv[1]) if l.strip()]
try:
    lib = ctypes.CDLL("libcuda.so.1")
except OSError as e:
    print(f"preflight: libcuda.so.1 does not load: {e}")
    sys.exit(1)
missing = [n for n in names if not hasattr(lib, n)]
print(f"preflight: libcuda.so.1 has {len(names) - len(missing)} of the {len(names)} driver functions the binary imports")
if missing:
    print("preflight: missing: " + " ".join(missing))
    sys.exit(1)
PY
	fi
	if [ "$ok" = 0 ] && [ "$stale" = 1 ]; then
		return 3
	fi
	return $ok
}

{
	echo "host: $(uname -a)"
	echo "nproc: $(nproc)"
	echo "glibc: $(ldd --version 2>&1 | head -1)"
	echo "python: ${py:-none} $([ -n "$py" ] && "$py" --version 2>&1)"
	command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
	echo "ldd ${bins[0]}:"
	ldd "${bins[0]}" 2>&1
} >"$out/env.txt" 2>&1

if [ "$dry" = 1 ]; then
	# Here the binary loads whichever libcuda.so.1 the machine has, else the toolkit's stub (whose cuInit fails).
	if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
		for d in /usr/lib/x86_64-linux-gnu/stubs /usr/lib/cuda/lib64/stubs /usr/local/cuda/lib64/stubs; do
			if [ -f "$d/libcuda.so" ]; then
				mkdir -p "$out/stub"
				ln -sf "$d/libcuda.so" "$out/stub/libcuda.so.1"
				export LD_LIBRARY_PATH=$out/stub${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
				break
			fi
		done
	fi
fi

# The PTX is compiled for the GPU by the driver when each process loads it; a cache big enough for all three
# modules lets the steps after the first reuse that work.
export CUDA_CACHE_MAXSIZE=1073741824 PYTHONDONTWRITEBYTECODE=1

# The steps run in child shells (under timeout): they see these functions and variables.
# run_in DIR CMD...: CMD in DIR, where a test binary finds its package's files as under go test.
run_in() {
	local dir=$1
	shift
	(cd "$dir" && "$@")
}
run_bin() { run_in "$here" "$@"; }
export -f preflight run_in run_bin
export here root bundle bin py

# A stale bundle (rc 3) still runs on a GPU, whose time is too scarce to waste, with the warning in status.txt
# and run.log; the dry run, where the bundle can be rebuilt, fails on it.
step preflight preflight
rc=$?
if [ "$rc" = 3 ] && [ "$dry" = 0 ]; then
	echo "preflight: continuing with a stale bundle: the results are those of the sources it was built from"
elif [ "$rc" != 0 ]; then
	echo "== preflight failed: nothing else runs"
	exit 1
fi

if command -v nvidia-smi >/dev/null 2>&1; then
	step nvidia-smi bash -c "nvidia-smi > '$out/nvidia-smi.txt' 2>&1 && nvidia-smi -q >> '$out/nvidia-smi.txt' 2>&1"
else
	skip nvidia-smi "no nvidia-smi on this machine"
fi

# stop_without_gpu FILE RC LINE...: when the first device step's output FILE shows cuInit failing, stop: a dry run
# lists the steps it would run (LINEs), checks the figures script and exits 0; a real run exits 1. A dry run whose
# first step did not stop at cuInit (RC its status) fails.
stop_without_gpu() {
	local file=$1 rc=$2
	shift 2
	if grep -q '^Error in initialization' "$file"; then
		reason=$(grep -m1 '^Error in initialization' "$file" | sed 's/.*details on: //')
		echo "== no usable GPU: cuInit failed ($reason); the device steps stop here"
		if [ "$dry" = 1 ]; then
			echo "== dry run: would run, with these limits:"
			printf '%s\n' "$@"
			if [ "$mode" = kernels ]; then
				PYTHONDONTWRITEBYTECODE=1 "$py" -c "import ast, sys; [ast.parse(open(f).read(), f) for f in sys.argv[1:]]" "$here/ceilings.py" "$here/figures.py" || exit 1
				step figures "$py" "$here/figures.py" --self-test || exit 1
			fi
			echo "== dry run ok: the bundle is fresh and loads, the run stopped cleanly at the first device call"
			exit 0
		fi
		exit 1
	fi
	if [ "$dry" = 1 ]; then
		echo "== dry run: the first device step did not stop at cuInit (rc=$rc): is there a GPU here?"
		exit 1
	fi
}

# The serving run: the executor's benchmarks, then the served trace beside the simulator.
if [ "$mode" = serving ]; then
	step steps run_in "$root/engine/executor" "$bundle/executor.test" -test.run '^$' -test.bench CUDA \
		-test.benchtime 10x -test.timeout $((limit[steps] - 5))s >"$out/executor-bench.txt" 2>&1
	rc=$?
	tail -3 "$out/executor-bench.txt"
	stop_without_gpu "$out/executor-bench.txt" "$rc" \
		"  serving (${limit[serving]} s): $bundle/morphlab device-fidelity --out $out/serving"
	grep -E '^Benchmark' "$out/executor-bench.txt"
	step serving "$bundle/morphlab" device-fidelity --out "$out/serving" >"$out/serving.txt" 2>&1
	cat "$out/serving.txt"
	echo "== results in $out"
	cat "$out/status.txt"
	exit $failed
fi

# The test binary runs in the package directory, so that the golden files (testdata/golden above go.mod) are
# found as under go test (run_bin). -test.timeout stops a hung test with its stack before the step's limit.
step test run_bin "$bin" -test.v -test.count=1 -test.timeout $((limit[test] - 10))s >"$out/test.txt" 2>&1
rc=$?
tail -3 "$out/test.txt"
stop_without_gpu "$out/test.txt" "$rc" \
	"  executor (${limit[executor]} s): $bundle/executor.test -test.run CUDA -test.v" \
	"  bench (${limit[bench]} s): $bin -test.run '^\$' -test.bench . -test.benchtime 20x -figures $out/bench.json" \
	"  ceilings (${limit[ceilings]} s): python3 $here/ceilings.py $out/ceilings.json" \
	"  sanitizer (${limit[sanitizer]} s): compute-sanitizer --tool memcheck $bin -test.short -test.run '$sanitize_run'"
grep -E '^(--- FAIL|FAIL|ok|PASS)' "$out/test.txt" | head -40

step executor run_in "$root/engine/executor" "$bundle/executor.test" -test.run CUDA -test.v -test.count=1 \
	-test.timeout $((limit[executor] - 5))s >"$out/executor.txt" 2>&1
grep -E '^(--- FAIL|FAIL|ok|PASS|    cuda)' "$out/executor.txt" | head -20

step bench run_bin "$bin" -test.run '^$' -test.bench . -test.benchtime 20x -figures "$out/bench.json" \
	>"$out/bench.txt" 2>&1
grep -E '^Benchmark' "$out/bench.txt"

if [ -n "$py" ] && "$py" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
	step ceilings "$py" "$here/ceilings.py" "$out/ceilings.json" >"$out/ceilings.txt" 2>&1
	cat "$out/ceilings.txt"
else
	skip ceilings "no python3 with a CUDA build of torch"
fi

san=$(command -v compute-sanitizer || true)
for c in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer \
	"$bundle/sanitizer/compute-sanitizer"; do
	[ -z "$san" ] && [ -x "$c" ] && san=$c
done
if [ -n "$san" ]; then
	step sanitizer run_bin "$san" --tool memcheck --error-exitcode 9 "$bin" -test.short -test.count=1 \
		-test.run "$sanitize_run" >"$out/sanitizer.txt" 2>&1
	tail -5 "$out/sanitizer.txt"
else
	skip sanitizer "no compute-sanitizer on this machine or in the bundle"
fi

if [ -n "$py" ]; then
	step figures "$py" "$here/figures.py" "$out/bench.json" "$out/ceilings.json" "$out/figures.json" \
		>"$out/figures.md"
	cat "$out/figures.md"
else
	skip figures "no python3: fill BENCH.md from bench.json by hand"
fi

echo "== results in $out"
cat "$out/status.txt"
exit $failed
