#!/usr/bin/env bash
# Runs one standalone (or ensemble-member) ringkeeper server in the background.
#
#   scripts/server.sh start [CONFIG]   start it (default: the embedded standalone config on
#                                      127.0.0.1:2181, data in ./data); prints its log path
#   scripts/server.sh stop             SIGTERM, then SIGKILL after 10 s
#   scripts/server.sh status           pid and the server's own answer to srvr
#
# State (pid file, log) lives in RK_SERVER_DIR (default target/server); RK_BIN picks the
# binary (default target/release/ringkeeper, built if missing). For ensembles on one machine
# see scripts/ensemble.sh.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
dir="${RK_SERVER_DIR:-$root/target/server}"
bin="${RK_BIN:-$root/target/release/ringkeeper}"

# shellcheck source=scripts/common.sh
. "$root/scripts/common.sh"
usage() { usage_from_header 3 11; }

# host and port of the client listener named by the config (the embedded default otherwise)
client_addr() {
    local cfg host port
    cfg="$(cat "$dir/config" 2>/dev/null || true)"
    host=127.0.0.1
    port=2181
    if [ -n "$cfg" ] && [ -f "$cfg" ]; then
        port="$(sed -n 's/^[[:space:]]*clientPort[[:space:]]*=[[:space:]]*\([0-9]*\).*/\1/p' "$cfg" | tail -n 1)"
        local a
        a="$(sed -n 's/^[[:space:]]*clientPortAddress[[:space:]]*=[[:space:]]*\([^[:space:]]*\).*/\1/p' "$cfg" | tail -n 1)"
        [ -n "$a" ] && [ "$a" != 0.0.0.0 ] && host="$a"
        [ -n "$port" ] || port=2181
    fi
    echo "$host $port"
}

start() {
    if alive "$dir"; then
        echo "already running (pid $(cat "$dir/pid"))" >&2
        exit 1
    fi
    [ -x "$bin" ] || (cd "$root" && cargo build --release --quiet)
    mkdir -p "$dir"
    local args=(serve)
    if [ $# -ge 1 ]; then
        local cfg
        cfg="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
        args+=(--config "$cfg")
        echo "$cfg" >"$dir/config"
    else
        rm -f "$dir/config"
    fi
    nohup "$bin" "${args[@]}" >>"$dir/server.log" 2>&1 &
    echo $! >"$dir/pid"
    echo "$dir/server.log"
}

stop() {
    alive "$dir" || { echo "not running"; return 0; }
    local pid
    pid="$(cat "$dir/pid")"
    kill -TERM "$pid"
    for _ in $(seq 1 100); do
        alive "$dir" || { echo "stopped"; return 0; }
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    echo "killed (did not stop within 10 s)"
}

status() {
    if ! alive "$dir"; then
        echo "not running"
        return 3
    fi
    local host port out
    read -r host port <<<"$(client_addr)"
    out="$(srvr "$host" "$port")"
    echo "running (pid $(cat "$dir/pid")) on $host:$port"
    if [ -n "$out" ]; then echo "$out"; else echo "(no answer to srvr yet)"; fi
}

case "${1:-}" in
    start) shift; start "$@" ;;
    stop) stop ;;
    status) status ;;
    *) usage ;;
esac
