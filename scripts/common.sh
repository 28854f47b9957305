# Shell helpers shared by scripts/server.sh, scripts/ensemble.sh, scripts/netns.sh and
# scripts/bench-vs-zookeeper.sh (sourced, not run; defines functions and constants only).

# The class path of Apache ZooKeeper 3.8 from Debian's zookeeper package (its server runs
# with org.apache.zookeeper.server.ZooKeeperServerMain or ...quorum.QuorumPeerMain).
ZK_CLASSPATH=/usr/share/java/zookeeper.jar:/usr/share/java/netty-codec.jar:/usr/share/java/netty-resolver.jar
ZK_CLASSPATH=$ZK_CLASSPATH:/usr/share/java/netty-transport-native-unix-common.jar:/usr/share/java/slf4j-simple.jar

# The header comment of the calling script, lines $1 to $2, as usage; exits 2.
usage_from_header() {
    sed -n "$1,$2p" "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

# True if the process in "$1/pid" is running and not a zombie nobody reaped (a killed
# server's parent shell is gone).
alive() {
    [ -f "$1/pid" ] || return 1
    local stat
    stat="$(cat "/proc/$(cat "$1/pid")/stat" 2>/dev/null)" || return 1
    [ "$(echo "${stat##*) }" | cut -d' ' -f1)" != Z ]
}

# The server's answer to srvr on host $1 port $2 (empty if none within 2 s).
srvr() {
    timeout 2 bash -c "exec 3<>/dev/tcp/$1/$2 && printf srvr >&3 && cat <&3" 2>/dev/null || true
}
