#!/usr/bin/env bash
# Runs real Redis client libraries (redis-py RESP2/RESP3, ioredis, node-redis,
# Jedis RESP2/RESP3; redis-py over TLS) against a freshly started lattice-server. Each client
# program in tests/clients/ does its library's normal handshake and asserts
# plain results; this script installs deps (idempotent, quiet), builds the
# release server, runs every program and prints "clients: N passed, M failed".
# Env: SKIP_JAVA=1 skips Jedis; LATTICE_BIN=path uses a prebuilt server;
# LATTICE_ARGS="--save ''" adds server arguments (default: only --port N).
#
# ACTIVE_CLIENT_CHECKS=1 (the default; 0 skips them) also runs issue 12 item 7:
# node-redis 3 (npm redis@3, installed as "redis3"), ioredis and redis-py must
# connect to and write to a node whose peers are down. A second server is
# started with ACTIVE_ARGS (default: --active-replica yes --replicaof
# 127.0.0.1 <a port nobody listens on>) and tests/clients/*/peer-down* /
# peer_down.py run against it (node-redis 3's ready check loops while INFO
# shows master_link_status:down; a read-only node answers READONLY).
# ACTIVE_ARGS="" checks the programs themselves against a plain server.
#
# APP_CHECKS=1 (the default; 0 skips it) also runs issue 14's application
# check: python-redis-lock (PyPI python-redis-lock, module redis_lock), a
# lock whose release, extend and reset are Lua scripts run by EVALSHA (with
# auto-renewal and a signal list for waiters), with its OWN test suite from
# its sdist. Its pytest fixture starts `redis-server --port 0 --unixsocket
# <tmp> --appendonly yes --dir <tmp>` per test: a redis-server in PATH that
# is lattice-server makes every test run against ours. Everything it needs
# (the sdist, pytest, process-tests, redis-py, gevent, eventlet, Django,
# django-redis at the versions below) is installed from PyPI into
# .ci/cache/redis-lock/ (gitignored) on first use. It counts as one check;
# its pytest summary is printed.
#
# APP_CHECKS also runs issue 25's application check: walrus (PyPI walrus),
# coleifer's Redis toolkit whose Stream, ConsumerGroup and TimeSeries wrap
# XADD/XRANGE/XREAD/XREADGROUP/XACK/XCLAIM/XPENDING/XINFO/XGROUP SETID (and
# whose other containers, models, full-text search, caches, locks and rate
# limiter use hashes, sorted sets and Lua), with its OWN unittest suite from
# its sdist (walrus/tests, every test: db 15 of a server of its own, ~1 s).
# Installed from PyPI into .ci/cache/walrus/ (gitignored); one check.
set -uo pipefail
# Client checks not run yet, each with its reason (the list only shrinks):
#   (none: multi/exec runs since MULTI/EXEC/WATCH were built, issue 3)
export CLIENT_SKIP="${CLIENT_SKIP-}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CL="$ROOT/tests/clients"
LOGDIR="$(mktemp -d)"
passed=0 failed=0 failed_names=()

note() { echo "clients.sh: $*" >&2; }

install_deps() {
  python3 -c 'import redis' 2>/dev/null || pip install -q redis >"$LOGDIR/pip.log" 2>&1 \
    || note "pip install redis failed (see $LOGDIR/pip.log)"
  if [ ! -d "$CL/node/node_modules/ioredis" ] || [ ! -d "$CL/node/node_modules/redis" ] \
    || [ ! -d "$CL/node/node_modules/redis3" ]; then
    (cd "$CL/node" && npm ci --no-audit --no-fund --silent >"$LOGDIR/npm.log" 2>&1) \
      || note "npm ci failed (see $LOGDIR/npm.log)"
  fi
  JAVA_OK=0
  if [ "${SKIP_JAVA:-0}" != 1 ] && command -v mvn >/dev/null && command -v javac >/dev/null; then
    (cd "$CL/java" &&
      { [ -s cp.txt ] && [ cp.txt -nt pom.xml ] ||
        mvn -q -B dependency:build-classpath -Dmdep.outputFile=cp.txt >"$LOGDIR/mvn.log" 2>&1; } &&
      mkdir -p target/classes &&
      javac -d target/classes -cp "$(cat cp.txt)" src/main/java/Main.java) && JAVA_OK=1 \
      || note "Java (Jedis) setup failed, skipping it (see $LOGDIR/mvn.log)"
  fi
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

build_server() {
  BIN="${LATTICE_BIN:-$ROOT/target/release/lattice-server}"
  if [ -z "${LATTICE_BIN:-}" ]; then
    (cd "$ROOT" && cargo build --release --quiet) || { note "cargo build failed"; exit 2; }
  fi
}

# start_server NAME [ARGS...]: starts a server on a free port with
# LATTICE_ARGS and ARGS (log: $LOGDIR/NAME.log), waits until it accepts
# connections and sets STARTED_PORT. Every server is killed on exit.
SERVER_PIDS=()
trap 'for p in "${SERVER_PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done' EXIT
start_server() {
  local name="$1" port; shift
  port="$(free_port)"
  local extra=()
  # LATTICE_ARGS is a word list with shell quoting ("--save ''").
  eval "extra=(${LATTICE_ARGS:-})"
  "$BIN" --port "$port" "${extra[@]}" "$@" >"$LOGDIR/$name.log" 2>&1 &
  SERVER_PIDS+=($!)
  for _ in $(seq 100); do
    python3 -c "import socket; socket.create_connection(('127.0.0.1',$port),0.2)" 2>/dev/null \
      && { STARTED_PORT="$port"; return; }
    sleep 0.1
  done
  note "$name server did not start"; cat "$LOGDIR/$name.log" >&2; exit 2
}

# run NAME CMD...: runs one client program against port $TARGET with a
# timeout, counts the result.
run() {
  local name="$1"; shift
  if timeout 30 "$@" "$TARGET"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1)); failed_names+=("$name")
  fi
}

# alive NAME: the server on $TARGET still answers (no crash, no wedged state).
alive() {
  python3 - "$TARGET" <<'PY' || { failed=$((failed + 1)); failed_names+=("$1"); }
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), 2)
s.sendall(b"PING\r\n")
assert s.recv(64) == b"+PONG\r\n"
PY
}

REDIS_LOCK_VERSION=4.0.1
REDIS_LOCK_DEPS=(pytest==9.2.0 process-tests==3.0.0 redis==8.1.0 gevent==26.9.0
  eventlet==0.41.3 Django==5.2.19 django-redis==7.0.0)
# Tests of python-redis-lock not run, each with its reason (the list only
# shrinks): extended regular expressions matched against pytest node ids.
#   (none: all 178 pass against lattice-server, 2026-11-27)
REDIS_LOCK_SKIP=()

# app_redis_lock: python-redis-lock's own tests against lattice-server (see
# the header); one check, named redis-lock.
# The subset: the suite runs most tests under 4 ids, decode_responses=X-
# decode_responses=Y, but only make_conn's parameter reaches the client
# (make_conn_plain's is unused), so the 4 are 2 tests twice; and every test
# starts its own server and waits 1 s in teardown, so the whole suite takes
# ~6 minutes. We run each such test once, with decode_responses=False (bytes,
# redis-py's default): ids carrying False-decode_responses=False, plus every
# test without that parameter (the contention tests test_no_overlap and
# test_no_overlap2, gevent/eventlet variants, Django cache integration). All
# the library's scripts (acquire's signal handling, release, extend,
# reset, reset_all) run in that subset; ~100 s. REDIS_LOCK_ALL=1 runs all.
app_redis_lock() {
  local dir="$ROOT/.ci/cache/redis-lock" venv src summary rc ids
  venv="$dir/venv" src="$dir/python_redis_lock-$REDIS_LOCK_VERSION"
  if [ ! -x "$venv/bin/pytest" ] || [ ! -d "$src/tests" ]; then
    mkdir -p "$dir"
    if ! { python3 -m venv "$venv" &&
      "$venv/bin/pip" install -q "${REDIS_LOCK_DEPS[@]}" &&
      "$venv/bin/pip" download -q --no-deps --no-binary :all: -d "$dir" \
        "python-redis-lock==$REDIS_LOCK_VERSION" &&
      tar xzf "$dir/python_redis_lock-$REDIS_LOCK_VERSION.tar.gz" -C "$dir" &&
      "$venv/bin/pip" install -q --no-deps "$src"; } >"$LOGDIR/redis-lock-pip.log" 2>&1; then
      note "python-redis-lock setup failed (see $LOGDIR/redis-lock-pip.log)"
      rm -rf "$venv"
      failed=$((failed + 1)); failed_names+=(redis-lock); return
    fi
  fi
  mkdir -p "$dir/bin" && ln -sfn "$BIN" "$dir/bin/redis-server"
  local py=(env PATH="$dir/bin:$PATH" PYTHONPATH=tests
    DJANGO_SETTINGS_MODULE=test_project.settings "$venv/bin/python" -m pytest -p no:cacheprovider)
  ids="$(cd "$src" && "${py[@]}" --collect-only -q tests 2>/dev/null | grep '::')"
  if [ "${REDIS_LOCK_ALL:-0}" != 1 ]; then
    ids="$(grep -vE 'decode_responses=(True|False)-decode_responses=' <<<"$ids";
      grep -E 'decode_responses=False-decode_responses=False[]-]' <<<"$ids")"
  fi
  local e
  for e in "${REDIS_LOCK_SKIP[@]}"; do ids="$(grep -vE "$e" <<<"$ids")"; done
  if [ -z "$ids" ]; then
    note "python-redis-lock: no tests collected"
    failed=$((failed + 1)); failed_names+=(redis-lock); return
  fi
  mapfile -t ids <<<"$ids"
  (cd "$src" && timeout "${REDIS_LOCK_TIMEOUT:-600}" "${py[@]}" -q -rf "${ids[@]}") \
    >"$LOGDIR/redis-lock.log" 2>&1
  rc=$?
  summary="$(grep -E '^(=+ )?[0-9]+ (passed|failed)' "$LOGDIR/redis-lock.log" | tail -1 |
    tr -d '=' | sed 's/^ *//; s/ *$//')"
  note "python-redis-lock $REDIS_LOCK_VERSION's tests (${#ids[@]} run): ${summary:-no summary (exit $rc)}"
  if [ "$rc" -eq 0 ]; then
    passed=$((passed + 1))
  else
    grep -E '^FAILED' "$LOGDIR/redis-lock.log" >&2
    note "log: $LOGDIR/redis-lock.log"
    failed=$((failed + 1)); failed_names+=(redis-lock)
  fi
}

WALRUS_VERSION=0.9.8
WALRUS_DEPS=(redis==8.1.0)
# Tests of walrus not run, each with its reason (the list only shrinks):
#   (none: all 131 pass against lattice-server, 2026-12-05)

# app_walrus: walrus's own tests against a lattice-server of their own (see
# the header); one check, named walrus.
app_walrus() {
  local dir="$ROOT/.ci/cache/walrus" venv src summary rc
  venv="$dir/venv" src="$dir/walrus-$WALRUS_VERSION"
  if [ ! -x "$venv/bin/python" ] || [ ! -d "$src/walrus/tests" ]; then
    mkdir -p "$dir"
    if ! { python3 -m venv "$venv" &&
      "$venv/bin/pip" install -q "${WALRUS_DEPS[@]}" &&
      "$venv/bin/pip" download -q --no-deps --no-binary :all: -d "$dir" \
        "walrus==$WALRUS_VERSION" &&
      tar xzf "$dir/walrus-$WALRUS_VERSION.tar.gz" -C "$dir" &&
      "$venv/bin/pip" install -q --no-deps "$src"; } >"$LOGDIR/walrus-pip.log" 2>&1; then
      note "walrus setup failed (see $LOGDIR/walrus-pip.log)"
      rm -rf "$venv"
      failed=$((failed + 1)); failed_names+=(walrus); return
    fi
  fi
  start_server walrus --save ""
  (cd "$src" && WALRUS_REDIS_HOST=127.0.0.1 WALRUS_REDIS_PORT="$STARTED_PORT" \
    timeout "${WALRUS_TIMEOUT:-300}" "$venv/bin/python" -m unittest -v walrus.tests) \
    >"$LOGDIR/walrus.log" 2>&1
  rc=$?
  summary="$(grep -E '^Ran [0-9]+ tests' "$LOGDIR/walrus.log" | tail -1), $(tail -1 "$LOGDIR/walrus.log")"
  note "walrus $WALRUS_VERSION's tests: $summary"
  if [ "$rc" -eq 0 ]; then
    passed=$((passed + 1))
  else
    grep -E '^(FAIL|ERROR):' "$LOGDIR/walrus.log" >&2
    note "log: $LOGDIR/walrus.log"
    failed=$((failed + 1)); failed_names+=(walrus)
  fi
}

install_deps
build_server
start_server server
PORT="$STARTED_PORT" TARGET="$STARTED_PORT"
export LATTICE_PORT="$PORT"
run redis-py-resp2 python3 "$CL/python/check.py" "$PORT" 2
run redis-py-resp3 python3 "$CL/python/check.py" "$PORT" 3
cd "$CL/node" || exit 2
run ioredis node ioredis.js
run node-redis node node-redis.js
if [ "$JAVA_OK" = 1 ]; then
  cd "$CL/java" && run jedis java -cp "target/classes:$(cat cp.txt)" Main
fi
alive server-alive

# Issue 12 item 7: a node whose only peer is down (see the header).
if [ "${ACTIVE_CLIENT_CHECKS:-1}" = 1 ]; then
  ACTIVE_ARGS="${ACTIVE_ARGS-"--active-replica yes --replicaof 127.0.0.1 $(free_port)"}"
  eval "active_args=($ACTIVE_ARGS)"
  start_server peer-down "${active_args[@]}"
  TARGET="$STARTED_PORT"
  run peer-down-node-redis3 node "$CL/node/peer-down-node-redis3.js"
  run peer-down-ioredis node "$CL/node/peer-down-ioredis.js"
  run peer-down-redis-py python3 "$CL/python/peer_down.py"
  alive peer-down-server-alive
fi

# Issue 26: redis-py with ssl=True and a client certificate, on a TLS port
# (certificates from ci/gen-test-certs.sh). TLS_CLIENT_CHECKS=0 skips it.
if [ "${TLS_CLIENT_CHECKS:-1}" = 1 ]; then
  CERTS="$LOGDIR/certs"
  bash "$ROOT/ci/gen-test-certs.sh" "$CERTS" >/dev/null
  TLS_PORT="$(free_port)"
  # (Its own dir, saving nothing: a dump left by an earlier run would be loaded.)
  start_server tls --dir "$LOGDIR" --save "" --tls-port "$TLS_PORT" \
    --tls-cert-file "$CERTS/server.crt" --tls-key-file "$CERTS/server.key" \
    --tls-ca-cert-file "$CERTS/ca.crt"
  TARGET="$STARTED_PORT"
  run redis-py-tls python3 "$CL/python/tls_check.py" "$CERTS" "$TLS_PORT"
  alive tls-server-alive
fi

# Issue 14: an application library that uses Lua scripts, its own tests.
[ "${APP_CHECKS:-1}" = 1 ] && app_redis_lock
# Issue 25: an application library built on streams, its own tests.
[ "${APP_CHECKS:-1}" = 1 ] && app_walrus

[ "$failed" -gt 0 ] && note "failed: ${failed_names[*]}"
echo "clients: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
