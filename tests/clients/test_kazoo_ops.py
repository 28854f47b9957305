"""Data operations driven through kazoo (and rawzk where kazoo lacks the op), run against
every selected server kind."""

import pytest
from kazoo.exceptions import (BadArgumentsError, BadVersionError, NoChildrenForEphemeralsError,
                              NodeExistsError, NoNodeError, NotEmptyError,
                              RolledBackError, RuntimeInconsistency)

import rawzk
from helpers import wait_until


def test_create_modes_and_get(zk, base):
    """create persistent / ephemeral / sequential / ephemeral-sequential, read them back."""
    assert zk.create(f"{base}/p", b"pdata") == f"{base}/p"
    e = zk.create(f"{base}/e", b"edata", ephemeral=True)
    assert e == f"{base}/e"
    s = zk.create(f"{base}/s-", b"sdata", sequence=True)
    es = zk.create(f"{base}/es-", b"esdata", ephemeral=True, sequence=True)
    assert s == f"{base}/s-0000000002"
    assert es == f"{base}/es-0000000003"
    data, st = zk.get(f"{base}/p")
    assert data == b"pdata" and st.version == 0 and st.ephemeralOwner == 0
    assert st.dataLength == 5 and st.numChildren == 0 and st.cversion == 0
    sid = zk.client_id[0]
    assert zk.exists(e).ephemeralOwner == sid
    assert zk.exists(es).ephemeralOwner == sid
    assert zk.exists(s).ephemeralOwner == 0
    assert sorted(zk.get_children(base)) == ["e", "es-0000000003", "p", "s-0000000002"]
    with pytest.raises(NodeExistsError):
        zk.create(f"{base}/p")
    with pytest.raises(NoNodeError):
        zk.create(f"{base}/missing/child")


def test_sequential_counter_is_per_parent_and_uses_cversion(zk, base):
    """The sequence suffix is %010d of a per-parent counter of child *creations* (any
    mode). Apache stores that counter; the Stat.cversion it reports is
    2*creations - numChildren, i.e. creations + deletions. So after a delete the next
    suffix is lower than the reported cversion."""
    a = f"{base}/a"
    b = f"{base}/b"
    zk.create(a)
    zk.create(b)
    names = [zk.create(f"{a}/n", sequence=True) for _ in range(3)]
    assert names == [f"{a}/n0000000000", f"{a}/n0000000001", f"{a}/n0000000002"]
    assert zk.create(f"{b}/n", sequence=True) == f"{b}/n0000000000"
    zk.create(f"{a}/plain")           # 4 creations, cversion 4
    zk.delete(f"{a}/plain")           # cversion 5, still 4 creations
    assert zk.exists(a).cversion == 5
    assert zk.create(f"{a}/", sequence=True) == f"{a}/0000000004"
    st = zk.exists(a)
    assert st.cversion == 6 and st.numChildren == 4
    zk.delete(f"{a}/n0000000000")
    assert zk.create(f"{a}/x", sequence=True) == f"{a}/x0000000005"
    st = zk.exists(a)
    assert st.cversion == 8 and st.numChildren == 4


def test_makepath_and_ensure_path(zk, base):
    """kazoo's makepath creates missing parents (several creates)."""
    assert zk.create(f"{base}/x/y/z", b"deep", makepath=True) == f"{base}/x/y/z"
    assert zk.get(f"{base}/x/y/z")[0] == b"deep"
    zk.ensure_path(f"{base}/q/r")
    assert zk.exists(f"{base}/q/r") is not None


def test_create2_returns_stat(zk, base):
    """create with include_data (create2) returns the new node's Stat."""
    path, st = zk.create(f"{base}/c2", b"abc", include_data=True)
    assert path == f"{base}/c2"
    assert st.version == 0 and st.dataLength == 3 and st.czxid == st.mzxid == st.pzxid
    assert st.czxid > 0 and st == zk.exists(path)
    path, st = zk.create(f"{base}/c2s-", include_data=True, sequence=True)
    assert path == f"{base}/c2s-0000000001"


def test_stat_fields_follow_writes(zk, base):
    """version, cversion, aversion, mzxid, pzxid, numChildren, dataLength after each write."""
    p = f"{base}/n"
    _, st0 = zk.create(p, b"1", include_data=True)
    st1 = zk.set(p, b"22")
    assert st1.version == 1 and st1.dataLength == 2 and st1.mzxid > st0.mzxid
    assert st1.czxid == st0.czxid and st1.pzxid == st0.pzxid and st1.ctime == st0.ctime
    zk.create(f"{p}/c")
    st2 = zk.exists(p)
    assert st2.cversion == 1 and st2.numChildren == 1 and st2.pzxid > st1.mzxid
    assert st2.mzxid == st1.mzxid and st2.version == 1
    zk.delete(f"{p}/c")
    st3 = zk.exists(p)
    assert st3.cversion == 2 and st3.numChildren == 0 and st3.pzxid > st2.pzxid
    zk.set_acls(p, zk.get_acls(p)[0])
    assert zk.exists(p).aversion == 1


def test_set_and_delete_with_versions(zk, base):
    """setData/delete honour the expected version; -1 matches any."""
    p = f"{base}/v"
    zk.create(p, b"a")
    with pytest.raises(BadVersionError):
        zk.set(p, b"b", version=3)
    assert zk.set(p, b"b", version=0).version == 1
    assert zk.set(p, b"c", version=-1).version == 2
    with pytest.raises(BadVersionError):
        zk.delete(p, version=1)
    zk.delete(p, version=2)
    assert zk.exists(p) is None
    with pytest.raises(NoNodeError):
        zk.delete(p)
    with pytest.raises(NoNodeError):
        zk.set(p, b"x")
    with pytest.raises(NoNodeError):
        zk.get(p)


def test_delete_not_empty_and_recursive(zk, base):
    """delete of a node with children → NotEmpty; kazoo's recursive delete works."""
    zk.create(f"{base}/d/e/f", makepath=True)
    with pytest.raises(NotEmptyError):
        zk.delete(f"{base}/d")
    zk.delete(f"{base}/d", recursive=True)
    assert zk.exists(f"{base}/d") is None


def test_empty_and_large_data(zk, base, server):
    """Empty data round-trips as b''; 500 KB of data round-trips."""
    zk.create(f"{base}/empty")
    assert zk.get(f"{base}/empty")[0] == b""
    big = bytes(range(256)) * 2000
    zk.create(f"{base}/big", big)
    data, st = zk.get(f"{base}/big")
    assert data == big and st.dataLength == len(big)


def test_get_children_include_data(zk, base):
    """getChildren2 returns the children and the parent's Stat."""
    for n in ("b", "a", "c"):
        zk.create(f"{base}/{n}")
    children, st = zk.get_children(base, include_data=True)
    assert sorted(children) == ["a", "b", "c"]
    assert st.numChildren == 3 and st.cversion == 3
    with pytest.raises(NoNodeError):
        zk.get_children(f"{base}/nope")


def test_sync(zk, base):
    """sync returns the path."""
    assert zk.sync(base) == base
    assert zk.sync("/") == "/"


def test_ephemeral_cannot_have_children(zk, base):
    """A child under an ephemeral → NoChildrenForEphemerals."""
    zk.create(f"{base}/eph", ephemeral=True)
    with pytest.raises(NoChildrenForEphemeralsError):
        zk.create(f"{base}/eph/kid")


def test_root_and_reserved_tree(zk):
    """/ and /zookeeper exist; the reserved nodes cannot be deleted (BadArguments);
    /zookeeper/config is read-only for world."""
    assert zk.exists("/") is not None
    assert sorted(zk.get_children("/zookeeper")) == ["config", "quota"]
    for p in ("/zookeeper", "/zookeeper/quota", "/zookeeper/config"):
        with pytest.raises(BadArgumentsError):
            zk.delete(p)
    acls, st = zk.get_acls("/zookeeper/config")
    assert [(a.perms, a.id.scheme, a.id.id) for a in acls] == [(1, "world", "anyone")]
    assert st.aversion == -1


def test_transaction_commits_all(zk, base):
    """A multi with create/set/check/delete commits and gives a result per op."""
    zk.create(f"{base}/a", b"a0")
    zk.create(f"{base}/gone")
    t = zk.transaction()
    t.create(f"{base}/b", b"b0")
    t.set_data(f"{base}/a", b"a1")
    t.check(f"{base}/a", 1)
    t.delete(f"{base}/gone")
    res = t.commit()
    assert res[0] == f"{base}/b"
    assert res[1].version == 1
    assert res[2] is True and res[3] is True
    assert zk.get(f"{base}/a")[0] == b"a1" and zk.exists(f"{base}/gone") is None
    # one zxid for the whole multi
    assert zk.exists(f"{base}/b").czxid == zk.exists(f"{base}/a").mzxid


def test_transaction_failure_rolls_back(zk, base):
    """A failing op rolls back every other op; per-op results say which one failed."""
    zk.create(f"{base}/a", b"a0")
    before = zk.exists(base)
    t = zk.transaction()
    t.create(f"{base}/new", b"x")
    t.set_data(f"{base}/a", b"a1")
    t.check(f"{base}/a", 7)          # fails: version is 1 after the set above
    t.delete(f"{base}/a")
    res = t.commit()
    assert isinstance(res[0], RolledBackError)
    assert isinstance(res[1], RolledBackError)
    assert isinstance(res[2], BadVersionError)
    assert isinstance(res[3], RuntimeInconsistency)
    assert zk.exists(f"{base}/new") is None
    data, st = zk.get(f"{base}/a")
    assert data == b"a0" and st.version == 0
    after = zk.exists(base)
    assert after.cversion == before.cversion and after.pzxid == before.pzxid


def test_multi_raw_results(raw, base):
    """Raw multi: per-op headers are 0 before the failure, the error at it, -2 after;
    the reply header err is 0."""
    c = raw()
    err, res = c.multi([rawzk.m_create(f"{base}/m1"), rawzk.m_create(f"{base}/m1"),
                        rawzk.m_create(f"{base}/m2")])
    assert err == 0
    assert [r.type for r in res] == [rawzk.OP_ERROR] * 3
    assert [r.err for r in res] == [0, rawzk.NODE_EXISTS, rawzk.RUNTIME_INCONSISTENCY]
    assert c.exists(f"{base}/m1") is None
    err, res = c.multi([rawzk.m_create(f"{base}/m1", b"x"), rawzk.m_set(f"{base}/m1", b"y"),
                        rawzk.m_check(f"{base}/m1", 1), rawzk.m_delete(f"{base}/m1")])
    assert err == 0
    assert [r.type for r in res] == [rawzk.OP_CREATE, rawzk.OP_SETDATA, rawzk.OP_CHECK,
                                     rawzk.OP_DELETE]
    assert res[0].value == f"{base}/m1" and res[1].value.version == 1
    # empty multi is fine
    assert c.multi([]) == (0, [])


def test_multi_read(raw, base):
    """multiRead (op 22): getData/getChildren results, errors per op without rollback."""
    c = raw()
    c.create(f"{base}/r", b"rd")
    c.create(f"{base}/r/k")
    err, res = c.multi([rawzk.m_get_data(f"{base}/r"), rawzk.m_get_children(f"{base}/r"),
                        rawzk.m_get_data(f"{base}/none")], rawzk.OP_MULTIREAD)
    assert err == 0
    assert res[0].type == rawzk.OP_GETDATA and res[0].value[0] == b"rd"
    assert res[0].value[1].numChildren == 1
    assert res[1].type == rawzk.OP_GETCHILDREN and res[1].value == ["k"]
    assert res[2].type == rawzk.OP_ERROR and res[2].err == rawzk.NO_NODE


def test_container_reaped_after_last_child(raw, base):
    """A container is removed by the server once its last child is gone; a container
    that never had a child is not removed (in this time frame)."""
    c = raw()
    path, st = c.create_container(f"{base}/box", b"c")
    assert path == f"{base}/box" and st.version == 0 and st.ephemeralOwner == 0
    c.create_container(f"{base}/never")
    c.create(f"{base}/box/item")
    c.delete(f"{base}/box/item")
    wait_until(lambda: c.exists(f"{base}/box") is None, timeout=75, interval=0.25,
               what="container reaped")
    assert c.exists(f"{base}/never") is not None


def test_create_container_ignores_plain_flags(raw, base):
    """createContainer (op 19) makes a container whatever its flags say: with the
    EPHEMERAL flag the node has no owner and outlives its session, and with a sequential
    flag it gets the suffix; either is reaped once its last child is gone. create (op 1)
    with the CONTAINER flag makes a plain persistent node that stays."""
    c = raw()
    ops = []
    for name, flags in (("eph", rawzk.EPHEMERAL), ("seq-", rawzk.PERSISTENT_SEQUENTIAL)):
        x = c.send_request(rawzk.OP_CREATECONTAINER, rawzk.encode_create(f"{base}/{name}", b"", None, flags))
        hdr, r = c.read_reply(x)
        assert hdr.err == 0
        ops.append(r.ustring())
    assert ops == [f"{base}/eph", f"{base}/seq-0000000001"]
    assert c.exists(f"{base}/eph").ephemeralOwner == 0
    c.create(f"{base}/plain", flags=rawzk.CONTAINER)
    for p in ops + [f"{base}/plain"]:
        c.create(f"{p}/k")
        c.delete(f"{p}/k")
    c.close_session()
    check = raw()
    wait_until(lambda: all(check.exists(p) is None for p in ops), timeout=75, interval=0.25,
               what="op-19 nodes reaped as containers")
    assert check.exists(f"{base}/plain") is not None


def test_ttl_node(raw, base):
    """TTL nodes (extended types enabled): createTTL works, the Stat shown to clients has
    ephemeralOwner 0 (the TTL marker is internal); bad TTL → BadArguments; the node is
    removed once expired and childless."""
    c = raw()
    path, st = c.create_ttl(f"{base}/ttl", b"t", ttl=500)
    assert path == f"{base}/ttl"
    assert st.ephemeralOwner == 0 and c.exists(path).ephemeralOwner == 0
    path, _ = c.create_ttl(f"{base}/ttls-", ttl=60000, flags=rawzk.PERSISTENT_SEQUENTIAL_WITH_TTL)
    assert path == f"{base}/ttls-0000000001"
    assert c.call_err(rawzk.OP_CREATETTL, rawzk.encode_create(
        f"{base}/bad", b"", None, rawzk.PERSISTENT_WITH_TTL, 0)) == rawzk.BAD_ARGUMENTS
    # TTL with a non-TTL create mode
    assert c.call_err(rawzk.OP_CREATETTL, rawzk.encode_create(
        f"{base}/bad", b"", None, rawzk.PERSISTENT, 1000)) == rawzk.BAD_ARGUMENTS
    wait_until(lambda: c.exists(f"{base}/ttl") is None, timeout=75, interval=0.25,
               what="TTL node removed")
    assert c.exists(f"{base}/ttls-0000000001") is not None


def test_ttl_disabled_is_unimplemented(make_server):
    """Without zookeeper.extendedTypesEnabled, createTTL → Unimplemented (-6)."""
    import helpers
    cfg = helpers.default_config(extended_types=False)
    s = make_server(config=cfg)
    with rawzk.RawConn(s.hostport) as c:
        err = c.call_err(rawzk.OP_CREATETTL, rawzk.encode_create(
            "/ttl", b"", None, rawzk.PERSISTENT_WITH_TTL, 1000))
        assert err == rawzk.UNIMPLEMENTED
        assert c.exists("/ttl") is None
        # the connection still works
        assert c.create("/after") == "/after"


def test_get_ephemerals_and_all_children_number(raw, base):
    """getEphemerals lists this session's ephemerals under a prefix; getAllChildrenNumber
    counts all descendants."""
    c = raw()
    other = raw()
    c.create(f"{base}/a")
    c.create(f"{base}/a/e1", flags=rawzk.EPHEMERAL)
    c.create(f"{base}/e2", flags=rawzk.EPHEMERAL)
    other.create(f"{base}/o1", flags=rawzk.EPHEMERAL)
    assert sorted(c.get_ephemerals(base)) == [f"{base}/a/e1", f"{base}/e2"]
    assert c.get_ephemerals(f"{base}/a") == [f"{base}/a/e1"]
    assert other.get_ephemerals(base) == [f"{base}/o1"]
    assert c.get_ephemerals(f"{base}/zzz") == []
    assert sorted(c.get_ephemerals("/")) == [f"{base}/a/e1", f"{base}/e2"]
    assert c.get_all_children_number(base) == 4
    assert c.get_all_children_number(f"{base}/a") == 1
    assert c.get_all_children_number(f"{base}/a/e1") == 0
    assert c.call_err(rawzk.OP_GETALLCHILDRENNUMBER,
                      rawzk.Writer().ustring(f"{base}/none").bytes()) == rawzk.NO_NODE


def test_invalid_paths(raw, base):
    """Path validation: BadArguments for malformed paths whose parent exists; reads of
    invalid paths give NoNode."""
    c = raw()
    for bad in ("bad", f"{base}/", f"{base}/.", f"{base}/..", f"{base}/a\u0001b"):
        err = c.call_err(rawzk.OP_CREATE, rawzk.encode_create(bad))
        assert err == rawzk.BAD_ARGUMENTS, (bad, err)
    # parent missing comes first
    assert c.call_err(rawzk.OP_CREATE, rawzk.encode_create(f"{base}/nope/")) == rawzk.NO_NODE
    assert c.call_err(rawzk.OP_GETDATA, rawzk.encode_path_watch(f"{base}//x")) == rawzk.NO_NODE
    assert c.call_err(rawzk.OP_CREATE, rawzk.encode_create("/")) in (
        rawzk.NODE_EXISTS, rawzk.BAD_ARGUMENTS)
    assert c.call_err(rawzk.OP_DELETE, rawzk.Writer().ustring("/").int(-1).bytes()) == \
        rawzk.BAD_ARGUMENTS
    assert c.exists(base) is not None
