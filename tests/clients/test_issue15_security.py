"""Issue 15, part A (security without TLS/SASL): session passwords nobody can derive, the
admin server's lock-down (bind address, whitelist, digest auth against the root's ACL),
the peer port's hardening, and security keys refused at start instead of ignored.

Each negative test says what Apache ZooKeeper 3.8 (the reference) does where it applies."""

import hashlib
import json
import os
import random
import socket
import struct
import threading
import urllib.error
import urllib.request

import pytest
from kazoo.security import ACL, Id

import rawzk
from helpers import RK_BIN, SUPER_PASSWORD, SUPER_USER, free_port, peer_hello, wait_until

# ringkeeper's password before issue 15: SHA-1 of a constant ("ringkeep") and the session id.
OLD_RINGKEEPER_SECRET = 0x72696E676B656570
# Apache ZooKeeper's: java.util.Random seeded with the session id XOR this constant
# (ZooKeeperServer.superSecret, 3.8).
APACHE_SUPER_SECRET = 0xB3415C00


def old_ringkeeper_password(session_id):
    h = hashlib.sha1(struct.pack(">Q", OLD_RINGKEEPER_SECRET) + struct.pack(">q", session_id))
    return h.digest()[:16]


def apache_password(session_id):
    """java.util.Random(session_id ^ superSecret).nextBytes(16), as ZooKeeperServer.generatePasswd."""
    mask = (1 << 48) - 1
    seed = ((session_id ^ APACHE_SUPER_SECRET) ^ 0x5DEECE66D) & mask
    out = bytearray()
    while len(out) < 16:
        seed = (seed * 0x5DEECE66D + 0xB) & mask
        rnd = seed >> 16  # next(32): 32 bits, read below byte by byte from the low end
        for _ in range(min(4, 16 - len(out))):
            out.append(rnd & 0xFF)
            rnd >>= 8
    return bytes(out)


def refused_resume(hostport, session_id, passwd):
    """Tries to resume `session_id` with `passwd` on a fresh socket; returns True if the
    server answered as it answers an invalid session (timeout 0, id 0, zero password) and
    closed the socket."""
    c = rawzk.RawConn(hostport, handshake=False)
    try:
        resp = c.handshake(timeout_ms=10000, session_id=session_id, passwd=passwd)
        if resp.timeout != 0:
            return False
        assert resp.session_id == 0 and resp.passwd == bytes(16)
        assert c.wait_closed(5)[0], "the refused connection is closed"
        return True
    finally:
        c.close()


# ---- 1. session passwords ----


def test_a_derived_or_guessed_password_does_not_resume_a_session(kind, raw, base):
    """Neither ringkeeper's old derivation (SHA-1 of a constant and the id) nor random or zero
    guesses resume a session on ringkeeper: each gets the invalid-session answer and a closed
    socket, and the session itself lives on (its owner resumes it with the real password).
    Apache 3.8 answers a wrong password the same way, but its own passwords ARE derivable
    from the id (java.util.Random seeded with id ^ 0xB3415C00): this test shows that its
    derived password resumes the victim's session there, and that it does not here."""
    a = raw(timeout_ms=10000)
    eph = f"{base}/victim-lock"
    a.create(eph, flags=rawzk.EPHEMERAL)
    sid, pw = a.session.session_id, a.session.passwd
    rng = random.Random(sid)
    guesses = [old_ringkeeper_password(sid), bytes(16), bytes([0xFF] * 16)]
    guesses += [bytes(rng.randrange(256) for _ in range(16)) for _ in range(3)]
    for guess in guesses:
        assert guess != pw
        assert refused_resume(a.hostport, sid, guess), f"password {guess.hex()} must not resume the session"
    derived = apache_password(sid)
    if kind == "apache":
        assert derived == pw, "Apache 3.8's password is java.util.Random(id ^ superSecret)"
    else:
        assert derived != pw
        assert refused_resume(a.hostport, sid, derived)
    b = raw(timeout_ms=10000, session_id=sid, passwd=pw)
    assert b.session.session_id == sid and b.session.timeout == 10000
    assert b.exists(eph).ephemeralOwner == sid


def test_a_session_resumes_with_its_password_after_a_restart(kind, make_server):
    """ringkeeper only (Apache's passwords need no stored key): the key is in the log (and in
    snapshots), so after a SIGTERM restart and after a kill -9 the same password resumes the
    session with its ephemeral, and a guessed one still does not. snapCount=2 makes the
    second restart recover from a snapshot that holds the key."""
    if kind != "ringkeeper":
        pytest.skip("ringkeeper's session key; Apache derives passwords from the id")
    s = make_server(snapCount=2, preAllocSize=4096)
    a = rawzk.RawConn(s.hostport, timeout_ms=10000)
    a.create("/r", b"")
    a.create("/r/eph", b"", flags=rawzk.EPHEMERAL)
    sid, pw = a.session.session_id, a.session.passwd
    assert pw != old_ringkeeper_password(sid) and pw != apache_password(sid)
    for i in range(4):
        a.create(f"/r/n{i}", b"x")  # past snapCount: a snapshot is written
    a.sock.close()
    for kill in (False, True):
        s.restart(kill=kill)
        assert refused_resume(s.hostport, sid, old_ringkeeper_password(sid))
        b = rawzk.RawConn(s.hostport, timeout_ms=10000, session_id=sid, passwd=pw)
        try:
            assert b.session.session_id == sid and b.session.timeout == 10000, "the session resumes"
            assert b.session.passwd == pw
            assert b.exists("/r/eph").ephemeralOwner == sid
            b.create(f"/r/after-{int(kill)}", b"")
        finally:
            b.sock.close()
    assert any(n.startswith("snapshot.") for n in os.listdir(s.data_dir)), "a snapshot was written"


# ---- 2. the admin server ----


def admin_get(port, name, headers=None):
    """(status, JSON body) of GET /commands/<name>."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}/commands/{name}", headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, json.loads(r.read().decode())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read().decode())


def listening_addresses(port):
    """The local addresses of TCP sockets listening on `port` (from /proc/net/tcp and tcp6)."""
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                addr, p = local.split(":")
                if state == "0A" and int(p, 16) == port:
                    out.append(socket.inet_ntop(socket.AF_INET, bytes.fromhex(addr)[::-1])
                               if len(addr) == 8 else "v6:" + addr)
    return out


def admin_server(make_server, **keys):
    port = free_port()
    s = make_server(**{"admin.enableServer": "true", "admin.serverPort": port, **keys})
    wait_until(lambda: admin_get(port, "ruok")[0] == 200, what="the admin server")
    return s, port


def test_the_admin_server_binds_the_loopback_unless_told(kind, make_server):
    """ringkeeper only (Debian's ZooKeeper has no Jetty; ZooKeeper's default is 0.0.0.0):
    without admin.serverAddress the admin port listens on 127.0.0.1 only; with
    admin.serverAddress=0.0.0.0 on every address."""
    if kind != "ringkeeper":
        pytest.skip("Debian's ZooKeeper 3.8 has no Jetty for the admin server")
    s, port = admin_server(make_server)
    assert listening_addresses(port) == ["127.0.0.1"]
    s2, port2 = admin_server(make_server, **{"admin.serverAddress": "0.0.0.0"})
    assert listening_addresses(port2) == ["0.0.0.0"]


def test_admin_commands_that_list_sessions_need_the_whitelist_or_every_permission_on_root(kind, make_server,
                                                                                         kazoo_factory):
    """ringkeeper only (Debian's ZooKeeper has no Jetty). Off the whitelist, dump / cons /
    stat / wchc / wchp / wchs answer 401 without an Authorization header and 401 for a scheme
    that is not a provider; with `digest user:password` they run only if that id holds EVERY
    permission on / — a user with READ alone gets 403 (CVE-2025-58457: any one bit passed) —
    and `ip` auth uses the TCP peer's address, never X-Forwarded-For (CVE-2024-51504).
    Commands that list nothing (monitor, ruok) stay open; a whitelisted command is open."""
    if kind != "ringkeeper":
        pytest.skip("Debian's ZooKeeper 3.8 has no Jetty for the admin server")
    s, port = admin_server(make_server)
    zk = kazoo_factory(s.hostport)
    zk.create("/secret-ephemeral", ephemeral=True)
    protected = ["dump", "cons", "stat", "wchc", "wchp", "wchs", "connections", "watches"]
    for name in protected:
        status, body = admin_get(port, name)
        assert status == 401 and body["error"] == "Auth info is missing for the command", (name, body)
        assert "session_id_to_ephemeral_paths" not in body and "connections" not in body
    assert admin_get(port, "monitor")[0] == 200 and admin_get(port, "srvr")[0] == 200
    for header in ("Basic YWRtaW46cHc=", "sasl admin", "digest", "digest a:b c"):
        assert admin_get(port, "dump", {"Authorization": header})[0] == 401, header

    # Lock the root: admin:pw has every bit, reader:pw only READ, the address 10.9.8.7 all.
    sup = kazoo_factory(s.hostport, auth_data=[("digest", f"{SUPER_USER}:{SUPER_PASSWORD}")])
    sup.set_acls("/", [
        ACL(31, Id("digest", rawzk.digest_id("admin", "pw"))),
        ACL(1, Id("digest", rawzk.digest_id("reader", "pw"))),
        ACL(31, Id("ip", "10.9.8.7")),
    ])
    for name in protected:
        status, body = admin_get(port, name, {"Authorization": "digest reader:pw"})
        assert status == 403 and body["error"] == "Not authorized", (name, body)
    assert admin_get(port, "dump", {"Authorization": "digest admin:wrong"})[0] == 403
    forged = {"Authorization": "ip", "X-Forwarded-For": "10.9.8.7", "X-Real-IP": "10.9.8.7"}
    assert admin_get(port, "dump", forged)[0] == 403
    assert admin_get(port, "dump", {"Authorization": "ip 10.9.8.7"})[0] == 403
    sid = zk.client_id[0]
    for header in ("digest admin:pw", f"digest {SUPER_USER}:{SUPER_PASSWORD}"):
        status, body = admin_get(port, "dump", {"Authorization": header})
        assert status == 200 and body["session_id_to_ephemeral_paths"][str(sid)] == ["/secret-ephemeral"], body

    # Whitelisted: open, as on the client port.
    s2, port2 = admin_server(make_server, **{"4lw.commands.whitelist": "srvr, dump"})
    assert admin_get(port2, "dump")[0] == 200
    assert admin_get(port2, "cons")[0] == 401


# ---- 3. the peer port (and 1. on an ensemble) ----

SNAP_FLOOD_CONNECTIONS = 3
SNAP_FLOOD_FRAME_BYTES = 500 * 1024 * 1024
SNAP_FLOOD_WRITE_BYTES = 1024 * 1024
RSS_GROWTH_BYTES_MAX = 64 * 1024 * 1024


def rss_bytes(pid, field="VmRSS"):
    """A process's resident memory (VmRSS), or its peak so far (field="VmHWM")."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} for {pid}")


def peer_connect(src_ip, dst):
    s = socket.socket()
    s.bind((src_ip, 0))
    s.settimeout(10)
    s.connect(dst)
    return s


def refused_by_peer_port(src_ip, dst, payload=b""):
    """Connects from `src_ip`, sends `payload`, and returns True once the server closes it."""
    s = peer_connect(src_ip, dst)
    try:
        if payload:
            try:
                s.sendall(payload)
            except OSError:
                return True
        try:
            return s.recv(64) == b""
        except ConnectionResetError:
            return True
    finally:
        s.close()


def snap_flood(src_ip, dst, claimed_sid):
    """The issue's attack: a valid-looking hello, then a frame labelled SnapChunk of 500 MiB,
    streamed; returns the bytes the server took before it closed the connection."""
    s = peer_connect(src_ip, dst)
    sent = 0
    try:
        head = struct.pack(">I", SNAP_FLOOD_FRAME_BYTES) + bytes([4]) + bytes(24) + bytes([11])
        s.sendall(peer_hello(claimed_sid) + head)
        block = bytes(SNAP_FLOOD_WRITE_BYTES)
        while sent < SNAP_FLOOD_FRAME_BYTES:
            s.sendall(block)
            sent += len(block)
    except OSError:
        pass
    finally:
        s.close()
    return sent


@pytest.fixture
def distinct_hosts_ensemble(tmp_path):
    """A 3-member ringkeeper ensemble whose member i has its peer ports on 127.0.0.i."""
    if not os.access(RK_BIN, os.X_OK):
        pytest.skip("ringkeeper binary not built")
    from test_ensemble import Ensemble
    e = Ensemble(3, tmp_path)
    e.env["RK_PEER_HOSTS"] = "distinct"
    e.env["RK_EXTRA_CONFIG"] = "maxSessionTimeout=30000\npreAllocSize=4096"
    e.start()
    yield e
    e.stop()


@pytest.mark.ringkeeper_only
def test_the_peer_port_refuses_strangers_forged_hellos_and_snap_floods(distinct_hosts_ensemble, kazoo_factory):
    """Issue 15's peer attacks on a follower of a 3-member ensemble (members on 127.0.0.1-3):
    three connections from a member's own address, each claiming that member's id and
    streaming a 500 MiB frame labelled SnapChunk, are cut after the frame's head (the follower's
    peak RSS grows by less than 64 MiB; before, 10 MiB became 1.5 GiB); a connection from an
    address that is no server's is closed and logged; a hello claiming server 2 from server
    3's address is refused and logged. The ensemble then still replicates, fails over when its
    leader is killed -9, and the killed member rejoins and catches up."""
    e = distinct_hosts_ensemble
    leader = e.wait_serving([1, 2, 3])
    t = next(i for i in (1, 2, 3) if i != leader)
    others = [i for i in (1, 2, 3) if i != t]
    port = lambda i: ("127.0.0.%d" % i, e.base + 10000 + i)  # noqa: E731
    zk = kazoo_factory(e.hostport(leader))
    zk.create("/before", b"1")

    peak_before = rss_bytes(e.pid(t), "VmHWM")
    results = []
    threads = [threading.Thread(target=lambda j=j: results.append(snap_flood(f"127.0.0.{j}", port(t), j)))
               for j in (others * 2)[:SNAP_FLOOD_CONNECTIONS]]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert len(results) == SNAP_FLOOD_CONNECTIONS
    assert all(r < SNAP_FLOOD_FRAME_BYTES for r in results), f"a flood was taken whole: {results}"
    # The peak, not the RSS after: a frame buffered whole is freed once it fails to decode.
    growth = rss_bytes(e.pid(t), "VmHWM") - peak_before
    print(f"SNAP flood: bytes taken per connection {results}; follower peak RSS {peak_before >> 20} MiB, "
          f"grew by {growth / 2**20:.1f} MiB")
    assert growth < RSS_GROWTH_BYTES_MAX, f"peak RSS grew by {growth >> 20} MiB"
    assert "exceeds the peer frame limit of" in e.log(t)

    stranger = "127.0.0.9"
    wait_until(lambda: refused_by_peer_port(stranger, port(t), peer_hello(others[0]))
               and f"{stranger}" in e.log(t) and "is not the address of any server.N line" in e.log(t),
               timeout=20, what="a stranger refused and logged")
    forger, victim = others[0], others[1]
    line = (f"claims server id {victim}, whose server.{victim} host is 127.0.0.{victim}, "
            f"but comes from 127.0.0.{forger}")
    wait_until(lambda: refused_by_peer_port(f"127.0.0.{forger}", port(t), peer_hello(victim)) and line in e.log(t),
               timeout=20, what="a forged hello refused and logged")

    # Still an ensemble: replication, failover, catch-up.
    k = kazoo_factory(e.hostport(t))
    wait_until(lambda: k.exists("/before") is not None, what="replication to the attacked follower")
    e.kill9(leader)
    new_leader = e.wait_serving([i for i in (1, 2, 3) if i != leader])
    assert new_leader != leader
    k2 = kazoo_factory(e.hostport(new_leader))
    k2.create("/after-failover", b"2")
    e.restart(leader)
    e.wait_serving([1, 2, 3])
    k3 = kazoo_factory(e.hostport(leader))
    wait_until(lambda: (k3.sync("/"), k3.exists("/after-failover"))[1] is not None,
               what="the killed member to catch up")


@pytest.mark.ringkeeper_only
def test_an_ensemble_session_resumes_on_any_member_and_after_a_full_restart_never_by_guess(distinct_hosts_ensemble):
    """The session key is replicated: a session made on one member resumes with its password
    on every other member, and after every member was stopped and started again; the old
    derivable password, Apache's, and random guesses are refused on every member."""
    e = distinct_hosts_ensemble
    e.wait_serving([1, 2, 3])
    a = rawzk.RawConn(e.hostport(1), timeout_ms=30000)
    a.create("/lock", b"", flags=rawzk.EPHEMERAL)
    sid, pw = a.session.session_id, a.session.passwd
    a.sock.close()
    guesses = [old_ringkeeper_password(sid), apache_password(sid), bytes(16), os.urandom(16)]

    def resume_everywhere():
        for i in (3, 2, 1):
            for g in guesses:
                assert refused_resume(e.hostport(i), sid, g), f"member {i} took a guessed password"
            b = rawzk.RawConn(e.hostport(i), timeout_ms=30000, session_id=sid, passwd=pw)
            try:
                assert b.session.session_id == sid and b.session.timeout > 0, f"no resume on member {i}"
                assert b.session.passwd == pw
                assert b.exists("/lock").ephemeralOwner == sid
            finally:
                b.sock.close()

    resume_everywhere()
    e.sh("stop")
    for i in (1, 2, 3):
        e.restart(i)
    e.wait_serving([1, 2, 3])
    resume_everywhere()
    # One key, made once by the first leader, never again after the restart.
    assert sum(e.log(i).count("no session-password key yet") for i in (1, 2, 3)) == 1


# ---- 4. security keys: honoured or refused, never ignored ----


@pytest.mark.parametrize("key,value", [
    # (the client port's TLS keys are honoured: tests/clients/test_tls.py; quorum TLS:
    # tests/clients/test_quorum_tls.py; admin HTTPS: tests/clients/test_admin_http.py)
    # (client SASL, Kerberos included, and enforce.auth are honoured: tests/clients/test_sasl.py,
    # test_kerberos.py; quorum SASL: test_quorum_sasl.py, test_kerberos.py)
    ("authProvider.1", "org.example.CustomAuthenticationProvider"),
    ("kerberos.principal", "zookeeper/host@EXAMPLE.COM"),            # Kerberos
    ("sasl.serverconfig", "OtherSection"),
])
def test_a_security_key_ringkeeper_cannot_honour_stops_the_start(kind, make_server, key, value):
    """ringkeeper only (Apache honours these): the process exits non-zero at start with a
    message naming the key and docs/security.md, instead of serving without the protection."""
    if kind != "ringkeeper":
        pytest.skip("Apache ZooKeeper honours these keys")
    s = make_server(start=False)
    s.config[key] = value
    s.spawn()
    rc = s.proc.wait(30)
    log = s.log_text()
    assert rc != 0, log[-2000:]
    assert f": {key}: not supported yet" in log and "docs/security.md" in log, log[-2000:]
    assert "panicked" not in log


def test_security_keys_ringkeeper_honours_start_the_server(kind, make_server):
    """The digest and ip providers, SHA1 digests, and the switches set to off start a server
    that serves (on both kinds), without a warning about them on ringkeeper."""
    keys = {
        "authProvider.1": "org.apache.zookeeper.server.auth.DigestAuthenticationProvider",
        "authProvider.2": "org.apache.zookeeper.server.auth.IPAuthenticationProvider",
        "sslQuorum": "false",
        "client.portUnification": "false",
        "quorum.auth.enableSasl": "false",
        "admin.forceHttps": "false",
    }
    s = make_server(**{k.replace(".", "__"): v for k, v in keys.items()})
    with rawzk.RawConn(s.hostport) as c:
        assert c.exists("/") is not None
    if kind == "ringkeeper":
        log = s.log_text()
        for k in keys:
            assert k not in log, log[-2000:]
