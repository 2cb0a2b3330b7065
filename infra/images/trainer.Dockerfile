# The trainer image: the driver (Ray head) and the DeepSpeed learner.
#   docker build -f infra/images/trainer.Dockerfile -t $REGISTRY/librarian-trainer:$TAG .
# CUDA devel base: DeepSpeed JIT-builds its ops with nvcc on first use. Python 3.11 from deadsnakes.
ARG CUDA_IMAGE=nvidia/cuda:12.8.1-cudnn-devel-ubuntu22.04
FROM ${CUDA_IMAGE}

ARG TORCH_VERSION=2.13.0
ARG DEEPSPEED_VERSION=0.19.8
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
 && apt-get install -y --no-install-recommends python3.11 python3.11-venv python3.11-dev build-essential \
 && rm -rf /var/lib/apt/lists/* \
 && python3.11 -m venv /opt/venv \
 && pip install --upgrade pip

# torch first (PyPI's Linux wheels are the CUDA builds), then DeepSpeed against it without building ops.
RUN pip install "torch==${TORCH_VERSION}" \
 && DS_BUILD_OPS=0 pip install --no-build-isolation "deepspeed==${DEEPSPEED_VERSION}" \
 && pip install "ray[default]==${RAY_VERSION}"

WORKDIR /opt/librarian
COPY pyproject.toml README.md ./
COPY constraints ./constraints
COPY scripts ./scripts
COPY configs ./configs
COPY librarian ./librarian
# Editable, so a `ray job submit --working-dir .` checkout placed first on PYTHONPATH overrides it.
RUN pip install -e '.[gpu]' "torch==${TORCH_VERSION}" "ray[default]==${RAY_VERSION}" \
 && python -c "import librarian, ray, torch, deepspeed; print('librarian', librarian.__version__, 'ray', ray.__version__, 'torch', torch.__version__)"

CMD ["bash"]
