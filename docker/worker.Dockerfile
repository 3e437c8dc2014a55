# kernelgrade workers and the per-job sandbox, on NVIDIA's CUDA images. Two targets:
#   worker   nvcc, pycuda, torch, numba, the docker CLI; runs `grader worker` (GPU runs, or
#            builds on the CPU queue)
#   sandbox  the image every sandboxed child runs in (KG_SANDBOX_BACKEND=docker): CUDA runtime,
#            the same interpreter, packages and code at the same paths, no compiler, no secrets
# Build from the repository root, choosing the course's CUDA version:
#   docker build -f docker/worker.Dockerfile --target worker  --build-arg CUDA_VERSION=13.0.0 -t kernelgrade-worker .
#   docker build -f docker/worker.Dockerfile --target sandbox --build-arg CUDA_VERSION=13.0.0 -t kernelgrade-sandbox .
ARG CUDA_VERSION=13.0.0
ARG UBUNTU=ubuntu24.04
ARG DEVEL_IMAGE=nvidia/cuda:${CUDA_VERSION}-devel-${UBUNTU}
ARG RUNTIME_IMAGE=nvidia/cuda:${CUDA_VERSION}-runtime-${UBUNTU}

FROM ${DEVEL_IMAGE} AS worker
# Students' MiniTorch needs these; pin them to the course's versions with --build-arg.
ARG TORCH_SPEC=torch
ARG PYCUDA_SPEC=pycuda
ARG NUMBA_SPEC=numba
ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:/usr/local/cuda/bin:$PATH \
    KG_DATA_DIR=/var/lib/kernelgrade
# docker.io brings the docker CLI the worker starts sandbox containers with (its daemon is unused).
# Versions come with the base image's Ubuntu release (CUDA_VERSION, UBUNTU), not pinned here.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv python3-dev g++ ca-certificates docker.io \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 kernelgrade \
    && useradd --system --uid 10001 --gid kernelgrade --home-dir /var/lib/kernelgrade \
       --shell /usr/sbin/nologin kernelgrade \
    && mkdir -p /var/lib/kernelgrade/blobs /var/lib/kernelgrade/jobs /var/lib/kernelgrade/build-cache \
    && chown -R kernelgrade:kernelgrade /var/lib/kernelgrade \
    && chmod -R go-rwx /var/lib/kernelgrade

WORKDIR /opt/kernelgrade
COPY pyproject.toml README.md ./
COPY docker/requirements.py docker/requirements.py
# TORCH_SPEC, NUMBA_SPEC and PYCUDA_SPEC are the pins (build args, the course's versions).
# hadolint ignore=DL3013
RUN python3 -m venv /opt/venv \
    && python3 docker/requirements.py > /tmp/requirements.txt \
    && pip install --no-cache-dir -r /tmp/requirements.txt "${TORCH_SPEC}" "${NUMBA_SPEC}" \
    && pip install --no-cache-dir "${PYCUDA_SPEC}" \
    && rm /tmp/requirements.txt
COPY alembic.ini ./
COPY alembic alembic
COPY rubrics rubrics
COPY starter starter
COPY grader grader
COPY worker worker
RUN pip install --no-cache-dir --no-deps -e .

USER 10001:10001
# Healthy while this worker answers a ping through the broker (it is up and consuming).
HEALTHCHECK --interval=60s --timeout=20s --start-period=60s --retries=3 \
    CMD ["sh", "-c", "celery -A grader.celery_app inspect ping --timeout 10 --destination celery@$HOSTNAME"]
CMD ["grader", "worker"]

FROM ${RUNTIME_IMAGE} AS sandbox
ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/venv/bin:$PATH
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 kernelgrade \
    && useradd --system --uid 10001 --gid kernelgrade --no-create-home --shell /usr/sbin/nologin kernelgrade
COPY --from=worker /opt/venv /opt/venv
COPY --from=worker /opt/kernelgrade /opt/kernelgrade
WORKDIR /tmp
USER 10001:10001
