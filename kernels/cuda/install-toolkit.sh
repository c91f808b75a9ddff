#!/bin/sh
# install-toolkit.sh installs Debian bookworm's CUDA toolkit (nvcc, ptxas, headers and the
# stub libcuda) when nvcc is not on PATH. It is idempotent and non-interactive, so CI on a
# fresh machine (root, no stdin) can run it before every `make cuda-check`.
set -eu

if command -v nvcc >/dev/null 2>&1; then
	exit 0
fi

SUDO=
if [ "$(id -u)" != 0 ]; then
	SUDO=sudo
fi

# nvidia-cuda-toolkit lives in bookworm's non-free component (with contrib for its helpers).
src=/etc/apt/sources.list.d/debian.sources
if [ -f "$src" ]; then
	if ! grep -q '^Components:.*non-free' "$src"; then
		$SUDO sed -i 's/^Components: main$/Components: main contrib non-free/' "$src"
	fi
else
	list=/etc/apt/sources.list.d/morphlab-cuda.list
	if ! grep -rqs 'bookworm .*non-free' /etc/apt/sources.list /etc/apt/sources.list.d/; then
		echo 'deb http://deb.debian.org/debian bookworm main contrib non-free' | $SUDO tee "$list" >/dev/null
	fi
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends nvidia-cuda-toolkit nvidia-cuda-dev
command -v nvcc
