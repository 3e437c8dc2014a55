# kernelgrade web app and API (also runs `grader migrate` and `grader reconcile`).
# Build from the repository root:  docker build -f docker/api.Dockerfile -t kernelgrade-api .
ARG PYTHON_IMAGE=python:3.12-slim
FROM ${PYTHON_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:$PATH \
    KG_DATA_DIR=/var/lib/kernelgrade

# xmlsec1: the program pysaml2 signs and checks SAML messages with (grader/auth/saml.py); its
# version comes with the base image's Debian release, not pinned here.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends xmlsec1 \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 kernelgrade \
    && useradd --system --uid 10001 --gid kernelgrade --home-dir /var/lib/kernelgrade \
       --shell /usr/sbin/nologin kernelgrade \
    && mkdir -p /var/lib/kernelgrade/blobs \
    && chown -R kernelgrade:kernelgrade /var/lib/kernelgrade \
    && chmod -R go-rwx /var/lib/kernelgrade

WORKDIR /opt/kernelgrade
# Dependencies first (cached while only the code changes): the runtime ones alone, no extras.
COPY pyproject.toml README.md ./
COPY docker/requirements.py docker/requirements.py
RUN python3 -m venv /opt/venv \
    && python3 docker/requirements.py > /tmp/requirements.txt \
    && pip install --no-cache-dir -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt
COPY alembic.ini ./
COPY alembic alembic
COPY rubrics rubrics
COPY starter starter
COPY grader grader
COPY worker worker
# Editable: the code finds alembic/, rubrics/ and starter/ beside itself.
RUN pip install --no-cache-dir --no-deps -e .

USER 10001:10001
EXPOSE 8000
# Healthy when the app answers and reaches its database (a broker outage still accepts uploads).
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python3", "-c", "import json, sys, urllib.request; r = json.load(urllib.request.urlopen('http://127.0.0.1:8000/api/v1/health', timeout=4)); sys.exit(0 if r['database'] else 1)"]
CMD ["grader", "serve", "--host", "0.0.0.0", "--port", "8000"]
