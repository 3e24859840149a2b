#!/usr/bin/env bash
# Makes (once) a minimal Debian 13 (trixie) tree holding the newer real components, and
# prints its path on stdout (everything else goes to stderr):
#   infiniband-diags (rdma-core 56), ibsim-utils and libumad2sim0 (ibsim 0.12), opensm,
#   slurmctld, slurmd, slurm-client (Slurm 24.11) and munge.
# A Debian 12 machine runs them with `chroot ROOT ...` against fabriclab's servers on the
# same machine (tests/debian13.py); a Debian 13 machine has them itself and needs no tree.
#
#   scripts/debian13-root.sh            build if needed, print the path
#
# Where: $FABRICLAB_DEBIAN13_ROOT, else ${XDG_CACHE_HOME:-/var/cache}/fabriclab/debian13.
# Which mirror: $FABRICLAB_DEBIAN_MIRROR, else the first Debian archive this machine's apt
# sources use.  The tree is built once (debootstrap --variant=minbase, then the packages)
# and recorded in a stamp file holding the suite and package list: a second run with the
# same list only prints the path; a changed list installs what is new.  A lock serialises
# concurrent runs.  Needs root (debootstrap, chroot).
set -euo pipefail
cd "$(dirname "$0")/.."

SUITE=trixie
PACKAGES=(infiniband-diags ibsim-utils libumad2sim0 opensm slurmctld slurmd slurm-client munge)
ROOT=${FABRICLAB_DEBIAN13_ROOT:-${XDG_CACHE_HOME:-/var/cache}/fabriclab/debian13}
STAMP="$ROOT/.fabriclab-root"
BASE="$ROOT/.fabriclab-base" # debootstrap finished
WANT="suite=$SUITE packages=${PACKAGES[*]}"

say() { echo "debian13-root: $*" >&2; }

# Slurm needs the short host name to resolve (to 127.0.0.1 here): the tree gets the
# machine's /etc/hosts, refreshed on every run since the machine's name may change.
hosts() {
    if [ -w "$ROOT/etc" ] && ! cmp -s /etc/hosts "$ROOT/etc/hosts"; then
        cp /etc/hosts "$ROOT/etc/hosts"
    fi
}

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
    hosts
    echo "$ROOT"
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "error: scripts/debian13-root.sh: building $ROOT needs root (debootstrap, chroot)" >&2
    exit 1
fi

mkdir -p "$(dirname "$ROOT")"
exec 9>"$ROOT.lock"
flock 9
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then # built while we waited
    hosts
    echo "$ROOT"
    exit 0
fi

mirror_from_apt() {
    # deb822 sources (URIs: ...) and one-line sources (deb [opts] URI suite ...); the
    # security archive serves only updates, not the suite itself.
    local f
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] && awk '/^URIs:/ { for (i = 2; i <= NF; i++) if ($i !~ /security/) print $i }' "$f"
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] && awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z+]+:\/\//) { if ($i !~ /security/) print $i; break } }' "$f"
    done
    return 0
}

t0=$(date +%s)
if [ ! -f "$BASE" ]; then
    command -v debootstrap >/dev/null || scripts/install-system-deps.sh debootstrap >&2
    MIRROR=${FABRICLAB_DEBIAN_MIRROR:-$(mirror_from_apt | sed -n 1p)}
    if [ -z "$MIRROR" ]; then
        echo "error: scripts/debian13-root.sh: no Debian mirror in this machine's apt sources; set FABRICLAB_DEBIAN_MIRROR" >&2
        exit 1
    fi
    say "debootstrap --variant=minbase $SUITE into $ROOT (from the apt sources' mirror)"
    rm -rf "$ROOT.new"
    if ! debootstrap --variant=minbase "$SUITE" "$ROOT.new" "$MIRROR" >"$ROOT.log" 2>&1; then
        tail -20 "$ROOT.log" >&2
        echo "error: scripts/debian13-root.sh: debootstrap failed (log: $ROOT.log)" >&2
        exit 1
    fi
    touch "$ROOT.new/.fabriclab-base"
    rm -rf "$ROOT"
    mv "$ROOT.new" "$ROOT"
fi

# Debian's policy-rc.d hook: exit 101 keeps the packages from starting their services.
printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d"
chmod 755 "$ROOT/usr/sbin/policy-rc.d"
hosts
say "installing ${PACKAGES[*]}"
if ! {
    chroot "$ROOT" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin apt-get update -qq &&
        chroot "$ROOT" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" &&
        chroot "$ROOT" apt-get clean
} >>"$ROOT.log" 2>&1; then
    tail -20 "$ROOT.log" >&2
    echo "error: scripts/debian13-root.sh: installing packages failed (log: $ROOT.log)" >&2
    exit 1
fi
echo "$WANT" >"$STAMP"
say "ready in $(($(date +%s) - t0)) s"
echo "$ROOT"
