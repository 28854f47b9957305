"""Differential test: one scripted sequence of raw operations (two sessions, watches,
multi, ACLs, special node types) runs against two servers, and the normalised transcripts
must be identical: error codes, Stat fields except czxid/mzxid/pzxid/ctime/mtime (whose
*ordering* is compared instead, as ranks), children as sorted lists, ACLs, and the exact
order of notifications relative to replies on each connection.

The pair comes from RK_DIFF (default "ringkeeper:apache"); RK_DIFF=apache:apache checks
the test itself."""

import os

import pytest

import helpers
import rawzk
from rawzk import Writer


class Recorder:
    """Runs ops on named connections and records normalised results."""

    def __init__(self, hostport):
        self.hostport = hostport
        self.conns = {}
        self.sessions = {}
        self.log = []
        self.zxids = set()

    def connect(self, name, **kw):
        c = rawzk.RawConn(self.hostport, **kw)
        self.conns[name] = c
        self.sessions[c.session.session_id] = name
        self.log.append((name, "connect", c.session.timeout, len(c.session.passwd)))
        return c

    def zx(self, v):
        if v > 0:
            self.zxids.add(v)
        return ("zxid", v)

    def stat(self, st):
        if st is None:
            return None
        owner = st.ephemeralOwner
        owner = self.sessions.get(owner, owner if owner == 0 else "other")
        return {"czxid": self.zx(st.czxid), "mzxid": self.zx(st.mzxid), "pzxid": self.zx(st.pzxid),
                "ctime<=mtime": st.ctime <= st.mtime, "version": st.version,
                "cversion": st.cversion, "aversion": st.aversion, "owner": owner,
                "dataLength": st.dataLength, "numChildren": st.numChildren}

    def drain(self, name):
        """Ping `name` and record every frame that arrives before the ping reply."""
        c = self.conns[name]
        c.send_request(rawzk.OP_PING, b"", xid=rawzk.XID_PING)
        while True:
            hdr, body = c.read_frame_parsed()
            if hdr.xid == rawzk.XID_PING:
                return
            assert hdr.xid == rawzk.XID_NOTIFICATION, hdr
            self.log.append((name, "event", body.type, body.state, body.path))

    def op(self, name, label, opcode, body, parse=None, watchers=()):
        c = self.conns[name]
        xid = c.send_request(opcode, body)
        while True:
            hdr, r = c.read_frame_parsed()
            if hdr.xid == rawzk.XID_NOTIFICATION:
                self.log.append((name, "event", r.type, r.state, r.path))
                continue
            break
        assert hdr.xid == xid, (hdr, xid)
        result = None
        if hdr.err == 0 and parse is not None:
            result = parse(r)
        self.log.append((name, label, hdr.err, result))
        for w in watchers:
            self.drain(w)
        return hdr.err, result

    def finish(self):
        """Replace zxid values by their rank among all zxids seen."""
        rank = {z: i for i, z in enumerate(sorted(self.zxids))}

        def norm(x):
            if isinstance(x, tuple) and len(x) == 2 and x[0] == "zxid":
                return ("zxid#", rank.get(x[1], x[1]))
            if isinstance(x, dict):
                return {k: norm(v) for k, v in x.items()}
            if isinstance(x, list):
                return [norm(v) for v in x]
            if isinstance(x, tuple):
                return tuple(norm(v) for v in x)
            return x
        out = [norm(e) for e in self.log]
        for c in self.conns.values():
            c.close()
        return out


def path_body(p, watch=None):
    w = Writer().ustring(p)
    if watch is not None:
        w.bool(watch)
    return w.bytes()


def script(hp):
    R = Recorder(hp)
    P = rawzk
    R.connect("A", timeout_ms=20000)
    R.connect("B", timeout_ms=20000)
    b = "/diff"
    st = R.stat
    create = lambda name, p, data=b"", flags=0, acl=None, w=(): R.op(  # noqa: E731
        name, f"create {p} f{flags}", P.OP_CREATE, P.encode_create(p, data, acl, flags),
        lambda r: r.ustring(), w)
    create2 = lambda name, p, data=b"", flags=0, w=(): R.op(  # noqa: E731
        name, f"create2 {p} f{flags}", P.OP_CREATE2, P.encode_create(p, data, None, flags),
        lambda r: (r.ustring(), st(r.stat())), w)
    get = lambda name, p, watch=False: R.op(  # noqa: E731
        name, f"get {p} w{watch}", P.OP_GETDATA, path_body(p, watch),
        lambda r: (r.buffer(), st(r.stat())))
    exists = lambda name, p, watch=False: R.op(  # noqa: E731
        name, f"exists {p} w{watch}", P.OP_EXISTS, path_body(p, watch), lambda r: st(r.stat()))
    children = lambda name, p, watch=False: R.op(  # noqa: E731
        name, f"children {p} w{watch}", P.OP_GETCHILDREN, path_body(p, watch),
        lambda r: sorted(r.strings()))
    children2 = lambda name, p, watch=False: R.op(  # noqa: E731
        name, f"children2 {p} w{watch}", P.OP_GETCHILDREN2, path_body(p, watch),
        lambda r: (sorted(r.strings()), st(r.stat())))
    setd = lambda name, p, data, v=-1, w=(): R.op(  # noqa: E731
        name, f"set {p} v{v}", P.OP_SETDATA, Writer().ustring(p).buffer(data).int(v).bytes(),
        lambda r: st(r.stat()), w)
    delete = lambda name, p, v=-1, w=(): R.op(  # noqa: E731
        name, f"delete {p} v{v}", P.OP_DELETE, Writer().ustring(p).int(v).bytes(), None, w)
    getacl = lambda name, p: R.op(  # noqa: E731
        name, f"getacl {p}", P.OP_GETACL, path_body(p), lambda r: (r.acls(), st(r.stat())))
    setacl = lambda name, p, acl, v=-1: R.op(  # noqa: E731
        name, f"setacl {p} v{v}", P.OP_SETACL, Writer().ustring(p).acls(acl).int(v).bytes(),
        lambda r: st(r.stat()))

    def multi(name, ops, opcode=P.OP_MULTI, w=()):
        def parse(r):
            out = []
            for m in P.RawConn.decode_multi(r):
                v = m.value
                if m.type == P.OP_SETDATA:
                    v = st(v)
                elif m.type == P.OP_GETDATA:
                    v = (v[0], st(v[1]))
                elif m.type == P.OP_GETCHILDREN:
                    v = sorted(v)
                out.append((m.type, m.err, v))
            return out
        return R.op(name, f"multi{opcode}", opcode, P.RawConn.encode_multi(ops), parse, w)

    # -- basic tree
    create("A", b)
    create("A", f"{b}/a", b"alpha")
    create("A", f"{b}/a", b"again")
    create("A", f"{b}/nope/x")
    create("A", "relative")
    create("A", f"{b}/")
    create2("A", f"{b}/c2", b"xyz")
    for _ in range(3):
        create("A", f"{b}/s-", flags=P.PERSISTENT_SEQUENTIAL)
    create("B", f"{b}/eb", b"eph", flags=P.EPHEMERAL)
    create("B", f"{b}/es-", flags=P.EPHEMERAL_SEQUENTIAL)
    create("B", f"{b}/eb/kid")
    children2("A", b)
    get("A", f"{b}/a")
    exists("A", f"{b}/missing")
    get("A", f"{b}/missing")
    children("A", f"{b}/missing")
    # -- watches: A watches, B writes; A drained after each B write
    get("A", f"{b}/a", True)
    exists("A", f"{b}/new", True)
    children("A", b, True)
    exists("A", f"{b}/eb", True)
    setd("B", f"{b}/a", b"beta", 0, w=["A"])
    setd("B", f"{b}/a", b"gamma", 0, w=["A"])
    create("B", f"{b}/new", b"n", w=["A"])
    delete("B", f"{b}/new", 5, w=["A"])
    delete("B", f"{b}/new", 0, w=["A"])
    delete("B", b, w=["A"])
    # -- self-triggered: notification before the reply
    get("A", f"{b}/c2", True)
    setd("A", f"{b}/c2", b"self")
    children("A", b, True)
    delete("A", f"{b}/c2")
    # -- ACLs
    did = P.digest_id("u", "p")
    create("A", f"{b}/acl", b"s", acl=[P.ACL(P.PERM_READ | P.PERM_ADMIN, "digest", did),
                                      P.ACL(P.PERM_READ, "world", "anyone")])
    getacl("A", f"{b}/acl")
    setd("A", f"{b}/acl", b"no")
    setacl("A", f"{b}/acl", P.OPEN_ACL_UNSAFE)
    create("A", f"{b}/acl2", acl=[])
    create("A", f"{b}/acl2", acl=[P.ACL(31, "auth", "")])
    R.op("A", "auth", P.OP_AUTH, Writer().int(0).ustring("digest").buffer(b"u:p").bytes())
    getacl("A", f"{b}/acl")
    setacl("A", f"{b}/acl", P.OPEN_ACL_UNSAFE, 3)
    setacl("A", f"{b}/acl", P.OPEN_ACL_UNSAFE, 0)
    create("A", f"{b}/acl2", acl=[P.ACL(31, "auth", "")])
    getacl("A", f"{b}/acl2")
    R.op("A", "whoami", P.OP_WHOAMI, b"",
         lambda r: sorted((r.ustring(), r.ustring()) for _ in range(r.int())))
    # -- multi
    multi("A", [P.m_create(f"{b}/m1", b"1"), P.m_set(f"{b}/a", b"m"), P.m_check(f"{b}/a", 3),
                P.m_delete(f"{b}/s-0000000002")], w=["B"])
    multi("A", [P.m_create(f"{b}/m2"), P.m_check(f"{b}/a", 0), P.m_delete(f"{b}/m1")])
    multi("A", [P.m_create(f"{b}/m3"), P.m_delete(f"{b}/s-0000000004")], w=["B"])
    multi("A", [P.m_get_data(f"{b}/a"), P.m_get_children(b), P.m_get_data(f"{b}/zz")],
          P.OP_MULTIREAD)
    multi("A", [])
    children2("A", b)
    # -- special nodes
    R.op("A", "container", P.OP_CREATECONTAINER, P.encode_create(f"{b}/box", b"", None, P.CONTAINER),
         lambda r: (r.ustring(), st(r.stat())))
    R.op("A", "ttl", P.OP_CREATETTL,
         P.encode_create(f"{b}/ttl", b"t", None, P.PERSISTENT_WITH_TTL, 600000),
         lambda r: (r.ustring(), st(r.stat())))
    R.op("A", "ttl0", P.OP_CREATETTL,
         P.encode_create(f"{b}/ttl0", b"t", None, P.PERSISTENT_WITH_TTL, 0), None)
    exists("A", f"{b}/box")
    exists("A", f"{b}/ttl")
    R.op("B", "getEphemerals", P.OP_GETEPHEMERALS, path_body(b), lambda r: sorted(r.strings()))
    R.op("A", "getEphemerals", P.OP_GETEPHEMERALS, path_body(b), lambda r: sorted(r.strings()))
    R.op("A", "allChildren", P.OP_GETALLCHILDRENNUMBER, path_body(b), lambda r: r.int())
    R.op("A", "sync", P.OP_SYNC, path_body(b), lambda r: r.ustring())
    # -- persistent watches
    R.op("A", "addWatch", P.OP_ADDWATCH, Writer().ustring(f"{b}/pw").int(0).bytes())
    R.op("A", "addWatchR", P.OP_ADDWATCH, Writer().ustring(f"{b}/rw").int(1).bytes())
    create("B", f"{b}/pw", w=["A"])
    create("B", f"{b}/pw/k", w=["A"])
    create("B", f"{b}/rw", w=["A"])
    create("B", f"{b}/rw/k", w=["A"])
    setd("B", f"{b}/rw/k", b"x", w=["A"])
    R.op("A", "checkWatches", P.OP_CHECKWATCHES, Writer().ustring(f"{b}/pw").int(3).bytes())
    R.op("A", "removeWatches", P.OP_REMOVEWATCHES, Writer().ustring(f"{b}/pw").int(3).bytes())
    R.op("A", "removeWatches", P.OP_REMOVEWATCHES, Writer().ustring(f"{b}/pw").int(3).bytes())
    setd("B", f"{b}/pw", b"x", w=["A"])
    delete("B", f"{b}/rw/k", w=["A"])
    # -- closeSession of B fires A's watches on B's ephemerals
    exists("A", f"{b}/eb", True)
    children("A", b, True)
    R.op("B", "closeSession", P.OP_CLOSESESSION, b"")
    R.conns["B"].wait_closed(5)
    R.drain("A")
    children2("A", b)
    R.op("A", "unknown-op", 777, b"")
    return R.finish()


def test_differential_transcripts_match():
    """The same raw-protocol script against two servers gives identical transcripts."""
    pair = os.environ.get("RK_DIFF", "ringkeeper:apache").split(":")
    assert len(pair) == 2, "RK_DIFF must be KIND:KIND"
    for k in pair:
        if k == "ringkeeper" and not os.access(helpers.RK_BIN, os.X_OK):
            pytest.skip(f"ringkeeper binary not found at {helpers.RK_BIN}")
        if k not in helpers.selected_kinds() and os.environ.get("RK_DIFF") is None:
            pytest.skip(f"{k} not selected by RK_SERVERS")
    servers = []
    try:
        transcripts = []
        for k in pair:
            s = helpers.Server(k)
            servers.append(s)
            s.start()
            transcripts.append(script(s.hostport))
        left, right = transcripts
        for i, (l, r) in enumerate(zip(left, right)):
            assert l == r, (f"step {i} differs:\n  {pair[0]}: {l}\n  {pair[1]}: {r}\n"
                            f"previous steps:\n" + "\n".join(map(str, left[max(0, i - 5):i])))
        assert len(left) == len(right)
        assert len(left) > 80
    finally:
        for s in servers:
            s.cleanup()
