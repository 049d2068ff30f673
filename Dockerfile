# syntax=docker/dockerfile:1
# custom-scheduler image: docker build -t custom-scheduler:0.1.0 .
#
# Supply chain: every dependency is installed from requirements.lock (pip-compile --generate-hashes
# from pyproject.toml: exact versions, sha256 of every file), pip refuses anything whose hash is not
# listed, and only pre-built wheels are taken (no setup.py of a dependency ever runs). Our own wheel
# is built with the build backend pinned the same way (requirements-build.lock).
# Regenerate both after changing dependencies in pyproject.toml (pip-tools is a dev dependency):
#   pip-compile --generate-hashes --strip-extras --allow-unsafe --no-emit-index-url --no-emit-find-links \
#     --output-file=requirements.lock pyproject.toml
#   pip-compile --generate-hashes --strip-extras --allow-unsafe --no-emit-index-url --no-emit-find-links \
#     --all-build-deps --only-build-deps --output-file=requirements-build.lock pyproject.toml
#
# Stage 1 downloads the locked wheels (hash-checked) and builds ours. Stage 2 installs only those
# files, offline, into a clean python:3.11-slim: no compiler, no pip cache, no source tree, no
# wheel left in a layer. The Deployment runs it with a read-only root filesystem; the only
# writable path it needs is /tmp (an emptyDir), for the self-signed serving certificate.

FROM python:3.11-slim AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
# .dockerignore lets in only pyproject.toml, README.md, custom_scheduler/ and the two lock files.
COPY . .
RUN python -m pip download --require-hashes --no-deps --only-binary=:all: \
        --dest /wheels -r requirements.lock \
 && python -m pip install --require-hashes --no-deps --only-binary=:all: -r requirements-build.lock \
 && python -m pip wheel --no-deps --no-build-isolation --wheel-dir /wheels . \
 && cp requirements.lock /wheels/

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    LOG_FORMAT=json
# The wheels are bind-mounted from the builder for this one step, so none of them stays in the
# image; --no-index keeps the install offline, --require-hashes checks each file against the lock
# again, and --no-deps installs our wheel without letting it resolve anything the lock lacks.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    python -m pip install --no-index --find-links=/wheels --require-hashes --no-deps -r /wheels/requirements.lock \
 && python -m pip install --no-index --no-deps /wheels/custom_scheduler-*.whl \
 && python -m pip check \
 && groupadd --system --gid 65532 scheduler \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin scheduler
# Numeric user so runAsNonRoot can verify it without reading /etc/passwd.
USER 65532:65532
WORKDIR /
# HTTPS: /healthz, /livez, /readyz (no credentials) and /metrics (delegated authn/authz).
EXPOSE 10259
ENTRYPOINT ["custom-scheduler"]
CMD ["run", "--config=/etc/kubernetes/scheduler-config.yaml"]
