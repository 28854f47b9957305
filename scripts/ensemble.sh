#!/usr/bin/env bash
# Runs an ensemble of ringkeeper servers on 127.0.0.1 for development and tests.
#
#   scripts/ensemble.sh start N [BASE_PORT]   N servers (3, 5 or 7); client ports BASE_PORT..
#                                             BASE_PORT+N-1 (default 2181); peer ports
#                                             BASE_PORT+10000+i (quorum), +10100+i (election);
#                                             admin HTTP on 127.0.0.1:BASE_PORT+10200+i
#   scripts/ensemble.sh restart ID            starts server ID again (after a kill), same data
#   scripts/ensemble.sh stop                  stops every server it started (SIGTERM, then -9)
#   scripts/ensemble.sh status                each server: pid, client port, role (from srvr)
#   scripts/ensemble.sh add ID [observer]     starts server ID (its ports as `start` numbers them)
#                                             from the running membership plus its own line, then
#                                             asks the ensemble to add it (`ringkeeper cli reconfig
#                                             -add`); needs reconfigEnabled=true (RK_EXTRA_CONFIG)
#   scripts/ensemble.sh remove ID             asks the ensemble to remove server ID
#                                             (`reconfig -remove`), then stops it
#
# add/remove authenticate as RK_RECONFIG_AUTH (digest user:password, e.g. the super user of a
# superDigest in RK_EXTRA_CONFIG): the ACL of /zookeeper/config lets nobody else reconfigure.
#
# Each server gets RK_ENSEMBLE_DIR/<id>/ (default target/ensemble) holding zoo.cfg, data/ with
# myid, server.log and pid; `start` prints that path. Set RK_TICK_TIME (ms, default 200) to
# change the tick (initLimit is 10 ticks, syncLimit 5), and RK_OBSERVERS=K to make the last K
# of the N servers observers (N - K voters, 3, 5 or 7), RK_SNAP_COUNT to change snapCount,
# RK_CLIENT_CORES to give each server that many client cores (default 1), RK_PREALLOC_KB to
# set preAllocSize (KiB; default the server's, 64 MiB per log segment); RK_EXTRA_CONFIG is
# appended to every member's zoo.cfg, with @ID@ replaced by the member's id (a per-member key
# store path, say). RK_PEER_HOSTS=distinct puts server i's peer ports on
# 127.0.0.i instead of 127.0.0.1 (so each member is its own host to the others' peer-address
# checks; client and admin ports stay on 127.0.0.1). RK_SERVER_LINE=full gives each server two
# peer addresses (`host:q:e|127.0.0.1:BASE_PORT+10300+i:BASE_PORT+10400+i`) and leaves the client
# address to the server line alone (no clientPort/clientPortAddress keys).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${RK_ENSEMBLE_DIR:-$root/target/ensemble}"
bin="${RK_BIN:-$root/target/release/ringkeeper}"
tick="${RK_TICK_TIME:-200}"
observers="${RK_OBSERVERS:-0}"
snap_count="${RK_SNAP_COUNT:-100000}"
client_cores="${RK_CLIENT_CORES:-1}"
prealloc_kb="${RK_PREALLOC_KB:-}"
peer_hosts="${RK_PEER_HOSTS:-same}"
extra="${RK_EXTRA_CONFIG:-}"
server_line="${RK_SERVER_LINE:-short}"

# shellcheck source=scripts/common.sh
. "$root/scripts/common.sh"
usage() { usage_from_header 3 20; }

start() {
    local n="$1" base="${2:-2181}"
    case "$((n - observers))" in 3 | 5 | 7) ;; *) echo "voters must be 3, 5 or 7 (got $n servers, $observers observers)" >&2; exit 2 ;; esac
    if [ -d "$dir" ] && ls "$dir"/*/pid >/dev/null 2>&1; then
        for d in "$dir"/*/; do
            if alive "$d"; then echo "an ensemble is already running in $dir; stop it first" >&2; exit 1; fi
        done
    fi
    [ -x "$bin" ] || (cd "$root" && cargo build --release --quiet)
    rm -rf "$dir"
    mkdir -p "$dir"
    local servers=""
    for i in $(seq 1 "$n"); do
        local kind=participant
        [ "$i" -gt "$((n - observers))" ] && kind=observer
        local host=127.0.0.1
        [ "$peer_hosts" = distinct ] && host="127.0.0.$i"
        local second=""
        [ "$server_line" = full ] && second="|127.0.0.1:$((base + 10300 + i)):$((base + 10400 + i))"
        servers+="server.$i=$host:$((base + 10000 + i)):$((base + 10100 + i))$second:$kind;127.0.0.1:$((base + i - 1))"$'\n'
    done
    for i in $(seq 1 "$n"); do
        local d="$dir/$i"
        mkdir -p "$d/data"
        echo "$i" >"$d/data/myid"
        local client_keys="clientPort=$((base + i - 1))"$'\n'"clientPortAddress=127.0.0.1"
        [ "$server_line" = full ] && client_keys="# the client address: this member's server line"
        cat >"$d/zoo.cfg" <<EOF
tickTime=$tick
initLimit=10
syncLimit=5
snapCount=$snap_count
dataDir=$d/data
$client_keys
ringkeeper.cpuPinning=false
ringkeeper.spinBeforeParkUs=0
ringkeeper.clientCores=$client_cores
4lw.commands.whitelist=*
admin.serverAddress=127.0.0.1
admin.serverPort=$((base + 10200 + i))
${prealloc_kb:+preAllocSize=$prealloc_kb}
${servers}
${extra//@ID@/$i}
EOF
        launch "$d"
    done
    echo "$dir"
}

launch() {
    nohup "$bin" serve --config "$1/zoo.cfg" >>"$1/server.log" 2>&1 &
    echo $! >"$1/pid"
}

restart() {
    local d="$dir/$1"
    [ -f "$d/zoo.cfg" ] || { echo "no server $1 in $dir" >&2; exit 2; }
    if alive "$d"; then echo "server $1 is running" >&2; exit 1; fi
    launch "$d"
}

stop() {
    [ -d "$dir" ] || return 0
    for d in "$dir"/*/; do
        alive "$d" && kill -TERM "$(cat "$d/pid")" 2>/dev/null || true
    done
    for _ in $(seq 1 50); do
        local any=0
        for d in "$dir"/*/; do alive "$d" && any=1; done
        [ "$any" = 0 ] && return 0
        sleep 0.1
    done
    for d in "$dir"/*/; do alive "$d" && kill -KILL "$(cat "$d/pid")" 2>/dev/null || true; done
}

status() {
    [ -d "$dir" ] || { echo "no ensemble in $dir"; return 0; }
    for d in "$dir"/*/; do
        local id port role out
        id="$(basename "$d")"
        # The client port: clientPort, else the last part of the member's own server line.
        port="$(sed -n 's/^clientPort=//p' "$d/zoo.cfg")"
        [ -n "$port" ] || port="$(sed -n "s/^server\.$id=.*:\([0-9]*\)\$/\1/p" "$d/zoo.cfg")"
        if ! alive "$d"; then
            echo "server.$id port $port: down"
            continue
        fi
        # The member's own answer to the srvr four-letter word (whitelisted by default).
        out="$(srvr 127.0.0.1 "$port")"
        role="$(echo "$out" | sed -n 's/^Mode: //p')"
        if [ -z "$role" ]; then
            case "$out" in
                *"not currently serving"*) role="not serving (electing or syncing)" ;;
                *) role="not answering" ;;
            esac
        fi
        echo "server.$id port $port pid $(cat "$d/pid"): $role"
    done
}

# The client port of the first live member, and the base port `start` was given.
live_port() {
    for d in "$dir"/*/; do
        if alive "$d"; then member_port "$d"; return 0; fi
    done
    echo "no live member in $dir" >&2
    exit 1
}

member_port() {
    local id port
    id="$(basename "$1")"
    port="$(sed -n 's/^clientPort=//p' "$1/zoo.cfg")"
    [ -n "$port" ] || port="$(sed -n "s/^server\.$id=.*:\([0-9]*\)\$/\1/p" "$1/zoo.cfg")"
    echo "$port"
}

# Runs zkCli commands (one per argument) through `ringkeeper cli` against a live member.
cli() {
    local port script=""
    port="$(live_port)"
    [ -n "${RK_RECONFIG_AUTH:-}" ] && script="addauth digest $RK_RECONFIG_AUTH"$'\n'
    for c in "$@"; do script+="$c"$'\n'; done
    printf '%s' "$script" | "$bin" cli --server "127.0.0.1:$port"
}

add() {
    local id="$1" kind="${2:-participant}" d="$dir/$1" base first
    [ -d "$dir/1" ] || { echo "no ensemble in $dir" >&2; exit 2; }
    if [ -d "$d" ] && alive "$d"; then echo "server $id is running" >&2; exit 1; fi
    # `start` numbered member 1's client port BASE_PORT.
    first="$(member_port "$dir/1/")"
    base="$first"
    local host=127.0.0.1
    [ "$peer_hosts" = distinct ] && host="127.0.0.$id"
    local line="server.$id=$host:$((base + 10000 + id)):$((base + 10100 + id)):$kind;127.0.0.1:$((base + id - 1))"
    # The running membership's lines (from /zookeeper/config), then this server's.
    local members
    members="$("$bin" cli --server "127.0.0.1:$(live_port)" config | grep '^server\.' | grep -v "^server\.$id=")"
    mkdir -p "$d/data"
    echo "$id" >"$d/data/myid"
    sed '/^server\./d' "$dir/1/zoo.cfg" \
        | sed "s|^dataDir=.*|dataDir=$d/data|; s|^clientPort=.*|clientPort=$((base + id - 1))|; s|^admin.serverPort=.*|admin.serverPort=$((base + 10200 + id))|" \
        >"$d/zoo.cfg"
    printf '%s\n%s\n' "$members" "$line" >>"$d/zoo.cfg"
    launch "$d"
    cli "reconfig -add $line"
}

remove() {
    local id="$1" d="$dir/$1"
    cli "reconfig -remove $id"
    if [ -d "$d" ] && alive "$d"; then kill -TERM "$(cat "$d/pid")" 2>/dev/null || true; fi
}

case "${1:-}" in
    start) [ $# -ge 2 ] || usage; start "$2" "${3:-2181}" ;;
    restart) [ $# -ge 2 ] || usage; restart "$2" ;;
    stop) stop ;;
    status) status ;;
    add) [ $# -ge 2 ] || usage; add "$2" "${3:-participant}" ;;
    remove) [ $# -ge 2 ] || usage; remove "$2" ;;
    *) usage ;;
esac
