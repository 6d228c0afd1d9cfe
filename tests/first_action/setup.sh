#!/usr/bin/env bash
# Installs what `make corpus` runs (docs/packs/corpus.md): the real servers and runtimes from
# Debian's packages (as root), the Python stacks and MCP servers into venvs of their own
# (.venv/corpus-http, .venv/corpus-mcp, and .venv/corpus-mcp1 for servers that need the 1.x
# Python SDK: their pinned dependencies never touch the project's),
# and the Node stacks and MCP servers pinned by tests/first_action/node/package-lock.json (the
# held-out sets': .venv/corpus-mcp-held-out, .venv/corpus-mcp-fresh, .venv/corpus-mcp-ranked,
# .venv/corpus-mcp-ranked1, tests/first_action/held_out/node and held_out/ranked).
# Idempotent: what is already there is not fetched again. Services the packages would start
# are not started (policy-rc.d for the length of the install): the corpus starts each one
# itself, on loopback ports of its own, and stops it after.
set -euo pipefail
cd "$(dirname "$0")/../.."
HERE=tests/first_action

debs=(
    nginx-light apache2 apache2-utils haproxy varnish caddy docker-registry etcd-server prometheus
    lighttpd
    ruby-sinatra ruby-webrick php-cli golang-go
    tomcat10 jetty9 openjdk-17-jdk-headless libmojolicious-perl libcatalyst-perl ruby-rack puma
    php-slim json2file-go yaws chromium
    postgresql redis-server memcached git
)
missing=()
for deb in "${debs[@]}"; do
    dpkg-query -W -f='${Status}' "$deb" 2>/dev/null | grep -q "install ok installed" \
        || missing+=("$deb")
done
# mcp-server-kubernetes runs kubectl; Debian's kubernetes-client when none is on the PATH.
command -v kubectl >/dev/null 2>&1 || missing+=(kubernetes-client)
if [ ${#missing[@]} -gt 0 ]; then
    policy=/usr/sbin/policy-rc.d
    made_policy=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy"
        chmod +x "$policy"
        made_policy=1
    fi
    trap '[ "$made_policy" = 1 ] && rm -f "$policy"' EXIT
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >/dev/null
fi

if [ ! -f .venv/corpus-http/.installed ] \
    || [ "$HERE/requirements-http.txt" -nt .venv/corpus-http/.installed ]; then
    python3 -m venv .venv/corpus-http
    .venv/corpus-http/bin/pip install --quiet --upgrade pip
    .venv/corpus-http/bin/pip install --quiet -r "$HERE/requirements-http.txt"
    touch .venv/corpus-http/.installed
fi
if [ ! -f .venv/corpus-mcp/.installed ] \
    || [ "$HERE/requirements-mcp.txt" -nt .venv/corpus-mcp/.installed ]; then
    python3 -m venv .venv/corpus-mcp
    .venv/corpus-mcp/bin/pip install --quiet --upgrade pip
    .venv/corpus-mcp/bin/pip install --quiet -r "$HERE/requirements-mcp.txt"
    touch .venv/corpus-mcp/.installed
fi
if [ ! -f .venv/corpus-mcp1/.installed ] \
    || [ "$HERE/requirements-mcp1.txt" -nt .venv/corpus-mcp1/.installed ]; then
    python3 -m venv .venv/corpus-mcp1
    .venv/corpus-mcp1/bin/pip install --quiet --upgrade pip
    .venv/corpus-mcp1/bin/pip install --quiet -r "$HERE/requirements-mcp1.txt"
    touch .venv/corpus-mcp1/.installed
fi
if [ ! -f .venv/corpus-mcp-held-out/.installed ] \
    || [ "$HERE/requirements-mcp-held-out.txt" -nt .venv/corpus-mcp-held-out/.installed ]; then
    python3 -m venv .venv/corpus-mcp-held-out
    .venv/corpus-mcp-held-out/bin/pip install --quiet --upgrade pip
    .venv/corpus-mcp-held-out/bin/pip install --quiet -r "$HERE/requirements-mcp-held-out.txt"
    touch .venv/corpus-mcp-held-out/.installed
fi
if [ ! -f .venv/corpus-mcp-fresh/.installed ] \
    || [ "$HERE/requirements-mcp-fresh.txt" -nt .venv/corpus-mcp-fresh/.installed ]; then
    python3 -m venv .venv/corpus-mcp-fresh
    .venv/corpus-mcp-fresh/bin/pip install --quiet --upgrade pip
    .venv/corpus-mcp-fresh/bin/pip install --quiet -r "$HERE/requirements-mcp-fresh.txt"
    touch .venv/corpus-mcp-fresh/.installed
fi
for set in ranked ranked1; do
    venv=.venv/corpus-mcp-$set
    if [ ! -f "$venv/.installed" ] || [ "$HERE/requirements-mcp-$set.txt" -nt "$venv/.installed" ]; then
        python3 -m venv "$venv"
        "$venv/bin/pip" install --quiet --upgrade pip
        "$venv/bin/pip" install --quiet -r "$HERE/requirements-mcp-$set.txt"
        touch "$venv/.installed"
    fi
done
for folder in "$HERE/held_out/node" "$HERE/held_out/ranked"; do
    held_lock="$folder/node_modules/.package-lock.json"
    if [ ! -f "$held_lock" ] || [ "$folder/package-lock.json" -nt "$held_lock" ]; then
        (cd "$folder" && npm ci --no-audit --no-fund --loglevel=error)
        touch "$held_lock"
    fi
done
lock="$HERE/node/node_modules/.package-lock.json"
if [ ! -f "$lock" ] || [ "$HERE/node/package-lock.json" -nt "$lock" ]; then
    (cd "$HERE/node" && npm ci --no-audit --no-fund --loglevel=error)
    touch "$lock"
fi
