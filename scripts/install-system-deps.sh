#!/usr/bin/env bash
# Installs the Debian packages fabriclab's tests and tools run for real:
#   ibsim-utils, libumad2sim0  - OFA's fabric simulator and its umad preload library
#   infiniband-diags, opensm   - the real ibnetdiscover/ibstat/perfquery/... and subnet manager
#   slurmctld, slurmd, slurm-client, munge
#                              - a real Slurm (22.05 or 24.11) that loads fabriclab's topology.conf
#   prometheus-node-exporter, prometheus
#                              - the real node_exporter reading a tray's /sys/class/infiniband
#                                ('fabriclab sysfs') and the Prometheus that scrapes it
#                                (node_exporter 1.5 / 1.9, Prometheus 2.42 / 2.53)
#   python3-venv               - to make the project's virtualenv (when python3 lacks venv)
#   gcc, libc6-dev             - to build fabriclab's host library (sim/host/hostlib/*.c)
#   libasan8, libubsan1        - AddressSanitizer's and UBSan's runtimes, for the tests'
#                                sanitizer build of it (gcc pulls them in already, through
#                                libgcc-12-dev on Debian 12 and libgcc-14-dev on Debian 13;
#                                named so that a trimmed gcc install cannot lack them)
#   chromium-headless-shell    - the browser the web view's tests drive through Playwright
#                                (/usr/lib/chromium/chromium-headless-shell; Playwright
#                                downloads no browser of its own)
#   npm                        - builds the web view's front-end (web/: Cytoscape.js and
#                                esbuild from the npm registry) when the package is built;
#                                named only where no npm is on PATH already
#   curl, iproute2             - what the manual's examples run (tests/test_docs_examples.py:
#                                curl against the topology API and node_exporter; ip in the
#                                network namespace each fabric example gets)
#   iputils-ping, iperf3, lldpd - the real programs on the other networks (up --networks:
#                                tests/test_networks_real.py pings between endpoints'
#                                namespaces)
# plus any package named on the command line (scripts/debian13-root.sh asks for debootstrap).
# The names are the same on Debian 12 (bookworm) and Debian 13 (trixie); none of the
# libraries renamed for the 64-bit time_t transition (libibnetdisc5 -> libibnetdisc5t64)
# is named here, apt pulls in whichever the release has.
# Already-installed packages are skipped, so a second run does nothing.
set -euo pipefail

packages=(ibsim-utils libumad2sim0 infiniband-diags opensm slurmctld slurmd slurm-client munge
    prometheus-node-exporter prometheus gcc libc6-dev libasan8 libubsan1 chromium-headless-shell
    curl iproute2 iputils-ping iperf3 lldpd "$@")
if ! command -v npm >/dev/null 2>&1; then
    packages+=(npm)
fi
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    packages+=(python3-venv)
fi

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "system packages: all present (${packages[*]})"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "error: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
    SUDO="sudo"
fi
echo "system packages: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# Debian's policy-rc.d hook: exit 101 tells invoke-rc.d not to start any service the
# packages install (a system slurmctld, munged or opensm would only get in the way).
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
    $SUDO chmod 755 "$policy"
    trap '$SUDO rm -f "$policy"' EXIT
fi
# opensm's, Slurm's and Prometheus's packages try to start their services; the tests start
# their own.
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
