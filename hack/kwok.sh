#!/usr/bin/env bash
# Provision kwok (sigs.k8s.io/kwok), the fake kubelet of the living-cluster tests
# (custom_scheduler/devenv/kwok.py, tests/integration/test_kwok.py). Prints the directory holding
# the `kwok` binary.
#
# The version is pinned in one place, hack/kwok/go.mod (its sigs.k8s.io/kwok requirement).
# Order of preference:
#   1. the cache, ${XDG_CACHE_HOME:-$HOME/.cache}/custom-scheduler/kwok-<version>/bin (the layout
#      hack/testenv.sh uses for the control plane);
#   2. a build from Go modules (whatever `go env GOPROXY` names): hack/kwok is a small Go module
#      that requires sigs.k8s.io/kwok and names cmd/kwok as a tool. CGO_ENABLED=0, under `nice`
#      (the build shares the machine's cores with whatever else runs); a few minutes on 2 cores.
#
# Usage: hack/kwok.sh [--version-only]
# Idempotent: a second run prints the cached directory at once. Progress goes to stderr; stdout
# carries only the directory (or, with --version-only, the pinned version).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
module="$here/kwok"

log() { printf 'kwok: %s\n' "$*" >&2; }
die() { printf 'kwok: ERROR: %s\n' "$*" >&2; exit 1; }

version_only=0
case "${1:-}" in
    "") ;;
    --version-only) version_only=1 ;;
    *) echo "usage: hack/kwok.sh [--version-only]" >&2; exit 2 ;;
esac

pinned="$(awk '$1=="require" && $2=="sigs.k8s.io/kwok" {print $3} $1=="sigs.k8s.io/kwok" && $2 ~ /^v/ {print $2}' "$module/go.mod" | head -n 1)"
[ -n "$pinned" ] || die "cannot read the sigs.k8s.io/kwok version from $module/go.mod"
version="${pinned#v}"
if [ "$version_only" = 1 ]; then
    echo "$version"
    exit 0
fi

cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/custom-scheduler"
dest="$cache_root/kwok-$version/bin"
if [ -x "$dest/kwok" ]; then
    echo "$dest"
    exit 0
fi

command -v go >/dev/null 2>&1 || die "no $dest/kwok, and no Go toolchain to build it (Go >= 1.26 with access to a Go module proxy)"
gov="$(go env GOVERSION)"
have_go="${gov#go1.}"; have_go="${have_go%%.*}"
[ "$have_go" -ge 26 ] 2>/dev/null || die "kwok $version needs Go >= 1.26; this machine has $gov"

mkdir -p "$cache_root"
exec 9>"$cache_root/build-kwok-$version.lock"
flock 9
if [ -x "$dest/kwok" ]; then   # another run finished while we waited for the lock
    echo "$dest"
    exit 0
fi

# Build in a copy, so go.sum in the checkout is never rewritten, and into a temporary name, so an
# interrupted build never leaves a half-written binary that the check above would take as done.
work="$cache_root/build/kwok-$version"
rm -rf "$work"
mkdir -p "$work" "$dest"
cp -r "$module/." "$work/"
export GOFLAGS="-mod=mod" GOTOOLCHAIN=local CGO_ENABLED=0
log "building kwok $version from Go modules (GOPROXY=$(go env GOPROXY)); a few minutes on 2 cores the first time"
start=$(date +%s)
(
    cd "$work"
    nice -n 10 go build -trimpath -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$version" \
        -o "$dest/kwok.tmp" sigs.k8s.io/kwok/cmd/kwok >&2
) || die "building kwok $version failed (see the output above)"
mv "$dest/kwok.tmp" "$dest/kwok"
"$dest/kwok" --version >/dev/null 2>&1 || die "the built $dest/kwok does not run"
log "built in $(( $(date +%s) - start )) s: $dest"
echo "$dest"
