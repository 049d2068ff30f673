#!/usr/bin/env bash
# Build the container image from the Dockerfile, here, without a registry for the base and without
# a container runtime that can start containers. Prints the path of the image as an OCI archive
# (`podman save --format oci-archive`), which tests/integration/test_image.py unpacks and runs
# chrooted.
#
# Why not plain `docker build`: the public base (python:3.11-slim-bookworm, pinned by digest in the
# Dockerfile) cannot be pulled on our development and CI machines; Debian's packages can. So:
#   1. the base: mmdebstrap makes a minimal Debian bookworm root (the `essential` variant plus
#      python3 3.11, python3-venv, ca-certificates and libstdc++6, which numpy's wheels link; no
#      recommends, docs, man pages or locales; merged /usr without the usrmerge package and the
#      perl it pulls in), imported into podman's local storage as
#      localhost/custom-scheduler-base:<recipe hash>;
#   2. the image: `podman build --isolation chroot --build-arg BASE=<that base>`, the same Dockerfile
#      and the same supply chain (the builder stage downloads the locked wheels from PyPI with
#      --require-hashes; the final stage installs them offline);
#   3. the cache: the archive goes to ${XDG_CACHE_HOME:-$HOME/.cache}/custom-scheduler/image-<hash>/,
#      where <hash> covers everything that goes into the image (Dockerfile, .dockerignore, the lock
#      files, pyproject.toml, README.md, custom_scheduler/ and this script's base recipe). A second
#      run with the same inputs prints the cached path at once.
# The apt packages it needs (podman, mmdebstrap) are installed when missing (as root).
#
# Usage: hack/image.sh [--hash-only]
# Progress goes to stderr; stdout carries only the archive's path (or, with --hash-only, the hash).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf 'image: %s\n' "$*" >&2; }
die() { printf 'image: ERROR: %s\n' "$*" >&2; exit 1; }

# The base recipe; a change here changes the base's tag and the image hash.
SUITE=bookworm
MIRROR=http://deb.debian.org/debian
SECURITY="deb http://deb.debian.org/debian-security $SUITE-security main"
BASE_PACKAGES=python3,python3-venv,ca-certificates,libstdc++6
BASE_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

hash_only=0
case "${1:-}" in
    "") ;;
    --hash-only) hash_only=1 ;;
    *) echo "usage: hack/image.sh [--hash-only]" >&2; exit 2 ;;
esac

# What the build context holds (see .dockerignore) plus the recipes; __pycache__ never counts.
input_hash() {
    {
        sha256sum Dockerfile .dockerignore requirements.lock requirements-build.lock pyproject.toml README.md
        printf '%s\n' "$SUITE" "$MIRROR" "$SECURITY" "$BASE_PACKAGES" "$BASE_PATH"
        find custom_scheduler -type f ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 | LC_ALL=C sort -z \
            | xargs -0 sha256sum
    } | sha256sum | cut -c1-16
}

hash="$(input_hash)"
if [ "$hash_only" = 1 ]; then
    echo "$hash"
    exit 0
fi

cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/custom-scheduler"
dest="$cache_root/image-$hash"
archive="$dest/image.oci.tar"
if [ -s "$archive" ]; then
    echo "$archive"
    exit 0
fi

ensure_apt() {
    local missing="" p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
    done
    [ -z "$missing" ] && return 0
    [ "$(id -u)" = 0 ] || die "no cached image in $dest, and building one needs:$missing (install them as root)"
    log "installing$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing >&2
}
[ "$(id -u)" = 0 ] || die "no cached image in $dest, and building one needs root (mmdebstrap, podman's storage)"
ensure_apt podman mmdebstrap

mkdir -p "$cache_root"
exec 9>"$cache_root/build-image.lock"
flock 9
if [ -s "$archive" ]; then   # another run finished while we waited for the lock
    echo "$archive"
    exit 0
fi

version="$(awk -F'"' '/^version *=/ {print $2; exit}' pyproject.toml)"
base_hash="$(printf '%s\n' "$SUITE" "$MIRROR" "$SECURITY" "$BASE_PACKAGES" "$BASE_PATH" | sha256sum | cut -c1-12)"
base="localhost/custom-scheduler-base:$SUITE-$base_hash"
image="localhost/custom-scheduler:$version-$hash"
start=$(date +%s)

if ! podman image exists "$base"; then
    log "making the base $base with mmdebstrap (Debian $SUITE: $BASE_PACKAGES)"
    mkdir -p "$cache_root/build"
    tmp="$(mktemp -d "$cache_root/build/base.XXXXXX")"
    trap 'rm -rf "$tmp"' EXIT
    nice -n 10 mmdebstrap --quiet --variant=essential \
        --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
        --include="$BASE_PACKAGES" \
        --aptopt='APT::Install-Recommends "false"' \
        --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/info/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        "$SUITE" "$tmp/base.tar" "$MIRROR" "$SECURITY" >&2 \
        || die "mmdebstrap failed (see above); it needs Debian's package mirror"
    podman import --quiet --change "ENV PATH=$BASE_PATH" --change 'CMD ["python3"]' \
        "$tmp/base.tar" "$base" >/dev/null || die "podman import of the base failed"
    rm -rf "$tmp"
    trap - EXIT
    log "base ready after $(( $(date +%s) - start )) s"
fi

# The CA bundle this machine's pip trusts (PIP_CERT, else the system's) is bind-mounted over the
# base's own for the RUN steps only (never committed to a layer): where PyPI is reached through a
# TLS-inspecting proxy, the base's stock CAs would refuse it. The wheels are still hash-checked.
ca_bundle="${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}"
ca_mount=()
[ -s "$ca_bundle" ] && ca_mount=(--volume "$ca_bundle:/etc/ssl/certs/ca-certificates.crt:ro")
log "building $image (podman build --isolation chroot, BASE=$base)"
# --network host: the builder stage downloads the locked wheels from PyPI; --pull=never: the base
# is local and nothing may be pulled from a registry.
nice -n 10 podman build --quiet --layers=false --isolation chroot --network host --pull=never "${ca_mount[@]}" \
    --build-arg "BASE=$base" --label "org.opencontainers.image.version=$version" \
    --label "io.custom-scheduler.inputs=$hash" -t "$image" -f Dockerfile . >&2 \
    || die "podman build failed (see above)"
mkdir -p "$dest"
rm -f "$archive.tmp"
podman save --quiet --format oci-archive -o "$archive.tmp" "$image" || die "podman save failed"
mv "$archive.tmp" "$archive"
# Only the newest image is kept: older archives and tags (the sources change with every edit) would
# otherwise fill the disk (--layers=false keeps no intermediate image). The base stays.
for old in "$cache_root"/image-*; do
    [ "$old" = "$dest" ] || rm -rf "$old"
done
podman images --format '{{.Repository}}:{{.Tag}}' --filter reference=localhost/custom-scheduler \
    | { grep -vxF "$image" || true; } | xargs -r podman rmi --force >/dev/null 2>&1 || true
log "built in $(( $(date +%s) - start )) s: $archive ($(du -h "$archive" | cut -f1))"
echo "$archive"
