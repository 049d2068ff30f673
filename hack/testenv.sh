#!/usr/bin/env bash
# Provision the control-plane binaries that the tests and benchmarks run against:
# etcd, kube-apiserver and kube-scheduler. Prints the directory holding them.
#
# Order of preference:
#   1. $KUBEBUILDER_ASSETS (controller-runtime's envtest convention), when it holds what is needed;
#   2. the cache, ${XDG_CACHE_HOME:-$HOME/.cache}/custom-scheduler/k8s-<version>/bin;
#   3. a build on Debian: etcd from the etcd-server package, kube-apiserver and kube-scheduler from
#      Debian 12's `kubernetes` source package (1.20.2, which vendors every Go dependency) compiled
#      with Debian 12's Go 1.19, unpacked into the cache so the host's own Go is never touched.
#
# Usage: hack/testenv.sh [--need "etcd kube-apiserver kube-scheduler"]
# The tests need etcd and kube-apiserver; the benchmarks also need kube-scheduler. A cache build
# always produces all three. Idempotent: a second run prints the cached directory at once.
# All progress goes to stderr; stdout carries only the directory.
set -euo pipefail

need="etcd kube-apiserver kube-scheduler"
if [ "${1:-}" = "--need" ]; then
    need="${2:?--need takes a list of binaries}"
fi

K8S_SRC_VERSION="1.20.5+really1.20.2"   # Debian 12 (bookworm) source version
K8S_VERSION="1.20.2"
GO_PKG_VERSION="1.19"
cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/custom-scheduler"
dest="$cache_root/k8s-$K8S_VERSION/bin"

log() { printf 'testenv: %s\n' "$*" >&2; }
die() { printf 'testenv: ERROR: %s\n' "$*" >&2; exit 1; }

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

[ -r /etc/debian_version ] || die "no binaries in \$KUBEBUILDER_ASSETS or $dest, and this is not Debian, so they cannot be built here. Set KUBEBUILDER_ASSETS to a directory holding: $need"
[ "$(id -u)" = 0 ] || die "building the control plane needs root for apt-get (or set KUBEBUILDER_ASSETS to a directory holding: $need)"

exec 9>"$cache_root.lock" 2>/dev/null || { mkdir -p "$(dirname "$cache_root")"; exec 9>"$cache_root.lock"; }
flock 9
if has_all "$dest"; then   # another run finished while we waited for the lock
    echo "$dest"
    exit 0
fi

export DEBIAN_FRONTEND=noninteractive
work="$cache_root/build"
aptdir="$cache_root/apt-bookworm"
mkdir -p "$work" "$aptdir/lists/partial" "$aptdir/archives/partial" "$dest"

# --- host packages --------------------------------------------------------------------------
host_pkgs="etcd-server rsync dpkg-dev make gcc libc6-dev ca-certificates openssl"
missing=""
for p in $host_pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    log "installing host packages:$missing"
    apt-get update -qq >&2 || die "apt-get update failed"
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing >&2 || die "apt-get install$missing failed"
fi
etcd_bin="$(command -v etcd || true)"
[ -n "$etcd_bin" ] || die "etcd-server is installed but no etcd binary is on PATH"

# --- a private apt view of Debian 12, for the pinned sources and Go 1.19 --------------------
# It reuses the mirror this host already uses, and leaves the host's apt configuration alone.
mirror=""
if [ -r /etc/apt/sources.list.d/debian.sources ]; then
    mirror="$(awk '/^URIs:/ {u=$2} /^Suites:/ && $0 !~ /security/ && u != "" {print u; exit}' /etc/apt/sources.list.d/debian.sources)"
fi
if [ -z "$mirror" ] && [ -r /etc/apt/sources.list ]; then
    mirror="$(awk '$1=="deb" && $0 !~ /security/ {for(i=2;i<=NF;i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' /etc/apt/sources.list)"
fi
[ -n "$mirror" ] || die "cannot find the Debian archive's URI in /etc/apt/sources.list.d/debian.sources or /etc/apt/sources.list"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -r "$keyring" ] || die "missing $keyring (package debian-archive-keyring)"
cat >"$aptdir/sources.list" <<EOF
deb [signed-by=$keyring] $mirror bookworm main
deb-src [signed-by=$keyring] $mirror bookworm main
EOF
apt_private=(
    -o "Dir::Etc::SourceList=$aptdir/sources.list"
    -o "Dir::Etc::SourceParts=/nonexistent"
    -o "Dir::State::Lists=$aptdir/lists"
    -o "Dir::Cache::Archives=$aptdir/archives"
    -o "Dir::Cache::pkgcache="
    -o "Dir::Cache::srcpkgcache="
    -o "APT::Get::AllowUnauthenticated=false"
)
log "reading Debian 12 package lists from $mirror"
apt-get "${apt_private[@]}" update -qq >&2 || die "apt-get update for the bookworm sources failed"

# --- Go 1.19 --------------------------------------------------------------------------------
goroot="$cache_root/go-$GO_PKG_VERSION/usr/lib/go-$GO_PKG_VERSION"
if [ ! -x "$goroot/bin/go" ]; then
    log "fetching golang-$GO_PKG_VERSION-go and golang-$GO_PKG_VERSION-src"
    (cd "$work" && apt-get "${apt_private[@]}" download "golang-$GO_PKG_VERSION-go" "golang-$GO_PKG_VERSION-src" >&2) \
        || die "cannot download Go $GO_PKG_VERSION from Debian 12"
    for deb in "$work"/golang-"$GO_PKG_VERSION"-*.deb; do
        dpkg -x "$deb" "$cache_root/go-$GO_PKG_VERSION"
    done
    [ -x "$goroot/bin/go" ] || die "Go $GO_PKG_VERSION unpacked, but $goroot/bin/go is missing"
fi

# --- Kubernetes sources ---------------------------------------------------------------------
srcdir="$work/kubernetes-$K8S_SRC_VERSION"
if [ ! -f "$srcdir/.unpacked" ]; then
    log "fetching the kubernetes $K8S_SRC_VERSION source package"
    rm -rf "$srcdir"
    # The private view holds only Debian 12, whose kubernetes source is $K8S_SRC_VERSION-*.
    (cd "$work" && apt-get "${apt_private[@]}" source --only-source kubernetes >&2) \
        || die "cannot fetch Debian's kubernetes source package"
    unpacked="$(find "$work" -maxdepth 1 -type d -name 'kubernetes-1.20*' | head -n 1)"
    [ -n "$unpacked" ] || die "the kubernetes source package did not unpack"
    [ "$unpacked" = "$srcdir" ] || mv "$unpacked" "$srcdir"
    touch "$srcdir/.unpacked"
fi

# --- build, in the GOPATH layout that the package's own debian/rules uses -------------------
gopath="$work/gopath"
pkgdir="$gopath/src/k8s.io/kubernetes"
mkdir -p "$(dirname "$pkgdir")"
[ -L "$pkgdir" ] || ln -sfn "$srcdir" "$pkgdir"
log "building kube-apiserver and kube-scheduler with Go $GO_PKG_VERSION (about 6-10 minutes on 2 cores)"
(
    cd "$pkgdir"
    export GOROOT="$goroot" PATH="$goroot/bin:$PATH" GOPATH="$gopath" GO111MODULE=off GOFLAGS="" \
        GOCACHE="$work/gocache" KUBE_GIT_VERSION="v$K8S_VERSION" KUBE_GIT_TREE_STATE=clean \
        KUBE_VERBOSE=1
    make WHAT="cmd/kube-apiserver cmd/kube-scheduler" >&2
) || die "building kube-apiserver/kube-scheduler failed (see the output above)"

out="$srcdir/_output/local/bin/linux/$(dpkg --print-architecture)"
[ -d "$out" ] || out="$(dirname "$(find "$srcdir/_output" -type f -name kube-apiserver | head -n 1)")"
for b in kube-apiserver kube-scheduler; do
    [ -x "$out/$b" ] || die "the build did not produce $b"
    install -m 0755 "$out/$b" "$dest/$b"
done
install -m 0755 "$etcd_bin" "$dest/etcd"
has_all "$dest" || die "provisioning finished but $dest lacks one of: $need"
# Keep the source tree (developers read pkg/scheduler/ there) but drop the build's bulk.
rm -rf "$srcdir/_output" "$work/gocache" "$work/gopath" "$work"/*.deb "$work"/*.tar.* "$work"/*.dsc
log "control plane ready in $dest (Kubernetes $K8S_VERSION sources kept in $srcdir)"
echo "$dest"
