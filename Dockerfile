# syntax=docker/dockerfile:1
# custom-scheduler image: docker build -t custom-scheduler:0.1.0 .
# Here (no registry for the base, no container runtime): hack/image.sh builds it with podman.
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
# files, offline, into a clean copy of the same base: no compiler, no pip, no pip cache, no source
# tree, no wheel left in a layer. The Deployment runs it with a read-only root filesystem; the only
# writable path it needs is /tmp (an emptyDir), for the self-signed serving certificate.

# The base, pinned by digest: python:3.11-slim-bookworm, Docker Hub's multi-architecture manifest
# list. Where the digest came from: a public project's ADR dated 2026-08-24 that pinned this
# digest after rechecking the registry's manifest response that day, found on 2026-12-03 (this
# development machine cannot reach Docker Hub, so it was not re-resolved here). Re-resolve it when
# bumping: `docker buildx imagetools inspect python:3.11-slim-bookworm` (the "Digest:" line).
# hack/image.sh builds with --build-arg BASE=<a local Debian bookworm base> instead (python3.11
# from Debian's packages), which is why the steps below say `python3` (python:3.11-slim has it in
# /usr/local/bin, Debian in /usr/bin) and install into a venv rather than the system site-packages.
ARG BASE=docker.io/library/python:3.11-slim-bookworm@sha256:2e32f7d302adc1c37428355c1e646897c0c53f4fd60b6a551245fb90ee129f91

FROM ${BASE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
# .dockerignore lets in only pyproject.toml, README.md, custom_scheduler/ and the two lock files.
COPY . .
RUN python3 -m venv /build \
 && /build/bin/pip download --require-hashes --no-deps --only-binary=:all: \
        --dest /wheels -r requirements.lock \
 && /build/bin/pip install --require-hashes --no-deps --only-binary=:all: -r requirements-build.lock \
 && /build/bin/pip wheel --no-deps --no-build-isolation --wheel-dir /wheels . \
 && cp requirements.lock /wheels/

FROM ${BASE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    LOG_FORMAT=json \
    PATH=/opt/custom-scheduler/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# The builder's venv (its pip) and wheels are bind-mounted for this one step, so neither pip nor
# any wheel stays in the image: the app's venv is made without pip and filled by the builder's pip
# (--python). --no-index keeps the install offline, --require-hashes checks each file against the
# lock again, and --no-deps installs our wheel without letting it resolve anything the lock lacks.
# The user is appended to /etc/passwd and /etc/group directly: a minimal Debian base has no useradd.
RUN --mount=type=bind,from=builder,source=/build,target=/build \
    --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    python3 -m venv --without-pip /opt/custom-scheduler \
 && /build/bin/pip --python /opt/custom-scheduler/bin/python install --no-index --find-links=/wheels \
        --require-hashes --no-deps -r /wheels/requirements.lock \
 && /build/bin/pip --python /opt/custom-scheduler/bin/python install --no-index --no-deps \
        /wheels/custom_scheduler-*.whl \
 && /build/bin/pip --python /opt/custom-scheduler/bin/python check \
 && echo 'scheduler:x:65532:' >>/etc/group \
 && echo 'scheduler:x:65532:65532:custom-scheduler:/nonexistent:/usr/sbin/nologin' >>/etc/passwd
# Numeric user so runAsNonRoot can verify it without reading /etc/passwd.
USER 65532:65532
WORKDIR /
# HTTPS: /healthz, /livez, /readyz (no credentials) and /metrics (delegated authn/authz).
EXPOSE 10259
ENTRYPOINT ["custom-scheduler"]
CMD ["run", "--config=/etc/kubernetes/scheduler-config.yaml"]
