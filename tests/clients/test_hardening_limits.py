"""Issue 14, items 1 and 5: whatever a server acknowledges it reads back after a restart, and
large pipelined writes go to the log in batches under a byte cap.

Item 1: the txn record decoder refused more than 4,096 ACL entries or 65,536 multi ops, which
prep accepted, logged and acknowledged: the server could not restart ("malformed txn record:
BadLength"). Apache takes the same inputs and restarts; both kinds must answer alike and come
back with the data after kill -9.
Item 5: a log batch is closed before the txn that would take it past ringkeeper.batchBytesMax
(before, nothing capped a batch but an assert at 1 GiB)."""

import pytest

import rawzk
from rawzk import ACL, RawConn


def distinct_ip_acl(n):
    return [ACL(rawzk.PERM_ALL, "ip", f"10.{i >> 8 & 255}.{i & 255}.1") for i in range(n)]


def test_hardening_1_create_with_4097_acl_entries_survives_restart(kind, make_server):
    s = make_server()
    # 4,097 distinct entries; the last lets this client (127.0.0.1) read the node back.
    acl = distinct_ip_acl(4096) + [ACL(rawzk.PERM_ALL, "ip", "127.0.0.1")]
    with RawConn(s.hostport) as c:
        assert c.create("/acl4097", b"payload", acl=acl) == "/acl4097"
        got, _ = c.get_acl("/acl4097")
        assert sorted(got) == sorted(acl)
    s.restart(kill=True)
    with RawConn(s.hostport) as c:
        data, _ = c.get_data("/acl4097")
        assert data == b"payload"
        got, _ = c.get_acl("/acl4097")
        assert sorted(got) == sorted(acl)
        # Still taking writes after the restart.
        assert c.create("/after", b"") == "/after"


def check_body(path, version=-1):
    return rawzk.Writer().ustring(path).int(version).bytes()


@pytest.mark.parametrize("path,fails", [("/missing", True), ("/", False)])
def test_hardening_1_multi_of_65537_checks_survives_restart(kind, make_server, path, fails):
    # 65,537 checks make a 1.6 MB frame: jute.maxbuffer raised, as in the issue.
    s = make_server(jute__maxbuffer=4 * 1024 * 1024)
    n = 65_537
    with RawConn(s.hostport, io_timeout=60.0) as c:
        c.create("/before", b"")
        err, results = c.multi([(rawzk.OP_CHECK, check_body(path))] * n)
        if fails:
            assert results is not None and len(results) == n, err
            assert results[0].err == rawzk.NO_NODE
            assert all(r.err == rawzk.RUNTIME_INCONSISTENCY for r in results[1:])
        else:
            assert err == 0 and len(results) == n
            assert all(r.type == rawzk.OP_CHECK for r in results)
        assert c.create("/after", b"x") == "/after"
        _, after = c.get_data("/after")
    s.restart(kill=True)
    with RawConn(s.hostport) as c:
        data, stat = c.get_data("/after")
        assert data == b"x" and stat.czxid == after.czxid
        # The multi took one zxid between the two creates, and it was replayed.
        _, before = c.get_data("/before")
        assert after.czxid - before.czxid == 2
        assert c.create("/again", b"") == "/again"


@pytest.mark.ringkeeper_only
def test_hardening_5_pipelined_writes_past_the_batch_byte_cap(make_server):
    # The smallest cap that holds the largest txn of the default jute.maxbuffer (2 x 1 MiB +
    # 4,100 bytes); 48 pipelined 1 MB writes are over 20 times that.
    s = make_server(ringkeeper__batchBytesMax=2_200_000)
    n, size = 48, 1_000_000
    with RawConn(s.hostport, io_timeout=60.0) as c:
        c.create("/big", b"")
        xids = []
        for i in range(n):
            body = rawzk.Writer().ustring("/big").buffer(bytes([i]) * size).int(-1).bytes()
            xids.append(c.send_request(rawzk.OP_SETDATA, body))
        for x in xids:
            hdr, r = c.read_reply(x)
            assert hdr.err == 0
        data, stat = c.get_data("/big")
        assert stat.version == n and data == bytes([n - 1]) * size
        # The log took them as several batches (each fdatasync'd before the replies).
        assert c.create("/still-serving", b"") == "/still-serving"
    s.restart(kill=True)
    with RawConn(s.hostport) as c:
        data, stat = c.get_data("/big")
        assert stat.version == n and data == bytes([n - 1]) * size
        assert c.create("/after", b"") == "/after"


@pytest.mark.ringkeeper_only
def test_hardening_5_batch_cap_below_the_largest_txn_is_refused(make_server):
    s = make_server(start=False, ringkeeper__batchBytesMax=1_000_000)
    s.spawn()
    s.proc.wait(timeout=30)
    assert s.proc.returncode != 0
    assert "ringkeeper.batchBytesMax" in s.log_text()
