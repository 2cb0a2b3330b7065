# The rollout image: the trainer image plus the separate vLLM environment at /opt/vllm-env
# (stock vLLM with its own CUDA torch; docs/vllm.md). Rollout actors run in /opt/venv like every
# actor and drive their engine with /opt/vllm-env/bin/python (configs/cluster.yaml, mode: subprocess).
#   docker build -f infra/images/rollout.Dockerfile --build-arg TRAINER_IMAGE=$REGISTRY/librarian-trainer:$TAG \
#     -t $REGISTRY/librarian-rollout:$TAG .
ARG TRAINER_IMAGE=librarian-trainer:latest
FROM ${TRAINER_IMAGE}

ARG VLLM_GPU_VERSION=0.33.0
ENV VLLM_GPU_VERSION=${VLLM_GPU_VERSION} \
    LIBRARIAN_VLLM_PYTHON=/opt/vllm-env/bin/python

WORKDIR /opt/librarian
COPY scripts/vllm_env.sh ./scripts/vllm_env.sh
RUN PYTHON=python3.11 bash scripts/vllm_env.sh --gpu /opt/vllm-env

CMD ["bash"]
