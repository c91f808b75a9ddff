# morphlab: build, test, benchmark and reproduce. Run from the module root; `make test` is what CI runs.

GO ?= go
# go-nvml's header marks many functions deprecated; without this, every cgo build of profiling/nvml prints pages
# of gcc warnings about functions we do not call.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations
MORPHLAB := ./morphlab

# The packages with a pure-Go path under -tags noasm: `make test` runs their tests both ways.
NOASM_DIRS := kernels quant
NOASM_PKGS = $(shell $(GO) list -e $(foreach d,$(NOASM_DIRS),$(if $(wildcard $(d)),./$(d)/...)))

# `make bench`: every kernel benchmark, six runs each (override: make bench BENCH=GEMV BENCH_COUNT=10).
BENCH_PKGS ?= ./kernels/...
BENCH ?= .
BENCH_COUNT ?= 6

# `make reproduce`: a curated subset of the kernel benchmarks, three runs each, a few minutes in all.
REPRO_BENCH ?= GEMV|GEMMf32|RMSNorm|Softmax|SwiGLU|CausalAttention|PagedAttention
REPRO_BENCHTIME ?= 500ms

FUZZTIME ?= 20s

.PHONY: build test fmt-check bench reproduce fuzz clean

build:
	$(GO) build ./...
	$(GO) build -o $(MORPHLAB) ./tools/morphlab

# test: the whole suite at full size (golden model outputs and perplexities included), then again under the race
# detector with -short (which trims the largest shapes and the long golden runs), then the pure-Go kernels.
test: fmt-check
	$(GO) vet ./...
	$(GO) test ./...
	$(GO) test -race -short ./...
	$(GO) test -tags noasm -short $(NOASM_PKGS)
	$(MAKE) cuda-check

# fmt-check fails listing the Go files that gofmt would change.
fmt-check:
	@files=$$(gofmt -l .); if [ -n "$$files" ]; then echo "gofmt needed on:"; echo "$$files"; exit 1; fi

bench:
	$(GO) run ./tools/morphlab bench --pkg '$(BENCH_PKGS)' --bench '$(BENCH)' --count $(BENCH_COUNT)

# reproduce measures the machine, then the kernel benchmarks against it; everything lands under results/.
reproduce: build
	mkdir -p results/bench
	$(MORPHLAB) probe --out results/probe.json > results/probe.txt
	cat results/probe.txt
	$(MORPHLAB) bench --pkg './kernels/...' --bench '$(REPRO_BENCH)' --count 3 --benchtime $(REPRO_BENCHTIME) \
		--probe results/probe.json --out results/bench/kernels.txt > results/bench/kernels-table.txt
	cat results/bench/kernels-table.txt

# fuzz runs every fuzz target (go test -list '^Fuzz') for FUZZTIME each.
fuzz:
	@set -e; for dir in $$(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -r -n1 dirname | sort -u); do \
		for target in $$($(GO) test -list '^Fuzz' $$dir | grep '^Fuzz'); do \
			echo "fuzz $$dir $$target ($(FUZZTIME))"; \
			$(GO) test -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZTIME) $$dir; \
		done; \
	done

clean:
	rm -f $(MORPHLAB)

# CUDA kernels (kernels/cuda): `make ptx` regenerates the committed PTX (sm_80, sm_90); `make cuda-check`, run by
# `make test`, installs Debian's CUDA toolkit when nvcc is missing, compiles every .cu for sm_80 and sm_90 with
# warnings, spills and local memory as errors, fails on stale PTX, and vets and builds the cuda-tagged Go code
# against the toolkit's stub libcuda. No GPU needed; kernels/cuda/run-device.sh is the GPU run.
.PHONY: ptx cuda-check
ptx:
	kernels/cuda/build.sh ptx

cuda-check:
	kernels/cuda/build.sh check
