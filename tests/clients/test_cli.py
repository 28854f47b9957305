"""`ringkeeper cli`, the zkCli look-alike (src/cli/), against both servers: one-shot commands
(output on the stream zkCli uses, exit codes 0 / 1 / 127), piped sessions, one script run
through zkCli.sh and through our CLI on the same server with the outputs compared line by
line, and an interactive session on a pty whose `get -w` watch fires when kazoo changes
the node."""

import os
import pty
import re
import select
import subprocess
import time

import pytest

import rawzk
from helpers import RK_BIN, free_port, wait_until, zkcli
from test_zkcli import parse_stats

TIMEOUT = 30


def cli_bin():
    if not os.access(RK_BIN, os.X_OK):
        pytest.skip(f"{RK_BIN} not built (cargo build --release)")
    return RK_BIN


def cli(server, *args, stdin=None, conn=None):
    """One-shot (args) or a piped session (stdin text): (rc, stdout lines, stderr lines)."""
    p = subprocess.run([cli_bin(), "cli", "--server", conn or server.hostport, "--timeout", "10000",
                        *args], input=stdin, capture_output=True, text=True, timeout=TIMEOUT)
    return p.returncode, p.stdout.splitlines(), p.stderr.splitlines()


def without_events(lines):
    """Output lines less the watcher's (blank, WATCHER::, WatchedEvent ...)."""
    return [l for l in lines if l and l != "WATCHER::" and not l.startswith("WatchedEvent ")]


def test_one_shot_crud_streams_and_exit_codes(server, base, zk):
    b = base
    assert cli(server, "create", f"{b}/a", "hello world") == (0, [], [f"Created {b}/a"])
    rc, out, err = cli(server, "get", f"{b}/a")
    assert (rc, out, err) == (0, ["hello world"], [])
    rc, out, _ = cli(server, "get", "-s", f"{b}/a")
    st = parse_stats(out)
    assert out[0] == "hello world" and len(st) == 1
    zst = zk.exists(f"{b}/a")
    assert st[0]["cZxid"] == hex(zst.czxid) and st[0]["dataLength"] == "11"
    assert st[0]["ephemeralOwner"] == "0x0" and st[0]["numChildren"] == "0"
    # Java's Date.toString: "Mon Nov 23 06:10:27 UTC 2026"
    assert re.fullmatch(r"\w{3} \w{3} \d\d \d\d:\d\d:\d\d \S+ \d{4}", st[0]["ctime"])
    assert cli(server, "set", "-v", "0", f"{b}/a", "v1")[0] == 0
    assert zk.get(f"{b}/a")[0] == b"v1"
    assert cli(server, "set", "-v", "0", f"{b}/a", "v2") == (1, [], [f"version No is not valid : {b}/a"])
    rc, out, _ = cli(server, "set", "-s", f"{b}/a", "v2")
    assert rc == 0 and parse_stats(out)[0]["dataVersion"] == "2"
    # no data: the node's data is null, which get prints as zkCli does
    assert cli(server, "create", f"{b}/n")[0] == 0
    assert cli(server, "get", f"{b}/n")[1] == ["null"]
    assert cli(server, "create", f"{b}/e", "")[0] == 0
    assert cli(server, "get", f"{b}/e")[1] == [""]
    rc, out, _ = cli(server, "ls", b)
    assert (rc, out) == (0, ["[a, e, n]"])
    rc, out, _ = cli(server, "ls", "-s", b)
    assert out[0] == "[a, e, n]" and parse_stats(out)[0]["numChildren"] == "3"
    rc, out, _ = cli(server, "stat", f"{b}/a")
    assert rc == 0 and parse_stats(out)[0]["dataVersion"] == "2"
    assert cli(server, "stat", f"{b}/zz") == (1, [], [f"Node does not exist: {b}/zz"])
    assert cli(server, "get", f"{b}/zz") == (1, [], [f"Node does not exist: {b}/zz"])
    assert cli(server, "create", f"{b}/a") == (1, [], [f"Node already exists: {b}/a"])
    assert cli(server, "create", f"{b}/x/y") == (1, [], [f"Node does not exist: {b}/x/y"])
    assert cli(server, "delete", b) == (1, [], [f"Node not empty: {b}"])
    assert cli(server, "delete", "-v", "5", f"{b}/a") == (1, [], [f"version No is not valid : {b}/a"])
    assert cli(server, "delete", f"{b}/n") == (0, [], [])
    assert zk.exists(f"{b}/n") is None
    # a subtree, listed and counted, then removed whole
    for p in ("t", "t/u", "t/u/v", "t/w"):
        assert cli(server, "create", f"{b}/{p}")[0] == 0
    rc, out, _ = cli(server, "ls", "-R", f"{b}/t")
    assert out == [f"{b}/t", f"{b}/t/u", f"{b}/t/w", f"{b}/t/u/v"]
    assert cli(server, "getAllChildrenNumber", f"{b}/t")[1] == ["3"]
    assert cli(server, "sync", b)[1] == ["Sync is OK"]
    assert cli(server, "deleteall", f"{b}/t") == (0, [], [])
    assert zk.exists(f"{b}/t") is None


def test_usage_parse_and_path_errors(server, base):
    rc, out, err = cli(server, "bogus")
    assert rc == 127 and err[-1] == "Command not found: bogus"
    assert "\tcreate [-s] [-e] [-c] [-t ttl] path [data] [acl]" in err
    assert cli(server, "get") == (1, [], ["get [-s] [-w] path"])
    assert cli(server, "ls", "-x", "/") == (1, [], ["org.apache.commons.cli.UnrecognizedOptionException: Unrecognized option: -x"])
    assert cli(server, "set", "-v") == (1, [], ["org.apache.commons.cli.MissingArgumentException: Missing argument for option: v"])
    assert cli(server, "create", "-c", "-e", f"{base}/c")[2] == [
        "-c cannot be combined with -s or -e. Containers cannot be ephemeral or sequential."]
    assert cli(server, "create", "-t", "0", f"{base}/t")[2] == [
        "ttl must be positive and cannot be larger than: 1099511627775"]
    assert cli(server, "create", "nopath") == (1, [], ["Path must start with / character"])
    assert cli(server, "get", f"{base}/a/../b") == (
        1, [], [f'Invalid path string "{base}/a/../b" caused by relative paths not allowed @{len(base) + 4}'])
    # no server there: a message and exit 1, within the timeout
    port = free_port()
    t0 = time.monotonic()
    p = subprocess.run([cli_bin(), "cli", "--server", f"127.0.0.1:{port}", "--timeout", "1500",
                        "ls", "/"], capture_output=True, text=True, timeout=TIMEOUT)
    assert p.returncode == 1 and "Unable to connect to 127.0.0.1:" in p.stderr
    assert time.monotonic() - t0 < 10


def test_a_low_locked_memory_limit_is_raised_or_explained(server, base):
    """The CLI runs on glommio, whose io_uring needs 512 KiB of locked memory: a low soft
    limit (a common default) is raised up to the hard one; a hard limit below that is a
    clear message, not a crash."""
    def run(limit_cmd):
        return subprocess.run(["bash", "-c", f'{limit_cmd} && exec "$0" "$@"', cli_bin(), "cli", "--server",
                               server.hostport, "--timeout", "10000", "ls", base],
                              capture_output=True, text=True, timeout=TIMEOUT)
    p = run("ulimit -Sl 64")
    assert p.returncode == 0 and p.stdout.strip() == "[]", (p.stdout, p.stderr)
    p = run("ulimit -Sl 64 && ulimit -Hl 64")
    if p.returncode == 0:
        pytest.skip("this process may raise its hard limit (CAP_SYS_RESOURCE)")
    assert p.returncode == 1 and "ulimit -l 512" in p.stderr, p.stderr


def test_modes_ephemeral_sequential_container_ttl(server, base, zk):
    b = base
    assert cli(server, "create", "-s", f"{b}/s", "x")[2] == [f"Created {b}/s0000000000"]
    assert cli(server, "create", "-s", f"{b}/s", "x")[2] == [f"Created {b}/s0000000001"]
    assert cli(server, "create", "-c", f"{b}/c")[2] == [f"Created {b}/c"]
    assert cli(server, "create", "-t", "60000", f"{b}/ttl")[2] == [f"Created {b}/ttl"]
    assert cli(server, "create", "-t", "60000", "-s", f"{b}/ts")[2] == [f"Created {b}/ts0000000004"]
    # TTL nodes outlive the session (clients see ephemeralOwner 0 for them)
    assert zk.exists(f"{b}/ttl").ephemeralOwner == 0 and zk.exists(f"{b}/ts0000000004")
    # an ephemeral lives as long as the CLI's session: gone once a one-shot run closes it
    assert cli(server, "create", "-e", f"{b}/gone")[0] == 0
    assert zk.exists(f"{b}/gone") is None
    # within one piped session: ephemerals, children refused, getEphemerals
    rc, out, err = cli(server, stdin="\n".join([
        f"create -e {b}/eph",
        f"create -e -s {b}/eph-",
        f"create {b}/eph/kid",
        f"stat {b}/eph",
        f"getEphemerals {b}",
        f"getEphemerals {b}/nothing",
    ]) + "\n")
    assert f"Ephemerals cannot have children: {b}/eph/kid" in err
    assert rc == 0, "the exit code is the last command's"
    assert parse_stats(out)[0]["ephemeralOwner"] != "0x0"
    seq = next(l for l in err if l.startswith(f"Created {b}/eph-"))[len("Created "):]
    assert sorted(out[out.index("[]") - 1].strip("[]").split(", ")) == sorted([f"{b}/eph", seq]), out
    assert zk.exists(f"{b}/eph") is None, "closed at end of input"


def test_acl_auth_and_whoami(server, base, zk):
    b = base
    did = rawzk.digest_id("u", "p")
    rc, out, err = cli(server, stdin="\n".join([
        "whoami",
        f"create {b}/open x world:anyone:r",
        f"getAcl {b}/open",
        f"set {b}/open y",
        "addauth digest u:p",
        "whoami",
        f"create {b}/mine m auth::cdrwa",
        f"getAcl -s {b}/mine",
        f"create {b}/d d",
        f"setAcl {b}/d digest:{did}:r,world:anyone:a",
        f"getAcl {b}/d",
        f"setAcl -v 7 {b}/d world:anyone:r",
        f"setAcl {b}/d bad",
        f"create {b}/ip x ip:127.0.0.1:cdrwa",
        f"get {b}/ip",
    ]) + "\n")
    assert rc == 0, (out, err)
    assert out.count("Auth scheme: User") == 2 and "ip: 127.0.0.1" in out and out.count("digest: u") == 1
    i = out.index("'world,'anyone")
    assert out[i + 1] == ": r"
    assert f"Insufficient permission : {b}/open" in err
    j = out.index(f"'digest,'{did}")
    assert out[j + 1] == ": cdrwa"
    assert parse_stats(out[j + 2:])[0]["aclVersion"] == "0"
    k = out.index(f"'digest,'{did}", j + 1)
    assert out[k + 1:k + 4] == [": r", "'world,'anyone", ": a"]
    assert f"version No is not valid : {b}/d" in err
    w = err.index("bad does not have the form scheme:id:perm")
    assert err[w + 1] == "Acl is not valid : null"
    assert without_events(out)[-1] == "x", "ip:127.0.0.1 lets this client read"
    # another session without the digest is refused
    assert cli(server, "get", f"{b}/mine") == (1, [], [f"Insufficient permission : {b}/mine"])
    assert cli(server, "get", f"{b}/d") == (1, [], [f"Insufficient permission : {b}/d"])


def test_watches_in_a_piped_session_and_a_chroot(server, base, zk):
    b = base
    zk.create(f"{b}/w", b"0")
    zk.create(f"{b}/w/kid", b"")
    # under a chroot: paths are the chroot's, events too
    rc, out, err = cli(server, conn=server.hostport + b, stdin="\n".join([
        "ls /",
        "get -w /w",
        "get -w /w",
        "set /w 1",
        "ls -w /w",
        "addWatch /",
        "create /w/new",
        "removewatches /w",
        "removewatches /",
        "history",
        "redo 0",
    ]) + "\n")
    text = "\n".join(out)
    assert "[kid]" in out
    ev = lambda t, p: f"WatchedEvent state:SyncConnected type:{t} path:{p}"  # noqa: E731
    # two get -w on one node, as with zkCli's single default watcher: one event
    assert out.count(ev("NodeDataChanged", "/w")) == 1, text
    # the new child reaches the recursive watch on the (chroot's) root as NodeCreated, and
    # the child watch on its parent. (Not both on one path: Apache 3.8 then fires only the
    # persistent one, ZOOKEEPER-4466.)
    assert out.count(ev("NodeCreated", "/w/new")) == 1, text
    assert out.count(ev("NodeChildrenChanged", "/w")) == 1, text
    assert "KeeperErrorCode = No such watcher for /w" in err, "the child watch has fired"
    assert out.count(ev("PersistentWatchRemoved", "/")) == 1, text
    assert "9 - history" in out
    assert out.count("[w]") == 2, "ls / ran again by redo 0"
    assert zk.exists(f"{b}/w/new") is not None


def normalized(lines, prefix):
    """zkCli and our CLI on the same script: drop banners, connection events, times and
    zxids (they differ between runs); the base path becomes B."""
    keep = []
    for l in lines:
        if re.match(r"^(Connecting to |Welcome to |JLine |ZooKeeper -server|ringkeeper cli --server|\t|"
                    r"Command not found|WATCHER::|\s*$|WatchedEvent state:(SyncConnected|Closed) "
                    r"type:None)", l):
            continue
        if re.match(r"^(c|m|p)(Zxid|time) = ", l):
            continue
        l = re.sub(r"^ephemeralOwner = 0x[1-9a-f][0-9a-f]*$", "ephemeralOwner = <session>", l)
        keep.append(l.replace(prefix, "B"))
    return keep


def test_same_output_as_zkcli(server, zk):
    """One script through zkCli.sh and through `ringkeeper cli` (stdout and stderr merged,
    compared as sorted lines: the two interleave the streams differently)."""
    bases = {}
    for who in ("zk", "rk"):
        bases[who] = f"/cmp-{who}-{free_port()}"
    script = [
        "create B hello",
        "create B/a x",
        "create B/a y",
        "create -s B/s d",
        "create -e B/e",
        "create B/n",
        "get B/n",
        "get -s B/a",
        "set -v 3 B/a z",
        "ls B",
        "ls -s B",
        "stat B/e",
        "getAcl B",
        "setAcl B/a world:anyone:cdrw,ip:127.0.0.1:a",
        "getAcl -s B/a",
        "addWatch -m bogus B",
        "get -w B/a",
        "set B/a w",
        "delete B/nope",
        "delete B",
        "create -c -s B/c",
        "create B/a/../b",
        "getAllChildrenNumber B",
        "ls -R B",
        "deleteall B/a",
        "ls B",
        "get",
        "bogus",
        "whoami",
    ]
    outs = {}
    zk_lines = zkcli(server.hostport, [l.replace("B", bases["zk"]) for l in script])
    outs["zk"] = normalized(zk_lines, bases["zk"])
    p = subprocess.run([cli_bin(), "cli", "--server", server.hostport],
                       input="\n".join(l.replace("B", bases["rk"]) for l in script) + "\nquit\n",
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=TIMEOUT)
    outs["rk"] = normalized(p.stdout.splitlines(), bases["rk"])
    assert sorted(outs["rk"]) == sorted(outs["zk"]), "\n".join(
        ["--- zkCli"] + outs["zk"] + ["--- ringkeeper cli"] + outs["rk"])
    assert "WatchedEvent state:SyncConnected type:NodeDataChanged path:B/a" in outs["rk"]
    assert len(outs["rk"]) > 40


class Pty:
    """The CLI on a pseudo-terminal (so rustyline edits the line), read by polling."""

    def __init__(self, args):
        self.master, slave = pty.openpty()
        self.p = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, close_fds=True,
                                  start_new_session=True, env={**os.environ, "TERM": "xterm"})
        os.close(slave)
        self.buf = b""

    def read(self):
        while select.select([self.master], [], [], 0)[0]:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:
                break
            if not chunk:
                break
            self.buf += chunk
        text = self.buf.decode(errors="replace").replace("\r", "")
        return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)

    def expect(self, pattern, timeout=10, count=1):
        rx = re.compile(pattern)
        return wait_until(lambda: len(rx.findall(self.read())) >= count, timeout=timeout,
                          what=f"{pattern!r} x{count} on the pty; got:\n{self.read()}")

    def send(self, line):
        os.write(self.master, line.encode() + b"\r")

    def close(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait(10)
        os.close(self.master)


def test_interactive_shell_on_a_pty_prints_a_watch_event(server, base, zk):
    zk.create(f"{base}/x", b"one")
    t = Pty([cli_bin(), "cli", "--server", server.hostport])
    try:
        hp = re.escape(server.hostport)
        t.expect(rf"\[zk: {hp}\(CONNECTED\) 0\] ")
        t.send(f"get -w {base}/x")
        t.expect(r"\bone\b")
        t.expect(rf"\[zk: {hp}\(CONNECTED\) 1\] ")
        zk.set(f"{base}/x", b"two")
        t.expect(re.escape(f"WatchedEvent state:SyncConnected type:NodeDataChanged path:{base}/x"))
        # the shell still takes commands after the event
        t.send(f"get {base}/x")
        t.expect(r"\btwo\b")
        t.send("history")
        t.expect(rf"1 - get {re.escape(base)}/x")
        t.send("close")
        t.expect(rf"\[zk: {hp}\(CLOSED\) 4\] ")
        t.send("quit")
        assert t.p.wait(10) == 0
    finally:
        t.close()
