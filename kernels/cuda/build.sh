#!/bin/sh
# build.sh is what `make ptx` and `make cuda-check` run.
#
#   build.sh ptx     regenerate the committed PTX: every .cu for compute_80 and compute_90 into ptx/NAME.sm_XX.ptx
#   build.sh check   install the toolkit if nvcc is missing; compile every .cu to cubin for sm_80 and sm_90 with
#                    warnings as errors and ptxas spill and local-memory warnings on; fail if the committed PTX
#                    differs from a fresh build (stale); vet, build and compile the tests of the cuda-tagged Go
#                    code, linked against the toolkit's stub libcuda (no GPU or driver needed); then build the
#                    device bundle and dry-run run-device.sh with it.
#   build.sh bundle [DIR]
#                    the device bundle (default build/device, ignored by git), what run-device.sh needs on a GPU
#                    machine without Go: cuda.test (go test -tags cuda -c, PTX embedded), BUILD-INFO,
#                    SOURCES.sha256 (to detect a stale bundle), cuda-symbols.txt (the driver functions it imports)
#                    and, when this machine has one, compute-sanitizer with its libraries in sanitizer/.
#   build.sh dryrun  run-device.sh --dry-run against the bundle (rebuilt first when missing or stale):
#                    everything up to the first device call.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
archs="80 90"
NVCCFLAGS="-O3 -std=c++17 -Werror all-warnings"

gen_ptx() { # gen_ptx DIR: write DIR/NAME.sm_XX.ptx for every .cu
	for cu in "$here"/*.cu; do
		name=$(basename "$cu" .cu)
		for a in $archs; do
			nvcc $NVCCFLAGS -ptx -arch=compute_$a -o "$1/$name.sm_$a.ptx" "$cu"
		done
	done
}

# stub_dir prints the directory of the toolkit's stub libcuda.so.
stub_dir() {
	for d in /usr/lib/x86_64-linux-gnu/stubs /usr/lib/cuda/lib64/stubs /usr/local/cuda/lib64/stubs; do
		if [ -f "$d/libcuda.so" ]; then
			echo "$d"
			return
		fi
	done
	echo "no stub libcuda.so found (install the CUDA toolkit: kernels/cuda/install-toolkit.sh)" >&2
	return 1
}

# sources lists, relative to the module root, the files that go into the test binary.
sources() {
	(cd "$root" && find go.mod go.sum kernels -type f \( -name '*.go' -o -name '*.cu' -o -name '*.cuh' -o -name '*.ptx' \) | sort)
}

bundle() { # bundle DIR
	dir=$1
	stubs=$(stub_dir)
	mkdir -p "$dir"
	rm -rf "$dir/sanitizer"
	(cd "$root" && CGO_ENABLED=1 CGO_LDFLAGS="-L$stubs" LIBRARY_PATH="$stubs" \
		go test -tags cuda -c -o "$dir/cuda.test" ./kernels/cuda/)
	(cd "$root" && sources | xargs sha256sum) >"$dir/SOURCES.sha256"
	nm -D --undefined-only "$dir/cuda.test" | awk '{sub(/@.*/, "", $2)} $2 ~ /^cu/ {print $2}' | sort -u >"$dir/cuda-symbols.txt"
	san=$(command -v compute-sanitizer || true)
	if [ -n "$san" ]; then
		mkdir -p "$dir/sanitizer"
		cp "$san" "$dir/sanitizer/"
		for d in "$(dirname "$(readlink -f "$san")")" /usr/lib/nvidia-cuda-toolkit/compute-sanitizer; do
			cp "$d"/*.so "$dir/sanitizer/" 2>/dev/null || true
		done
	fi
	{
		echo "built: $(date -u +%FT%TZ) on $(uname -n)"
		echo "commit: $(cd "$root" && git rev-parse HEAD 2>/dev/null || echo unknown)$(cd "$root" && git diff --quiet HEAD -- 2>/dev/null || echo ' (with uncommitted changes)')"
		echo "go: $(go version)"
		echo "nvcc: $(nvcc --version 2>/dev/null | tail -1 || echo none)"
		echo "linked against: $stubs/libcuda.so (stub); needs libcuda.so.1 of a driver for CUDA 11.8 or newer"
		echo "glibc symbol versions needed, newest: $(objdump -T "$dir/cuda.test" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)"
		echo "driver functions imported: $(wc -l <"$dir/cuda-symbols.txt")"
		echo "sanitizer: $( [ -n "$san" ] && "$san" --version | tail -1 || echo none)"
	} >"$dir/BUILD-INFO"
	cat "$dir/BUILD-INFO"
	du -sh "$dir"
}

case "${1:-}" in
bundle)
	bundle "${2:-$root/build/device}"
	;;
dryrun)
	if [ ! -x "$root/build/device/cuda.test" ] ||
		! (cd "$root" && sha256sum --quiet -c build/device/SOURCES.sha256 >/dev/null 2>&1); then
		bundle "$root/build/device"
	fi
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	"$here/run-device.sh" --dry-run "$tmp/out"
	;;
ptx)
	mkdir -p "$here/ptx"
	rm -f "$here"/ptx/*.ptx
	gen_ptx "$here/ptx"
	;;
check)
	"$here/install-toolkit.sh"
	start=$(date +%s)
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	nvcc --version | tail -1
	for cu in "$here"/*.cu; do
		for a in $archs; do
			echo "nvcc sm_$a $(basename "$cu")"
			nvcc $NVCCFLAGS -cubin -arch=sm_$a -Xptxas -warn-spills,-warn-lmem-usage -o "$tmp/x.cubin" "$cu"
		done
	done
	mkdir "$tmp/ptx"
	gen_ptx "$tmp/ptx"
	if ! diff -r -q "$here/ptx" "$tmp/ptx"; then
		echo "kernels/cuda/ptx is stale: run make ptx and commit the result" >&2
		exit 1
	fi
	# The stub libcuda satisfies the linker; nothing here calls into it.
	stubs=$(stub_dir)
	(
		export CGO_ENABLED=1 CGO_LDFLAGS="-L$stubs" LIBRARY_PATH="$stubs"
		cd "$root"
		go vet -tags cuda ./...
		go build -tags cuda ./...
	)
	bundle "$root/build/device"
	"$here/run-device.sh" --dry-run "$tmp/dryrun"
	echo "cuda-check ok in $(($(date +%s) - start)) s (after the toolkit install)"
	;;
*)
	echo "usage: $0 ptx|check|bundle [DIR]|dryrun" >&2
	exit 2
	;;
esac
