#!/usr/bin/env bash
# run-device.sh [RESULTS_DIR]: the whole GPU run of morphlab's CUDA kernels, in one go, on a machine with an
# NVIDIA GPU (sm_80 or newer) and no internet. Everything lands in RESULTS_DIR (default: $OUT, else
# results/cuda-device):
#   nvidia-smi.txt      the GPU, driver and clocks (nvidia-smi and nvidia-smi -q)
#   env.txt             go version, toolkit, include and link paths used
#   test.txt            go test -tags cuda -v ./kernels/cuda/: the shared conformance suite, golden files, f16,
#                       quantized and split-KV tests
#   bench.txt           go test -bench: every kernel (us/median, TFLOP/s or GB/s) and BenchmarkCopy, the
#                       device-to-device copy bandwidth ceiling
#   torch.txt           bf16 torch.matmul and int8 torch._int_mm rates at 8192^3, the matrix-rate ceilings (when
#                       python3 with a CUDA torch is installed)
#   status.txt          the exit status of each step
#
# What the machine must have, since nothing can be downloaded there:
#   - Go, and the module's dependencies. The copy of the repository arrives without the module cache: either run
#     `go mod vendor` in the checkout before sending it (vendor/ is not ignored by git, so it travels with the
#     working tree; this script then builds with -mod=vendor), or have the modules in the machine's cache. The
#     script tries `go mod download` only if the module proxy answers. RISK: without either, the build fails and
#     only nvidia-smi.txt and torch.txt are written.
#   - cuda.h, for the cgo of gorgonia.org/cu: from a CUDA toolkit on the machine, or copied beforehand into
#     kernels/cuda/.device-include/ (untracked, so it travels too: `mkdir -p kernels/cuda/.device-include &&
#     cp /usr/include/cuda.h kernels/cuda/.device-include/`).
#   - The driver's libcuda.so.1; the script links against it through a libcuda.so symlink in a temporary directory
#     when no unversioned libcuda.so exists.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
out=${1:-${OUT:-results/cuda-device}}
mkdir -p "$out"
out=$(cd "$out" && pwd)
exec > >(tee "$out/run.log") 2>&1
: >"$out/status.txt"

step() { # step NAME TIMEOUT_S CMD...: run CMD with a time limit, record its status
	local name=$1 limit=$2
	shift 2
	echo "== $name"
	local start=$SECONDS
	timeout "$limit" "$@"
	local rc=$?
	echo "$name rc=$rc seconds=$((SECONDS - start))" | tee -a "$out/status.txt"
	return $rc
}

step nvidia-smi 60 bash -c "nvidia-smi > '$out/nvidia-smi.txt' 2>&1; nvidia-smi -q >> '$out/nvidia-smi.txt' 2>&1"

# cgo flags: cuda.h and libcuda.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cflags=""
for d in "$root/kernels/cuda/.device-include" /usr/local/cuda/include /usr/include; do
	if [ -f "$d/cuda.h" ]; then
		cflags="-I$d"
		break
	fi
done
libdir=""
for d in /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib/wsl/lib; do
	if [ -e "$d/libcuda.so" ]; then
		libdir=$d
		break
	fi
done
if [ -z "$libdir" ]; then
	so1=$(ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 .*x86-64/ {print $NF; exit}')
	if [ -n "$so1" ]; then
		ln -s "$so1" "$tmp/libcuda.so"
		libdir=$tmp
	fi
fi
export CGO_ENABLED=1 CGO_CFLAGS="$cflags" CGO_LDFLAGS="-L$libdir" LIBRARY_PATH="$libdir"

modflag=""
if [ -f vendor/modules.txt ]; then
	modflag="-mod=vendor"
elif ! go list -tags cuda -deps ./kernels/cuda/ >/dev/null 2>&1; then
	proxy=$(go env GOPROXY | cut -d, -f1)
	if [ "$proxy" != off ] && [ "$proxy" != direct ] && curl -sSf --max-time 10 -o /dev/null "$proxy/gorgonia.org/cu/@v/list"; then
		step go-mod-download 300 go mod download
	else
		echo "module proxy unreachable and no vendor/: the build needs the modules in the local cache"
	fi
fi

{
	go version
	command -v nvcc && nvcc --version | tail -1
	echo "CGO_CFLAGS=$CGO_CFLAGS CGO_LDFLAGS=$CGO_LDFLAGS modflag=$modflag"
	echo "nproc=$(nproc)"
} >"$out/env.txt" 2>&1
cat "$out/env.txt"

if step build 600 go test $modflag -tags cuda -c -o "$tmp/cuda.test" ./kernels/cuda/; then
	# The test binary runs in the package directory so the golden files (testdata/golden at the module root)
	# are found as under go test.
	(cd kernels/cuda && step test 600 "$tmp/cuda.test" -test.v -test.count=1 >"$out/test.txt" 2>&1)
	tail -5 "$out/test.txt"
	grep -E '^(--- FAIL|FAIL|ok|PASS)' "$out/test.txt" | head -50
	(cd kernels/cuda && step bench 900 "$tmp/cuda.test" -test.run '^$' -test.bench . -test.benchtime 20x \
		>"$out/bench.txt" 2>&1)
	grep -E '^Benchmark' "$out/bench.txt"
fi

if command -v python3 >/dev/null 2>&1 && python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
	step torch 300 python3 - >"$out/torch.txt" 2>&1 <<'PY'
# Matrix-rate ceilings through the vendor libraries: median of 20 timed runs after 5 warm-ups, CUDA events.
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0))
def rate(f, flops):
    for _ in range(5):
        f()
    times = []
    for _ in range(20):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); f(); e.record(); torch.cuda.synchronize()
        times.append(s.elapsed_time(e) / 1e3)
    times.sort()
    return flops / times[len(times) // 2] / 1e12
for n in (4096, 8192):
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    print(f"matmul bf16 n={n} TFLOP/s={rate(lambda: torch.matmul(a, b), 2 * n**3):.1f}")
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    print(f"matmul f16 n={n} TFLOP/s={rate(lambda: torch.matmul(a, b), 2 * n**3):.1f}")
    ai = torch.randint(-128, 127, (n, n), device="cuda", dtype=torch.int8)
    bi = torch.randint(-128, 127, (n, n), device="cuda", dtype=torch.int8)
    try:
        print(f"int_mm int8 n={n} TOP/s={rate(lambda: torch._int_mm(ai, bi), 2 * n**3):.1f}")
    except Exception as ex:
        print(f"int_mm int8 n={n} unavailable: {ex}")
x = torch.empty(1 << 28, device="cuda", dtype=torch.float32)
y = torch.empty_like(x)
print(f"copy GB/s={rate(lambda: y.copy_(x), 2 * x.numel() * 4) * 1e3:.0f}")
PY
	cat "$out/torch.txt"
else
	echo "no python3 with CUDA torch: torch.txt not written" | tee "$out/torch.txt"
fi

echo "== results in $out"
cat "$out/status.txt"
! grep -qv ' rc=0 ' "$out/status.txt"
