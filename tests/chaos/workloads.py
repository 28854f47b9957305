"""Workloads of the chaos rig (issue 18): threads that talk to the ensemble through rawzk (the
repo's raw client: no hidden retries, replies and notifications read in wire order) and record
every operation in a History (tests/chaos/history.py), plus per-connection stream logs for the
watch checkers.

A `Client` is one logical ZooKeeper client: it keeps its session id, password and the highest
zxid it has seen across connections, and on a lost connection resumes the session on another
member (as real clients do), so read-your-writes is checked across members. An op whose reply
does not come (timeout, closed connection) has an unknown outcome ("info").
Rules: every connection has an I/O timeout; workers stop when `stop` is set; names of nodes are
unique per op; nothing here decides pass/fail (the checkers do)."""

import random
import threading
import time

import rawzk
from history import FAIL, INFO, OK

# Errors that prove an op had no effect; any other error leaves its outcome unknown.
DEFINITE_ERRORS = {rawzk.BAD_VERSION, rawzk.NODE_EXISTS, rawzk.NO_NODE}
LOST = (rawzk.ConnectionClosed, rawzk.ReadTimeout, OSError, ValueError)
IO_TIMEOUT_S = 3.0
SESSION_TIMEOUT_MS = 8000
EPHEMERAL_SESSION_TIMEOUT_MS = 2000
OP_PAUSE_S = 0.02  # between a worker's ops: keeps the trees small enough to compare
ROOT = "/chaos"
REGISTER_KEYS = 3
SEQ_PARENTS = 2
WATCH_KEYS = 2


class Unknown(Exception):
    """The connection was lost during the op."""


class Client:
    def __init__(self, name, hosts, rng, timeout_ms=SESSION_TIMEOUT_MS):
        self.name, self.hosts, self.rng, self.timeout_ms = name, hosts, rng, timeout_ms
        self.session_id, self.passwd, self.last_zxid = 0, b"\0" * 16, 0
        self.conn, self.member, self.sessions, self.connections = None, 0, 0, 0

    def connect(self, avoid=None):
        order = self.rng.sample(range(len(self.hosts)), len(self.hosts))
        if avoid is not None and len(order) > 1:
            order.remove(avoid - 1)
            order.append(avoid - 1)
        for i in order:
            try:
                c = rawzk.RawConn(self.hosts[i], timeout_ms=self.timeout_ms, session_id=self.session_id,
                                  passwd=self.passwd, last_zxid=self.last_zxid, io_timeout=IO_TIMEOUT_S)
            except LOST:
                continue
            resp = c.session
            if resp.timeout <= 0 or resp.session_id == 0:  # expired: the next try opens a new session
                c.close()
                self.session_id, self.passwd = 0, b"\0" * 16
                continue
            if resp.session_id != self.session_id:
                self.session_id, self.passwd = resp.session_id, resp.passwd
                self.sessions += 1
            c.last_zxid = max(c.last_zxid, self.last_zxid)
            self.conn, self.member = c, i + 1
            self.connections += 1
            return True
        return False

    def drop(self):
        if self.conn is not None:
            self.last_zxid = max(self.last_zxid, self.conn.last_zxid)
            self.conn.close()
            self.conn = None

    def ensure(self, stop):
        while self.conn is None:
            if stop.is_set():
                raise Unknown("stopping")
            if not self.connect():
                time.sleep(0.2)

    def call(self, fn):
        """fn(conn) -> result; a lost connection raises Unknown (and drops it)."""
        try:
            r = fn(self.conn)
            self.last_zxid = max(self.last_zxid, self.conn.last_zxid)
            return r
        except LOST as e:
            self.drop()
            raise Unknown(str(e))
        except rawzk.ZKError as e:
            if e.code in (rawzk.SESSION_EXPIRED, rawzk.SESSION_MOVED):
                self.drop()
            raise

    def close(self, close_session=True):
        if self.conn is not None and close_session:
            try:
                self.conn.close_session()
            except (rawzk.ZKError, *LOST):
                pass
        self.drop()


def run_op(history, client, stop, f, key, value, fn):
    """Records one op: invoke, then ok / fail (definite error) / info (anything else)."""
    client.ensure(stop)
    op = history.invoke(client.name, f, key, value, client.session_id, client.member)
    try:
        history.complete(op, OK, client.call(fn))
    except rawzk.ZKError as e:
        history.complete(op, FAIL if e.code in DEFINITE_ERRORS else INFO, e.code)
    except Unknown:
        history.complete(op, INFO)
    return op


class Context:
    """What the workers share: hosts, history, stop flag, stream logs, direct violations."""

    def __init__(self, hosts, history, seed):
        self.hosts, self.history, self.seed = hosts, history, seed
        self.stop = threading.Event()
        self.streams = []  # (kind "oneshot"/"persistent", where, log list)
        self.wire_violations = []
        self.ephemeral_sessions = 0
        self.lock = threading.Lock()
        self.errors = []

    def rng(self, name):
        return random.Random(f"{self.seed}-{name}")


def setup(hosts):
    """The workloads' nodes (persistent, data empty, version 0)."""
    c = Client("setup", hosts, random.Random(0))
    deadline = time.monotonic() + 60
    while True:
        try:
            c.ensure(threading.Event())
            for p in [ROOT, f"{ROOT}/reg", f"{ROOT}/acked", f"{ROOT}/seq", f"{ROOT}/sess", f"{ROOT}/watch",
                      f"{ROOT}/eph"] + [f"{ROOT}/reg/k{i}" for i in range(REGISTER_KEYS)] + \
                    [f"{ROOT}/seq/p{i}" for i in range(SEQ_PARENTS)] + \
                    [f"{ROOT}/watch/k{i}" for i in range(WATCH_KEYS)]:
                try:
                    c.call(lambda conn: conn.create(p))
                except rawzk.ZKError as e:
                    if e.code != rawzk.NODE_EXISTS:
                        raise
            c.close()
            return
        except (Unknown, rawzk.ZKError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _guard(ctx, name, body):
    def run():
        try:
            body()
        except Unknown:
            pass
        except Exception as e:  # a bug in the rig, not the server: reported, never silent
            with ctx.lock:
                ctx.errors.append(f"{name}: {type(e).__name__}: {e}")
    return threading.Thread(target=run, name=name, daemon=True)


def register_worker(ctx, name):
    """CAS (setData with the last version this client saw) and sync+getData on a few keys."""
    rng = ctx.rng(name)
    c = Client(name, ctx.hosts, rng)
    known = {}
    i = 0
    while not ctx.stop.is_set():
        key = f"{ROOT}/reg/k{rng.randrange(REGISTER_KEYS)}"
        if rng.random() < 0.5 or key not in known:
            def read(conn, key=key):
                conn.sync(key)
                data, st = conn.get_data(key)
                return (st.version, data)
            op = run_op(ctx.history, c, ctx.stop, "read", key, None, read)
            if op.type == OK:
                known[key] = op.result[0]
        else:
            i += 1
            new = f"{name}-{i}".encode()
            exp = known[key]
            op = run_op(ctx.history, c, ctx.stop, "cas", key, (exp, new),
                        lambda conn, key=key, new=new, exp=exp: conn.set_data(key, new, exp).version)
            if op.type == OK:
                known[key] = op.result
            else:
                known.pop(key, None)
        time.sleep(OP_PAUSE_S)
    c.close()


def create_worker(ctx, name):
    """Plain creates (each acknowledged one must survive) and sequential creates."""
    rng = ctx.rng(name)
    c = Client(name, ctx.hosts, rng)
    i = 0
    while not ctx.stop.is_set():
        i += 1
        data = f"{name}-{i}".encode()
        if rng.random() < 0.5:
            path = f"{ROOT}/acked/{name}-{i:07d}"
            run_op(ctx.history, c, ctx.stop, "create", path, data, lambda conn, p=path, d=data: conn.create(p, d))
        else:
            parent = f"{ROOT}/seq/p{rng.randrange(SEQ_PARENTS)}"
            run_op(ctx.history, c, ctx.stop, "seq", parent, data,
                   lambda conn, p=parent, d=data: conn.create(p + "/s-", d, flags=rawzk.PERSISTENT_SEQUENTIAL))
        time.sleep(OP_PAUSE_S)
    c.close()


def session_worker(ctx, name):
    """Pipelined setData bursts on the client's own node, then a plain read (no sync); every
    ~10 rounds the client moves its session to another member."""
    rng = ctx.rng(name)
    c = Client(name, ctx.hosts, rng)
    key = f"{ROOT}/sess/{name}"
    try:
        c.ensure(ctx.stop)
        c.call(lambda conn: conn.create(key))
    except rawzk.ZKError as e:
        if e.code != rawzk.NODE_EXISTS:
            raise
    seq = 0
    while not ctx.stop.is_set():
        c.ensure(ctx.stop)
        n = rng.randint(1, 3)
        ops = []
        for _ in range(n):
            seq += 1
            op = ctx.history.invoke(name, "sset", key, seq, c.session_id, c.member)
            op.extra["seq"] = seq
            ops.append(op)
        try:
            conn = c.conn
            xids = [conn.send_request(rawzk.OP_SETDATA, rawzk.Writer().ustring(key).buffer(b"%d" % o.value)
                                      .int(-1).bytes()) for o in ops]
            for x, o in zip(xids, ops):
                try:
                    hdr, r = conn.read_reply(x)
                except AssertionError as e:  # a reply out of order
                    with ctx.lock:
                        ctx.wire_violations.append(f"{name}: {e}")
                    raise rawzk.ConnectionClosed("out of order")
                c.last_zxid = max(c.last_zxid, conn.last_zxid)
                if hdr.err == 0:
                    ctx.history.complete(o, OK, r.stat().version)
                else:
                    ctx.history.complete(o, FAIL if hdr.err in DEFINITE_ERRORS else INFO, hdr.err)
                    if hdr.err in (rawzk.SESSION_EXPIRED, rawzk.SESSION_MOVED):
                        c.drop()
                        break
        except LOST:
            c.drop()
        for o in ops:
            if o.result is None and o.type == INFO:
                ctx.history.complete(o, INFO)
        if c.conn is not None:
            run_op(ctx.history, c, ctx.stop, "sget", key, None, lambda conn: conn.get_data(key)[1].version)
        if c.conn is not None and rng.random() < 0.1:
            m = c.member
            c.drop()
            c.connect(avoid=m)
        time.sleep(OP_PAUSE_S)
    c.close()


def watch_writer(ctx, name):
    rng = ctx.rng(name)
    c = Client(name, ctx.hosts, rng)
    while not ctx.stop.is_set():
        key = f"{ROOT}/watch/k{rng.randrange(WATCH_KEYS)}"
        run_op(ctx.history, c, ctx.stop, "wset", key, None, lambda conn, k=key: conn.set_data(k, b"x").version)
        time.sleep(OP_PAUSE_S * 3)
    c.close()


def _logged(c, log, fn, fired=None):
    """Runs fn(conn) and appends to log, in wire order, the events that arrived before its
    reply (their paths also to `fired`), then returns the result."""
    conn = c.conn
    n0 = len(conn.events)
    try:
        return c.call(fn)
    finally:
        for ev in conn.events[n0:]:
            if ev.path:
                log.append(("event", ev.path, ev.type))
                if fired is not None:
                    fired.add(ev.path)


def _streams(ctx, name, kind, connection):
    """Runs connection(c, log) on each new connection of one client (a new connection starts a
    new stream: watches are not carried over), until the run stops."""
    c = Client(name, ctx.hosts, ctx.rng(name))
    while not ctx.stop.is_set():
        try:
            c.ensure(ctx.stop)
            log = []
            with ctx.lock:
                ctx.streams.append((kind, f"{name} conn {c.connections} (member {c.member}): ", log))
            connection(c, log)
        except Unknown:
            continue
        except rawzk.ZKError:
            c.drop()
    c.close()


def watch_oneshot(ctx, name):
    """One-shot data watches (getData with watch), set again after each event, and plain
    reads."""
    rng = random.Random(f"{ctx.seed}-{name}-reads")
    keys = [f"{ROOT}/watch/k{i}" for i in range(WATCH_KEYS)]

    def connection(c, log):
        armed, fired = set(), set()
        while not ctx.stop.is_set():
            for k in keys:
                if k not in armed:
                    v = _logged(c, log, lambda conn, k=k: conn.get_data(k, watch=True)[1].version, fired)
                    fired.discard(k)  # an event before this reply belongs to no watch of ours
                    log.append(("reg", k, v))
                    armed.add(k)
            k = rng.choice(keys)
            log.append(("read", k, _logged(c, log, lambda conn, k=k: conn.get_data(k)[1].version, fired)))
            armed -= fired
            fired.clear()
            time.sleep(OP_PAUSE_S)
    _streams(ctx, name, "oneshot", connection)


def watch_persistent(ctx, name):
    """A persistent recursive watch on the watch keys' parent, and plain reads."""
    rng = random.Random(f"{ctx.seed}-{name}-reads")
    keys = [f"{ROOT}/watch/k{i}" for i in range(WATCH_KEYS)]

    def connection(c, log):
        for k in keys:
            log.append(("pre", k, _logged(c, log, lambda conn, k=k: conn.get_data(k)[1].version)))
        _logged(c, log, lambda conn: conn.add_watch(f"{ROOT}/watch", rawzk.AW_PERSISTENT_RECURSIVE))
        log.append(("added",))
        for k in keys:
            log.append(("base", k, _logged(c, log, lambda conn, k=k: conn.get_data(k)[1].version)))
        while not ctx.stop.is_set():
            k = rng.choice(keys)
            log.append(("read", k, _logged(c, log, lambda conn, k=k: conn.get_data(k)[1].version)))
            time.sleep(OP_PAUSE_S)
    _streams(ctx, name, "persistent", connection)


def ephemeral_worker(ctx, name):
    """Short sessions that create an ephemeral, then close the session or abandon it (to
    expire); after healing none of their ephemerals may remain on any member."""
    rng = ctx.rng(name)
    n = 0
    while not ctx.stop.is_set():
        n += 1
        c = Client(f"{name}-{n}", ctx.hosts, rng, timeout_ms=EPHEMERAL_SESSION_TIMEOUT_MS)
        path = f"{ROOT}/eph/{name}-{n:06d}"
        try:
            run_op(ctx.history, c, ctx.stop, "eph", path, None,
                   lambda conn: conn.create(path, b"", flags=rawzk.EPHEMERAL))
            for _ in range(rng.randint(1, 5)):
                if ctx.stop.is_set() or c.conn is None:
                    break
                c.call(lambda conn: conn.exists(path))
                time.sleep(0.1)
        except (Unknown, rawzk.ZKError):
            pass
        with ctx.lock:
            ctx.ephemeral_sessions += 1
        c.close(close_session=rng.random() < 0.5)
        time.sleep(OP_PAUSE_S * 10)


WORKLOADS = {
    "register": [(register_worker, 3)],
    "creates": [(create_worker, 2)],
    "sessions": [(session_worker, 2)],
    "watches": [(watch_writer, 1), (watch_oneshot, 1), (watch_persistent, 1)],
    "ephemerals": [(ephemeral_worker, 1)],
}


def start(ctx, names):
    threads = []
    for w in names:
        for fn, count in WORKLOADS[w]:
            for j in range(count):
                t = _guard(ctx, f"{fn.__name__}{j}", lambda fn=fn, j=j: fn(ctx, f"{fn.__name__.split('_')[0]}{j}"))
                t.start()
                threads.append(t)
    return threads
