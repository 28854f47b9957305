#!/usr/bin/env bash
# The fault-injection rig (issue 18): a 3- or 5-member ensemble (plus observers) in network namespaces (scripts/netns.sh)
# under a seeded nemesis, with workloads whose histories are checked for ZooKeeper's guarantees.
#
#   scripts/chaos.sh [--seed N] [--minutes M] [--nemesis LIST] [--workloads LIST]
#                    [--server rk|zk] [--mutant] [--members N] [--observers K] [--overlap]
#                    [--dir DIR] [--out FILE] [--keep]
#
#   --nemesis    comma list of partition,kill,stop,delay,loss,dup,reorder,clock,disk,bitflip,ioerror
#                (default: all; ioerror needs Debian's python3-fusepy and libfuse2)
#   --members    voting members (default 3); --observers K adds K observers (members N+1..N+K):
#                clients connect to them too and every fault may hit them
#   --overlap    two faults active at once (the second starts 1-4 s after the first; both healed)
#   --oldflip T  instead of a run: T tries of seed 101's stall (tests/chaos/oldflip.py: a bit
#                flipped in a killed member's segment older than its newest snapshot; serves?)
#   --workloads  comma list of register,creates,sessions,watches,ephemerals (default: all)
#   --server     rk (ringkeeper, default) or zk (Apache ZooKeeper 3.8 from Debian's package)
#   --mutant     ringkeeper built with the test-only feature mutation-leader-acks-alone into
#                target/mutant (a leader commits on its own ack): the checkers must catch it
#   --dir        where the members' data, logs and chaos.log go (default target/chaos/<server>-<seed>)
#   --out        the JSON summary (default DIR/summary.json)
#   --keep       keep the members' data dirs after a passing run (always kept after a failure)
#
# Prints a summary (ops, acknowledged writes, violations per checker); exit status 0 when no
# checker found a violation, 1 when one did (the command replaying the seed is printed), 2 when
# the rig failed, 77 when this machine cannot run it (not root, no namespaces: says why).
# Rules: everything it creates lives in namespaces PREFIX-* (RK_NETNS_PREFIX, default
# chaos<pid>) on a private subnet, and is removed on exit, also on failure or Ctrl-C.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seed=$(( $(date +%s%N) % 1000000 ))
minutes=1 nemesis="partition,kill,stop,delay,loss,dup,reorder,clock,disk,bitflip,ioerror"
work="register,creates,sessions,watches,ephemerals"
server=rk mutant=0 members=3 observers=0 overlap=0 oldflip=0 dir="" out="" keep=0
args=("$@")
while [ $# -gt 0 ]; do
    case "$1" in
        --seed) seed="$2"; shift 2 ;;
        --minutes) minutes="$2"; shift 2 ;;
        --nemesis) nemesis="$2"; shift 2 ;;
        --workloads) work="$2"; shift 2 ;;
        --server) server="$2"; shift 2 ;;
        --mutant) mutant=1; shift ;;
        --keep) keep=1; shift ;;
        --members) members="$2"; shift 2 ;;
        --observers) observers="$2"; shift 2 ;;
        --overlap) overlap=1; shift ;;
        --oldflip) oldflip="$2"; shift 2 ;;
        --dir) dir="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        *) sed -n 5,23p "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
    esac
done
case "$server" in rk | zk) ;; *) echo "chaos: --server must be rk or zk" >&2; exit 2 ;; esac

export RK_NETNS_PREFIX="${RK_NETNS_PREFIX:-chaos$(( $$ % 100000 ))}"
export RK_NETNS_SUBNET="${RK_NETNS_SUBNET:-10.79.$(( $$ % 250 + 1 ))}"
export RK_NETNS_TICK_MS="${RK_NETNS_TICK_MS:-500}"
export RK_NETNS_STATE="${RK_NETNS_STATE:-$ROOT/target/netns-$RK_NETNS_PREFIX}"
# Small log segments (the default 64 MiB is fallocated per segment), snapshots during the run.
export RK_NETNS_EXTRA_CONFIG="${RK_NETNS_EXTRA_CONFIG:-preAllocSize=4096
snapCount=2000}"
export ZK_HEAP="${ZK_HEAP:-256m}"
# Apache ZooKeeper's JVM does not run under libfaketime (its leader's timed waits for a quorum
# expire at once, even at offset +0: no ensemble forms), so its runs leave the clock out.
if [ "$server" = zk ] && [[ ",$nemesis," == *,clock,* ]]; then
    nemesis="$(echo ",$nemesis," | sed 's/,clock,/,/; s/^,//; s/,$//')"
    echo "chaos: the clock nemesis is left out for Apache ZooKeeper (the JVM does not run under libfaketime)"
fi
if [[ ",$nemesis," == *,ioerror,* ]] && ! /usr/bin/python3 -c 'import fusepy' 2>/dev/null; then
    nemesis="$(echo ",$nemesis," | sed 's/,ioerror,/,/; s/^,//; s/,$//')"
    echo "chaos: the ioerror nemesis is left out (apt-get install python3-fusepy libfuse2 for it)"
fi
if [[ ",$nemesis," == *,clock,* ]]; then export RK_NETNS_FAKETIME=1; fi
# shellcheck source=scripts/netns.sh
. "$ROOT/scripts/netns.sh"

why="$(netns_unavailable_reason)"
if [ -n "$why" ]; then echo "chaos: skipped: $why"; exit 77; fi
[ -x "$ROOT/target/venv/bin/python" ] || { echo "chaos: target/venv missing (run scripts/test.sh once)" >&2; exit 2; }
if [ "$server" = rk ]; then
    if [ "$mutant" = 1 ]; then
        echo "chaos: building the mutant (feature mutation-leader-acks-alone) into target/mutant"
        (cd "$ROOT" && cargo build -q --profile ci --features mutation-leader-acks-alone --target-dir target/mutant --bin ringkeeper)
        export RK_BIN="$ROOT/target/mutant/ci/ringkeeper"
    fi
    [ -x "$NETNS_RK" ] || NETNS_RK="${RK_BIN:-$ROOT/target/release/ringkeeper}"
    [ -x "${RK_BIN:-$NETNS_RK}" ] || { echo "chaos: ringkeeper not built (cargo build --release)" >&2; exit 2; }
    NETNS_RK="${RK_BIN:-$NETNS_RK}"
    export RK_BIN="$NETNS_RK"
elif [ ! -f /usr/share/java/zookeeper.jar ]; then
    echo "chaos: Apache ZooKeeper missing (apt-get install zookeeper)" >&2; exit 2
fi

suffix=""
[ "$mutant" = 0 ] || suffix=-mutant
[ "$oldflip" = 0 ] || suffix=-oldflip
name="$server$suffix-$seed"
dir="${dir:-$ROOT/target/chaos/$name}"
rm -rf "$dir"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
out="${out:-$dir/summary.json}"
# The members' server logs stay off their data dirs, which the disk nemesis fills (a full
# volume would swallow the very lines that say what happened).
export RK_NETNS_LOG_DIR="$dir/logs"

cleanup() { netns_down >/dev/null 2>&1 || true; }
trap cleanup EXIT
trap 'exit 130' INT TERM
netns_up "$members" "$observers" >/dev/null
rc=0
if [ "$oldflip" -gt 0 ]; then
    ip netns exec "$(netns_name c)" "$ROOT/target/venv/bin/python" "$ROOT/tests/chaos/oldflip.py" --seed "$seed" \
        --tries "$oldflip" --dir "$dir" >"$dir/oldflip.out" 2>&1 &
    wait $! || rc=$?
    cat "$dir/oldflip.out"
    echo "details: $dir (oldflip.out, stall-*.log, logs/member*.server.log)"
    exit "$rc"
fi
# In the background so that a signal interrupts `wait` and the EXIT trap tears down at once
# (netns_down kills everything in the namespaces, the runner included).
ip netns exec "$(netns_name c)" "$ROOT/target/venv/bin/python" "$ROOT/tests/chaos/run.py" --seed "$seed" \
    --minutes "$minutes" --nemesis "$nemesis" --workloads "$work" --kind "$server" --dir "$dir" --out "$out" \
    --members "$members" --observers "$observers" $([ "$overlap" = 0 ] || echo --overlap) \
    $([ "$mutant" = 0 ] || echo --mutant) >"$dir/run.out" 2>&1 &
wait $! || rc=$?
sed -n '/==== chaos summary ====/,$p' "$dir/run.out"
[ "$rc" = 0 ] || tail -5 "$dir/run.out" | grep -v '^violations' || true
# A passing run's data (snapshots, txn logs, loop images: up to GBs) is removed unless --keep;
# the server logs (logs/) stay.
if [ "$rc" = 0 ] && [ "$keep" = 0 ]; then
    rm -rf "$dir/ensemble"
    echo "details: $dir (chaos.log, run.out, history.jsonl, logs/; data removed, --keep keeps it)"
else
    echo "details: $dir (chaos.log, run.out, history.jsonl, logs/member*.server.log, ensemble/)"
fi
if [ "$rc" != 0 ]; then
    replay="scripts/chaos.sh --seed $seed --minutes $minutes --nemesis $nemesis --workloads $work --server $server"
    [ "$members" = 3 ] || replay+=" --members $members"
    [ "$observers" = 0 ] || replay+=" --observers $observers"
    [ "$overlap" = 0 ] || replay+=" --overlap"
    [ "$mutant" = 0 ] || replay+=" --mutant"
    echo "replay: $replay"
fi
exit "$rc"
