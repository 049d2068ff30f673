#!/usr/bin/env bash
# Provision the control-plane binaries that the tests, the demo and the benchmarks run against:
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl. Prints the directory
# holding them.
#
# The Kubernetes version is pinned in one place, hack/controlplane/go.mod (its k8s.io/kubernetes
# requirement). K8S_VERSION=1.34.4 (say) selects another release; the staging modules are then
# replaced with the matching v0.<minor>.<patch> releases and etcd follows what that release requires.
#
# Order of preference:
#   1. $KUBEBUILDER_ASSETS (controller-runtime's envtest convention), when it holds what is needed;
#   2. the cache, ${XDG_CACHE_HOME:-$HOME/.cache}/custom-scheduler/k8s-<version>/bin;
#   3. a build from Go modules (the Go module proxy): hack/controlplane is a small Go module that
#      requires k8s.io/kubernetes and names the commands as tools; etcd comes from the go.etcd.io
#      modules that the same release requires. CGO_ENABLED=0; about 20-25 minutes on 2 cores.
#
# Usage: hack/testenv.sh [--need "etcd kube-apiserver ..."] [--version-only]
# --need names the binaries wanted (default: all five); only missing ones are built.
# Idempotent: a second run prints the cached directory at once. Progress goes to stderr; stdout
# carries only the directory (or, with --version-only, the selected version).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
module="$here/controlplane"
all="etcd kube-apiserver kube-controller-manager kube-scheduler kubectl"
need="$all"
version_only=0
while [ $# -gt 0 ]; do
    case "$1" in
        --need) need="${2:?--need takes a list of binaries}"; shift 2 ;;
        --version-only) version_only=1; shift ;;
        *) echo "usage: hack/testenv.sh [--need LIST] [--version-only]" >&2; exit 2 ;;
    esac
done

log() { printf 'testenv: %s\n' "$*" >&2; }
die() { printf 'testenv: ERROR: %s\n' "$*" >&2; exit 1; }

pinned="$(awk '$1=="require" && $2=="k8s.io/kubernetes" {print $3} $1=="k8s.io/kubernetes" && $2 ~ /^v/ {print $2}' "$module/go.mod" | head -n 1)"
[ -n "$pinned" ] || die "cannot read the k8s.io/kubernetes version from $module/go.mod"
version="${K8S_VERSION:-${pinned#v}}"
version="${version#v}"
[[ "$version" =~ ^1\.[0-9]+\.[0-9]+$ ]] || die "K8S_VERSION must look like 1.37.2 (got '$version')"
if [ "$version_only" = 1 ]; then
    echo "$version"
    exit 0
fi

cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/custom-scheduler"
dest="$cache_root/k8s-$version/bin"

has_all() {
    local dir="$1" b
    for b in $need; do [ -x "$dir/$b" ] || return 1; done
}

if [ -n "${KUBEBUILDER_ASSETS:-}" ] && has_all "$KUBEBUILDER_ASSETS"; then
    echo "$KUBEBUILDER_ASSETS"
    exit 0
fi
if has_all "$dest"; then
    echo "$dest"
    exit 0
fi

command -v go >/dev/null 2>&1 || die "no binaries in \$KUBEBUILDER_ASSETS or $dest, and no Go toolchain to build them (Go >= 1.26 with access to a Go module proxy). Install Go, or set KUBEBUILDER_ASSETS to a directory holding: $need"
gov="$(go env GOVERSION)"
minor="${version#1.}"; minor="${minor%%.*}"
need_go=26
[ "$minor" -le 34 ] && need_go=24
[ "$minor" -le 32 ] && need_go=22
have_go="${gov#go1.}"; have_go="${have_go%%.*}"
[ "$have_go" -ge "$need_go" ] 2>/dev/null || die "Kubernetes $version needs Go >= 1.$need_go; this machine has $gov"

mkdir -p "$cache_root"
exec 9>"$cache_root/build-$version.lock"
flock 9
if has_all "$dest"; then   # another run finished while we waited for the lock
    echo "$dest"
    exit 0
fi

work="$cache_root/build/k8s-$version"
rm -rf "$work"
mkdir -p "$work" "$dest"
cp -r "$module/." "$work/"
export GOFLAGS="-mod=mod" GOTOOLCHAIN=local CGO_ENABLED=0
if [ "v$version" != "$pinned" ]; then
    # Another release: the same module, written for that release's staging modules and Go version.
    log "preparing a module for Kubernetes $version (the pinned version is ${pinned#v})"
    (
        cd "$work"
        go mod download "k8s.io/kubernetes@v$version" >&2 \
            || die "the Go module proxy does not serve k8s.io/kubernetes@v$version"
        kdir="$(go env GOMODCACHE)/k8s.io/kubernetes@v$version"
        {
            echo "module custom-scheduler/hack/controlplane"
            awk '$1=="go" {print; exit}' "$kdir/go.mod"
            echo "require k8s.io/kubernetes v$version"
            awk -v v="v0.${version#1.}" '$2=="=>" && $3 ~ /^\.\/staging\// {print "replace " $1 " => " $1 " " v}' "$kdir/go.mod"
            awk '$1=="tool" && $2 != "(" {print} /^tool \(/ {t=1; next} t && /^\)/ {t=0} t {print "tool " $1}' "$module/go.mod"
        } >go.mod
        rm -f go.sum
        go mod tidy >&2
    ) || die "could not prepare the Go module for Kubernetes $version"
fi

pkgs=()
for b in $need; do
    [ -x "$dest/$b" ] && continue
    case "$b" in
        etcd) pkgs+=(./etcd) ;;
        kube-apiserver|kube-controller-manager|kube-scheduler|kubectl) pkgs+=("k8s.io/kubernetes/cmd/$b") ;;
        *) die "unknown binary '$b' (known: $all)" ;;
    esac
done
log "building Kubernetes $version ($need) from Go modules; about 20-25 minutes on 2 cores the first time"
pkg="k8s.io/component-base/version"
cpkg="k8s.io/client-go/pkg/version"
ldflags="-s -w"
for p in "$pkg" "$cpkg"; do
    ldflags="$ldflags -X $p.gitVersion=v$version -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
done
start=$(date +%s)
(
    cd "$work"
    go build -ldflags "$ldflags" -o "$dest/" "${pkgs[@]}" >&2
) || die "building Kubernetes $version failed (see the output above)"
for b in $need; do
    [ -x "$dest/$b" ] || die "the build did not produce $b"
done
log "built in $(( $(date +%s) - start )) s: $dest"
echo "$dest"
