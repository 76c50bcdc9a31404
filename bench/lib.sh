# Shared by the bench/ scripts (sourced, not run): builds the release
# binary, starts Elsa, Redis and PostgreSQL on free loopback ports in a temp
# dir, and stops each by PID on exit.
#
# Durability is the same class on every system unless DURABILITY=none:
# the log is written at once and fsynced about every second (Redis AOF
# everysec, Elsa --appendfsync everysec, PostgreSQL synchronous_commit=off).
# Otherwise each server runs its defaults; ELSA_FLAGS and PG_FLAGS (e.g.
# "-c deadlock_timeout=10ms") add server options.

set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
ELSA=$ROOT/target/release/elsa
DURABILITY=${DURABILITY:-everysec}
TMP=$(mktemp -d /tmp/elsa-bench.XXXXXX)
PIDS=()
PG_DATA=""

cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  if [ -n "$PG_DATA" ] && [ -f "$PG_DATA/postmaster.pid" ]; then
    # SIGINT is PostgreSQL's fast shutdown.
    pgpid=$(head -1 "$PG_DATA/postmaster.pid")
    kill -INT "$pgpid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pgpid" 2>/dev/null || break; sleep 0.1; done
  fi
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

build() {
  echo "building target/release/elsa ..." >&2
  cargo build --release --bin elsa >&2
}

wait_ping() { # port
  for _ in $(seq 200); do
    redis-cli -p "$1" ping >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "nothing answers PING on port $1" >&2
  return 1
}

start_elsa() { # -> sets ELSA_URL
  local port flags=()
  port=$(free_port)
  if "$ELSA" server --help | grep -q -- --appendfsync; then
    if [ "$DURABILITY" = none ]; then flags+=(--appendfsync no); else flags+=(--appendfsync everysec); fi
  fi
  ELSA_LOG=warn "$ELSA" server --port "$port" --data-dir "$TMP/elsa" "${flags[@]}" ${ELSA_FLAGS:-} >"$TMP/elsa.log" 2>&1 &
  PIDS+=($!)
  wait_ping "$port"
  ELSA_URL=redis://127.0.0.1:$port
}

start_redis() { # -> sets REDIS_URL
  local port aof=(--appendonly no)
  command -v redis-server >/dev/null || { echo "needs redis-server: apt-get install -y redis-server redis-tools" >&2; exit 1; }
  [ "$DURABILITY" = none ] || aof=(--appendonly yes --appendfsync everysec)
  port=$(free_port)
  redis-server --port "$port" --bind 127.0.0.1 --save "" "${aof[@]}" --dir "$TMP" >"$TMP/redis.log" 2>&1 &
  PIDS+=($!)
  wait_ping "$port"
  REDIS_URL=redis://127.0.0.1:$port
}

pg_bin() {
  if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
    dirname "$(command -v pg_ctl)"
    return
  fi
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  [ -n "$d" ] || { echo "needs PostgreSQL: apt-get install -y postgresql" >&2; exit 1; }
  echo "$d"
}

start_postgres() { # -> sets PG_URL
  local bin port run=() sync=off
  bin=$(pg_bin)
  port=$(free_port)
  mkdir -p "$TMP/pg"
  # initdb refuses to run as root.
  if [ "$(id -u)" -eq 0 ]; then
    chown postgres:postgres "$TMP" "$TMP/pg"
    run=(runuser -u postgres --)
  fi
  PG_DATA=$TMP/pg/data
  "${run[@]}" "$bin/initdb" -D "$PG_DATA" -U bench --auth=trust -E UTF8 --no-sync >"$TMP/initdb.log" 2>&1
  [ "$DURABILITY" = none ] && sync="off -c fsync=off"
  "${run[@]}" "$bin/pg_ctl" -D "$PG_DATA" -l "$TMP/pg/log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $port -c unix_socket_directories=$TMP/pg -c max_connections=300 -c shared_buffers=256MB -c synchronous_commit=$sync ${PG_FLAGS:-}" \
    start >/dev/null
  PG_URL=postgres://bench@127.0.0.1:$port/postgres
}

start_system() { # name -> echoes nothing, sets URL
  case $1 in
    elsa) start_elsa; URL=$ELSA_URL ;;
    redis) start_redis; URL=$REDIS_URL ;;
    postgres) start_postgres; URL=$PG_URL ;;
    *) echo "unknown system $1 (elsa, redis, postgres)" >&2; exit 1 ;;
  esac
}

# The machine, for the results table.
machine() {
  echo "$(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), $(free -h | awk '/^Mem:/ {print $2}') RAM, $(. /etc/os-release && echo "$PRETTY_NAME"), redis $(redis-server --version | grep -o 'v=[0-9.]*' | cut -d= -f2), PostgreSQL $("$(pg_bin)/postgres" --version | awk '{print $3}'), durability $DURABILITY"
}
