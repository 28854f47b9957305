"""Hardening (issue 14) of the peer side and of smaller divergences from Apache:
item 6 (a write burst past the peer transport's queue limit is flow-controlled, never dropped
into a gap), item 3's ensemble part (a member whose log is damaged rejoins from the quorum and
keeps the damaged files), item 10 (the admin HTTP server under idle connections) and item 11
(error codes, addauth, ip ACL ids, `dirs`, each against Apache 3.8 as the reference)."""

import hashlib
import os
import signal
import threading
import time

import pytest

import rawzk
from helpers import wait_until
from test_admin_http import prometheus
from test_ensemble import Ensemble, ensemble  # noqa: F401 (fixture)


# ---- item 6: a write burst over the peer queue limit ----

BURST_CONNECTIONS = 100
BURST_VALUE_BYTES = 1024 * 1024
FOLLOWERS_STOPPED_S = 2.0


def _epoch(zxid):
    return zxid >> 32


def _metrics(e, i):
    m = prometheus(e.base + 10200 + i)
    return m["elections"], m["election_time"]


def _reconfigure(e, **keys):
    """Stops every member of `e`, adds `keys` to each zoo.cfg, and starts them again."""
    e.sh("stop")
    for i in range(1, e.n + 1):
        path = os.path.join(e.dir, str(i), "zoo.cfg")
        with open(path) as f:
            lines = [ln for ln in f.read().splitlines() if ln.split("=", 1)[0] not in keys]
        with open(path, "w") as f:
            f.write("\n".join(lines + [f"{k}={v}" for k, v in keys.items()]) + "\n")
        e.restart(i)


def _encode_set_data(path, data, version=-1):
    w = rawzk.Writer()
    w.ustring(path)
    w.buffer(data)
    w.int(version)
    return w.bytes()


@pytest.mark.ringkeeper_only
def test_hardening_6_write_burst_over_64mib_keeps_every_follower(ensemble):
    """100 connections each send a 1 MiB setData at once while both followers are slow (stopped
    for 2 s, well within syncLimit): 100 MiB for the leader's queue to each follower, past the
    64 MiB the transport used to drop at (a gap: both followers re-elected). The writes wait instead,
    no follower loses its leader (same leader, same epoch, no election on any member), no
    client connection is closed, and every member holds every write."""
    e = ensemble(3)
    # syncLimit 10 s: the followers are stopped for a moment below it (they are slow, not gone).
    _reconfigure(e, maxClientCnxns=0, syncLimit=50, initLimit=50, maxSessionTimeout=120000, **{"jute.maxbuffer": 4 * 1024 * 1024})
    leader = e.wait_serving([1, 2, 3])
    members = [1, 2, 3]
    with rawzk.RawConn(e.hostport(leader)) as c:
        c.call(rawzk.OP_CREATE, rawzk.encode_create("/burst"))
        for n in range(BURST_CONNECTIONS):
            c.call(rawzk.OP_CREATE, rawzk.encode_create(f"/burst/n{n:03d}"))
        hdr, _ = c.call(rawzk.OP_GETDATA, rawzk.encode_path_watch("/burst"))
        epoch_before = _epoch(hdr.zxid)
    metrics_before = {i: _metrics(e, i) for i in members}
    # Only what the logs say from the burst on: the start-up may go through an election.
    log_before = {i: len(e.log(i)) for i in members}
    conns = [rawzk.RawConn(e.hostport(leader), timeout_ms=120000, io_timeout=120.0)
             for n in range(BURST_CONNECTIONS)]
    values = [hashlib.sha256(b"%d" % n).digest() * (BURST_VALUE_BYTES // 32) for n in range(BURST_CONNECTIONS)]
    try:
        # Slow followers: stopped while the burst arrives, so the leader's queues to them pass
        # 64 MiB whatever the machine's speed.
        followers = [i for i in members if i != leader]
        for i in followers:
            e.signal(i, signal.SIGSTOP)
        # Send all, then read all: the burst is in flight at once.
        senders = []
        xids = [None] * BURST_CONNECTIONS

        def send(n):
            xids[n] = conns[n].send_request(rawzk.OP_SETDATA, _encode_set_data(f"/burst/n{n:03d}", values[n]))

        for n in range(BURST_CONNECTIONS):
            t = threading.Thread(target=send, args=(n,))
            t.start()
            senders.append(t)
        for t in senders:
            t.join(timeout=120)
        time.sleep(FOLLOWERS_STOPPED_S)
        for i in followers:
            e.signal(i, signal.SIGCONT)
        for n, c in enumerate(conns):
            hdr, _ = c.read_reply(xids[n])  # ConnectionClosed here: a client lost its connection
            assert hdr.err == 0, f"setData {n} on server {members[n % 3]}: error {hdr.err}"
            assert _epoch(hdr.zxid) == epoch_before, f"setData {n} committed in a new epoch"
    finally:
        for c in conns:
            c.close()
    assert e.leader() == leader, "the leader changed"
    for i in members:
        assert _metrics(e, i) == metrics_before[i], f"server {i} went through an election:\n{e.tail(i)}"
        log = e.log(i)[log_before[i]:]
        assert "lost the quorum" not in log and "electing" not in log, f"server {i}:\n{e.tail(i)}"
    for i in members:
        with rawzk.RawConn(e.hostport(i), io_timeout=60.0) as c:
            c.call(rawzk.OP_SYNC, rawzk.Writer().ustring("/burst").bytes())
            for n in range(BURST_CONNECTIONS):
                _, r = c.call(rawzk.OP_GETDATA, rawzk.encode_path_watch(f"/burst/n{n:03d}"))
                assert r.buffer() == values[n], f"server {i}: /burst/n{n:03d} lacks its write"


# ---- item 3, ensemble part: a member with a damaged log rejoins from the quorum ----

SECTOR_BYTES = 512  # the log's crc-sealed unit (docs/storage-format.md)


def _segments(data_dir):
    return sorted((int(n[4:], 16), os.path.join(data_dir, n)) for n in os.listdir(data_dir)
                  if n.startswith("log.") and not n.endswith(".spare") and all(c in "0123456789abcdefABCDEF" for c in n[4:]))


@pytest.mark.ringkeeper_only
def test_hardening_3_ensemble_member_with_a_damaged_log_rejoins_from_the_quorum(ensemble):
    """A follower's last log segment has a flipped byte in the records of a batch it had
    acknowledged (its sector's crc tells it from a torn write). On
    restart it used to stop for good; now it moves the damaged segment aside unchanged, logs an
    ERROR naming file and offset, rejoins from the quorum and holds every write."""
    e = ensemble(3)
    leader = e.wait_serving([1, 2, 3])
    f = next(i for i in (1, 2, 3) if i != leader)
    written = {}
    with rawzk.RawConn(e.hostport(leader)) as c:
        c.call(rawzk.OP_CREATE, rawzk.encode_create("/dmg"))
        for n in range(60):  # one by one: one batch each
            path, data = f"/dmg/n{n:03d}", b"before %d" % n
            c.call(rawzk.OP_CREATE, rawzk.encode_create(path, data))
            written[path] = data
    with rawzk.RawConn(e.hostport(f)) as c:  # f has them all before it stops
        c.call(rawzk.OP_SYNC, rawzk.Writer().ustring("/dmg").bytes())
        assert c.call(rawzk.OP_GETDATA, rawzk.encode_path_watch("/dmg/n059"))[1].buffer() == b"before 59"
    pid = e.pid(f)
    e.signal(f, signal.SIGTERM)
    wait_until(lambda: not os.path.exists(f"/proc/{pid}"), timeout=20, what=f"server {f} to stop")
    data_dir = os.path.join(e.dir, str(f), "data")
    # The segment holding the acknowledged create the byte is flipped in (the log may have
    # rolled since: the last segment is not always the one), found in the logical stream (the
    # sector payloads: a record may straddle a sector's crc).
    def logical(d):
        return b"".join(d[i:i + SECTOR_BYTES - 4] for i in range(0, len(d), SECTOR_BYTES))
    seg, original = next((p, d) for p, d in ((p, open(p, "rb").read()) for _, p in _segments(data_dir))
                         if b"before 30" in logical(d))
    # A byte inside an acknowledged create's data (a valid batch follows it): the sector's
    # crc no longer matches, which the log tells from a write that never completed.
    at_logical = logical(original).index(b"before 30") + 3
    at = at_logical // (SECTOR_BYTES - 4) * SECTOR_BYTES + at_logical % (SECTOR_BYTES - 4)
    off = at // SECTOR_BYTES * SECTOR_BYTES
    damaged = bytearray(original)
    damaged[at] ^= 0x40
    with open(seg, "r+b") as fh:
        fh.seek(at)
        fh.write(damaged[at:at + 1])
    e.restart(f)
    wait_until(lambda: e.roles().get(f) == "follower", timeout=60, what=f"server {f} to follow again")
    log = e.log(f)
    assert "ERROR" in log and os.path.basename(seg) in log and f"byte {off}" in log, e.tail(f)
    # The damaged segment sits unchanged in damaged.<time>/ under the log directory.
    aside = [d for d in os.listdir(data_dir) if d.startswith("damaged.")]
    assert len(aside) == 1, os.listdir(data_dir)
    with open(os.path.join(data_dir, aside[0], os.path.basename(seg)), "rb") as fh:
        assert fh.read() == bytes(damaged), "the damaged segment was rewritten"
    assert not os.path.exists(os.path.join(data_dir, "rejoin.pending")), "synced, it counts again"
    with rawzk.RawConn(e.hostport(leader)) as c:
        for n in range(60, 80):
            path, data = f"/dmg/n{n:03d}", b"after %d" % n
            c.call(rawzk.OP_CREATE, rawzk.encode_create(path, data))
            written[path] = data
    with rawzk.RawConn(e.hostport(f)) as c:
        c.call(rawzk.OP_SYNC, rawzk.Writer().ustring("/dmg").bytes())
        for path, data in written.items():
            assert c.call(rawzk.OP_GETDATA, rawzk.encode_path_watch(path))[1].buffer() == data, path


# ---- item 11: smaller divergences from Apache 3.8 (the reference: every test runs on both) ----

NO_NODE, BAD_VERSION, MARSHALLING_ERROR, RECONFIG_DISABLED, INVALID_ACL = -101, -103, -5, -123, -114
OP_CREATE_SESSION = -10


def _still_usable(c):
    assert c.call_err(rawzk.OP_EXISTS, rawzk.encode_path_watch("/")) == 0


def test_hardening_11_top_level_check_answers_nonode_and_badversion(raw, base, kind):
    """Opcode 13 outside a multi: NoNode for a missing node, BadVersion for a wrong version,
    and the connection continues (the old build answered Unimplemented and closed). Apache 3.8
    answers nothing on success (it fails to serialize its reply), so success is not compared."""
    c = raw()
    c.call(rawzk.OP_CREATE, rawzk.encode_create(f"{base}/n"))
    check = lambda path, version: rawzk.Writer().ustring(path).int(version).bytes()  # noqa: E731
    assert c.call_err(rawzk.OP_CHECK, check(f"{base}/missing", -1)) == NO_NODE
    assert c.call_err(rawzk.OP_CHECK, check(f"{base}/n", 5)) == BAD_VERSION
    assert c.call_err(rawzk.OP_CHECK, b"") == MARSHALLING_ERROR
    _still_usable(c)


def test_hardening_11_reconfig_is_disabled(raw, kind):
    """Opcode 16: ReconfigDisabled (reconfigEnabled=false is the default), MarshallingError for
    a body that does not decode; the connection continues (the old build: Unimplemented)."""
    c = raw()
    body = rawzk.Writer().ustring("").ustring("").ustring("").long(-1).bytes()
    assert c.call_err(rawzk.OP_RECONFIG, body) == RECONFIG_DISABLED
    assert c.call_err(rawzk.OP_RECONFIG, b"") == MARSHALLING_ERROR
    _still_usable(c)


def test_hardening_11_sasl_gets_a_null_token_and_the_connection_continues(raw, kind):
    """Opcode 102 without a SASL server: err 0 and a null token, the connection continuing
    (the old build answered AuthFailed and closed); a body that does not decode closes it."""
    c = raw()
    x = c.send_request(rawzk.OP_SASL, rawzk.Writer().buffer(b"token").bytes())
    hdr, r = c.read_reply(x)
    assert hdr.err == 0 and r.buffer() is None
    _still_usable(c)
    c.send_request(rawzk.OP_SASL, b"")
    closed, frames = c.wait_closed(timeout=10)
    assert closed and not frames


def test_hardening_11_create_session_from_a_client(raw, kind):
    """Opcode -10 is the server's own: a body too short for its timeout is MarshallingError
    and the connection continues (the old build: Unimplemented and close). (With a timeout in
    the body Apache opens a second session on the connection; ringkeeper closes it.)"""
    c = raw()
    assert c.call_err(OP_CREATE_SESSION, b"") == MARSHALLING_ERROR
    _still_usable(c)


@pytest.mark.parametrize("scheme,auth", [("digest", b"nocolon"), ("ip", b"127.0.0.1"), ("ip", b"")])
def test_hardening_11_addauth_digest_without_colon_and_ip_are_accepted(raw, kind, scheme, auth):
    """`addauth digest nocolon` and `addauth ip ...` succeed and the connection continues (the
    old build answered AuthFailed and closed). A digest without a colon authenticates the
    whole text as the user."""
    c = raw()
    assert c.add_auth(scheme, auth) == 0
    _still_usable(c)
    ids = c.whoami()
    if scheme == "digest":
        assert ("digest", "nocolon") in ids, ids
    assert ("ip", "127.0.0.1") in ids, ids


@pytest.mark.parametrize("ident,ok", [
    ("127.0.0.1", True), ("10.0.0.0/8", True), ("1.2.3.4/32", True), ("010.1.1.1", True),
    ("::1", False), ("::1/128", False), ("fe80::1", False), ("1.2.3", False), ("256.1.1.1", False),
    ("1.2.3.4/33", False), ("1.2.3.4/", False), ("a.b.c.d", False),
])
def test_hardening_11_ip_acl_ids_are_validated_as_apache_does(raw, base, kind, ident, ok):
    """ZooKeeper 3.8's ip scheme is IPv4 only: `ip:::1` is InvalidACL (the old build accepted it)."""
    c = raw()
    acl = [rawzk.ACL(31, "ip", ident)]
    err = c.call_err(rawzk.OP_CREATE, rawzk.encode_create(f"{base}/n", acl=acl))
    assert err == (0 if ok else INVALID_ACL)


def test_hardening_11_dirs_off_the_whitelist_reads_no_directory(make_server, kind):
    """`dirs` refused by the whitelist must not size the directories first. Seen through the
    directories' access times (relatime updates an access time older than the modification
    time when the directory is read): they stay as set."""
    s = make_server(**{"4lw.commands.whitelist": "ruok,srvr"})
    old = 1_000_000_000
    dirs = [s.data_dir, s.log_dir]
    for d in dirs:
        os.utime(d, (old, os.stat(d).st_mtime))
    assert rawzk.four_letter(s.hostport, "dirs") == "dirs is not executed because it is not in the whitelist.\n"
    for d in dirs:
        assert os.stat(d).st_atime == old, f"{d} was read"


# ---- item 10: the admin HTTP server under idle connections ----

IDLE_ADMIN_CONNECTIONS = 48


@pytest.mark.ringkeeper_only
def test_hardening_10_idle_admin_connections_starve_no_request(make_server, kind):
    """48 connections open to the admin port and send nothing (or half a request head), and
    stay open; GETs meanwhile are all answered, each well within a generous deadline (the
    old server had 16 connection threads and closed every further connection unanswered)."""
    import urllib.request
    from helpers import free_port
    port = free_port()
    make_server(**{"admin.enableServer": "true", "admin.serverAddress": "127.0.0.1", "admin.serverPort": port})
    url = f"http://127.0.0.1:{port}/commands/ruok"
    wait_until(lambda: urllib.request.urlopen(url, timeout=10).status == 200, what="the admin server")
    idle = [socket_connect(port) for _ in range(IDLE_ADMIN_CONNECTIONS)]
    try:
        for i, c in enumerate(idle):
            if i % 2:
                c.sendall(b"GET /metrics HTTP/1.1\r\n")  # and never the rest
        for _ in range(20):
            with urllib.request.urlopen(url, timeout=10) as r:
                assert r.status == 200 and b'"ruok"' in r.read()
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                assert r.status == 200 and b"znode_count" in r.read()
    finally:
        for c in idle:
            c.close()


def socket_connect(port):
    import socket
    return socket.create_connection(("127.0.0.1", port), timeout=10)
