#!/usr/bin/env bash
# Ensembles in network namespaces: each member in its own namespace, a client namespace, all
# joined by veth pairs to a bridge in a hub namespace, with a one-way delay on every path.
#
#   scripts/netns.sh check                   whether this machine can run it (root, ip netns,
#                                            netem or nft)
#   scripts/netns.sh up N [K]                namespaces PREFIX-hub, PREFIX-m1..m(N+K), PREFIX-c;
#                                            members SUBNET.11.., client SUBNET.2 (/24); the
#                                            last K members are observers (default 0)
#   scripts/netns.sh delay US [JITTER_US] [LOSS_PCT]   one-way delay on every path (netem, or
#                                            relays: set it before starting servers)
#   scripts/netns.sh ensemble-start rk|zk DIR   a ringkeeper / Apache ZooKeeper ensemble, one
#                                            member per namespace (ports 2181, 2888, 3888)
#   scripts/netns.sh ensemble-stop DIR       SIGTERM its members, SIGKILL after 10 s
#   scripts/netns.sh conn                    the client connection string (from PREFIX-c)
#   scripts/netns.sh srvr I                  member I's answer to srvr, asked from PREFIX-c
#   scripts/netns.sh leader                  the number of the member that leads
#   scripts/netns.sh exec NAME CMD...        CMD inside PREFIX-NAME (NAME: c, hub, m1..)
#   scripts/netns.sh status                  namespaces, mode, delay, processes in each
#   scripts/netns.sh block I NAME...         member I drops what arrives from NAMEs (m2, c, ...)
#   scripts/netns.sh loss I PCT              member I drops PCT% of what arrives, at random
#   scripts/netns.sh dup I PCT               member I sends PCT% of its packets twice
#   scripts/netns.sh reorder I PCT           member I holds PCT% of its packets back in a slow
#                                            queue, so later packets overtake them
#   scripts/netns.sh heal                    removes every block, loss, dup and reorder rule
#   scripts/netns.sh member-start rk|zk DIR I   (re)starts member I of the ensemble in DIR
#   scripts/netns.sh down                    kills every process in the namespaces, deletes them
#
# Sourced (`. scripts/netns.sh`) it only defines the netns_* functions (issue 18's fault rig
# reuses them). Environment: RK_NETNS_PREFIX (rk), RK_NETNS_SUBNET (10.77.0: addresses
# SUBNET.x/24 exist only inside the namespaces), RK_NETNS_MODE (auto: netem when the kernel has
# the netem qdisc, else relays; or netem / relay), RK_NETNS_PORTS ("2181 2888 3888": what the
# relays front), RK_NETNS_TICK_MS (2000), RK_NETNS_EXTRA_CONFIG (appended to every zoo.cfg),
# ZK_HEAP (2g), RK_BIN, RK_BENCH_BIN, RK_NETNS_FAKETIME (1: members under libfaketime, see
# netns_member_start). State: target/netns-PREFIX/.
#
# Delay: with netem (mode netem) each namespace's eth0 delays what it sends, so any path between
# two namespaces is delayed once per direction. Without netem (mode relay, e.g. Firecracker
# kernels) an nftables rule in each member's namespace redirects TCP arriving on eth0 for the
# ports RK_NETNS_PORTS to port+10000, where a `ringkeeper-bench delay-relay` listens and
# forwards to the member's own address and port, holding bytes for the delay each way. Every
# member-to-member and client-to-member connection thus crosses exactly one relay (the one in
# front of the member it connects to), the members' configs name the real addresses, and what
# a member advertises (ZooKeeper sends its election address to peers) is right. A member sees
# a relayed connection as coming from its own address. TCP cannot lose bytes through a relay:
# LOSS_PCT there stalls a stream by one minimum RTO (200 ms) instead. Needs `nft` (Debian's
# nftables) in relay mode. Rules: nothing outside the namespaces this script makes is changed
# (no host routes, no host firewall: the nft rules live in the member namespaces); `up` undoes
# itself when it fails; `down` removes everything even after a failed or killed run.

NETNS_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/common.sh
. "$NETNS_ROOT/scripts/common.sh"

NETNS_PREFIX="${RK_NETNS_PREFIX:-rk}"
NETNS_SUBNET="${RK_NETNS_SUBNET:-10.77.0}"
NETNS_PORTS="${RK_NETNS_PORTS:-2181 2888 3888}"
NETNS_STATE="${RK_NETNS_STATE:-$NETNS_ROOT/target/netns-$NETNS_PREFIX}"
NETNS_BENCH="${RK_BENCH_BIN:-$NETNS_ROOT/target/release/ringkeeper-bench}"
NETNS_RK="${RK_BIN:-$NETNS_ROOT/target/release/ringkeeper}"
# Members' client port (the same in every namespace) and how long a member may take to serve.
NETNS_CLIENT_PORT=2181
# A relay for port P listens on P + this (nft redirects arriving connections there).
NETNS_RELAY_PORT_OFFSET=10000
NETNS_SERVE_WAIT_S_MAX=120
NETNS_FAKETIME_LIB=/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1

netns_name() { echo "$NETNS_PREFIX-$1"; } # m1, c, hub -> PREFIX-m1 ...
netns_addr() {                              # c -> SUBNET.2, mI -> SUBNET.(10+I)
    case "$1" in
        c) echo "$NETNS_SUBNET.2" ;;
        m*) echo "$NETNS_SUBNET.$((10 + ${1#m}))" ;;
        *) return 1 ;;
    esac
}
netns_members() { cat "$NETNS_STATE/members" 2>/dev/null || echo 0; } # voters + observers
netns_observers() { cat "$NETNS_STATE/observers" 2>/dev/null || echo 0; }
netns_mode() { cat "$NETNS_STATE/mode" 2>/dev/null || echo none; }
netns_list() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$NETNS_PREFIX-(hub|c|m[0-9]+)$" || true; }

# Empty when this machine can run namespaces, else why not (one line).
netns_unavailable_reason() {
    [ "$(id -u)" = 0 ] || { echo "needs root (ip netns)"; return; }
    command -v ip >/dev/null || { echo "needs iproute2 (ip)"; return; }
    local probe="$NETNS_PREFIX-probe$$"
    if ! ip netns add "$probe" 2>/dev/null; then echo "ip netns add fails here (no network namespaces)"; return; fi
    if ! ip -n "$probe" link add p0 type veth peer name p1 2>/dev/null; then
        ip netns del "$probe" 2>/dev/null
        echo "veth pairs cannot be made here"
        return
    fi
    local netem=0
    ip -n "$probe" link set p0 up 2>/dev/null
    if tc -n "$probe" qdisc add dev p0 root netem delay 0us 2>/dev/null; then netem=1; fi
    ip netns del "$probe" 2>/dev/null || true
    if [ "$netem" = 0 ] && ! command -v nft >/dev/null; then
        echo "the kernel has no netem qdisc and nft is missing for delay relays (apt-get install nftables)"
    fi
}

# Runs CMD inside namespace NAME (m1, c, hub).
netns_exec() {
    local ns
    ns="$(netns_name "$1")"
    shift
    ip netns exec "$ns" "$@"
}

# Joins namespace $1 (short name) to the hub's bridge with address $2 on its eth0.
netns_link() {
    local ns hub
    ns="$(netns_name "$1")"
    hub="$(netns_name hub)"
    ip netns add "$ns" &&
        ip -n "$hub" link add "h-$1" type veth peer name eth0 netns "$ns" &&
        ip -n "$hub" link set "h-$1" master br0 up &&
        ip -n "$ns" addr add "$2/24" dev eth0 &&
        ip -n "$ns" link set lo up &&
        ip -n "$ns" link set eth0 up
}

# Relay mode: in member I's namespace, TCP arriving on eth0 for each relayed port P goes to
# P + NETNS_RELAY_PORT_OFFSET on the same address, where its delay relay listens.
netns_redirect() {
    local rules="" p
    for p in $NETNS_PORTS; do rules+="        iifname \"eth0\" tcp dport $p redirect to :$((p + NETNS_RELAY_PORT_OFFSET))"$'\n'; done
    netns_exec "m$1" nft -f - <<EOF
table ip rk_netns {
    chain prerouting {
        type nat hook prerouting priority dstnat; policy accept;
$rules    }
}
EOF
}

# Makes the namespaces, links and hosts files for N members, the last K of them observers
# (netns_up undoes it on failure).
netns_build() {
    local n="$1" k="${2:-0}" hub mode="${RK_NETNS_MODE:-auto}"
    hub="$(netns_name hub)"
    mkdir -p "$NETNS_STATE" || return 1
    rm -f "$NETNS_STATE"/relay-m*.log
    ip netns add "$hub" || return 1
    ip -n "$hub" link add br0 type bridge || return 1
    ip -n "$hub" link set br0 up || return 1
    netns_link c "$(netns_addr c)" || return 1
    for i in $(seq 1 "$n"); do netns_link "m$i" "$(netns_addr "m$i")" || return 1; done
    if [ "$mode" = auto ]; then
        mode=relay
        if tc -n "$(netns_name c)" qdisc add dev eth0 root netem delay 0us 2>/dev/null; then
            tc -n "$(netns_name c)" qdisc del dev eth0 root || return 1
            mode=netem
        fi
    fi
    case "$mode" in netem | relay) ;; *) echo "netns: RK_NETNS_MODE must be auto, netem or relay" >&2; return 1 ;; esac
    echo "$n" >"$NETNS_STATE/members" || return 1
    echo "$k" >"$NETNS_STATE/observers" || return 1
    echo "$mode" >"$NETNS_STATE/mode" || return 1
    if [ "$mode" = relay ]; then
        for i in $(seq 1 "$n"); do netns_redirect "$i" || return 1; done
    fi
    netns_delay 0 0 0
}

# Creates the namespaces for N voting members, K observers and a client; removes everything if
# a step fails.
netns_up() {
    local n="$1" k="${2:-0}" why
    [[ "$n" =~ ^[1-9][0-9]?$ ]] || { echo "netns up: N must be 1..99" >&2; return 2; }
    [[ "$k" =~ ^[0-9]$ ]] || { echo "netns up: K (observers) must be 0..9" >&2; return 2; }
    n=$((n + k))
    why="$(netns_unavailable_reason)"
    [ -z "$why" ] || { echo "netns: $why" >&2; return 1; }
    if [ -n "$(netns_list)" ]; then echo "netns: namespaces $NETNS_PREFIX-* exist; run down first" >&2; return 1; fi
    trap 'netns_down >/dev/null 2>&1' INT TERM
    if ! netns_build "$n" "$k"; then
        netns_down >/dev/null 2>&1
        trap - INT TERM
        return 1
    fi
    trap - INT TERM
    echo "netns: $n members ($k observers) + client in $NETNS_PREFIX-*, subnet $NETNS_SUBNET.0/24, delay by $(netns_mode)"
}

# Kills the relays this script started (relay mode) and waits until they are gone.
netns_relays_stop() {
    local f p
    for f in "$NETNS_STATE"/relay-m*.pid; do
        [ -f "$f" ] || continue
        p="$(cat "$f")"
        kill "$p" 2>/dev/null || true
        for _ in $(seq 1 50); do [ -e "/proc/$p" ] || break; sleep 0.1; done
        rm -f "$f"
    done
}

# One-way delay US (+ jitter 0..JITTER_US, + loss LOSS_PCT) on every path between namespaces.
netns_delay() {
    local us="${1:?delay US}" jitter="${2:-0}" loss="${3:-0}" n mode
    n="$(netns_members)"
    mode="$(netns_mode)"
    [ "$n" -gt 0 ] || { echo "netns: not up" >&2; return 1; }
    if [ "$mode" = netem ]; then
        for who in c $(seq -f 'm%g' 1 "$n"); do
            tc -n "$(netns_name "$who")" qdisc replace dev eth0 root netem delay "${us}us" "${jitter}us" loss "${loss}%" || return 1
        done
    else
        [ -x "$NETNS_BENCH" ] || { echo "netns: $NETNS_BENCH missing (cargo build --release)" >&2; return 1; }
        netns_relays_stop
        for i in $(seq 1 "$n"); do
            local pairs=() addr
            addr="$(netns_addr "m$i")"
            for p in $NETNS_PORTS; do pairs+=(--pair "$addr:$((p + NETNS_RELAY_PORT_OFFSET))=$addr:$p"); done
            # `ip netns exec` (not a function: $! must be the relay itself) execs the command.
            ip netns exec "$(netns_name "m$i")" "$NETNS_BENCH" delay-relay "${pairs[@]}" --delay-us "$us" --jitter-us "$jitter" \
                --loss-pct "$loss" --seed "$i" >>"$NETNS_STATE/relay-m$i.log" 2>&1 &
            echo $! >"$NETNS_STATE/relay-m$i.pid"
        done
        # Ready once every relay accepts on its first port (checked from the client namespace).
        for i in $(seq 1 "$n"); do
            local port ok=0
            port="${NETNS_PORTS%% *}"
            for _ in $(seq 1 100); do
                if netns_exec c bash -c "exec 3<>/dev/tcp/$(netns_addr "m$i")/$port" 2>/dev/null; then ok=1; break; fi
                sleep 0.05
            done
            [ "$ok" = 1 ] || { echo "netns: the relay of m$i does not listen; see $NETNS_STATE/relay-m$i.log" >&2; return 1; }
        done
    fi
    echo "$us $jitter $loss" >"$NETNS_STATE/delay"
}

# Kills every process inside the namespaces (SIGTERM, then SIGKILL), deletes them (and with
# them their links and nft rules) and the state this script made (relay logs stay until the
# next up). Safe to run any number of times.
netns_down() {
    local nss
    nss="$(netns_list)"
    netns_relays_stop 2>/dev/null
    for sig in TERM KILL; do
        local left=0
        for ns in $nss; do
            for p in $(ip netns pids "$ns" 2>/dev/null); do kill "-$sig" "$p" 2>/dev/null && left=1 || true; done
        done
        [ "$left" = 0 ] && break
        for _ in $(seq 1 50); do
            left=0
            for ns in $nss; do [ -n "$(ip netns pids "$ns" 2>/dev/null)" ] && left=1 || true; done
            [ "$left" = 0 ] && break
            sleep 0.1
        done
    done
    for ns in $nss; do ip netns del "$ns" 2>/dev/null || true; done
    rm -f "$NETNS_STATE/members" "$NETNS_STATE/observers" "$NETNS_STATE/mode" "$NETNS_STATE/delay"
    echo "netns: $NETNS_PREFIX-* removed"
}

# The client connection string, as seen from the client namespace.
netns_conn() {
    local conn="" i
    for i in $(seq 1 "$(netns_members)"); do conn+="${conn:+,}$(netns_addr "m$i"):$NETNS_CLIENT_PORT"; done
    echo "$conn"
}

# Member I's answer to srvr, asked from the client namespace (empty if none within 2 s).
netns_srvr() {
    netns_exec c timeout 2 bash -c "exec 3<>/dev/tcp/$(netns_addr "m$1")/$NETNS_CLIENT_PORT && printf srvr >&3 && cat <&3" \
        2>/dev/null || true
}

# Writes DIR/I/zoo.cfg (and myid) for member I of a KIND (rk|zk) ensemble; the last
# netns_observers members are observers (`:observer` on their server lines, peerType=observer
# in their own config, as both servers read it).
netns_member_cfg() {
    local kind="$1" dir="$2" i="$3" n voters
    n="$(netns_members)"
    voters=$((n - $(netns_observers)))
    mkdir -p "$dir/$i"
    echo "$i" >"$dir/$i/myid"
    {
        echo "tickTime=${RK_NETNS_TICK_MS:-2000}"
        printf 'initLimit=10\nsyncLimit=5\ndataDir=%s\n' "$dir/$i"
        printf 'clientPort=%s\nclientPortAddress=%s\n' "$NETNS_CLIENT_PORT" "$(netns_addr "m$i")"
        printf 'maxClientCnxns=0\nforceSync=yes\n4lw.commands.whitelist=*\nadmin.enableServer=false\n'
        for j in $(seq 1 "$n"); do
            if [ "$j" -gt "$voters" ]; then echo "server.$j=$(netns_addr "m$j"):2888:3888:observer"; else echo "server.$j=$(netns_addr "m$j"):2888:3888"; fi
        done
        if [ "$i" -gt "$voters" ]; then echo "peerType=observer"; fi
        # Members share this host's CPUs (as scripts/ensemble.sh runs them).
        if [ "$kind" = rk ]; then printf 'ringkeeper.cpuPinning=false\nringkeeper.spinBeforeParkUs=0\n'; fi
        echo "${RK_NETNS_EXTRA_CONFIG:-}"
    } >"$dir/$i/zoo.cfg"
}

# Starts member I of a KIND (rk|zk) ensemble with its data under DIR/I (zoo.cfg written first
# if missing), in the background; its pid goes to DIR/I/pid. With RK_NETNS_FAKETIME=1 it runs
# under libfaketime with its wall clock from DIR/I/faketime ("+0" unless present; rewriting it
# steps or drifts that member's CLOCK_REALTIME at runtime, CLOCK_MONOTONIC untouched).
# The server log of member I of the ensemble in DIR: DIR/I/server.log, or, with
# RK_NETNS_LOG_DIR set (the chaos rig: a member's dir may be a volume it fills), a file there.
netns_member_log() {
    if [ -n "${RK_NETNS_LOG_DIR:-}" ]; then
        echo "$RK_NETNS_LOG_DIR/member$2.server.log"
    else
        echo "$1/$2/server.log"
    fi
}

netns_member_start() {
    local kind="$1" dir="$2" i="$3" pre=() log
    log="$(netns_member_log "$dir" "$i")"
    mkdir -p "$(dirname "$log")"
    [ -f "$dir/$i/zoo.cfg" ] || netns_member_cfg "$kind" "$dir" "$i"
    if [ "${RK_NETNS_FAKETIME:-0}" = 1 ]; then
        [ -f "$dir/$i/faketime" ] || echo "+0" >"$dir/$i/faketime"
        pre=(env LD_PRELOAD="$NETNS_FAKETIME_LIB" FAKETIME_TIMESTAMP_FILE="$dir/$i/faketime" FAKETIME_NO_CACHE=1
            DONT_FAKE_MONOTONIC=1)
    fi
    case "$kind" in
        # `ip netns exec` (not a function: $! must be the server itself) execs the command.
        rk) ip netns exec "$(netns_name "m$i")" "${pre[@]}" "$NETNS_RK" serve --config "$dir/$i/zoo.cfg" >>"$log" 2>&1 & ;;
        zk) ip netns exec "$(netns_name "m$i")" "${pre[@]}" java "-Xmx${ZK_HEAP:-2g}" "-Xms${ZK_HEAP:-2g}" -Dzookeeper.4lw.commands.whitelist='*' \
            -Dzookeeper.admin.enableServer=false -cp "$ZK_CLASSPATH" org.apache.zookeeper.server.quorum.QuorumPeerMain \
            "$dir/$i/zoo.cfg" >>"$log" 2>&1 & ;;
        *) echo "netns: ensemble kind must be rk or zk" >&2; return 2 ;;
    esac
    echo $! >"$dir/$i/pid"
}

# Starts a KIND (rk|zk) ensemble with its data under DIR, one member per namespace, and waits
# until every member leads, follows or observes.
netns_ensemble_start() {
    local kind="$1" dir="$2" n i
    n="$(netns_members)"
    [ "$n" -gt 0 ] || { echo "netns: not up" >&2; return 1; }
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd)"
    for i in $(seq 1 "$n"); do
        netns_member_cfg "$kind" "$dir" "$i"
        netns_member_start "$kind" "$dir" "$i" || return
    done
    local deadline=$((SECONDS + NETNS_SERVE_WAIT_S_MAX))
    for i in $(seq 1 "$n"); do
        until netns_srvr "$i" | grep -qE 'Mode: (leader|follower|observer)'; do
            if [ "$SECONDS" -ge "$deadline" ] || ! alive "$dir/$i"; then
                echo "netns: member $i of $dir does not serve; see $(netns_member_log "$dir" "$i")" >&2
                return 1
            fi
            sleep 0.25
        done
    done
}

# The number of the member that leads (empty if none answers so).
netns_leader() {
    local i
    for i in $(seq 1 "$(netns_members)"); do
        if netns_srvr "$i" | grep -q 'Mode: leader'; then echo "$i"; return 0; fi
    done
}

# Partitions (issue 18's nemesis): member I drops every packet arriving on eth0 from the
# addresses of the named namespaces (m2, c, ...): one direction only, FROM -> I. A symmetric
# cut is two calls. Rules live in table ip rk_chaos of I's namespace (after the relays'
# redirect, so a relayed connection is dropped by its real source address).
netns_block() {
    local i="$1" addrs="" who
    shift
    for who in "$@"; do addrs+="${addrs:+, }$(netns_addr "$who")"; done
    [ -n "$addrs" ] || return 0
    netns_exec "m$i" nft -f - <<EOF
table ip rk_chaos {
    chain input {
        type filter hook input priority filter; policy accept;
        iifname "eth0" ip saddr { $addrs } drop
    }
}
EOF
}

# Packet loss (issue 18's nemesis; this kernel has no netem): member I drops PCT percent of
# the packets arriving on eth0, each at random (nft numgen). TCP resends them: what a lossy
# network does to the protocol is stalls and retransmission timeouts, which this gives.
netns_loss() {
    local i="$1" pct="$2"
    case "$pct" in '' | *[!0-9]*) echo "loss: PCT must be a whole percentage" >&2; return 2 ;; esac
    [ "$pct" -le 100 ] || { echo "loss: PCT must be at most 100" >&2; return 2; }
    netns_exec "m$i" nft -f - <<EOF
table ip rk_chaos_loss {
    chain input {
        type filter hook input priority filter; policy accept;
        iifname "eth0" numgen random mod 100 < $pct drop
    }
}
EOF
}

# Duplication (issue 18's nemesis; no netem here): member I sends PCT percent of its packets
# twice. An nft netdev egress chain on its eth0 picks them at random (numgen) and `dup to`
# the same device transmits a copy (the copy skips the egress hook, so it is not duplicated
# again); the peer's TCP discards the copy and answers with a D-SACK.
netns_dup() {
    local i="$1" pct="$2"
    netns_pct "$pct" dup || return
    netns_exec "m$i" nft -f - <<EOF
table netdev rk_chaos_dup {
    chain egress {
        type filter hook egress device "eth0" priority filter; policy accept;
        numgen random mod 100 < $pct dup to "eth0"
    }
}
EOF
}

# Reordering (issue 18's nemesis; no netem here): member I's eth0 gets an htb qdisc with a
# fast class (1:1, the default, 10 Gbit/s) and a slow one (1:2: NETNS_REORDER_KBIT_S with a
# one-packet burst, at most NETNS_REORDER_QUEUE_PKTS_MAX queued: the rest are dropped); an nft
# netdev egress chain sends PCT percent of the packets, at random, to the slow class (htb takes
# skb->priority 1:2 as the class), so packets sent after them overtake them. htb delays a
# packet only while its class is over its rate (an idle class sends at once), so the slow
# class is slow: at 32 kbit/s a 166-byte packet holds it for 41 ms, and a flow of 300 packets/s
# with 20% in the slow class had 487 segments queued out of order in 4 s (1 Mbit/s: none);
# a full slow queue holds at most ~0.4 s of small packets.
NETNS_REORDER_KBIT_S="${RK_NETNS_REORDER_KBIT_S:-32}"
NETNS_REORDER_QUEUE_PKTS_MAX="${RK_NETNS_REORDER_QUEUE_PKTS_MAX:-10}"
netns_reorder() {
    local i="$1" pct="$2" ns
    netns_pct "$pct" reorder || return
    ns="$(netns_name "m$i")"
    tc -n "$ns" qdisc replace dev eth0 root handle 1: htb default 1 r2q 1000 &&
        tc -n "$ns" class add dev eth0 parent 1: classid 1:1 htb rate 10gbit quantum 1514 &&
        tc -n "$ns" class add dev eth0 parent 1: classid 1:2 htb rate "${NETNS_REORDER_KBIT_S}kbit" \
            ceil "${NETNS_REORDER_KBIT_S}kbit" burst 1600 cburst 1600 quantum 1514 &&
        tc -n "$ns" qdisc add dev eth0 parent 1:2 handle 2: pfifo limit "$NETNS_REORDER_QUEUE_PKTS_MAX" || return 1
    netns_exec "m$i" nft -f - <<EOF
table netdev rk_chaos_reorder {
    chain egress {
        type filter hook egress device "eth0" priority filter; policy accept;
        meta priority set numgen random mod 100 map { 0-$((pct - 1)) : 1:2, $pct-99 : 1:1 }
    }
}
EOF
}

# Checks that $1 is a whole percentage 1..99 (for $2's message).
netns_pct() {
    case "$1" in '' | *[!0-9]*) echo "$2: PCT must be a whole percentage" >&2; return 2 ;; esac
    [ "$1" -ge 1 ] && [ "$1" -le 99 ] || { echo "$2: PCT must be 1..99" >&2; return 2; }
}

# Removes every partition, loss, duplication and reordering rule (tables rk_chaos*, the htb
# qdisc) from every member's namespace.
netns_heal() {
    local i
    for i in $(seq 1 "$(netns_members)"); do
        netns_exec "m$i" nft delete table ip rk_chaos 2>/dev/null || true
        netns_exec "m$i" nft delete table ip rk_chaos_loss 2>/dev/null || true
        netns_exec "m$i" nft delete table netdev rk_chaos_dup 2>/dev/null || true
        netns_exec "m$i" nft delete table netdev rk_chaos_reorder 2>/dev/null || true
        tc -n "$(netns_name "m$i")" qdisc del dev eth0 root 2>/dev/null || true
    done
}

netns_ensemble_stop() {
    local dir="$1" d
    for d in "$dir"/*/; do alive "$d" && kill -TERM "$(cat "$d/pid")" 2>/dev/null || true; done
    for _ in $(seq 1 100); do
        local any=0
        for d in "$dir"/*/; do alive "$d" && any=1 || true; done
        [ "$any" = 0 ] && return 0
        sleep 0.1
    done
    for d in "$dir"/*/; do alive "$d" && kill -KILL "$(cat "$d/pid")" 2>/dev/null || true; done
    return 0
}

netns_status() {
    local nss
    nss="$(netns_list)"
    [ -n "$nss" ] || { echo "netns: no $NETNS_PREFIX-* namespaces"; return 0; }
    echo "mode $(netns_mode), $(netns_members) members, delay/jitter/loss: $(cat "$NETNS_STATE/delay" 2>/dev/null)"
    for ns in $nss; do echo "$ns: pids $(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')"; done
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    set -euo pipefail
    case "${1:-}" in
        check)
            why="$(netns_unavailable_reason)"
            if [ -n "$why" ]; then echo "netns unavailable: $why"; exit 1; fi
            echo "netns available"
            ;;
        up) [ $# -ge 2 ] || usage_from_header 5 27; netns_up "$2" "${3:-0}" ;;
        down) netns_down ;;
        delay) [ $# -ge 2 ] || usage_from_header 5 27; netns_delay "$2" "${3:-0}" "${4:-0}" ;;
        ensemble-start) [ $# -ge 3 ] || usage_from_header 5 27; netns_ensemble_start "$2" "$3" ;;
        ensemble-stop) [ $# -ge 2 ] || usage_from_header 5 27; netns_ensemble_stop "$2" ;;
        conn) netns_conn ;;
        srvr) [ $# -ge 2 ] || usage_from_header 5 27; netns_srvr "$2" ;;
        leader) netns_leader ;;
        exec) [ $# -ge 3 ] || usage_from_header 5 27; shift; netns_exec "$@" ;;
        status) netns_status ;;
        block) [ $# -ge 3 ] || usage_from_header 5 27; shift; netns_block "$@" ;;
        loss) [ $# -ge 3 ] || usage_from_header 5 27; netns_loss "$2" "$3" ;;
        dup) [ $# -ge 3 ] || usage_from_header 5 27; netns_dup "$2" "$3" ;;
        reorder) [ $# -ge 3 ] || usage_from_header 5 27; netns_reorder "$2" "$3" ;;
        heal) netns_heal ;;
        member-start) [ $# -ge 4 ] || usage_from_header 5 27; netns_member_start "$2" "$3" "$4" ;;
        *) usage_from_header 5 27 ;;
    esac
fi
