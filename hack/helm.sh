#!/usr/bin/env bash
# Provision helm (helm.sh/helm/v4), which tests/integration/test_chart.py uses to lint and render
# chart/custom-scheduler. Prints the directory holding the `helm` binary.
#
# The version is pinned in one place, hack/helm/go.mod (its helm.sh/helm/v4 requirement).
# Order of preference:
#   1. the cache, ${XDG_CACHE_HOME:-$HOME/.cache}/custom-scheduler/helm-<version>/bin (the layout
#      hack/testenv.sh and hack/kwok.sh use);
#   2. a build from Go modules (whatever `go env GOPROXY` names): hack/helm is a small Go module
#      that requires helm.sh/helm/v4 and names cmd/helm as a tool. CGO_ENABLED=0, under `nice`
#      (the build shares the machine's cores with whatever else runs); a few minutes on 2 cores.
#
# Usage: hack/helm.sh [--version-only]
# Idempotent: a second run prints the cached directory at once. Progress goes to stderr; stdout
# carries only the directory (or, with --version-only, the pinned version).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
module="$here/helm"

log() { printf 'helm: %s\n' "$*" >&2; }
die() { printf 'helm: ERROR: %s\n' "$*" >&2; exit 1; }

version_only=0
case "${1:-}" in
    "") ;;
    --version-only) version_only=1 ;;
    *) echo "usage: hack/helm.sh [--version-only]" >&2; exit 2 ;;
esac

pinned="$(awk '$1=="require" && $2=="helm.sh/helm/v4" {print $3} $1=="helm.sh/helm/v4" && $2 ~ /^v/ {print $2}' "$module/go.mod" | head -n 1)"
[ -n "$pinned" ] || die "cannot read the helm.sh/helm/v4 version from $module/go.mod"
version="${pinned#v}"
if [ "$version_only" = 1 ]; then
    echo "$version"
    exit 0
fi

cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/custom-scheduler"
dest="$cache_root/helm-$version/bin"
if [ -x "$dest/helm" ]; then
    echo "$dest"
    exit 0
fi

command -v go >/dev/null 2>&1 || die "no $dest/helm, and no Go toolchain to build it (Go >= 1.26 with access to a Go module proxy)"
gov="$(go env GOVERSION)"
have_go="${gov#go1.}"; have_go="${have_go%%.*}"
[ "$have_go" -ge 26 ] 2>/dev/null || die "helm $version needs Go >= 1.26; this machine has $gov"

mkdir -p "$cache_root"
exec 9>"$cache_root/build-helm-$version.lock"
flock 9
if [ -x "$dest/helm" ]; then   # another run finished while we waited for the lock
    echo "$dest"
    exit 0
fi

# Build in a copy, so go.sum in the checkout is never rewritten, and into a temporary name, so an
# interrupted build never leaves a half-written binary that the check above would take as done.
work="$cache_root/build/helm-$version"
rm -rf "$work"
mkdir -p "$work" "$dest"
cp -r "$module/." "$work/"
export GOFLAGS="-mod=mod" GOTOOLCHAIN=local CGO_ENABLED=0
log "building helm $version from Go modules (GOPROXY=$(go env GOPROXY)); a few minutes on 2 cores the first time"
start=$(date +%s)
(
    cd "$work"
    # The version variables helm's own Makefile sets for a release build (`helm version` shows them).
    nice -n 10 go build -trimpath \
        -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=v$version -X helm.sh/helm/v4/internal/version.metadata= -X helm.sh/helm/v4/internal/version.gitTreeState=clean" \
        -o "$dest/helm.tmp" helm.sh/helm/v4/cmd/helm >&2
) || die "building helm $version failed (see the output above)"
mv "$dest/helm.tmp" "$dest/helm"
"$dest/helm" version --short >/dev/null 2>&1 || die "the built $dest/helm does not run"
log "built in $(( $(date +%s) - start )) s: $dest"
echo "$dest"
