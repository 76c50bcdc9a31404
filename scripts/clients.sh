#!/usr/bin/env bash
# Client-compatibility suite: real client libraries (redis-py, go-redis, Jedis,
# Lettuce, node-redis, ioredis) and libraries built on them (RQ, BullMQ) run small
# application-style programs (tests/clients/) against Elsa and against
# redis-server.
#
#   scripts/clients.sh [--target elsa|redis|both] [--only PROGRAM-GLOB] [--no-install] [--install-only] [--serial]
#
# Installs what it needs under target/clients (a Python venv, node_modules via
# `npm ci`, a Go binary, a Java jar and its classpath), once: later runs reuse it
# while the lock files are unchanged. Elsa's binary: $ELSA_BIN, else the newer
# of target/release/elsa and target/debug/elsa (built with cargo if missing).
#
# Against redis-server every feature must PASS (or SKIP where the library has
# no such feature). Against Elsa, a feature listed in
# tests/clients/known-elsa-failures.txt may FAIL; one listed that passes fails
# the run, so the list only shrinks. The targets run side by side (--serial:
# one after the other).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SRC=$ROOT/tests/clients
WORK=${CLIENTS_WORK:-$ROOT/target/clients}
KNOWN=$SRC/known-elsa-failures.txt
PASSWORD=elsa-clients-pw
TARGETS=both
ONLY='*'
INSTALL=1
INSTALL_ONLY=0
SERIAL=0

while (($#)); do
  case $1 in
    --target) TARGETS=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    --no-install) INSTALL=0; shift ;;
    --install-only) INSTALL_ONLY=1; shift ;;
    --serial) SERIAL=1; shift ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
case $TARGETS in
  both) TARGETS="redis elsa" ;;
  elsa|redis) ;;
  *) echo "--target is elsa, redis or both" >&2; exit 2 ;;
esac
# An --only without a glob character matches as a prefix (--only py, --only go).
[[ $ONLY == *[*?[]* ]] || ONLY="$ONLY*"

mkdir -p "$WORK/run"

# redis-server (a target) and redis-cli (the readiness check), as scripts/test.sh.
need=()
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
if ((${#need[@]})); then
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  echo "installing ${need[*]} ..."
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi
PY_PROGRAMS=()
for mode in sync async; do
  for resp in 2 3; do
    for parser in hiredis python; do PY_PROGRAMS+=("py-$mode-resp$resp-$parser"); done
  done
done
PY_PROGRAMS+=(py-rq)
ALL_PROGRAMS=("${PY_PROGRAMS[@]}" go-redis jedis lettuce node-redis ioredis node-bullmq)
PROGRAMS=()
for p in "${ALL_PROGRAMS[@]}"; do [[ $p == $ONLY ]] && PROGRAMS+=("$p"); done
((${#PROGRAMS[@]})) || { echo "--only $ONLY matches no program (${ALL_PROGRAMS[*]})" >&2; exit 2; }
wants() { local p; for p in "${PROGRAMS[@]}"; do [[ $p == $1 ]] && return 0; done; return 1; }

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
# A stamp of the files an install depends on: reinstall when they change.
stamp_of() { cat "$@" | sha256sum | cut -c1-16; }
fresh() { [[ -f $1 && $(cat "$1") == "$2" ]]; }

# ---------------------------------------------------------------- installs
install_python() {
  local venv=$WORK/venv s
  s=$(stamp_of "$SRC/python/requirements.txt")
  fresh "$venv/.stamp" "$s" && return 0
  rm -rf "$venv"
  python3 -m venv "$venv" && "$venv/bin/pip" install -q --disable-pip-version-check \
    -r "$SRC/python/requirements.txt" && echo "$s" >"$venv/.stamp"
}
install_node() {
  local s
  s=$(stamp_of "$SRC/node/package-lock.json")
  fresh "$SRC/node/node_modules/.stamp" "$s" && return 0
  (cd "$SRC/node" && npm ci --no-audit --no-fund --loglevel=error) && echo "$s" >"$SRC/node/node_modules/.stamp"
}
install_go() {
  local s
  s=$(stamp_of "$SRC/go/go.sum" "$SRC/go/go.mod" "$SRC/go/main.go")
  fresh "$WORK/go-redis.stamp" "$s" && return 0
  (cd "$SRC/go" && go mod download && go build -o "$WORK/go-redis" .) && echo "$s" >"$WORK/go-redis.stamp"
}
install_java() {
  local s
  s=$(stamp_of "$SRC/java/pom.xml" "$SRC"/java/src/main/java/clients/*.java)
  fresh "$WORK/java.stamp" "$s" && return 0
  (cd "$SRC/java" && mvn -q -B package -DskipTests -Dmaven.test.skip=true \
    -DbuildDir="$WORK/java-build" &&
    mvn -q -B dependency:build-classpath -Dmdep.outputFile="$WORK/java.classpath") &&
    echo "$s" >"$WORK/java.stamp"
}

if ((INSTALL)); then
  for lang in python node go java; do
    case $lang in
      python) wants 'py-*' || continue ;;
      node) wants node-redis || wants ioredis || wants node-bullmq || continue ;;
      go) wants go-redis || continue ;;
      java) wants jedis || wants lettuce || continue ;;
    esac
    t0=$(now)
    if ! "install_$lang" >"$WORK/install-$lang.log" 2>&1; then
      cat "$WORK/install-$lang.log"; echo "install $lang: FAILED"; exit 1
    fi
    echo "install $lang: $(elapsed "$t0")s"
  done
fi
((INSTALL_ONLY)) && exit 0

command_for() {
  case $1 in
    py-sync-*|py-async-*)
      local rest=${1#py-} mode resp parser
      mode=${rest%%-*}; rest=${rest#*-resp}; resp=${rest%%-*}; parser=${rest#*-}
      echo "env RESP=$resp PARSER=$parser $WORK/venv/bin/python $SRC/python/app_$mode.py" ;;
    py-rq) echo "$WORK/venv/bin/python $SRC/python/app_rq.py" ;;
    go-redis) echo "$WORK/go-redis" ;;
    jedis) echo "java -cp $WORK/java-build/classes:$(cat "$WORK/java.classpath") clients.JedisApp" ;;
    lettuce) echo "java -cp $WORK/java-build/classes:$(cat "$WORK/java.classpath") clients.LettuceApp" ;;
    node-redis) echo "node $SRC/node/node-redis.mjs" ;;
    ioredis) echo "node $SRC/node/ioredis.mjs" ;;
    node-bullmq) echo "node $SRC/node/bullmq.mjs" ;;
  esac
}

# ---------------------------------------------------------------- servers
# A free port below the kernel's ephemeral range (32768–60999 here), with
# the seven after it free too (the workers' ports): a port the kernel hands out
# can be a client socket's local port by the time a restarted server binds
# it again ("cannot listen on …:43912: Address already in use" at a
# `reconnect` test's restart, 2026-12-01).
free_port() {
  python3 -c '
import random, socket
low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
for _ in range(1000):
    port = random.randrange(10000, max(10001, low - 64))
    try:
        for p in range(port, port + 8):
            s = socket.socket()
            s.bind(("127.0.0.1", p))
            s.close()
    except OSError:
        continue
    print(port)
    break
'
}

# $ELSA_BIN, else the newer of target/release/elsa and target/debug/elsa (the
# one `cargo test` builds), else a debug build made now.
elsa_bin() {
  if [[ -n ${ELSA_BIN:-} ]]; then echo "$ELSA_BIN"; return; fi
  local b
  b=$(ls -t "$ROOT/target/release/elsa" "$ROOT/target/debug/elsa" 2>/dev/null | head -1)
  [[ -n $b ]] && { echo "$b"; return; }
  cargo build --bin elsa >&2 || return 1
  echo "$ROOT/target/debug/elsa"
}

# Writes $WORK/run/<target>.start (starts the server, records its PID, waits for
# PING) and <target>.restart (stops it by PID, starts it again, same port/data).
setup_server() {
  local target=$1 port dir cmd bin
  port=$(free_port)
  dir=$(mktemp -d "${TMPDIR:-/tmp}/elsa-clients-$target.XXXXXX")
  if [[ $target == elsa ]]; then
    bin=$(elsa_bin) || { echo "no elsa binary" >&2; return 1; }
    # A port per worker too: cluster clients (f_cluster_client) use them.
    cmd="$bin server --port $port --bind 127.0.0.1 --data-dir $dir/data --requirepass $PASSWORD --worker-port-base $(free_port)"
  else
    cmd="redis-server --port $port --bind 127.0.0.1 --dir $dir --requirepass $PASSWORD --save '' --appendonly no"
  fi
  cat >"$WORK/run/$target.start" <<EOF
#!/usr/bin/env bash
cd $dir
setsid $cmd >>$dir/server.log 2>&1 </dev/null &
echo \$! >$dir/pid
for _ in \$(seq 1 200); do
  [[ \$(redis-cli -p $port -a $PASSWORD --no-auth-warning ping 2>/dev/null) == PONG ]] && exit 0
  sleep 0.05
done
echo "$target did not answer PING on port $port" >&2; tail -20 $dir/server.log >&2; exit 1
EOF
  cat >"$WORK/run/$target.stop" <<EOF
#!/usr/bin/env bash
pid=\$(cat $dir/pid 2>/dev/null) || exit 0
kill -TERM "\$pid" 2>/dev/null || exit 0
for _ in \$(seq 1 200); do kill -0 "\$pid" 2>/dev/null || exit 0; sleep 0.05; done
kill -KILL "\$pid" 2>/dev/null; exit 0
EOF
  cat >"$WORK/run/$target.restart" <<EOF
#!/usr/bin/env bash
$WORK/run/$target.stop && $WORK/run/$target.start
EOF
  chmod +x "$WORK/run/$target".{start,stop,restart}
  echo "$port $dir"
}

# ---------------------------------------------------------------- known failures
# Lines: "PROGRAM-GLOB FEATURE  # why". Prints the matching line's reason.
known_failure() {
  local prog=$1 feat=$2 glob f rest
  [[ -f $KNOWN ]] || return 1
  while read -r glob f rest; do
    [[ -z $glob || $glob == \#* ]] && continue
    if [[ $prog == $glob && $feat == "$f" ]]; then echo "${rest#\# }"; return 0; fi
  done <"$KNOWN"
  return 1
}

# ---------------------------------------------------------------- run
# run_target TARGET PORT: every program against one running server. Prints
# its report; leaves "passed failed skipped expected" in run/TARGET.counts and
# one problem a line in run/TARGET.problems.
run_target() {
  local target=$1 port=$2 prog t0 log rc seen verdict feat reason why
  local passed=0 failed=0 skipped=0 expected=0
  : >"$WORK/run/$target.problems"
  problem() { failed=$((failed + 1)); echo "$target $1" >>"$WORK/run/$target.problems"; }
  for prog in "${PROGRAMS[@]}"; do
    t0=$(now)
    log=$WORK/run/$prog-$target.log
    # shellcheck disable=SC2046
    TARGET=$target HOST=127.0.0.1 PORT=$port PASSWORD=$PASSWORD \
      RESTART_CMD="$WORK/run/$target.restart" \
      timeout 300 $(command_for "$prog") >"$log" 2>&1 </dev/null
    rc=$?
    seen=0
    while read -r verdict feat reason; do
      feat=${feat%:}
      case $verdict in
        PASS|FAIL|SKIP) seen=$((seen + 1)) ;;
        *) continue ;;
      esac
      if [[ $target == elsa ]] && why=$(known_failure "$prog" "$feat"); then
        if [[ $verdict == FAIL ]]; then
          expected=$((expected + 1)); echo "  known  $prog $feat: $reason"
        elif [[ $verdict == PASS ]]; then
          problem "$prog $feat: listed in known-elsa-failures.txt but PASSES now; remove the line"
          echo "  UNEXPECTED PASS $prog $feat"
        else
          skipped=$((skipped + 1))
        fi
        continue
      fi
      case $verdict in
        PASS) passed=$((passed + 1)) ;;
        SKIP) skipped=$((skipped + 1)); echo "  skip   $prog $feat: $reason" ;;
        FAIL) problem "$prog $feat: $reason"; echo "  FAIL   $prog $feat: $reason" ;;
      esac
    done <"$log"
    if ((seen == 0)) || { ((rc != 0)) && ! grep -q '^FAIL ' "$log"; }; then
      problem "$prog: exited $rc (log $log)"
      echo "  CRASH  $prog exited $rc:"; tail -20 "$log" | sed 's/^/    /'
    fi
    echo "$target $prog: $(grep -c '^PASS ' "$log") pass, $(grep -c '^FAIL ' "$log") fail, $(grep -c '^SKIP ' "$log") skip in $(elapsed "$t0")s"
  done
  echo "$passed $failed $skipped $expected" >"$WORK/run/$target.counts"
}

suite_t0=$(now)
DIRS=()
cleanup() {
  local t d
  for t in redis elsa; do [[ -x $WORK/run/$t.stop ]] && "$WORK/run/$t.stop"; done
  for d in "${DIRS[@]}"; do rm -rf "$d"; done
}
trap cleanup EXIT

# The targets run side by side (each program is mostly waiting), unless --serial.
declare -A PORT_OF
for target in $TARGETS; do
  read -r port dir < <(setup_server "$target") || exit 1
  [[ -n ${port:-} ]] || exit 1
  DIRS+=("$dir")
  "$WORK/run/$target.start" || exit 1
  PORT_OF[$target]=$port
  echo "== $target on 127.0.0.1:$port (data $dir)"
done
pids=()
for target in $TARGETS; do
  if ((SERIAL)); then
    run_target "$target" "${PORT_OF[$target]}"
  else
    run_target "$target" "${PORT_OF[$target]}" >"$WORK/run/$target.out" 2>&1 &
    pids+=($!)
  fi
done
for pid in "${pids[@]}"; do wait "$pid"; done
passed=0 failed=0 skipped=0 expected=0
for target in $TARGETS; do
  ((SERIAL)) || { echo "== $target"; cat "$WORK/run/$target.out"; }
  read -r p f s e <"$WORK/run/$target.counts" 2>/dev/null || { p=0 f=1 s=0 e=0; echo "$target: the run did not finish" >>"$WORK/run/$target.problems"; }
  passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s)) expected=$((expected + e))
  "$WORK/run/$target.stop"
done

echo "suite ran in $(elapsed "$suite_t0")s ($expected known Elsa failures, listed in tests/clients/known-elsa-failures.txt)"
for target in $TARGETS; do sed 's/^/problem: /' "$WORK/run/$target.problems"; done
echo "clients: $passed passed, $failed failed, $skipped skipped"
((failed == 0))
