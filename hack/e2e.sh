#!/usr/bin/env bash
# Provision e2e.test, Kubernetes' own end-to-end suite (k8s.io/kubernetes/test/e2e), which
# `./hack/dev.sh e2e` (custom_scheduler/devenv/e2e.py) runs against a kwok cluster to compare our
# scheduler with kube-scheduler on the [sig-scheduling] specs. Prints the directory holding it.
#
# The release is the control plane's (hack/controlplane/go.mod pins it); hack/e2e/go.mod requires
# the same k8s.io/kubernetes version with the same staging `replace` directives, and its go.sum pins
# everything else. The script refuses to build when the two pins differ, so the suite always
# matches the API server it talks to.
# Order of preference:
#   1. the cache, ${XDG_CACHE_HOME:-$HOME/.cache}/custom-scheduler/e2e-<version>/bin (the layout
#      hack/testenv.sh and hack/kwok.sh use);
#   2. `go test -c` from Go modules (whatever `go env GOPROXY` names), CGO_ENABLED=0, under `nice`
#      (the build shares the machine's cores); about 7-15 minutes on 2 cores the first time.
# The binary runs specs directly (--ginkgo.focus / --ginkgo.skip), so no ginkgo CLI is built.
#
# Usage: hack/e2e.sh [--version-only]
# Idempotent: a second run prints the cached directory at once. Progress goes to stderr; stdout
# carries only the directory (or, with --version-only, the pinned version).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
module="$here/e2e"

log() { printf 'e2e: %s\n' "$*" >&2; }
die() { printf 'e2e: ERROR: %s\n' "$*" >&2; exit 1; }

version_only=0
case "${1:-}" in
    "") ;;
    --version-only) version_only=1 ;;
    *) echo "usage: hack/e2e.sh [--version-only]" >&2; exit 2 ;;
esac

read_pin() {
    awk '$1=="require" && $2=="k8s.io/kubernetes" {print $3} $1=="k8s.io/kubernetes" && $2 ~ /^v/ {print $2}' "$1" | head -n 1
}
pinned="$(read_pin "$module/go.mod")"
[ -n "$pinned" ] || die "cannot read the k8s.io/kubernetes version from $module/go.mod"
cp_pinned="$(read_pin "$here/controlplane/go.mod")"
[ "$pinned" = "$cp_pinned" ] \
    || die "hack/e2e/go.mod pins k8s.io/kubernetes $pinned but hack/controlplane/go.mod pins $cp_pinned; update both"
version="${pinned#v}"
if [ "$version_only" = 1 ]; then
    echo "$version"
    exit 0
fi

cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/custom-scheduler"
dest="$cache_root/e2e-$version/bin"
if [ -x "$dest/e2e.test" ]; then
    echo "$dest"
    exit 0
fi

command -v go >/dev/null 2>&1 || die "no $dest/e2e.test, and no Go toolchain to build it (Go >= 1.26 with access to a Go module proxy)"
gov="$(go env GOVERSION)"
have_go="${gov#go1.}"; have_go="${have_go%%.*}"
[ "$have_go" -ge 26 ] 2>/dev/null || die "Kubernetes $version's e2e suite needs Go >= 1.26; this machine has $gov"

mkdir -p "$cache_root"
exec 9>"$cache_root/build-e2e-$version.lock"
flock 9
if [ -x "$dest/e2e.test" ]; then   # another run finished while we waited for the lock
    echo "$dest"
    exit 0
fi

# Build in a copy, so go.mod/go.sum in the checkout are never rewritten, and into a temporary
# name, so an interrupted build never leaves a half-written binary that the check above would take
# as done.
work="$cache_root/build/e2e-$version"
rm -rf "$work"
mkdir -p "$work" "$dest"
cp -r "$module/." "$work/"
export GOFLAGS="-mod=mod" GOTOOLCHAIN=local CGO_ENABLED=0
minor="${version#1.}"; minor="${minor%%.*}"
ldflags="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags="$ldflags -X $p.gitVersion=v$version -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
done
log "building e2e.test (Kubernetes $version) from Go modules (GOPROXY=$(go env GOPROXY)); about 7-15 minutes on 2 cores the first time"
start=$(date +%s)
(
    cd "$work"
    nice -n 10 go test -c -vet=off -trimpath -ldflags "$ldflags" -o "$dest/e2e.test.tmp" k8s.io/kubernetes/test/e2e >&2
) || die "building e2e.test $version failed (see the output above)"
mv "$dest/e2e.test.tmp" "$dest/e2e.test"
"$dest/e2e.test" --help >/dev/null 2>&1 || die "the built $dest/e2e.test does not run"
log "built in $(( $(date +%s) - start )) s: $dest"
echo "$dest"
