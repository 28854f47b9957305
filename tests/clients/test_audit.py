"""ZooKeeper's audit log (`audit.enable=true`, issue 19), against ringkeeper and Apache
ZooKeeper 3.8 side by side: the same kazoo session's writes give the same audit events on
both servers (operation, znode, znode_type, acl, result, user, ip, session): creates (a sequential one
named as created, an ephemeral), setData, setAcl, deletes, failures (an existing
node, a bad version, NoAuth), a multi as its sub-ops and a failed multi as one
multiOperation failure, digest and ip users, the ephemerals of a closed session deleted as
the server's own operation, serverStart and serverStop. ringkeeper only: the lines go to
`ringkeeper.auditLogFile` when it is set, and a server without audit.enable logs none."""
import re
import time

import pytest
from kazoo.exceptions import BadVersionError, NodeExistsError, NoAuthError
from kazoo.security import make_digest_acl

from helpers import wait_until

EVENT = re.compile(r"((?:session|user)=[^\n]*?\tresult=(?:success|failure|invoked))")


def events(text):
    """Audit events in a log as dicts (key=value pairs)."""
    return [dict(p.split("=", 1) for p in m.group(1).split("\t")) for m in EVENT.finditer(text)]


def client_writes(zk):
    """The same writes on either server; returns the session id."""
    zk.create("/au", b"x")
    zk.create("/au/p", b"1")
    with pytest.raises(NodeExistsError):
        zk.create("/au/p", b"again")
    seq = zk.create("/au/s-", b"", sequence=True)
    zk.create("/au/e", b"", ephemeral=True)
    zk.set("/au/p", b"2")
    with pytest.raises(BadVersionError):
        zk.set("/au/p", b"3", version=7)
    zk.set_acls("/au/p", [make_digest_acl("bob", "pw", all=True)])
    with pytest.raises(NoAuthError):
        zk.set("/au/p", b"4")
    t = zk.transaction()
    t.create("/au/m", b"")
    t.set_data("/au/m", b"y")
    t.check("/au/m", 1)
    t.delete(seq)
    assert all(not isinstance(r, Exception) for r in t.commit())
    t = zk.transaction()
    t.create("/au/m2", b"")
    t.delete("/au/nope")
    assert any(isinstance(r, Exception) for r in t.commit())
    zk.add_auth("digest", "bob:pw")
    zk.delete("/au/p")
    return zk.client_id[0], seq


def audited(kind, make_server, kazoo_factory, **keys):
    s = make_server(**{"audit.enable": "true", **keys})
    zk = kazoo_factory(s.hostport)
    session, seq = client_writes(zk)
    zk.stop()
    zk.close()
    s.stop()
    return s, session, seq


def comparable(evs, session):
    """What both servers must agree on: every key but dates, with the session as S."""
    out = []
    for e in evs:
        e = dict(e)
        if e.get("operation") in ("serverStart", "serverStop"):
            e.pop("user", None)
        if e.get("session") == f"0x{session:x}":
            e["session"] = "S"
        if "user" in e:
            e["user"] = ",".join(sorted(e["user"].split(",")))  # Apache keeps ids in a hash set
        out.append(tuple(sorted(e.items())))
    return out


@pytest.fixture
def audit_of(make_server, kazoo_factory):
    def run(kind, **keys):
        return audited(kind, make_server, kazoo_factory, **keys)
    return run


def test_audit_events_match_zookeepers(kind, audit_of):
    s, session, seq = audit_of(kind)
    evs = events(s.log_text())
    got = comparable(evs, session)
    S, ip = "S", "127.0.0.1"
    expect = [
        {"operation": "serverStart", "result": "success"},
        {"session": S, "user": ip, "ip": ip, "operation": "create", "znode": "/au", "znode_type": "persistent", "result": "success"},
        {"session": S, "user": ip, "ip": ip, "operation": "create", "znode": "/au/p", "znode_type": "persistent", "result": "success"},
        {"session": S, "user": ip, "ip": ip, "operation": "create", "znode": "/au/p", "znode_type": "persistent", "result": "failure"},
        {"session": S, "user": ip, "ip": ip, "operation": "create", "znode": seq,
         "znode_type": "persistent_sequential", "result": "success"},
        {"session": S, "user": ip, "ip": ip, "operation": "create", "znode": "/au/e", "znode_type": "ephemeral", "result": "success"},
        {"session": S, "user": ip, "ip": ip, "operation": "setData", "znode": "/au/p", "result": "success"},
        {"session": S, "user": ip, "ip": ip, "operation": "setData", "znode": "/au/p", "result": "failure"},
        {"session": S, "user": ip, "ip": ip, "operation": "setAcl", "znode": "/au/p",
         "acl": "digest:bob:" + make_digest_acl("bob", "pw").id.id.split(":", 1)[1] + ":cdrwa", "result": "success"},
        {"session": S, "user": ip, "ip": ip, "operation": "setData", "znode": "/au/p", "result": "failure"},
        {"session": S, "user": ip, "ip": ip, "operation": "create", "znode": "/au/m", "znode_type": "persistent", "result": "success"},
        {"session": S, "user": ip, "ip": ip, "operation": "setData", "znode": "/au/m", "result": "success"},
        {"session": S, "user": ip, "ip": ip, "operation": "delete", "znode": seq, "result": "success"},
        {"session": S, "user": ip, "ip": ip, "operation": "multiOperation", "result": "failure"},
        {"session": S, "user": f"{ip},bob", "ip": ip, "operation": "delete", "znode": "/au/p", "result": "success"},
        {"session": S, "operation": "ephemeralZNodeDeletionOnSessionCloseOrExpire", "znode": "/au/e", "result": "success"},
        {"operation": "serverStop", "result": "invoked"},
    ]
    want = [tuple(sorted(e.items())) for e in expect]
    # The session-close deletion names the server's own user, which differs by machine.
    got = [tuple((k, v) for k, v in e if not (k == "user" and ("operation", "ephemeralZNodeDeletionOnSessionCloseOrExpire") in e))
           for e in got]
    assert sorted(got) == sorted(want), "\n".join(["--- got"] + [str(g) for g in got] + ["--- want"] + [str(w) for w in want])


@pytest.mark.ringkeeper_only
def test_audit_lines_go_to_the_audit_log_file(make_server, kazoo_factory, tmp_path):
    path = tmp_path / "audit.log"
    s = make_server(**{"audit.enable": "true", "ringkeeper.auditLogFile": str(path)})
    zk = kazoo_factory(s.hostport)
    zk.create("/to-file", b"")
    wait_until(lambda: path.exists() and "znode=/to-file" in path.read_text(), what="the create in the audit file")
    zk.stop()
    s.stop()
    lines = path.read_text().splitlines()
    assert re.match(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO audit\.Slf4jAuditLogger: user=\S+\toperation=serverStart\tresult=success$", lines[0]), lines
    assert lines[-1].endswith("\toperation=serverStop\tresult=invoked"), lines
    assert "znode=/to-file" not in s.log_text(), "audit lines go to the file only"


@pytest.mark.ringkeeper_only
def test_no_audit_without_audit_enable(make_server, kazoo_factory):
    s = make_server()
    zk = kazoo_factory(s.hostport)
    zk.create("/quiet", b"")
    zk.stop()
    s.stop()
    assert events(s.log_text()) == []
