"""Sessions: timeout negotiation, resume on a new connection by id + password, wrong
password, expiry (ephemerals deleted, their watches fired to other sessions), closeSession,
a client whose lastZxidSeen is ahead of the server, whoAmI, kazoo's session handling."""

import time

import pytest

import rawzk
from helpers import TICK_MS, wait_until


def test_timeout_negotiation_default_bounds(raw):
    """Requested timeouts are clamped into [2, 20] x tickTime (tickTime=500)."""
    assert raw(timeout_ms=100).session.timeout == 2 * TICK_MS
    assert raw(timeout_ms=4321).session.timeout == 4321
    assert raw(timeout_ms=10 ** 6).session.timeout == 20 * TICK_MS


def test_timeout_negotiation_configured_bounds(make_server):
    """minSessionTimeout / maxSessionTimeout from the config replace the defaults."""
    s = make_server(minSessionTimeout=3000, maxSessionTimeout=6000)
    for req, want in ((100, 3000), (4000, 4000), (60000, 6000)):
        with rawzk.RawConn(s.hostport, timeout_ms=req) as c:
            assert c.session.timeout == want, req


def test_connect_response_shape(raw):
    """45-byte ConnectRequest → 37-byte response with a 16-byte password and readOnly;
    a 44-byte (pre-3.4) request → 36-byte response; session ids are distinct."""
    a = raw()
    assert a.session.raw_len == 37 and len(a.session.passwd) == 16
    assert a.session.read_only is False and a.session.session_id != 0
    b = rawzk.RawConn(a.hostport, handshake=False)
    try:
        s = b.handshake(with_read_only=False)
        assert s.raw_len == 36 and s.read_only is None and len(s.passwd) == 16
        assert s.session_id not in (0, a.session.session_id)
        assert b.create(f"/rk-44-{s.session_id:x}", flags=rawzk.EPHEMERAL)
    finally:
        b.close()


def test_requests_pipelined_behind_connect(server):
    """A client may send requests right behind its ConnectRequest without waiting; they
    are answered in order after the ConnectResponse."""
    c = rawzk.RawConn(server.hostport, handshake=False)
    try:
        req = rawzk.frame(rawzk.encode_connect(timeout=10000))
        req += rawzk.frame(rawzk.struct.pack(">ii", 1, rawzk.OP_EXISTS) +
                           rawzk.encode_path_watch("/"))
        req += rawzk.frame(rawzk.struct.pack(">ii", 2, rawzk.OP_GETCHILDREN) +
                           rawzk.encode_path_watch("/zookeeper"))
        c.send_raw(req)
        resp = c.read_connect_response()
        assert resp.timeout == 10000
        h1, _ = c.read_frame_parsed()
        h2, r2 = c.read_frame_parsed()
        assert (h1.xid, h1.err, h2.xid, h2.err) == (1, 0, 2, 0)
        assert sorted(r2.strings()) == ["config", "quota"]
    finally:
        c.close()


def test_resume_session_on_new_connection(raw, base):
    """Reconnecting with id + password on a second socket resumes the session: same id,
    the old socket is closed by the server, ephemerals survive, the new socket works."""
    a = raw(timeout_ms=10000)
    eph = f"{base}/eph"
    a.create(eph, flags=rawzk.EPHEMERAL)
    b = raw(session_id=a.session.session_id, passwd=a.session.passwd,
            last_zxid=a.last_zxid, timeout_ms=10000)
    assert b.session.session_id == a.session.session_id
    assert b.session.passwd == a.session.passwd and b.session.timeout == 10000
    closed, _ = a.wait_closed(5)
    assert closed, "the old connection of a moved session should be closed"
    st = b.exists(eph)
    assert st is not None and st.ephemeralOwner == a.session.session_id
    assert b.get_ephemerals(base) == [eph]
    b.create(f"{base}/more", flags=rawzk.EPHEMERAL)


def test_resume_with_wrong_password_is_refused(raw, base):
    """A wrong password gets the invalid-session response (timeout 0, id 0, zero
    password) and the socket is closed; the real session stays valid (resumable with the
    right password, ephemerals intact). (Apache 3.8 also closes the session's current
    connection when the wrong-password attempt arrives; not asserted here.)"""
    a = raw(timeout_ms=10000)
    a.create(f"{base}/e", flags=rawzk.EPHEMERAL)
    pw = a.session.passwd
    bad = pw[:-1] + bytes([pw[-1] ^ 1])
    c = rawzk.RawConn(a.hostport, handshake=False)
    try:
        resp = c.handshake(timeout_ms=10000, session_id=a.session.session_id, passwd=bad)
        assert resp.timeout == 0 and resp.session_id == 0 and resp.passwd == bytes(16)
        assert c.wait_closed(5)[0]
    finally:
        c.close()
    b = raw(timeout_ms=10000, session_id=a.session.session_id, passwd=pw)
    assert b.session.timeout == 10000 and b.session.session_id == a.session.session_id
    assert b.exists(f"{base}/e").ephemeralOwner == a.session.session_id


def test_unknown_session_is_refused(raw):
    """Resuming a session id that never existed → timeout 0, then close."""
    c = raw(session_id=0x0123456789ABCDEF, passwd=bytes(16))
    assert c.session.timeout == 0 and c.session.session_id == 0
    assert c.wait_closed(5)[0]


def test_expiry_deletes_ephemerals_and_fires_watches(raw, base):
    """A silent session with the minimum timeout (1000 ms) expires: its ephemerals go,
    other sessions' watches on them fire, the server closes its socket, and resuming it
    is refused."""
    a = raw(timeout_ms=1000)
    assert a.session.timeout == 1000
    w = raw(timeout_ms=20000)
    e1, e2 = f"{base}/e1", f"{base}/e2"
    a.create(e1, flags=rawzk.EPHEMERAL)
    a.create(e2, b"d", flags=rawzk.EPHEMERAL)
    w.exists(e1, watch=True)
    w.get_data(e2, watch=True)
    w.get_children(base, watch=True)
    t0 = time.monotonic()
    closed, frames = a.wait_closed(6)
    assert closed and frames == [], "expired session's socket is closed without a message"
    events = w.wait_events(3, timeout=5)
    took = time.monotonic() - t0
    assert sorted((e.type, e.path) for e in events) == sorted(
        [(rawzk.EV_NODE_DELETED, e1), (rawzk.EV_NODE_DELETED, e2),
         (rawzk.EV_NODE_CHILDREN_CHANGED, base)])
    assert took < 5, took
    assert w.exists(e1) is None and w.exists(e2) is None
    r = raw(session_id=a.session.session_id, passwd=a.session.passwd)
    assert r.session.timeout == 0
    assert r.wait_closed(5)[0]


def test_pings_keep_session_alive(raw, base):
    """Pings refresh a session: a 1000 ms session pinged every 300 ms outlives 2.5 s; a ping
    reply carries xid -2."""
    a = raw(timeout_ms=1000)
    a.create(f"{base}/alive", flags=rawzk.EPHEMERAL)
    deadline = time.monotonic() + 2.5
    while time.monotonic() < deadline:
        hdr = a.ping()
        assert hdr.xid == rawzk.XID_PING and hdr.err == 0
        time.sleep(0.3)
    assert a.exists(f"{base}/alive") is not None


def test_close_session(raw, base):
    """closeSession: reply with err 0, ephemerals removed (watchers notified), the socket
    closed; the session cannot be resumed."""
    a = raw()
    w = raw()
    e = f"{base}/e"
    a.create(e, flags=rawzk.EPHEMERAL)
    w.exists(e, watch=True)
    hdr = a.close_session()
    assert hdr.err == 0
    assert a.wait_closed(5)[0]
    assert [(x.type, x.path) for x in w.wait_events(1)] == [(rawzk.EV_NODE_DELETED, e)]
    assert w.exists(e) is None
    r = raw(session_id=a.session.session_id, passwd=a.session.passwd)
    assert r.session.timeout == 0


def test_last_zxid_ahead_is_refused(raw):
    """A ConnectRequest with lastZxidSeen beyond the server's last zxid is closed without
    any response; the server keeps serving."""
    c = rawzk.RawConn(raw().hostport, handshake=False)
    try:
        c.send_frame(rawzk.encode_connect(last_zxid=(1 << 40) + 12345, timeout=10000))
        closed, frames = c.wait_closed(5)
        assert closed and frames == []
    finally:
        c.close()
    assert raw().exists("/") is not None


def test_last_zxid_equal_is_accepted(raw, base):
    """lastZxidSeen equal to the server's last zxid is fine."""
    a = raw()
    a.create(f"{base}/z")
    b = raw(last_zxid=a.last_zxid)
    assert b.session.timeout > 0
    assert b.exists(f"{base}/z") is not None


def test_whoami(raw):
    """whoAmI lists the connection's identities: ip, plus added digest identities (the
    order is not fixed in Apache 3.8, so compared as a set)."""
    c = raw()
    assert c.whoami() == [("ip", "127.0.0.1")]
    assert c.add_auth("digest", b"alice:secret") == 0
    assert sorted(c.whoami()) == [("digest", "alice"), ("ip", "127.0.0.1")]


def test_kazoo_session_and_ephemeral_lifecycle(kazoo_factory, server, base):
    """kazoo: an ephemeral disappears for other clients when its owner stops."""
    a = kazoo_factory(server.hostport)
    b = kazoo_factory(server.hostport)
    a.create(f"{base}/ka", ephemeral=True)
    assert b.exists(f"{base}/ka").ephemeralOwner == a.client_id[0]
    a.stop()
    assert b.exists(f"{base}/ka") is None


def test_kazoo_session_closed_elsewhere_is_lost(kazoo_factory, server, base):
    """Another connection resumes kazoo's session (id + password) and closes it: kazoo's
    socket is closed by the server, its reconnect is refused (timeout 0) and kazoo goes
    to LOST; the ephemeral is gone."""
    from kazoo.protocol.states import KazooState
    a = kazoo_factory(server.hostport, timeout=1.0)
    states = []
    a.add_listener(lambda s: states.append(s))
    a.create(f"{base}/ke", ephemeral=True)
    sid, pw = a.client_id
    r = rawzk.RawConn(server.hostport, session_id=sid, passwd=pw, timeout_ms=1000)
    try:
        assert r.session.session_id == sid
        assert r.close_session().err == 0
        wait_until(lambda: KazooState.LOST in states, timeout=15, what="kazoo LOST state")
    finally:
        r.close()
    b = kazoo_factory(server.hostport)
    assert b.exists(f"{base}/ke") is None
