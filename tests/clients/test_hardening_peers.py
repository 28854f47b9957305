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
        log = e.log(i)
        assert "lost the quorum" not in log and "electing" not in log, f"server {i}:\n{e.tail(i)}"
    for i in members:
        with rawzk.RawConn(e.hostport(i), io_timeout=60.0) as c:
            c.call(rawzk.OP_SYNC, rawzk.Writer().ustring("/burst").bytes())
            for n in range(BURST_CONNECTIONS):
                _, r = c.call(rawzk.OP_GETDATA, rawzk.encode_path_watch(f"/burst/n{n:03d}"))
                assert r.buffer() == values[n], f"server {i}: /burst/n{n:03d} lacks its write"
