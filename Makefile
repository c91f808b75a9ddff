# morphlab: build, test, benchmark and reproduce. Run from the module root; `make test` is what CI runs.

GO ?= go
# go-nvml's header marks many functions deprecated; without this, every CUDA build (-tags cuda, which compiles
# profiling/nvml's NVML reader) prints pages of gcc warnings about functions we do not call.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations
MORPHLAB := ./morphlab

# The packages with a pure-Go path under -tags noasm: `make test` runs their tests both ways.
NOASM_DIRS := kernels quant
NOASM_PKGS = $(shell $(GO) list -e $(foreach d,$(NOASM_DIRS),$(if $(wildcard $(d)),./$(d)/...)))

# `make bench`: the machine's ceilings, then a curated subset of the kernel benchmarks against them, six runs each
# (the fewest that give the median a 95% confidence interval), a few minutes in all. Every kernel benchmark:
# make bench BENCH=. (BENCH_PKGS, BENCH_COUNT and BENCH_TIME override the rest).
BENCH_PKGS ?= ./kernels/...
BENCH ?= GEMV|GEMMf32|RMSNorm|Softmax|SwiGLU|CausalAttention|PagedAttention
BENCH_COUNT ?= 6
BENCH_TIME ?= 250ms

FUZZTIME ?= 20s

.PHONY: build test fmt-check bench reproduce quality fuzz clean data

build:
	$(GO) build ./...
	$(GO) build -o $(MORPHLAB) ./tools/morphlab

# test: the whole suite at full size (golden model outputs and perplexities included), then again under the race
# detector with -short (which trims the largest shapes and the long golden runs), then the pure-Go kernels.
test: fmt-check
	$(GO) vet ./...
	$(GO) test -timeout 30m ./...
	$(GO) test -race -short -timeout 30m ./...
	$(GO) test -tags noasm -short $(NOASM_PKGS)
	$(MAKE) cuda-check

# fmt-check fails listing the Go files that gofmt would change.
fmt-check:
	@files=$$(gofmt -l .); if [ -n "$$files" ]; then echo "gofmt needed on:"; echo "$$files"; exit 1; fi

# bench measures the machine, then the kernel benchmarks against it; everything lands under results/bench.
bench: build
	mkdir -p results/bench
	$(MORPHLAB) probe --out results/probe.json > results/probe.txt
	cat results/probe.txt
	$(MORPHLAB) bench --pkg '$(BENCH_PKGS)' --bench '$(BENCH)' --count $(BENCH_COUNT) --benchtime $(BENCH_TIME) \
		--probe results/probe.json --out results/bench/kernels.txt > results/bench/kernels-table.txt
	cat results/bench/kernels-table.txt

# reproduce runs the experiment suite (morphlab reproduce): the paper's comparison simulated at paper scale, the
# rate sweep, Table 5, stories260K's layer sensitivity and the real CPU engine beside the simulator, into
# results/paper (summary.md, tables, plots). Stand-ins replace missing data files (make data fetches them).
reproduce: build
	$(MORPHLAB) reproduce --out results/paper

# quality scores stories260K's perplexity with its layers in each format and its KV cache in each type (needs the
# model and the TinyStories text in the data directory).
quality: build
	@data=$${MORPHLAB_DATA:-$$(for d in data ../shared/data; do [ -f $$d/models/stories260K.bin ] && [ -f $$d/eval/tinystories_val.txt ] && echo $$d && break; done)}; \
	if [ ! -f "$$data/models/stories260K.bin" ] || [ ! -f "$$data/eval/tinystories_val.txt" ]; then \
		echo "quality: no data directory with models/stories260K.bin and eval/tinystories_val.txt"; exit 1; fi; \
	set -e; mkdir -p results/model; \
	for f in f32 f16 int8 int4; do \
		echo "== perplexity, layers in $$f"; \
		$(MORPHLAB) perplexity --model $$data/models/stories260K.bin --tokenizer $$data/models/tok512.bin \
			--text $$data/eval/tinystories_val.txt --dtype $$f | tee results/model/perplexity-$$f.txt; \
	done; \
	for kv in f16 int8; do \
		echo "== perplexity, layers in f32, KV cache in $$kv"; \
		$(MORPHLAB) perplexity --model $$data/models/stories260K.bin --tokenizer $$data/models/tok512.bin \
			--text $$data/eval/tinystories_val.txt --kv-cache-dtype $$kv | tee results/model/perplexity-kv-$$kv.txt; \
	done

# data downloads the public data files into ./data (about 14 MB: models, tokenizers, traces, GPU profiles, eval
# texts), each checked against its pinned sha256; run it again to resume. `morphlab data list` shows the manifest.
data:
	$(GO) run ./tools/morphlab data fetch --dir data

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
# warnings, spills and local memory as errors, fails on stale PTX, vets and builds the cuda-tagged Go code
# against the toolkit's stub libcuda, builds the device bundle and dry-runs kernels/cuda/run-device.sh with it
# (up to the first device call). No GPU needed. `make device-bundle` builds build/device/ alone: carry it to a
# GPU machine and run kernels/cuda/run-device.sh there (no Go needed); `make device-dryrun` is the dry run alone.
.PHONY: ptx cuda-check device-bundle device-dryrun
ptx:
	kernels/cuda/build.sh ptx

cuda-check:
	kernels/cuda/build.sh check

device-bundle:
	kernels/cuda/build.sh bundle

device-dryrun:
	kernels/cuda/build.sh dryrun
