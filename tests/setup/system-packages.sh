#!/usr/bin/env bash
# Installs the Debian packages the test suite runs for real (nginx, haproxy, redis-server,
# chromium and its driver): whatever program of the list below is not found is installed with
# apt-get, after one `apt-get update`. `make test`, `make test-slow` and `make test-uvloop` run
# it first, so CI on a clean clone has them; with everything present it is a handful of
# `command -v` checks. It fails, non-zero and saying what to install, where it cannot install
# (not root, no apt-get, a package that does not exist): the tests that need these programs
# fail rather than skip, so a missing one must stop here, by name. Services the packages would
# start are not started (policy-rc.d for the length of the install): each test starts its own
# server on a loopback port of its own and stops it after. docs/development.md#system-packages
set -euo pipefail

# One line per program: the command the tests run, then the Debian package(s) that provide
# it, first available wins. Add a line here when a test needs another.
programs=(
    "nginx nginx-light nginx"
    "haproxy haproxy"
    "redis-server redis-server"
    "chromium chromium"
    "chromedriver chromium-driver"
)

# Also where the tests look (tests/support/system.py): sbin is not on every user's PATH.
found() {
    command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || [ -x "/usr/local/sbin/$1" ]
}

missing=()
for line in "${programs[@]}"; do
    read -r program _ <<<"$line"
    found "$program" || missing+=("$line")
done
[ ${#missing[@]} -eq 0 ] && exit 0

fail() {
    echo "tests/setup/system-packages.sh: $*" >&2
    exit 1
}
names=()
for line in "${missing[@]}"; do
    read -r program _ <<<"$line"
    names+=("$program")
done
echo "tests/setup/system-packages.sh: installing what provides ${names[*]} (apt-get)" >&2
command -v apt-get >/dev/null 2>&1 \
    || fail "no apt-get here; install ${names[*]} yourself (the tests run them)"
[ "$(id -u)" -eq 0 ] \
    || fail "${names[*]} not found and not root: run tests/setup/system-packages.sh as root"

# Another process may be installing too (apt-get waits for its lock, up to 10 minutes).
lock_wait=(-o DPkg::Lock::Timeout=600)
apt-get "${lock_wait[@]}" update -qq || fail "apt-get update failed"
debs=()
for line in "${missing[@]}"; do
    read -r program candidates <<<"$line"
    chosen=""
    for deb in $candidates; do
        if [ -n "$(apt-cache policy "$deb" 2>/dev/null | sed -n 's/^ *Candidate: //p' \
            | grep -v '(none)')" ]; then
            chosen=$deb
            break
        fi
    done
    [ -n "$chosen" ] || fail "no Debian package provides $program here (tried: $candidates)"
    debs+=("$chosen")
done

policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod +x "$policy"
    made_policy=1
fi
trap '[ "$made_policy" = 1 ] && rm -f "$policy"' EXIT
DEBIAN_FRONTEND=noninteractive apt-get "${lock_wait[@]}" install -y -qq --no-install-recommends \
    "${debs[@]}" >/dev/null || fail "apt-get install ${debs[*]} failed"

for line in "${missing[@]}"; do
    read -r program _ <<<"$line"
    found "$program" || fail "installed its package, but $program is still not found"
done
