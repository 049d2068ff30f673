# syntax=docker/dockerfile:1
# custom-scheduler image: docker build -t custom-scheduler:0.1.0 .
#
# Stage 1 builds wheels for the package and every dependency (pip wheel resolves the same
# versions pip install would). Stage 2 installs only those wheels, offline, into a clean
# python:3.11-slim: no compiler, no pip cache, no source tree, no wheel files left in a layer.

FROM python:3.11-slim AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
# .dockerignore lets in only pyproject.toml, README.md and custom_scheduler/.
COPY . .
RUN python -m pip wheel --wheel-dir /wheels .

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    LOG_FORMAT=json
# The wheels are bind-mounted from the builder for this one step, so none of them stays in the
# image; --no-index keeps the install offline and limited to what the builder resolved.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    python -m pip install --no-index --find-links=/wheels custom-scheduler \
 && groupadd --system --gid 65532 scheduler \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin scheduler
# Numeric user so runAsNonRoot can verify it without reading /etc/passwd.
USER 65532:65532
WORKDIR /
# /healthz, /livez, /readyz, /metrics (plain HTTP).
EXPOSE 10259
ENTRYPOINT ["custom-scheduler"]
CMD ["run", "--config=/etc/kubernetes/scheduler-config.yaml"]
