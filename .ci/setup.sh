#!/usr/bin/env bash
# Prepares a fresh Debian 12 machine (as root) for `bash ci/test-all.sh`:
#   - Debian packages: redis-server/redis-tools (redis-cli, redis-benchmark,
#     and a reference redis-server, all built with TLS), tcl (the Redis test
#     suite's runtime) and tcl-tls (its --tls mode), openssl (test certificates),
#     dpkg-dev (so `apt-get source` can unpack the Redis sources);
#   - deb-src entries, so `apt-get source redis` fetches the Redis 7.0 sources
#     whose tests/ directory is the Tcl suite;
#   - the client-library checks' runtimes (ci/clients.sh): Node.js with npm
#     (ioredis, node-redis) and a JDK with Maven (Jedis), each only when the
#     machine does not have it already (a preinstalled one is kept).
# Python packages are installed later, into a venv under .ci/cache/, by
# ci/lib/redis_py.py. Idempotent: safe to re-run.
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive

enable_deb_src() {
    local d=/etc/apt/sources.list.d
    if grep -rqsE '^(Types:.*\bdeb-src\b|deb-src )' /etc/apt/sources.list "$d"; then
        return 0
    fi
    local f
    for f in "$d"/*.sources; do
        [ -e "$f" ] || continue
        # deb822: copy each stanza that carries binary packages as deb-src.
        grep -qE '^Types:.*\bdeb\b' "$f" || continue
        sed -E 's/^Types:.*/Types: deb-src/' "$f" > "$d/lattice-deb-src-$(basename "$f")"
    done
    if [ -f /etc/apt/sources.list ]; then
        # one-line format: mirror each "deb " line as "deb-src ".
        grep -E '^deb ' /etc/apt/sources.list | sed 's/^deb /deb-src /' \
            > "$d/lattice-deb-src.list" || true
    fi
}

echo "== .ci/setup: deb-src + apt packages"
enable_deb_src
apt-get update -qq
# (redis-server's package may start a system server on 6379; the suites use
# their own free ports, so it is left alone.) python3-venv: in case python3 is
# Debian's, whose venv module needs it.
apt-get install -y -qq --no-install-recommends \
    redis-server redis-tools tcl tcl-tls openssl dpkg-dev xz-utils ca-certificates python3-venv >/dev/null
# Client checks (ci/clients.sh): install only what is missing, so a newer
# preinstalled node/java is left as it is (nodejs first: some builds of it
# carry npm, which Debian's own npm package would then conflict with).
need() { command -v "$1" >/dev/null || { echo "== .ci/setup: installing $2"; apt-get install -y -qq --no-install-recommends "$2" >/dev/null; }; }
need node nodejs
need npm npm
need javac default-jdk-headless
need mvn maven
echo "== .ci/setup: node $(node --version), npm $(npm --version), $(javac -version 2>&1), $(mvn -B --version 2>/dev/null | head -n 1)"
echo "== .ci/setup: done ($(redis-server --version | awk '{print $3}'), tclsh $(echo 'puts [info patchlevel]' | tclsh))"
