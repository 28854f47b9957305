"""Read-only mode (issue 16): 3-member ensembles with `-Dreadonlymode.enabled=true` in
SERVER_JVMFLAGS (the only place Apache ZooKeeper reads it; ringkeeper reads it there and as a
zoo.cfg key), ringkeeper and Apache ZooKeeper 3.8 side by side. With 2 of 3 members stopped the
survivor serves read-only: `isro` says `ro`, `srvr` Mode `read-only`; kazoo with read_only=True
connects (CONNECTED_RO), reads the last tree, gets NotReadOnly on a create, a setData and a
sync; a client that did not ask for read-only is closed without a reply. When the members come
back the read-only connections close and the kazoo client ends read-write (CONNECTED) and
writes. Both get `localSessionsEnabled=true`: Apache 3.8 answers a read-only member's new
session with a bare NotReadOnly reply header (which no client can read) unless sessions are
local; ringkeeper's read-only sessions are local either way. Our Rust CLI's `-r` is checked
against the read-only survivor too."""

import os
import socket
import struct
import subprocess
import threading

import pytest

import helpers
from helpers import APACHE_CLASSPATH, JAVA, RK_BIN, wait_until
from test_four_letter_words import four_letter_word
from test_local_sessions import RkTrio
from test_quorum_tls import MEMBERS, ApacheEnsemble

RO_FLAGS = "-Dreadonlymode.enabled=true"


def isro(hostport):
    try:
        return four_letter_word(hostport, "isro", timeout=5.0)
    except OSError:
        return ""


class ApacheTrio(ApacheEnsemble):
    """Three Apache ZooKeeper 3.8 QuorumPeerMain processes (test_quorum_tls's), read-only mode
    on from the JVM flags, local sessions on."""

    def __init__(self, tmp_path):
        if not os.path.exists("/usr/share/java/zookeeper.jar"):
            pytest.skip("Apache ZooKeeper (Debian's zookeeper package) is not installed")
        super().__init__(tmp_path, {"localSessionsEnabled": "true"})

    def spawn(self, i):
        d = self.dir / str(i)
        with open(d / "server.log", "ab") as log:
            self.procs[i] = subprocess.Popen(
                [JAVA, "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", RO_FLAGS, "-cp",
                 APACHE_CLASSPATH, "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(d / "zoo.cfg")],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)

    def start(self):
        for i in MEMBERS:
            self.spawn(i)
        for i in MEMBERS:
            wait_until(lambda: isro(self.hostport(i)) == "rw", timeout=90.0, interval=0.5,
                       what=f"Apache member {i} to serve")
        return self

    def kill(self, i):
        self.procs[i].kill()
        self.procs[i].wait(10)

    def restart(self, i):
        self.spawn(i)


@pytest.fixture
def trio(kind, tmp_path):
    if kind == "ringkeeper" and not os.access(RK_BIN, os.X_OK):
        pytest.skip("ringkeeper binary not built")
    if kind not in helpers.selected_kinds():
        pytest.skip(f"{kind} not selected by RK_SERVERS")
    if kind == "ringkeeper":
        t = RkTrio(tmp_path, {"localSessionsEnabled": "true"}, env={"SERVER_JVMFLAGS": RO_FLAGS})
    else:
        t = ApacheTrio(tmp_path)
    try:
        yield t.start()
    finally:
        t.stop()


def connect_request(read_only):
    """A raw ConnectRequest (new session, timeout 10 s), with or without the readOnly byte."""
    body = struct.pack(">iqiqi", 0, 0, 10000, 0, 16) + b"\0" * 16
    if read_only is not None:
        body += b"\1" if read_only else b"\0"
    return struct.pack(">i", len(body)) + body


def raw_connect(hostport, read_only):
    """Sends a ConnectRequest; returns the bytes received before the server closed (or 5 s)."""
    host, port = hostport.split(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(connect_request(read_only))
        out = b""
        try:
            while True:
                b = s.recv(4096)
                if not b:
                    break
                out += b
                if len(out) >= 4 and len(out) >= 4 + struct.unpack(">i", out[:4])[0]:
                    break
        except socket.timeout:
            pass
        return out


def test_survivor_serves_read_only_then_clients_move_to_read_write(trio, kind, kazoo_factory):
    from kazoo.exceptions import NotReadOnlyCallError
    from kazoo.protocol.states import KeeperState

    hosts = ",".join(trio.hostport(i) for i in MEMBERS)
    w = kazoo_factory(hosts)
    w.create("/ro/a", b"before", makepath=True)
    w.stop()

    trio.kill(2)
    trio.kill(3)
    survivor = trio.hostport(1)
    wait_until(lambda: isro(survivor) == "ro", timeout=60.0, interval=0.2, what="the survivor to serve read-only")
    srvr = four_letter_word(survivor, "srvr")
    assert "Mode: read-only" in srvr and "READ-ONLY mode; serving only read-only clients" in srvr, srvr
    assert "zk_server_state\tread-only" in four_letter_word(survivor, "mntr")

    # Not asking for read-only (false, or an old client without the byte): closed, no reply.
    assert raw_connect(survivor, False) == b""
    assert raw_connect(survivor, None) == b""
    # Asking: a ConnectResponse whose readOnly byte is 1, for a session this member made
    # (ZooKeeper's ids carry the server id in the top byte).
    resp = raw_connect(survivor, True)
    assert len(resp) == 4 + 37, resp
    _, _, timeout_ms, session_id = struct.unpack(">iiiq", resp[:20])
    assert timeout_ms > 0 and session_id >> 56 == 1 and resp[-1] == 1, resp

    states = []
    ro = kazoo_factory(hosts, start=False, read_only=True)
    ro.add_listener(lambda s: states.append((s, ro.client_state)))
    ro.start(timeout=30)
    assert ro.client_state == KeeperState.CONNECTED_RO
    assert ro.get("/ro/a")[0] == b"before"
    assert ro.get_children("/ro") == ["a"]
    for write in (lambda: ro.create("/ro/b", b""), lambda: ro.set("/ro/a", b"x"), lambda: ro.sync("/ro")):
        with pytest.raises(NotReadOnlyCallError):
            write()
    assert ro.get("/ro/a")[0] == b"before", "still connected after the refused writes"

    rw = kazoo_factory(survivor, start=False, timeout=4.0)
    with pytest.raises(Exception):
        rw.start(timeout=4)
    rw.stop()

    trio.restart(2)
    trio.restart(3)
    wait_until(lambda: ro.client_state == KeeperState.CONNECTED, timeout=90.0, interval=0.2,
               what="the read-only client to move to a read-write server")
    ro.create("/ro/after", b"rw")
    assert ro.get("/ro/after")[0] == b"rw"
    assert isro(survivor) == "rw"
    if kind == "ringkeeper":
        assert "serving read-only clients" in trio.log(1) and "stops serving read-only" in trio.log(1)


def test_rust_cli_read_only(trio, kind, tmp_path):
    if not os.access(RK_BIN, os.X_OK):
        pytest.skip("ringkeeper binary not built (the CLI)")
    hosts = ",".join(trio.hostport(i) for i in MEMBERS)
    cli = [RK_BIN, "cli", "--server", hosts]
    out = subprocess.run(cli + ["create", "/cli", "v0"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    trio.kill(2)
    trio.kill(3)
    wait_until(lambda: isro(trio.hostport(1)) == "ro", timeout=60.0, interval=0.2, what="read-only survivor")
    # Without -r the lone read-only member refuses the session: the command fails.
    out = subprocess.run(cli + ["--timeout", "3000", "get", "/cli"], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0, out.stdout
    out = subprocess.run(cli + ["-r", "get", "/cli"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "v0", (out.stdout, out.stderr)
    out = subprocess.run(cli + ["-r", "set", "/cli", "v1"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 1 and "Not a read-only call: /cli" in out.stderr, (out.stdout, out.stderr)
    # A shell session with -r: ConnectedReadOnly now, SyncConnected once the members are back
    # (the client probes them with isro and moves), then writes.
    shell = CliPipe(cli + ["-r"])
    try:
        shell.wait_for(r"state:ConnectedReadOnly type:None", timeout=30.0)
        shell.run("get /cli", r"^v0$", timeout=30.0)
        trio.restart(2)
        trio.restart(3)
        shell.wait_for(r"state:SyncConnected type:None", timeout=120.0)
        shell.run("create /cli/moved rw", r"Created /cli/moved", timeout=30.0)
    finally:
        shell.close()


class CliPipe(helpers.CliMt):
    """`ringkeeper cli` driven through a pipe, as helpers.CliMt drives cli_mt."""

    def __init__(self, args):
        self.p = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.out = bytearray()
        self.lock = threading.Lock()
        self.t = threading.Thread(target=self._reader, daemon=True)
        self.t.start()
