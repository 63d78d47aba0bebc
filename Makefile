# dra-jupyter: two commands do everything on a fresh machine.
#   make demo   run the main job on the embedded default, then the service of many users
#   make test   install everything and run the whole suite (lint, types, layers, every tier)
# and one is the everyday loop:
#   make check  lint (ruff, biome), mypy --strict, the layers and the pure tier: no apt
#               beyond Node.js for the install, no Go, no browser
#   make test-TIER   one tier of tests/conftest.py (pure, kernel, server, service, ...)
#   make fuzz   the fuzz suites at length (CLI object files and inventories, ledger rows, REST)
#   make lab    JupyterLab with the extensions on the example notebooks
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
NODE   := $(or $(shell command -v node),/usr/bin/node)
TSC_STAMP := labextension/node_modules/.installed

# the test tiers of tests/conftest.py (TIER_NAMES): make test-pure, make test-kernel, ...
TIERS := pure kernel server service browser k8s gpu

LAB_BUILD := dra_jupyter/labextension/static/style.js
LAB_SOURCES := labextension/package.json labextension/yarn.lock \
	$(shell find labextension/src -name '*.ts') \
	$(wildcard labextension/schema/*.json labextension/style/*)

.PHONY: install check test unit lint typecheck layers pytest k8s-build fuzz fuzz-upstream demo lab \
	labextension bench bench-latency bench-upstream bench-placement bench-load bench-service \
	bench-hub bench-usage bench-gpu-sampling bench-kernels bench-handoff bench-health bench-k8s-load clean hub-proxy $(addprefix test-,$(TIERS))

install: $(STAMP)

# The editable install builds the JupyterLab extension too (hatch-jupyter-builder runs jlpm
# in labextension/, so it needs Node.js) and installs a copy in the venv; `develop` makes
# that a link to dra_jupyter/labextension (jupyter-builder develop, what `jupyter labextension
# develop` runs), so that a rebuild (below) is what JupyterLab loads.
$(STAMP): pyproject.toml | $(NODE)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/jupyter-builder develop --overwrite . >/dev/null
	touch $(STAMP)

# The JupyterLab extension, rebuilt when its sources change (jlpm build:prod: tsc, then
# jupyter labextension build into dra_jupyter/labextension)
labextension: $(LAB_BUILD)

$(LAB_BUILD): $(LAB_SOURCES) | $(TSC_STAMP)
	cd labextension && PATH="$(abspath $(BIN)):$$PATH" $(abspath $(BIN))/jlpm build:prod
	touch $(LAB_BUILD)

# TypeScript for the check of the widgets' JavaScript against the REST spec
# (tests/widgets/test_wire_types.py): pinned by labextension/yarn.lock, installed with jlpm
# (the yarn that comes with JupyterLab) into labextension/node_modules once, then kept.
# Node.js runs both: Debian's nodejs where none is on the PATH.
$(NODE):
	@command -v apt-get >/dev/null || { echo "the JavaScript check needs Node.js (node on the PATH)"; exit 1; }
	@[ "$$(id -u)" = 0 ] || { echo "the JavaScript check needs Node.js: run 'sudo apt-get install nodejs', or make test as root"; exit 1; }
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs >/dev/null

$(TSC_STAMP): labextension/package.json labextension/yarn.lock | $(STAMP) $(NODE)
	cd labextension && $(abspath $(BIN))/jlpm install --immutable
	touch $(TSC_STAMP)

# Debian's chromium for the browser tests (Playwright drives it; it never downloads one)
CHROMIUM := /usr/bin/chromium

$(CHROMIUM):
	@command -v apt-get >/dev/null || { echo "the browser tests need Debian's chromium package at $(CHROMIUM)"; exit 1; }
	@[ "$$(id -u)" = 0 ] || { echo "the browser tests need Debian's chromium: run 'sudo apt-get install chromium', or make test as root"; exit 1; }
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null

# configurable-http-proxy for the real JupyterHub of tests/hub, pinned by
# hub/proxy/package-lock.json (npm ci), into hub/proxy/node_modules once, then kept
HUB_PROXY := hub/proxy/node_modules/.bin/configurable-http-proxy

hub-proxy: $(HUB_PROXY)

# (Debian's own nodejs comes without npm: its npm package then, as root)
$(HUB_PROXY): hub/proxy/package.json hub/proxy/package-lock.json | $(NODE)
	@command -v npm >/dev/null || [ "$$(id -u)" != 0 ] || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null; }
	@command -v npm >/dev/null || { echo "the JupyterHub tests need npm: run 'sudo apt-get install npm', or make test as root"; exit 1; }
	cd hub/proxy && npm ci --no-audit --no-fund --loglevel=error
	touch $(HUB_PROXY)

# Kubernetes for tests/k8s and tests/hub (as root also a real node: kubelet, containerd,
# the simulated GPU driver, Debian's runc and CNI plugins), and the real allocator for
# tests/upstream: built from the Go module proxy once, then cached outside the repository
k8s-build: install
	$(BIN)/python scripts/k8s-testenv build
	$(BIN)/python scripts/upstream-allocator build

# The whole suite, every tier, with everything each tier needs
pytest: install $(CHROMIUM) $(TSC_STAMP) $(LAB_BUILD) $(HUB_PROXY) k8s-build
	$(BIN)/python -m pytest -q

# The pure tier (tiers: tests/conftest.py), on every core (pytest-xdist); a worker that is
# done takes tests queued for the other: the few long property tests do not end on one.
# Its TypeScript unit tests (tests/lab/test_unit.py) need labextension/node_modules.
unit: install $(TSC_STAMP)
	$(BIN)/python -m pytest -q -m pure -n auto --dist worksteal

typecheck: install
	$(BIN)/mypy

# the layers: [tool.importlinter] in pyproject.toml
layers: install
	$(BIN)/lint-imports --no-cache

# Python with ruff; the JupyterLab extension's TypeScript with biome (labextension/biome.json,
# pinned by labextension/yarn.lock; src/wire.ts is generated, so not formatted by it)
lint: install $(TSC_STAMP)
	$(BIN)/ruff check dra_jupyter tests benchmarks scripts
	$(BIN)/ruff format --check dra_jupyter tests benchmarks scripts
	cd labextension && $(abspath $(BIN))/jlpm biome ci --colors=off src test

# The everyday loop: what a change must pass before it is committed (no apt beyond the
# install's Node.js, no Go, no browser)
check: lint typecheck layers unit

# Everything, as CI runs it: the checks of `make check`, then the builds and every tier
test: lint typecheck layers pytest

# One tier, with what it needs (make test-pure, make test-kernel, ...)
test-pure: install $(TSC_STAMP)
test-kernel: install $(TSC_STAMP) $(LAB_BUILD)
test-server: install
test-service: install $(HUB_PROXY)
test-browser: install $(CHROMIUM) $(TSC_STAMP) $(LAB_BUILD)
test-k8s: install $(HUB_PROXY) k8s-build
test-gpu: install
$(addprefix test-,$(TIERS)):
	$(BIN)/python -m pytest -q -m $(@:test-%=%)

# The fuzz suites at length: the property tests of tests/test_cli_fuzz.py (mutated object
# files, garbled bytes, mutated inventories), tests/local/test_ledger_damage.py (any
# value in any column of a claim's row) and tests/server/test_rest_fuzz.py (mutated REST
# bodies, raw bytes and path segments against a real jupyter server) with 50x the examples
# `make test` runs, drawn at random (DRA_JUPYTER_FUZZ_FACTOR=N for N x). A failure is kept
# in .hypothesis/ and tried first the next time. About 5 minutes on 2 shared cores for the
# first two (17,500 examples), about 15 more for the REST suite (12,000).
fuzz: install
	HYPOTHESIS_PROFILE=fuzz $(BIN)/python -m pytest -q tests/test_cli_fuzz.py \
		tests/local/test_ledger_damage.py tests/server/test_rest_fuzz.py \
		--hypothesis-show-statistics

# Ours against the real Kubernetes 1.37.2 allocator (tools/upstream-allocator, built and
# cached like the test control plane) on N seeded random worlds from seeds `make test` does
# not use (FIRST_SEED on); agreement per feature, and each mismatch shrunk into a small
# reproducer (JSON, under $TMPDIR/dra-jupyter-fuzz-upstream). About 1 s per 200 worlds.
N ?= 10000
FIRST_SEED ?= 1000000
fuzz-upstream: install
	$(BIN)/python scripts/upstream-allocator build
	$(BIN)/python -m tests.upstream.differential --worlds $(N) --first-seed $(FIRST_SEED)

# The main job on the embedded default; the shared-machine service, started in a temporary
# folder, serving several users (as root: two temporary Unix users; else two processes of
# yours); then (from a terminal) the example notebooks in JupyterLab with the server
# extension, idle release after 2 minutes so it can be watched.
LAB_ARGS := --ServerApp.root_dir=examples --DRAExtensionApp.idle_timeout=120 \
	--DRAExtensionApp.idle_warning=60 $(if $(filter 0,$(shell id -u)),--allow-root,)

demo: install
	$(BIN)/dra-jupyter demo
	$(BIN)/dra-jupyter demo --service
	@if [ -t 0 ] && [ -t 1 ]; then $(MAKE) --no-print-directory lab; \
	else echo "Not a terminal, so JupyterLab was not opened: run 'make lab' for the notebooks."; fi

# .venv/bin first on PATH for the kernels; JupyterLab's terminals (login shells, which
# lose it) get it from the server extension (c.DRAExtensionApp.terminal_path)
lab: install $(LAB_BUILD)
	PATH="$(abspath $(BIN)):$$PATH" $(BIN)/jupyter lab $(LAB_ARGS)

# Benchmarks are kept out of `make test`; results and the command for each figure: BENCHMARKS.md
bench: bench-latency bench-upstream bench-placement bench-load bench-service bench-handoff \
	bench-hub bench-usage bench-gpu-sampling bench-kernels bench-health bench-k8s-load

bench-latency: install
	$(BIN)/python benchmarks/bench_allocator.py --repeat 20 --oracle

# Cold and warm calls side by side with the real allocator (tools/upstream-allocator), one run,
# then the model conversion of 8,000 GPUs and 20,800 MIG devices (benchmarks/bench_model.py)
bench-upstream: install
	$(BIN)/python scripts/upstream-allocator build
	$(BIN)/python benchmarks/bench_upstream.py --repeat 20

bench-placement: install
	$(BIN)/python benchmarks/bench_placement.py --json benchmarks/placement.json --plot benchmarks/placement.png

# The REST API under load: 16 clients creating and deleting claims against one real server
# and two sharing a ledger, beside a GET /api/status baseline; at most 5,000 requests or 20 s
# a run, two rounds; loopback only. About 3-4 minutes.
bench-load: install
	$(BIN)/python -m benchmarks.bench_load --rounds 2

# The shared-machine service against the embedded backend, side by side (a real daemon)
bench-service: install
	$(BIN)/python -m benchmarks.bench_service

# A release to the waiter's claim allocated, the waiter in another process: the embedded
# ledger with its wake-up and without (polling), and a real service daemon; 200 hand-offs
# each, about 3-4 minutes
bench-handoff: install
	$(BIN)/python -m benchmarks.bench_handoff

# The health watcher: an XID on the fake NVML to the GPU's taint in the ledger, 50 runs
# (p50/p99; the tests check the behaviour with a generous limit), about 10 s
bench-health: install
	$(BIN)/python -m benchmarks.bench_health

# The spawn form's choices (dra_jupyter.hub.choices) on 1,000 nodes of 8 GPUs and on the MIG
# cluster of bench-latency, beside one cold allocation in the same world; about a minute
bench-hub: install
	$(BIN)/python benchmarks/bench_hub.py

# `dra-jupyter usage --since 30d` over 100 users x 30 days of claim intervals, beside
# `dra-jupyter claims --all` on the same ledger, as a command and in process; about a minute
bench-usage: install
	$(BIN)/python -m benchmarks.bench_usage

# The service's GPU sampler on 8 GPUs x 50 processes (the fake NVML), beside the metrics read
bench-gpu-sampling: install
	$(BIN)/python -m benchmarks.bench_gpu_sampling

# GPU kernels on the test control plane (the kernel provisioner, a real jupyter_server, the
# stand-in kubelet): start to first executed cell with devices, idle deadline to claim deleted,
# each phase; 10 kernels after a warm-up, beside the pod's process started without
# Kubernetes. Builds the control plane once (as k8s-build); about 1.5 minutes when quiet.
bench-kernels: install
	$(BIN)/python scripts/k8s-testenv build
	$(BIN)/python -m benchmarks.bench_gpu_kernels

# What Jupyter servers on Kubernetes cost the API server (issue 38): 5 real servers read as an
# open JupyterLab reads them, on 1,000 simulated nodes, with watch off (the baseline) and on,
# counted from the API server's /metrics; their memory beside 10 nodes. Builds the control
# plane once (as k8s-build); about 15 minutes.
bench-k8s-load: install
	$(BIN)/python scripts/k8s-testenv build
	$(BIN)/python -m benchmarks.bench_k8s_load

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis labextension/node_modules \
		labextension/lib labextension/build-test labextension/*.tsbuildinfo dra_jupyter/labextension \
		hub/proxy/node_modules
