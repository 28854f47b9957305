"""A minimal raw-socket ZooKeeper client for wire-level tests.

It speaks the client protocol described in docs/wire-protocol.md (shared/docs): 4-byte
big-endian length frames, jute encoding, the ConnectRequest/ConnectResponse handshake
without headers, RequestHeader/ReplyHeader framing after it, and watch notifications
with xid -1.  It does nothing behind the caller's back: no pings, no reconnects, no
re-sent auth.  Every blocking read has a timeout.
"""

import base64
import hashlib
import socket
import struct
import time
from collections import namedtuple

# ---------------------------------------------------------------------------
# constants
# ---------------------------------------------------------------------------

OP_NOTIFICATION = 0
OP_CREATE = 1
OP_DELETE = 2
OP_EXISTS = 3
OP_GETDATA = 4
OP_SETDATA = 5
OP_GETACL = 6
OP_SETACL = 7
OP_GETCHILDREN = 8
OP_SYNC = 9
OP_PING = 11
OP_GETCHILDREN2 = 12
OP_CHECK = 13
OP_MULTI = 14
OP_CREATE2 = 15
OP_RECONFIG = 16
OP_CHECKWATCHES = 17
OP_REMOVEWATCHES = 18
OP_CREATECONTAINER = 19
OP_DELETECONTAINER = 20
OP_CREATETTL = 21
OP_MULTIREAD = 22
OP_AUTH = 100
OP_SETWATCHES = 101
OP_SASL = 102
OP_GETEPHEMERALS = 103
OP_GETALLCHILDRENNUMBER = 104
OP_SETWATCHES2 = 105
OP_ADDWATCH = 106
OP_WHOAMI = 107
OP_CLOSESESSION = -11
OP_ERROR = -1

XID_NOTIFICATION = -1
XID_PING = -2
XID_AUTH = -4
XID_SETWATCHES = -8

# error codes
OK = 0
SYSTEM_ERROR = -1
RUNTIME_INCONSISTENCY = -2
MARSHALLING_ERROR = -5
UNIMPLEMENTED = -6
BAD_ARGUMENTS = -8
NO_NODE = -101
NO_AUTH = -102
BAD_VERSION = -103
NO_CHILDREN_FOR_EPHEMERALS = -108
NODE_EXISTS = -110
NOT_EMPTY = -111
SESSION_EXPIRED = -112
SESSION_MOVED = -118
INVALID_ACL = -114
AUTH_FAILED = -115
NO_WATCHER = -121

# create flags
PERSISTENT = 0
EPHEMERAL = 1
PERSISTENT_SEQUENTIAL = 2
EPHEMERAL_SEQUENTIAL = 3
CONTAINER = 4
PERSISTENT_WITH_TTL = 5
PERSISTENT_SEQUENTIAL_WITH_TTL = 6

# event types
EV_NODE_CREATED = 1
EV_NODE_DELETED = 2
EV_NODE_DATA_CHANGED = 3
EV_NODE_CHILDREN_CHANGED = 4

# watcher types for checkWatches / removeWatches
WT_CHILDREN = 1
WT_DATA = 2
WT_ANY = 3
WT_PERSISTENT = 4
WT_PERSISTENT_RECURSIVE = 5

# addWatch modes
AW_PERSISTENT = 0
AW_PERSISTENT_RECURSIVE = 1

# permissions
PERM_READ = 1
PERM_WRITE = 2
PERM_CREATE = 4
PERM_DELETE = 8
PERM_ADMIN = 16
PERM_ALL = 31

Stat = namedtuple(
    "Stat",
    "czxid mzxid ctime mtime version cversion aversion ephemeralOwner "
    "dataLength numChildren pzxid",
)
ACL = namedtuple("ACL", "perms scheme id")
Event = namedtuple("Event", "type state path zxid")
ConnectResponse = namedtuple(
    "ConnectResponse", "protocol_version timeout session_id passwd read_only raw_len"
)
ReplyHeader = namedtuple("ReplyHeader", "xid zxid err")
MultiResult = namedtuple("MultiResult", "type err value")

OPEN_ACL_UNSAFE = [ACL(PERM_ALL, "world", "anyone")]
READ_ACL_UNSAFE = [ACL(PERM_READ, "world", "anyone")]
CREATOR_ALL_ACL = [ACL(PERM_ALL, "auth", "")]

STAT_STRUCT = struct.Struct(">qqqqiiiqiiq")
assert STAT_STRUCT.size == 68


def digest_id(user, password):
    """user:BASE64(SHA1("user:password")) as used by the digest ACL scheme."""
    h = hashlib.sha1(f"{user}:{password}".encode()).digest()
    return f"{user}:{base64.b64encode(h).decode()}"


class ZKError(Exception):
    def __init__(self, code, msg=""):
        super().__init__(f"ZooKeeper error {code} {msg}".strip())
        self.code = code


class ConnectionClosed(Exception):
    """The server closed the connection (EOF or reset)."""


class ReadTimeout(Exception):
    """Nothing (or not enough) arrived in time."""


# ---------------------------------------------------------------------------
# jute encoding
# ---------------------------------------------------------------------------


class Writer:
    def __init__(self):
        self.b = bytearray()

    def int(self, v):
        self.b += struct.pack(">i", v)
        return self

    def long(self, v):
        self.b += struct.pack(">q", v)
        return self

    def bool(self, v):
        self.b += b"\x01" if v else b"\x00"
        return self

    def buffer(self, v):
        if v is None:
            return self.int(-1)
        self.int(len(v))
        self.b += v
        return self

    def ustring(self, s):
        if s is None:
            return self.int(-1)
        return self.buffer(s.encode("utf-8"))

    def strings(self, lst):
        if lst is None:
            return self.int(-1)
        self.int(len(lst))
        for s in lst:
            self.ustring(s)
        return self

    def acls(self, lst):
        if lst is None:
            return self.int(-1)
        self.int(len(lst))
        for a in lst:
            self.int(a.perms).ustring(a.scheme).ustring(a.id)
        return self

    def bytes(self):
        return bytes(self.b)


class Reader:
    def __init__(self, data, off=0):
        self.d = data
        self.o = off

    def remaining(self):
        return len(self.d) - self.o

    def _take(self, n):
        if self.o + n > len(self.d):
            raise ValueError(f"short record: need {n} at {self.o}, have {len(self.d)}")
        v = self.d[self.o:self.o + n]
        self.o += n
        return v

    def int(self):
        return struct.unpack(">i", self._take(4))[0]

    def long(self):
        return struct.unpack(">q", self._take(8))[0]

    def bool(self):
        return self._take(1) != b"\x00"

    def buffer(self):
        n = self.int()
        if n < 0:
            return None
        return bytes(self._take(n))

    def ustring(self):
        b = self.buffer()
        return None if b is None else b.decode("utf-8")

    def strings(self):
        n = self.int()
        if n < 0:
            return None
        return [self.ustring() for _ in range(n)]

    def stat(self):
        return Stat(*STAT_STRUCT.unpack(self._take(68)))

    def acls(self):
        n = self.int()
        if n < 0:
            return None
        out = []
        for _ in range(n):
            perms = self.int()
            scheme = self.ustring()
            ident = self.ustring()
            out.append(ACL(perms, scheme, ident))
        return out


def encode_create(path, data=b"", acl=None, flags=0, ttl=None):
    w = Writer().ustring(path).buffer(data).acls(OPEN_ACL_UNSAFE if acl is None else acl)
    w.int(flags)
    if ttl is not None:
        w.long(ttl)
    return w.bytes()


def encode_path_watch(path, watch=False):
    return Writer().ustring(path).bool(watch).bytes()


def encode_connect(last_zxid=0, timeout=30000, session_id=0, passwd=b"\0" * 16,
                   read_only=False, with_read_only=True):
    w = Writer().int(0).long(last_zxid).int(timeout).long(session_id).buffer(passwd)
    if with_read_only:
        w.bool(read_only)
    return w.bytes()


def frame(payload):
    return struct.pack(">i", len(payload)) + payload


# ---------------------------------------------------------------------------
# connection
# ---------------------------------------------------------------------------


def parse_hostport(hostport):
    host, port = hostport.rsplit(":", 1)
    return host, int(port)


class RawConn:
    """One TCP connection. `handshake=True` sends a ConnectRequest at once."""

    def __init__(self, hostport, timeout_ms=30000, session_id=0, passwd=b"\0" * 16,
                 last_zxid=0, handshake=True, io_timeout=10.0):
        self.hostport = hostport
        self.io_timeout = io_timeout
        self.sock = socket.create_connection(parse_hostport(hostport), timeout=io_timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()
        self.xid = 0
        self.events = []
        self.session = None
        self.last_zxid = last_zxid
        self.closed = False
        if handshake:
            self.session = self.handshake(timeout_ms, session_id, passwd, last_zxid)

    # -- low level ---------------------------------------------------------

    def close(self):
        if not self.closed:
            self.closed = True
            try:
                self.sock.close()
            except OSError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send_raw(self, data):
        self.sock.sendall(data)

    def send_frame(self, payload):
        self.sock.sendall(frame(payload))

    def _fill(self, n, deadline):
        while len(self.buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ReadTimeout(f"waited for {n} bytes, have {len(self.buf)}")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                raise ReadTimeout(f"waited for {n} bytes, have {len(self.buf)}")
            except (ConnectionResetError, BrokenPipeError) as e:
                raise ConnectionClosed(str(e))
            if not chunk:
                raise ConnectionClosed(f"EOF with {len(self.buf)} bytes buffered")
            self.buf += chunk

    def recv_frame(self, timeout=None):
        deadline = time.monotonic() + (self.io_timeout if timeout is None else timeout)
        self._fill(4, deadline)
        (n,) = struct.unpack(">i", self.buf[:4])
        if n < 0 or n > 64 * 1024 * 1024:
            raise ValueError(f"bad frame length {n}")
        self._fill(4 + n, deadline)
        payload = bytes(self.buf[4:4 + n])
        del self.buf[:4 + n]
        return payload

    def wait_closed(self, timeout=10.0):
        """True if the server closes the connection within `timeout` seconds
        (any frames that arrive meanwhile are returned in a list as well)."""
        frames = []
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False, frames
            try:
                frames.append(self.recv_frame(timeout=left))
            except ConnectionClosed:
                return True, frames
            except ReadTimeout:
                return False, frames

    # -- handshake ---------------------------------------------------------

    def handshake(self, timeout_ms=30000, session_id=0, passwd=b"\0" * 16, last_zxid=0,
                  with_read_only=True):
        self.send_frame(encode_connect(last_zxid, timeout_ms, session_id, passwd,
                                       False, with_read_only))
        return self.read_connect_response()

    def read_connect_response(self, timeout=None):
        p = self.recv_frame(timeout)
        r = Reader(p)
        proto = r.int()
        to = r.int()
        sid = r.long()
        pw = r.buffer()
        ro = r.bool() if r.remaining() >= 1 else None
        return ConnectResponse(proto, to, sid, pw, ro, len(p))

    # -- requests ----------------------------------------------------------

    def next_xid(self):
        self.xid += 1
        return self.xid

    def send_request(self, op, body=b"", xid=None):
        if xid is None:
            xid = self.next_xid()
        self.send_frame(struct.pack(">ii", xid, op) + body)
        return xid

    def read_frame_parsed(self, timeout=None):
        """Read one frame and parse its ReplyHeader; notifications are recorded
        in self.events and returned like any other frame."""
        p = self.recv_frame(timeout)
        r = Reader(p)
        hdr = ReplyHeader(r.int(), r.long(), r.int())
        if hdr.xid == XID_NOTIFICATION:
            ev = Event(r.int(), r.int(), r.ustring(), hdr.zxid)
            self.events.append(ev)
            return hdr, ev
        if hdr.zxid > 0:
            self.last_zxid = max(self.last_zxid, hdr.zxid)
        return hdr, r

    def read_reply(self, xid, timeout=None):
        """Read frames until the reply with `xid`; notifications are collected."""
        deadline = time.monotonic() + (self.io_timeout if timeout is None else timeout)
        while True:
            left = max(0.001, deadline - time.monotonic())
            hdr, r = self.read_frame_parsed(left)
            if hdr.xid == XID_NOTIFICATION:
                continue
            if hdr.xid != xid:
                raise AssertionError(f"out-of-order reply: expected xid {xid}, got {hdr}")
            return hdr, r

    def call(self, op, body=b"", xid=None):
        """Send and wait; raise ZKError on err != 0; return (header, Reader)."""
        x = self.send_request(op, body, xid)
        hdr, r = self.read_reply(x)
        if hdr.err != 0:
            raise ZKError(hdr.err, f"op {op}")
        return hdr, r

    def call_err(self, op, body=b""):
        """Send and wait; return the error code (0 on success)."""
        x = self.send_request(op, body)
        hdr, _ = self.read_reply(x)
        return hdr.err

    def wait_events(self, n, timeout=5.0):
        """Wait until at least n events are recorded; returns the list."""
        deadline = time.monotonic() + timeout
        while len(self.events) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                hdr, _ = self.read_frame_parsed(left)
            except ReadTimeout:
                break
            if hdr.xid != XID_NOTIFICATION:
                raise AssertionError(f"unexpected frame while waiting for events: {hdr}")
        return list(self.events)

    def quiet_events(self, quiet=0.5):
        """Collect notifications until none arrives for `quiet` seconds."""
        while True:
            try:
                hdr, _ = self.read_frame_parsed(quiet)
            except ReadTimeout:
                return list(self.events)
            if hdr.xid != XID_NOTIFICATION:
                raise AssertionError(f"unexpected frame while draining events: {hdr}")

    # -- operations ----------------------------------------------------------

    def ping(self):
        self.send_request(OP_PING, b"", xid=XID_PING)
        hdr, _ = self.read_reply(XID_PING)
        return hdr

    def create(self, path, data=b"", acl=None, flags=0):
        _, r = self.call(OP_CREATE, encode_create(path, data, acl, flags))
        return r.ustring()

    def create2(self, path, data=b"", acl=None, flags=0):
        _, r = self.call(OP_CREATE2, encode_create(path, data, acl, flags))
        return r.ustring(), r.stat()

    def create_container(self, path, data=b"", acl=None):
        _, r = self.call(OP_CREATECONTAINER, encode_create(path, data, acl, CONTAINER))
        return r.ustring(), r.stat()

    def create_ttl(self, path, data=b"", ttl=60000, acl=None, flags=PERSISTENT_WITH_TTL):
        _, r = self.call(OP_CREATETTL, encode_create(path, data, acl, flags, ttl))
        return r.ustring(), r.stat()

    def delete(self, path, version=-1):
        self.call(OP_DELETE, Writer().ustring(path).int(version).bytes())

    def exists(self, path, watch=False):
        x = self.send_request(OP_EXISTS, encode_path_watch(path, watch))
        hdr, r = self.read_reply(x)
        if hdr.err == NO_NODE:
            return None
        if hdr.err:
            raise ZKError(hdr.err, "exists")
        return r.stat()

    def get_data(self, path, watch=False):
        _, r = self.call(OP_GETDATA, encode_path_watch(path, watch))
        return r.buffer(), r.stat()

    def set_data(self, path, data, version=-1):
        _, r = self.call(OP_SETDATA, Writer().ustring(path).buffer(data).int(version).bytes())
        return r.stat()

    def get_children(self, path, watch=False):
        _, r = self.call(OP_GETCHILDREN, encode_path_watch(path, watch))
        return r.strings()

    def get_children2(self, path, watch=False):
        _, r = self.call(OP_GETCHILDREN2, encode_path_watch(path, watch))
        return r.strings(), r.stat()

    def get_acl(self, path):
        _, r = self.call(OP_GETACL, Writer().ustring(path).bytes())
        return r.acls(), r.stat()

    def set_acl(self, path, acl, version=-1):
        _, r = self.call(OP_SETACL, Writer().ustring(path).acls(acl).int(version).bytes())
        return r.stat()

    def sync(self, path):
        _, r = self.call(OP_SYNC, Writer().ustring(path).bytes())
        return r.ustring()

    def add_auth(self, scheme, auth):
        """Send an AuthPacket; returns the reply's err."""
        body = Writer().int(0).ustring(scheme).buffer(auth).bytes()
        self.send_request(OP_AUTH, body, xid=XID_AUTH)
        hdr, _ = self.read_reply(XID_AUTH)
        return hdr.err

    def whoami(self):
        _, r = self.call(OP_WHOAMI, b"")
        n = r.int()
        return [(r.ustring(), r.ustring()) for _ in range(n)]

    def get_ephemerals(self, prefix):
        _, r = self.call(OP_GETEPHEMERALS, Writer().ustring(prefix).bytes())
        return r.strings()

    def get_all_children_number(self, path):
        _, r = self.call(OP_GETALLCHILDRENNUMBER, Writer().ustring(path).bytes())
        return r.int()

    def add_watch(self, path, mode):
        _, r = self.call(OP_ADDWATCH, Writer().ustring(path).int(mode).bytes())
        return r

    def check_watches_err(self, path, wtype):
        return self.call_err(OP_CHECKWATCHES, Writer().ustring(path).int(wtype).bytes())

    def remove_watches_err(self, path, wtype):
        return self.call_err(OP_REMOVEWATCHES, Writer().ustring(path).int(wtype).bytes())

    def set_watches(self, relative_zxid, data=(), exist=(), child=(), persistent=None,
                    recursive=None):
        """SetWatches (op 101) or, when persistent/recursive lists are given, SetWatches2
        (op 105), with xid -8. Returns the reply header; events it triggers are collected
        in self.events (they may arrive before the reply)."""
        w = Writer().long(relative_zxid).strings(list(data)).strings(list(exist))
        w.strings(list(child))
        op = OP_SETWATCHES
        if persistent is not None or recursive is not None:
            op = OP_SETWATCHES2
            w.strings(list(persistent or [])).strings(list(recursive or []))
        self.send_request(op, w.bytes(), xid=XID_SETWATCHES)
        hdr, _ = self.read_reply(XID_SETWATCHES)
        return hdr

    def close_session(self):
        x = self.send_request(OP_CLOSESESSION, b"")
        hdr, _ = self.read_reply(x)
        return hdr

    # -- multi -------------------------------------------------------------

    @staticmethod
    def encode_multi(ops):
        """ops: list of (opcode, body-bytes)."""
        w = Writer()
        for op, body in ops:
            w.int(op).bool(False).int(-1)
            w.b += body
        w.int(-1).bool(True).int(-1)
        return w.bytes()

    @staticmethod
    def decode_multi(r):
        results = []
        while True:
            t = r.int()
            done = r.bool()
            err = r.int()
            if done:
                return results
            if t == OP_ERROR:
                results.append(MultiResult(t, err, r.int()))
            elif t == OP_CREATE:
                results.append(MultiResult(t, err, r.ustring()))
            elif t in (OP_CREATE2, OP_CREATETTL, OP_CREATECONTAINER):
                results.append(MultiResult(t, err, (r.ustring(), r.stat())))
            elif t in (OP_DELETE, OP_CHECK):
                results.append(MultiResult(t, err, None))
            elif t == OP_SETDATA:
                results.append(MultiResult(t, err, r.stat()))
            elif t == OP_GETCHILDREN:
                results.append(MultiResult(t, err, r.strings()))
            elif t == OP_GETDATA:
                results.append(MultiResult(t, err, (r.buffer(), r.stat())))
            else:
                raise AssertionError(f"unknown multi result type {t}")

    def multi(self, ops, opcode=OP_MULTI):
        """Returns (reply-header err, results or None)."""
        x = self.send_request(opcode, self.encode_multi(ops))
        hdr, r = self.read_reply(x)
        if hdr.err != 0:
            return hdr.err, None
        return 0, self.decode_multi(r)


# multi op body helpers ------------------------------------------------------

def m_create(path, data=b"", acl=None, flags=0):
    return (OP_CREATE, encode_create(path, data, acl, flags))


def m_create2(path, data=b"", acl=None, flags=0):
    return (OP_CREATE2, encode_create(path, data, acl, flags))


def m_delete(path, version=-1):
    return (OP_DELETE, Writer().ustring(path).int(version).bytes())


def m_set(path, data, version=-1):
    return (OP_SETDATA, Writer().ustring(path).buffer(data).int(version).bytes())


def m_check(path, version):
    return (OP_CHECK, Writer().ustring(path).int(version).bytes())


def m_get_children(path):
    return (OP_GETCHILDREN, encode_path_watch(path, False))


def m_get_data(path):
    return (OP_GETDATA, encode_path_watch(path, False))


def four_letter(hostport, cmd, timeout=5.0):
    """Send a four-letter word and return the text reply ('' if none)."""
    s = socket.create_connection(parse_hostport(hostport), timeout=timeout)
    try:
        s.sendall(cmd.encode() if isinstance(cmd, str) else cmd)
        out = bytearray()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            except ConnectionResetError:
                break
            if not chunk:
                break
            out += chunk
        return out.decode(errors="replace")
    finally:
        s.close()
