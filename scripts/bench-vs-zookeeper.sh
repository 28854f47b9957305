#!/usr/bin/env bash
# Throughput-versus-read-ratio curves, ringkeeper and Apache ZooKeeper side by side, on this
# machine (127.0.0.1, and network namespaces for the netns3 setups).
#
#   scripts/bench-vs-zookeeper.sh [--quick] [--docs] [--summarize DIR]
#
# Installs Apache ZooKeeper 3.8 from Debian's `zookeeper` package if missing, builds
# ringkeeper, measures the data disk's fdatasync latency, then sweeps with the same harness
# options (ringkeeper-bench run):
#   1. the canned-reply responder (the ceiling of the harness and loopback),
#   2. a standalone Apache ZooKeeper, 3. a standalone ringkeeper,
#   4. a 3-member Apache ZooKeeper ensemble, 5. a 3-member ringkeeper ensemble,
#   6, 7. the same ensembles with each member in its own network namespace and the load in a
#      client namespace, BENCH_NETNS_DELAY_US one-way on every path (scripts/netns.sh: netem
#      where the kernel has it, else delay relays; skipped with a message without root or
#      namespaces),
# each swept closed-loop, then (where ZooKeeper ran) open-loop at half of ZooKeeper's
# saturation throughput to compare p99 latencies at the same load,
# with matched settings: fsync on for both (forceSync=yes), data on the same disk (under the
# results directory), tickTime 2000, maxClientCnxns 0, Java heap $ZK_HEAP (default 2g).
# Everything lands in bench-results/<timestamp>/ (results.csv, one .json/.md per server,
# summary.md with the ringkeeper/ZooKeeper ratio per point, throughput.svg/.png,
# latency-p99.svg/.png drawn by plotters (needs a TTF font: fonts-dejavu-core), server logs). --docs also rewrites docs/benchmarks.md from this run (keeping
# the "## " sections other scripts wrote, such as scripts/bench-state.py's).
# --summarize DIR writes the summary (and with --docs, the docs) of an earlier run's
# directory again, without running anything (give the same options and environment).
#
# Environment: BENCH_CLIENTS (16), BENCH_OUTSTANDING (100), BENCH_PAYLOAD (1024),
# BENCH_ZNODES (1000), BENCH_WARMUP_S (2), BENCH_MEASURE_S (5), BENCH_RATIOS
# (0,10,...,100), BENCH_HALF_RATIOS (0,50,90,100: where p50 and p99 are also measured open-loop
# at shares of ZooKeeper's saturation at that read share; empty: not), BENCH_RATE_SHARES (0.5:
# those shares, comma list, e.g. 0.1,0.25,0.5,0.75), BENCH_THREADS (1), BENCH_PIN (CPUs for the load, e.g. 1), ZK_HEAP (2g),
# BENCH_ONLY (comma list of: ceiling,ringkeeper-standalone,zookeeper-standalone,
# ringkeeper-ensemble3,zookeeper-ensemble3,floor-ensemble3,ringkeeper-netns3,zookeeper-netns3,
# floor-netns3; a floor-<setup> runs canned-reply responders in the members' places at the
# open-loop points, the latency of that network and harness alone, after zookeeper-<setup>), BENCH_BASE_PORT
# (27181; the run uses a few ports above it), BENCH_NETNS_DELAY_US (100), BENCH_NETNS_JITTER_US
# (0), RK_NETNS_PREFIX (rkbench: the namespaces' names), RK_ENSEMBLE_CONFIG (lines added to
# every ringkeeper ensemble member's zoo.cfg, e.g. ringkeeper.clientCoreOnPipeline=true),
# BENCH_ENSEMBLE_MEMBER (leader or follower: an ensemble's load goes to that member alone, the
# first in member order that srvr names so, e.g. for lone writes with BENCH_CLIENTS=1
# BENCH_OUTSTANDING=1; empty: spread over all members). --quick: 4 ratios, 1 s warm-up, 2 s
# windows.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
DOCS=0
QUICK=0
SUMMARIZE=""
while [ $# -gt 0 ]; do
    case "$1" in
        --docs) DOCS=1 ;;
        --quick) QUICK=1 ;;
        --summarize) SUMMARIZE="${2:?--summarize needs a results directory}"; shift ;;
        *) sed -n '2,40p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
    esac
    shift
done

CLIENTS=${BENCH_CLIENTS:-16}
OUTSTANDING=${BENCH_OUTSTANDING:-100}
PAYLOAD=${BENCH_PAYLOAD:-1024}
ZNODES=${BENCH_ZNODES:-1000}
WARMUP=${BENCH_WARMUP_S:-2}
MEASURE=${BENCH_MEASURE_S:-5}
RK_ENSEMBLE_CONFIG=${RK_ENSEMBLE_CONFIG:-}
RATIOS=${BENCH_RATIOS:-0,10,20,30,40,50,60,70,80,90,100}
HALF_RATIOS=${BENCH_HALF_RATIOS-0,50,90,100}
RATE_SHARES=${BENCH_RATE_SHARES:-0.5}
if [ "$QUICK" = 1 ]; then
    WARMUP=1; MEASURE=2; RATIOS=${BENCH_RATIOS:-0,50,90,100}; HALF_RATIOS=${BENCH_HALF_RATIOS-0,90}
fi
THREADS=${BENCH_THREADS:-1}
ENSEMBLE_MEMBER=${BENCH_ENSEMBLE_MEMBER:-}
case "$ENSEMBLE_MEMBER" in
    "" | leader | follower) ;;
    *) echo "BENCH_ENSEMBLE_MEMBER must be leader or follower (or empty), not $ENSEMBLE_MEMBER" >&2; exit 2 ;;
esac
ZK_HEAP=${ZK_HEAP:-2g}
ONLY=${BENCH_ONLY:-ceiling,ringkeeper-standalone,zookeeper-standalone,ringkeeper-ensemble3,zookeeper-ensemble3,floor-ensemble3,ringkeeper-netns3,zookeeper-netns3,floor-netns3}
BASE_PORT=${BENCH_BASE_PORT:-27181}
NETNS_DELAY_US=${BENCH_NETNS_DELAY_US:-100}
NETNS_JITTER_US=${BENCH_NETNS_JITTER_US:-0}
export RK_NETNS_PREFIX="${RK_NETNS_PREFIX:-rkbench}"
# shellcheck source=scripts/netns.sh
. "$ROOT/scripts/netns.sh"

# --- what it needs ------------------------------------------------------------------------
if ! dpkg -s zookeeper >/dev/null 2>&1 || ! command -v java >/dev/null 2>&1; then
    echo "==> installing Apache ZooKeeper (Debian's zookeeper package) and a JRE"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends zookeeper default-jre-headless
fi
echo "==> cargo build --release --workspace"
cargo build --release --workspace --bins
RK="$ROOT/target/release/ringkeeper"
BENCH="$ROOT/target/release/ringkeeper-bench"

OUT="$ROOT/bench-results/$(date -u +%Y%m%dT%H%M%SZ)"
if [ -n "$SUMMARIZE" ]; then
    OUT="$(cd "$SUMMARIZE" && pwd)"
fi
mkdir -p "$OUT/data"
PIDS=()
NETNS_USED=0
cleanup() {
    for p in "${PIDS[@]:-}"; do
        [ -n "$p" ] && kill "$p" 2>/dev/null || true
    done
    if [ "$NETNS_USED" = 1 ]; then netns_down >/dev/null 2>&1 || true; fi
    wait 2>/dev/null || true
    rm -rf "$OUT/data"
}
trap cleanup EXIT

srvr() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1 && printf srvr >&3 && cat <&3" 2>/dev/null || true; }
loopback_srvr() { srvr "$((BASE_PORT + 10 + $1))"; } # member I of a loopback ensemble
# The first of members 1..3 whose srvr (asked by `$1 I`) names mode BENCH_ENSEMBLE_MEMBER.
member_in_mode() {
    local i
    for i in 1 2 3; do
        if "$1" "$i" | grep -q "Mode: $ENSEMBLE_MEMBER"; then echo "$i"; return 0; fi
    done
    echo "no member of the ensemble is a $ENSEMBLE_MEMBER" >&2
    return 1
}
wait_mode() { # port, pattern
    for _ in $(seq 1 240); do
        if srvr "$1" | grep -qE "Mode: ($2)"; then return 0; fi
        sleep 0.25
    done
    echo "server on port $1 did not come up; see $OUT/*.log" >&2
    return 1
}
want() { [[ ",$ONLY," == *",$1,"* ]]; }
# A canned-reply responder on address:port (inside the namespace when given), waited for until
# it accepts connections; fails when it does not.
start_responder() { # address, port, [namespace]
    local in=()
    if [ -n "${3:-}" ]; then in=(ip netns exec "$3"); fi
    "${in[@]}" "$BENCH" responder --listen "$1:$2" --payload "$PAYLOAD" 2>>"$OUT/responder.log" &
    PIDS+=($!)
    for _ in $(seq 1 40); do
        if "${in[@]}" bash -c "exec 3<>/dev/tcp/$1/$2" 2>/dev/null; then return 0; fi
        sleep 0.25
    done
    echo "responder on $1:$2 did not come up; see $OUT/responder.log" >&2
    return 1
}
if [ -z "$SUMMARIZE" ]; then
# Every port this run uses must be free (another server there would be measured instead).
for port in $(seq "$BASE_PORT" $((BASE_PORT + 13))) $(seq $((BASE_PORT + 101)) $((BASE_PORT + 103))) \
    $(seq $((BASE_PORT + 201)) $((BASE_PORT + 203))); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        echo "port $port on 127.0.0.1 is taken; set BENCH_BASE_PORT to a free range" >&2
        exit 1
    fi
done
fi

# A zoo.cfg both servers read. $1 dir, $2 client port, $3 extra lines.
write_cfg() {
    mkdir -p "$1"
    cat >"$1/zoo.cfg" <<EOF
tickTime=2000
initLimit=10
syncLimit=5
dataDir=$1
clientPort=$2
clientPortAddress=127.0.0.1
maxClientCnxns=0
forceSync=yes
4lw.commands.whitelist=*
admin.enableServer=false
$3
EOF
}

SWEEP_IN=() # a command prefix the load runs under (the client namespace for netns3)
sweep() { # label, connection string, ratios, [extra args]
    local label="$1" servers="$2" ratios="$3"
    shift 3
    local pin=()
    if [ -n "${BENCH_PIN:-}" ]; then pin=(--pin "$BENCH_PIN"); fi
    echo "==> $label ($servers)"
    "${SWEEP_IN[@]}" "$BENCH" run --servers "$servers" --label "$label" --out "$OUT" --clients "$CLIENTS" \
        --outstanding "$OUTSTANDING" --payload "$PAYLOAD" --znodes "$ZNODES" --ratios "$ratios" \
        --warmup-s "$WARMUP" --measure-s "$MEASURE" --threads "$THREADS" "${pin[@]}" "$@" \
        | tee -a "$OUT/harness.log"
}

stop_all() {
    for p in "${PIDS[@]:-}"; do
        [ -n "$p" ] && kill "$p" 2>/dev/null || true
    done
    wait 2>/dev/null || true
    PIDS=()
}

start_rk() { # dir, port
    "$RK" serve --config "$1/zoo.cfg" >"$OUT/$(basename "$1").log" 2>&1 &
    PIDS+=($!)
}

start_zk() { # dir, main class
    java "-Xmx$ZK_HEAP" "-Xms$ZK_HEAP" -Dzookeeper.4lw.commands.whitelist='*' -Dzookeeper.admin.enableServer=false \
        -cp "$ZK_CLASSPATH" "$2" "$1/zoo.cfg" >"$OUT/$(basename "$1").log" 2>&1 &
    PIDS+=($!)
}

if [ -z "$SUMMARIZE" ]; then
# --- the log disk ---------------------------------------------------------------------------
"$BENCH" fsync --dir "$OUT/data" --count 500 | tee "$OUT/fsync.txt"

# --- 1. ceiling ---------------------------------------------------------------------------------
if want ceiling; then
    start_responder 127.0.0.1 "$BASE_PORT"
    sweep ceiling-standalone "127.0.0.1:$BASE_PORT" "$RATIOS"
    stop_all
fi

# --- 2, 3. standalone -----------------------------------------------------------------------------
P=$((BASE_PORT + 1))
# Each server: the closed-loop sweep, then open-loop points at each of RATE_SHARES of
# ZooKeeper's saturation (ZooKeeper runs first, so its saturation is known when ringkeeper runs).
measure() { # label, connection string
    sweep "$1" "$2" "$RATIOS"
    local setup="${1#*-}"
    if want "zookeeper-$setup" && [ -n "$HALF_RATIOS" ]; then open_loop_points "$1" "$2"; fi
}
open_loop_points() { # label, connection string: at each of RATE_SHARES of zookeeper-<setup>'s saturation
    local setup="${1#*-}" share
    for share in ${RATE_SHARES//,/ }; do
        sweep "$1" "$2" "$HALF_RATIOS" --skip-setup --rate-from "$OUT" --rate-label "zookeeper-$setup" \
            --rate-share "$share"
    done
}
if want zookeeper-standalone; then
    write_cfg "$OUT/data/zk-standalone" "$P" ""
    start_zk "$OUT/data/zk-standalone" org.apache.zookeeper.server.ZooKeeperServerMain
    wait_mode "$P" standalone
    measure zookeeper-standalone "127.0.0.1:$P"
    stop_all
fi
if want ringkeeper-standalone; then
    write_cfg "$OUT/data/rk-standalone" "$P" ""
    start_rk "$OUT/data/rk-standalone"
    wait_mode "$P" standalone
    measure ringkeeper-standalone "127.0.0.1:$P"
    stop_all
fi

# --- 4, 5. three-member ensembles -----------------------------------------------------------------
ensemble() { # kind (rk|zk)
    local servers="" conn=""
    for i in 1 2 3; do
        servers+="server.$i=127.0.0.1:$((BASE_PORT + 100 + i)):$((BASE_PORT + 200 + i))"$'\n'
    done
    # Three ringkeeper members share this host's CPUs: unpinned, and idle executors sleep at
    # once instead of polling (as scripts/ensemble.sh runs them; one member per host would
    # keep the embedded defaults).
    local shared=""
    if [ "$1" = rk ]; then
        shared=$'ringkeeper.cpuPinning=false\nringkeeper.spinBeforeParkUs=0\n'
        if [ -n "$RK_ENSEMBLE_CONFIG" ]; then shared+="$RK_ENSEMBLE_CONFIG"$'\n'; fi
    fi
    for i in 1 2 3; do
        local dir="$OUT/data/$1-ensemble3-$i"
        write_cfg "$dir" "$((BASE_PORT + 10 + i))" "$servers$shared"
        echo "$i" >"$dir/myid"
        conn+="${conn:+,}127.0.0.1:$((BASE_PORT + 10 + i))"
    done
    for i in 1 2 3; do
        if [ "$1" = rk ]; then
            start_rk "$OUT/data/$1-ensemble3-$i"
        else
            start_zk "$OUT/data/$1-ensemble3-$i" org.apache.zookeeper.server.quorum.QuorumPeerMain
        fi
    done
    for i in 1 2 3; do wait_mode "$((BASE_PORT + 10 + i))" "leader|follower"; done
    ENSEMBLE_CONN="$conn"
    if [ -n "$ENSEMBLE_MEMBER" ]; then
        i="$(member_in_mode loopback_srvr)" || exit 1
        ENSEMBLE_CONN="127.0.0.1:$((BASE_PORT + 10 + i))"
    fi
}
if want zookeeper-ensemble3; then
    ensemble zk
    measure zookeeper-ensemble3 "$ENSEMBLE_CONN"
    stop_all
fi
if want ringkeeper-ensemble3; then
    ensemble rk
    measure ringkeeper-ensemble3 "$ENSEMBLE_CONN"
    stop_all
fi
# The floor of a setup: canned-reply responders where its members listen, only at the open-loop
# points (the rates come from zookeeper-<setup>'s closed-loop rows of this run).
floor_possible() { # setup; says why not and fails when the floor cannot run
    if [ -z "$HALF_RATIOS" ]; then
        echo "==> skipping floor-$1: BENCH_HALF_RATIOS is empty (no open-loop points)"
        return 1
    fi
    # results.csv: column 1 the label, column 17 target_rate (0: closed loop).
    if ! awk -F, -v l="zookeeper-$1" '$1 == l && $17 == 0 { found = 1 } END { exit !found }' \
        "$OUT/results.csv" 2>/dev/null; then
        echo "==> skipping floor-$1: no closed-loop zookeeper-$1 rows in this run to take its rates from"
        return 1
    fi
}
if want floor-ensemble3 && floor_possible ensemble3; then
    conn="" ready=1
    for i in 1 2 3; do
        start_responder 127.0.0.1 "$((BASE_PORT + 10 + i))" || ready=0
        conn+="${conn:+,}127.0.0.1:$((BASE_PORT + 10 + i))"
    done
    # A responder that did not start skips the floor; the servers' points are kept.
    if [ "$ready" = 1 ]; then open_loop_points floor-ensemble3 "$conn"; fi
    stop_all
fi

# --- 6, 7. three-member ensembles in network namespaces -------------------------------------------
# Whether the namespaces can be made here; says why not, and fails, where they cannot.
netns_possible() { # label of what needs them
    local why
    why="$(netns_unavailable_reason)"
    if [ -n "$why" ]; then
        echo "==> skipping $1: $why"
        return 1
    fi
}
# The namespaces and their delay (outside any condition, so a failure stops the run).
netns_rig_up() {
    NETNS_USED=1
    netns_up 3
    netns_delay "$NETNS_DELAY_US" "$NETNS_JITTER_US"
    netns_mode >"$OUT/netns-mode.txt"
}
netns_ensemble() { # kind (rk|zk), label
    local dir="$OUT/data/$1-netns3"
    netns_possible "$2" || return 0
    netns_rig_up
    local extra=""
    if [ "$1" = rk ]; then extra="$RK_ENSEMBLE_CONFIG"; fi
    RK_NETNS_EXTRA_CONFIG="$extra" netns_ensemble_start "$1" "$dir"
    SWEEP_IN=(ip netns exec "$(netns_name c)")
    local conn i
    conn="$(netns_conn)"
    if [ -n "$ENSEMBLE_MEMBER" ]; then
        i="$(member_in_mode netns_srvr)" || exit 1
        conn="$(netns_addr "m$i"):$NETNS_CLIENT_PORT"
    fi
    measure "$2" "$conn"
    SWEEP_IN=()
    netns_ensemble_stop "$dir"
    for i in 1 2 3; do cp "$dir/$i/server.log" "$OUT/$1-netns3-$i.log"; done
    netns_down
}
if want zookeeper-netns3; then netns_ensemble zk zookeeper-netns3; fi
if want ringkeeper-netns3; then netns_ensemble rk ringkeeper-netns3; fi
if want floor-netns3 && floor_possible netns3 && netns_possible floor-netns3; then
    netns_rig_up
    ready=1
    for i in 1 2 3; do
        # Each member's namespace: a responder on the member's own address and client port,
        # behind the same relay (or netem) a member would be.
        start_responder "$(netns_addr "m$i")" "$NETNS_CLIENT_PORT" "$(netns_name "m$i")" || ready=0
    done
    if [ "$ready" = 1 ]; then
        SWEEP_IN=(ip netns exec "$(netns_name c)")
        open_loop_points floor-netns3 "$(netns_conn)"
        SWEEP_IN=()
    fi
    # The namespaces first: their relays are this shell's children too, and stop_all waits
    # for every child.
    netns_down
    stop_all
fi
fi

# --- summary ----------------------------------------------------------------------------------------
QUICK_FLAG=""
if [ "$QUICK" = 1 ]; then QUICK_FLAG=" --quick"; fi
ZK_VERSION=$(dpkg-query -W -f '${Version}' zookeeper 2>/dev/null || echo '?')
JAVA_VERSION=$(java -version 2>&1 | head -1)
CPU=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')
PREAMBLE="# ringkeeper vs Apache ZooKeeper, $(date -u +%Y-%m-%d)

- Machine: $(nproc) CPUs ($CPU), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), \
kernel $(uname -r); everything on 127.0.0.1$(if [ -f "$OUT/netns-mode.txt" ]; then echo " (netns3: in network namespaces, see below)"; fi).
- Servers: ringkeeper $(git -C "$ROOT" rev-parse --short HEAD) (release build, embedded defaults plus the \
config below); Apache ZooKeeper $ZK_VERSION (Debian), $JAVA_VERSION, heap -Xms/-Xmx $ZK_HEAP.
- Both: tickTime 2000, forceSync yes, maxClientCnxns 0, data directories on the same disk.
  The three ringkeeper members of an ensemble run unpinned with \`ringkeeper.spinBeforeParkUs=0\`,
  since they share this host's CPUs (as \`scripts/ensemble.sh\` runs them)${RK_ENSEMBLE_CONFIG:+, and with \`$(echo "$RK_ENSEMBLE_CONFIG" | paste -sd' ')\`}.
- Log disk: $(cat "$OUT/fsync.txt")
- Load: ringkeeper-bench, $CLIENTS clients × $OUTSTANDING outstanding, $PAYLOAD-byte getData/setData on \
$ZNODES znodes, warm-up ${WARMUP} s and ${MEASURE} s measured per point; connections \
$(if [ -n "$ENSEMBLE_MEMBER" ]; then echo "to an ensemble's $ENSEMBLE_MEMBER alone"; else echo "spread over an ensemble's members"; fi); \
$THREADS load executor(s)${BENCH_PIN:+ pinned to CPU $BENCH_PIN}.
- Command: \`scripts/bench-vs-zookeeper.sh$QUICK_FLAG\`; raw rows in results.csv.
$(if grep -q '^ceiling-' "$OUT/results.csv" 2>/dev/null; then echo "- ceiling-standalone is the harness against a canned-reply \
responder: what the harness and loopback can do."; fi)
$(if grep -q '^floor-' "$OUT/results.csv" 2>/dev/null; then echo "- floor-<setup> is the same responder in each member's \
place (its port, its namespace, behind its relay), loaded at the setup's open-loop points: the latency of that network \
and harness alone (no disk, no quorum, no work), one window per point, a noisy bound."; fi)
$(if [ -f "$OUT/netns-mode.txt" ]; then echo "- netns3: each member in its own network namespace (\`scripts/netns.sh\`), the load in a client \
namespace, ${NETNS_DELAY_US} µs one-way delay (+ jitter 0..${NETNS_JITTER_US} µs) on every path by $(cat "$OUT/netns-mode.txt") \
(relay: a \`ringkeeper-bench delay-relay\` in front of each member)."; fi)
- Open-loop points send at $(echo "$RATE_SHARES" | sed 's/,/, /g') of ZooKeeper's closed-loop throughput at that read share, each
  request at its scheduled time (paced in 1 ms steps); latency counts from the scheduled time.

"
"$BENCH" report "$OUT" >/dev/null
printf '%s' "$PREAMBLE" | cat - "$OUT/summary.md" >"$OUT/summary.md.tmp" && mv "$OUT/summary.md.tmp" "$OUT/summary.md"
cat "$OUT/summary.md"
if [ "$DOCS" = 1 ]; then
    mkdir -p docs/bench
    cp "$OUT/throughput.svg" "$OUT/latency-p99.svg" docs/bench/
    # Sections other runs wrote (a "## " heading other than "How to read this", e.g.
    # scripts/bench-state.py's) are kept, after this run's text.
    KEPT="$(awk '/^## / { keep = ($0 != "## How to read this") } keep' docs/benchmarks.md 2>/dev/null || true)"
    {
        cat "$OUT/summary.md"
        printf '\n![throughput](bench/throughput.svg)\n\n![p99 latency](bench/latency-p99.svg)\n'
        cat <<'EOF'

## How to read this

- Every number above comes from the run named at the top: `ringkeeper-bench` wrote
  results.csv, and `ringkeeper-bench report` and this script made the tables and plots from it.
- **ceiling-standalone** is the harness against a responder that answers every request with a
  canned reply. It shows how far the harness and loopback go on this machine. A server near it
  is limited by the load generator, not by itself.
- **Closed loop** (the first two tables, the plots): every client keeps `--outstanding`
  requests in flight. This is the paper's method and measures saturation throughput;
  latencies there are those of a saturated server.
- **Open loop** (the last tables): requests leave at a fixed rate, a share of ZooKeeper's
  saturation throughput at that read share, each timed from when it was due. This compares
  latency at the same load.
- **Shared machine:** the load generator and every server process share the machine's CPUs.
  A 3-member ensemble on one host runs three servers on the same cores, so the ensemble
  curves measure the work per request more than what a real three-host ensemble would do.
- **Reproduce:** `scripts/bench-vs-zookeeper.sh --docs` (about 15 minutes; `--quick` for a
  shorter run). `BENCH_*` variables change the load (see the script's header).
EOF
        if [ -n "$KEPT" ]; then printf '\n%s\n' "$KEPT"; fi
    } >docs/benchmarks.md.tmp
    mv docs/benchmarks.md.tmp docs/benchmarks.md
    echo "docs/benchmarks.md rewritten from $OUT"
fi
echo "results: $OUT"
