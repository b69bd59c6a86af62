# Thin wrapper: the two commands of the README, plus bench.
#   make demo  — install what is missing, build the tool (Release, no tests), prepare the default
#                corpus, run the quick comparison grid (configs/grids/quick.toml: RoPE, XSA, GOAT,
#                DAR-block, XSA+GOAT+DAR × 2 seeds; about 7 minutes on 2 quiet cores), print its table and the
#                path of its HTML report. Run again, it resumes (finished runs are skipped).
#   make train-demo — the plain single-model path: train the small model (170 s budget), print the
#                validation loss and a sample.
#   make example — install the library into a temporary prefix, build examples/ against it
#                (find_package(attnlab)) and run it (scripts/example_check.sh; about 10 s after a build).
#   make test  — install the test dependencies too, build everything and run the whole CTest suite
#                (long checks are opt-in: make test-long). PRESET=portable builds one binary for any
#                x86-64-v2 CPU (the attention kernels pick AVX-512 / AVX2 at run time).
SHELL := /bin/bash
PRESET ?= release
BUILD := build/$(PRESET)
JOBS ?= 2
DATA ?= data/heldout
RUN ?= runs/demo
GRID ?= configs/grids/quick.toml
GRID_OUT ?= runs/quick

.PHONY: demo train-demo test test-long example build build-tool deps deps-test bench bench-pytorch corpus clean

deps:
	@bash scripts/install_deps.sh demo

deps-test:
	@bash scripts/install_deps.sh test

# the tool alone (what the demo runs)
build-tool: deps
	@cmake --preset $(PRESET) -DATTNLAB_TESTS=OFF >/dev/null
	@cmake --build $(BUILD) -j $(JOBS) --target attnlab

# everything: the tool, the benchmarks and the tests
build: deps-test
	@cmake --preset $(PRESET) -DATTNLAB_TESTS=ON >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

corpus: build-tool
	@bash scripts/fetch_corpus.sh data/corpus
	@if [ ! -f $(DATA)/prepare.json ]; then \
	  $(BUILD)/attnlab prepare --input data/corpus/tdavid.txt --input data/corpus/web.txt --input data/corpus/kjv.txt \
	    --split groups --groups data/corpus/tdavid.groups --groups data/corpus/web.groups --groups data/corpus/kjv.groups \
	    --out $(DATA) --vocab 8192; fi

demo: corpus
	$(BUILD)/attnlab compare $(GRID) --out $(GRID_OUT) --resume
	@echo "report: $(GRID_OUT)/report.html (open it in a browser; results.md and results.json beside it)"

train-demo: corpus
	$(BUILD)/attnlab train --preset small --set data.dir=$(DATA) --set train.out_dir=$(RUN) --force
	$(BUILD)/attnlab eval --checkpoint $(RUN)/model.safetensors --data $(DATA)/val.bin
	$(BUILD)/attnlab sample --checkpoint $(RUN)/model.safetensors --prompt "Blessed is the man that" -n 60 --temperature 0.8 --top-k 40 --seed 1

test: build
	@ctest --preset $(PRESET)

example: build
	bash scripts/example_check.sh $(BUILD)

test-long: build
	@ctest --test-dir $(BUILD) -L long --output-on-failure

bench: build-tool
	$(BUILD)/attnlab bench --preset bench --steps 20

bench-pytorch: build-tool
	python3 bench/compare_pytorch.py --attnlab $(BUILD)/attnlab

clean:
	rm -rf build
