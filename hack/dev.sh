#!/usr/bin/env bash
# One entry point that does all set-up on a fresh Debian machine, then runs what was asked:
#   hack/dev.sh test   lint (ruff, mypy), the whole test suite against a real control plane of the
#                      newest supported Kubernetes, then the integration smoke on the oldest one
#   hack/dev.sh demo   a local control plane, the scheduler, a sample workload and a summary
#   hack/dev.sh setup  only the set-up (apt packages, .venv, control-plane binaries, kwok, helm, Kueue,
#                      the container image)
#   hack/dev.sh up     a local playground left running in the background: control plane, kwok
#                      nodes, the scheduler with config.example.yaml; prints KUBECONFIG and what
#                      to try (--foreground: in this terminal until Ctrl-C)
#   hack/dev.sh down   stops the playground (the PIDs it recorded) and removes its state
#   hack/dev.sh image  only the container image (hack/image.sh; prints its OCI archive)
#   hack/dev.sh kueue  only Kueue v0.17.0, for its tests and `demo kueue` (part of setup; about
#                      7 minutes the first time)
#   hack/dev.sh e2e    Kubernetes' own [sig-scheduling] e2e specs on a kwok cluster, with
#                      kube-scheduler and with ours (--scheduler custom|kube|both; builds e2e.test
#                      into the cache the first time, 7-15 minutes); prints the table
# Idempotent: each step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf 'dev: %s\n' "$*" >&2; }

# The oldest Kubernetes release we support; the newest is pinned in hack/controlplane/go.mod.
OLDEST_K8S_VERSION=1.34.4

ensure_apt() {
    local missing="" p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
    done
    [ -z "$missing" ] && return 0
    if [ "$(id -u)" != 0 ]; then
        log "please install:$missing (needs root)"; exit 1
    fi
    log "installing$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing
}

setup_python() {
    local py="${PYTHON:-python3}"
    "$py" -c 'import sys; assert sys.version_info >= (3, 11), sys.version' \
        || { log "Python >= 3.11 is required (found $("$py" --version 2>&1))"; exit 1; }
    if ! "$py" -c 'import venv, ensurepip' 2>/dev/null; then
        ensure_apt python3-venv
    fi
    if [ ! -x .venv/bin/python ] || [ pyproject.toml -nt .venv/.installed ]; then
        log "creating .venv and installing the project with its dev extras"
        [ -x .venv/bin/python ] || "$py" -m venv .venv
        .venv/bin/python -m pip install -q --upgrade pip
        .venv/bin/python -m pip install -q -e '.[dev]'
        touch .venv/.installed
    fi
}

setup_controlplane() {
    # etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl: $KUBEBUILDER_ASSETS,
    # the cache, or a build from Go modules ($K8S_VERSION selects a release). Go is needed only for
    # a build: the script says what is missing when there is neither a cache nor Go.
    KUBE_ASSETS="$(bash hack/testenv.sh)"
    export KUBE_ASSETS
    log "control plane binaries: $KUBE_ASSETS"
}

setup_kwok() {
    # kwok, the fake kubelet of tests/integration/test_kwok.py: the cache, or a build from Go
    # modules pinned in hack/kwok/go.mod (about 2.5 minutes on 2 cores the first time); the
    # script says what is missing when it can do neither.
    local dir
    dir="$(bash hack/kwok.sh)"
    log "kwok: $dir"
}

setup_helm() {
    # helm, which tests/integration/test_chart.py lints and renders chart/custom-scheduler with:
    # the cache, or a build from Go modules pinned in hack/helm/go.mod (a few minutes on 2 cores
    # the first time).
    local dir
    dir="$(bash hack/helm.sh)"
    log "helm: $dir"
}

setup_image() {
    # The container image, built from the Dockerfile on a Debian base made with mmdebstrap (the
    # public base cannot be pulled here; see hack/image.sh), for tests/integration/test_image.py.
    # Cached by a hash of its inputs: 2-4 minutes the first time, instant after.
    local archive
    local cached
    cached="${XDG_CACHE_HOME:-$HOME/.cache}/custom-scheduler/image-$(bash hack/image.sh --hash-only)/image.oci.tar"
    if [ "$(id -u)" != 0 ] && [ ! -s "$cached" ]; then
        log "image: not built (building needs root: mmdebstrap, podman); tests/integration/test_image.py skips"
        return 0
    fi
    archive="$(bash hack/image.sh)"
    log "image: $archive"
}

setup_runtime() {
    # What a local cluster needs (the demo, the playground, the e2e runs): no helm, no image.
    ensure_apt ca-certificates openssl
    setup_python
    setup_controlplane
    setup_kwok
}

setup_kueue() {
    # Kueue v0.17.0 for tests/integration/test_kueue*.py and `demo kueue`: the cache, or a build
    # from Go modules pinned in hack/kueue/go.mod (391 s on a fresh 2-core machine under load).
    log "kueue: $(bash hack/kueue.sh)"
}

setup() {
    setup_runtime
    setup_helm
    setup_kueue
    setup_image
    # Headless Chromium for the simulator page's browser test (tests/integration/test_ui_browser.py).
    ensure_apt chromium
}

cmd="${1:-test}"
shift || true
case "$cmd" in
    setup) setup ;;
    kueue)
        # Only Kueue (also part of setup, so of `test`).
        setup_runtime
        setup_kueue
        ;;
    lint)
        setup_python
        .venv/bin/ruff check custom_scheduler tests bench
        .venv/bin/mypy
        ;;
    test)
        setup
        log "ruff"; .venv/bin/ruff check custom_scheduler tests bench
        log "mypy"; .venv/bin/mypy
        log "pytest (Kubernetes $(bash hack/testenv.sh --version-only))"; .venv/bin/python -m pytest "$@"
        if [ $# -eq 0 ] && [ -z "${K8S_VERSION:-}" ] && [ "${CS_SKIP_OLDEST:-}" != 1 ]; then
            # The integration smoke (daemon, plugins, preemption) on the oldest supported release.
            K8S_VERSION="$OLDEST_K8S_VERSION" bash hack/testenv.sh --need "etcd kube-apiserver kube-controller-manager" >/dev/null
            log "pytest -m smoke (Kubernetes $OLDEST_K8S_VERSION)"
            K8S_VERSION="$OLDEST_K8S_VERSION" .venv/bin/python -m pytest -m smoke tests/integration
        fi
        ;;
    demo)
        setup_runtime
        .venv/bin/python -m custom_scheduler demo "$@"
        ;;
    up)
        # A local playground left running: control plane, kwok nodes, the scheduler (see
        # custom_scheduler/devenv/playground.py); --foreground keeps it in this terminal.
        setup_runtime
        exec .venv/bin/python -m custom_scheduler.devenv.playground up "$@"
        ;;
    down)
        exec .venv/bin/python -m custom_scheduler.devenv.playground down "$@"
        ;;
    image)
        setup_image
        ;;
    e2e)
        setup_runtime
        bash hack/e2e.sh >/dev/null
        exec nice -n 10 .venv/bin/python -m custom_scheduler.devenv.e2e "$@"
        ;;
    *) echo "usage: hack/dev.sh {setup|lint|test|demo|up|down|image|kueue|e2e} [args]" >&2; exit 2 ;;
esac
