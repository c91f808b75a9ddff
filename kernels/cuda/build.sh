#!/bin/sh
# build.sh is what `make ptx` and `make cuda-check` run.
#
#   build.sh ptx     regenerate the committed PTX: every .cu for compute_80 and compute_90 into ptx/NAME.sm_XX.ptx
#   build.sh check   install the toolkit if nvcc is missing; compile every .cu to cubin for sm_80 and sm_90 with
#                    warnings as errors and ptxas spill and local-memory warnings on; fail if the committed PTX
#                    differs from a fresh build (stale); vet, build and compile the tests of the cuda-tagged Go
#                    code, linked against the toolkit's stub libcuda (no GPU or driver needed).
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

case "${1:-}" in
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
	stubs=
	for d in /usr/lib/x86_64-linux-gnu/stubs /usr/lib/cuda/lib64/stubs /usr/local/cuda/lib64/stubs; do
		if [ -f "$d/libcuda.so" ]; then
			stubs=$d
			break
		fi
	done
	if [ -z "$stubs" ]; then
		echo "no stub libcuda.so found" >&2
		exit 1
	fi
	export CGO_ENABLED=1 CGO_LDFLAGS="-L$stubs" LIBRARY_PATH="$stubs"
	cd "$root"
	go vet -tags cuda ./...
	go build -tags cuda ./...
	go test -tags cuda -c -o /dev/null ./kernels/cuda/
	echo "cuda-check ok in $(($(date +%s) - start)) s (after the toolkit install)"
	;;
*)
	echo "usage: $0 ptx|check" >&2
	exit 2
	;;
esac
