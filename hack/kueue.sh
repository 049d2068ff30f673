#!/usr/bin/env bash
# Provision Kueue (sigs.k8s.io/kueue), the job-queueing controller that the Kueue integration tests
# and the `kueue` demo scenario run in front of custom-scheduler (docs/kueue.md). Prints the
# directory holding the `kueue` manager binary; its CRDs sit beside it in ../crd.
#
# The version is pinned in one place, hack/kueue/go.mod (its sigs.k8s.io/kueue requirement).
# Order of preference:
#   1. the cache, ${XDG_CACHE_HOME:-$HOME/.cache}/custom-scheduler/kueue-<version>/{bin,crd} (the
#      layout hack/kwok.sh and hack/testenv.sh use);
#   2. a build from Go modules (whatever `go env GOPROXY` names): hack/kueue is a small Go module
#      that requires sigs.k8s.io/kueue and names cmd/kueue as a tool. CGO_ENABLED=0, under `nice`
#      (the build shares the machine's cores with whatever else runs). The CRDs are copied from
#      the same module source (config/components/crd/bases), so binary and CRDs always match.
#
# Usage: hack/kueue.sh [--version-only]
# Idempotent: a second run prints the cached directory at once. Progress goes to stderr; stdout
# carries only the directory (or, with --version-only, the pinned version).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
module="$here/kueue"

log() { printf 'kueue: %s\n' "$*" >&2; }
die() { printf 'kueue: ERROR: %s\n' "$*" >&2; exit 1; }

version_only=0
case "${1:-}" in
    "") ;;
    --version-only) version_only=1 ;;
    *) echo "usage: hack/kueue.sh [--version-only]" >&2; exit 2 ;;
esac

pinned="$(awk '$1=="require" && $2=="sigs.k8s.io/kueue" {print $3} $1=="sigs.k8s.io/kueue" && $2 ~ /^v/ {print $2}' "$module/go.mod" | head -n 1)"
[ -n "$pinned" ] || die "cannot read the sigs.k8s.io/kueue version from $module/go.mod"
version="${pinned#v}"
if [ "$version_only" = 1 ]; then
    echo "$version"
    exit 0
fi

cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/custom-scheduler"
root="$cache_root/kueue-$version"
dest="$root/bin"
done_marker() { [ -x "$dest/kueue" ] && [ -f "$root/crd/.complete" ]; }
if done_marker; then
    echo "$dest"
    exit 0
fi

command -v go >/dev/null 2>&1 || die "no $dest/kueue, and no Go toolchain to build it (Go >= 1.26 with access to a Go module proxy)"
gov="$(go env GOVERSION)"
have_go="${gov#go1.}"; have_go="${have_go%%.*}"
[ "$have_go" -ge 26 ] 2>/dev/null || die "kueue $version needs Go >= 1.26 here; this machine has $gov"

mkdir -p "$cache_root"
exec 9>"$cache_root/build-kueue-$version.lock"
flock 9
if done_marker; then   # another run finished while we waited for the lock
    echo "$dest"
    exit 0
fi

# Build in a copy, so go.sum in the checkout is never rewritten, and into a temporary name, so an
# interrupted build never leaves a half-written binary that the check above would take as done.
work="$cache_root/build/kueue-$version"
rm -rf "$work"
mkdir -p "$work" "$dest"
cp -r "$module/." "$work/"
export GOFLAGS="-mod=mod" GOTOOLCHAIN=local CGO_ENABLED=0
log "building kueue $version from Go modules (GOPROXY=$(go env GOPROXY)); several minutes on 2 cores the first time"
start=$(date +%s)
(
    cd "$work"
    nice -n 10 go build -trimpath \
        -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=v$version" \
        -o "$dest/kueue.tmp" sigs.k8s.io/kueue/cmd/kueue >&2
) || die "building kueue $version failed (see the output above)"
src="$(cd "$work" && go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)"
[ -d "$src/config/components/crd/bases" ] || die "no CRDs in $src/config/components/crd/bases"
rm -rf "$root/crd"
mkdir -p "$root/crd"
cp "$src"/config/components/crd/bases/*.yaml "$root/crd/"
chmod -R u+w "$root/crd"
mv "$dest/kueue.tmp" "$dest/kueue"
"$dest/kueue" --help >/dev/null 2>&1 || die "the built $dest/kueue does not run"
touch "$root/crd/.complete"
log "built in $(( $(date +%s) - start )) s: $dest"
echo "$dest"
