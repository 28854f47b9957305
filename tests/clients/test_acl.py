"""ACLs: world, auth, digest, ip (with CIDR), the super digest from the config, the
permission each operation checks, getACL digest masking, AuthFailed."""

import pytest
from kazoo.exceptions import AuthFailedError, InvalidACLError, NoAuthError
from kazoo.security import (OPEN_ACL_UNSAFE, READ_ACL_UNSAFE, make_acl, make_digest_acl,
                            make_digest_acl_credential)

import rawzk
from helpers import SUPER_PASSWORD, SUPER_USER, exists_checks_read


def test_digest_acl_denies_without_auth(zk, kazoo_factory, server, base):
    """A node with only a digest ACL: no access without auth (NoAuthError), full access
    after add_auth digest with the right password, NoAuth with a wrong one."""
    acl = [make_digest_acl("alice", "pw", all=True)]
    zk.add_auth("digest", "alice:pw")
    p = f"{base}/sec"
    zk.create(p, b"secret", acl=acl)
    assert zk.get(p)[0] == b"secret"
    anon = kazoo_factory(server.hostport)
    for op in (lambda: anon.get(p), lambda: anon.set(p, b"x"),
               lambda: anon.get_children(p), lambda: anon.create(f"{p}/c"),
               lambda: anon.set_acls(p, OPEN_ACL_UNSAFE), lambda: anon.get_acls(p)):
        with pytest.raises(NoAuthError):
            op()
    if exists_checks_read(server.kind):
        with pytest.raises(NoAuthError):
            anon.exists(p)
    else:
        assert anon.exists(p) is not None, "exists checks no permission before 3.8.4"
    assert anon.exists(f"{p}/missing") is None, "exists of a missing node checks nothing"
    wrong = kazoo_factory(server.hostport, auth_data=[("digest", "alice:nope")])
    with pytest.raises(NoAuthError):
        wrong.get(p)
    right = kazoo_factory(server.hostport, auth_data=[("digest", "alice:pw")])
    assert right.get(p)[0] == b"secret"
    right.set(p, b"new")
    assert zk.get(p)[0] == b"new"


def test_permission_per_operation(raw, server, base):
    """Each op checks ZooKeeper's permission: getData/getChildren READ, setData WRITE,
    create CREATE on the parent, delete DELETE on the parent, setACL ADMIN,
    getACL READ or ADMIN; exists READ (3.8.4+, see exists_checks_read); sync nothing."""
    c = raw()
    P = rawzk
    W = lambda perms: [rawzk.ACL(perms, "world", "anyone")]  # noqa: E731

    def node(name, perms, kids=()):
        p = f"{base}/{name}"
        c.create(p, b"d")
        for k in kids:
            c.create(f"{p}/{k}")
        c.set_acl(p, W(perms))
        return p

    r = node("r", P.PERM_READ, kids=["k"])
    assert c.get_data(r)[0] == b"d" and c.get_children(r) == ["k"]
    assert c.call_err(P.OP_SETDATA, P.Writer().ustring(r).buffer(b"x").int(-1).bytes()) == P.NO_AUTH
    assert c.call_err(P.OP_CREATE, P.encode_create(f"{r}/n")) == P.NO_AUTH
    assert c.call_err(P.OP_DELETE, P.Writer().ustring(f"{r}/k").int(-1).bytes()) == P.NO_AUTH
    assert c.call_err(P.OP_SETACL, P.Writer().ustring(r).acls(W(31)).int(-1).bytes()) == P.NO_AUTH
    assert c.get_acl(r)[0] == W(P.PERM_READ)

    w = node("w", P.PERM_WRITE)
    assert c.call_err(P.OP_GETDATA, P.encode_path_watch(w)) == P.NO_AUTH
    assert c.call_err(P.OP_GETCHILDREN, P.encode_path_watch(w)) == P.NO_AUTH
    assert c.call_err(P.OP_GETACL, P.Writer().ustring(w).bytes()) == P.NO_AUTH
    assert c.set_data(w, b"ok").version == 1
    if exists_checks_read(server.kind):
        assert c.call_err(P.OP_EXISTS, P.encode_path_watch(w)) == P.NO_AUTH
    else:
        assert c.exists(w) is not None
    assert c.sync(w) == w

    cr = node("c", P.PERM_CREATE, kids=["k"])
    assert c.create(f"{cr}/n") == f"{cr}/n"
    assert c.call_err(P.OP_DELETE, P.Writer().ustring(f"{cr}/n").int(-1).bytes()) == P.NO_AUTH

    d = node("d", P.PERM_DELETE, kids=["k"])
    c.delete(f"{d}/k")
    assert c.call_err(P.OP_CREATE, P.encode_create(f"{d}/n")) == P.NO_AUTH

    a = node("a", P.PERM_ADMIN)
    assert c.get_acl(a)[0] == W(P.PERM_ADMIN)
    c.set_acl(a, W(P.PERM_ALL))
    assert c.get_data(a)[0] == b"d"

    # a multi with one forbidden op fails as a whole
    err, res = c.multi([P.m_set(f"{base}/r/k", b"fine"), P.m_set(r, b"forbidden")])
    assert err == 0 and [x.err for x in res] == [0, P.NO_AUTH]
    assert c.get_data(f"{base}/r/k")[0] == b""


def test_get_acl_masks_digest_without_admin(raw, base):
    """getACL by a client with READ but not ADMIN masks digest hashes as 'user:x';
    a client holding ADMIN (the digest identity itself) sees the full hash."""
    c = raw()
    did = rawzk.digest_id("u", "p")
    p = f"{base}/m"
    c.create(p, acl=[rawzk.ACL(rawzk.PERM_READ | rawzk.PERM_ADMIN, "digest", did),
                     rawzk.ACL(rawzk.PERM_READ, "world", "anyone")])
    acl, _ = c.get_acl(p)
    assert acl == [rawzk.ACL(17, "digest", "u:x"), rawzk.ACL(1, "world", "anyone")]
    assert c.add_auth("digest", b"u:p") == 0
    acl, _ = c.get_acl(p)
    assert acl == [rawzk.ACL(17, "digest", did), rawzk.ACL(1, "world", "anyone")]


def test_auth_scheme_uses_session_identities(zk, kazoo_factory, server, base):
    """The 'auth' scheme turns into the session's digest identity; without any
    authenticated identity it is InvalidACL."""
    anon = kazoo_factory(server.hostport)
    with pytest.raises(InvalidACLError):
        anon.create(f"{base}/x", acl=[make_acl("auth", "", all=True)])
    zk.add_auth("digest", "bob:pw")
    zk.create(f"{base}/a", acl=[make_acl("auth", "", all=True)])
    acls, _ = zk.get_acls(f"{base}/a")
    assert [(a.perms, a.id.scheme, a.id.id) for a in acls] == [
        (31, "digest", make_digest_acl_credential("bob", "pw"))]
    with pytest.raises(NoAuthError):
        anon.get(f"{base}/a")


def test_invalid_acls(raw, base):
    """An empty ACL list, an unknown scheme or a malformed digest id → InvalidACL (-114)."""
    c = raw()
    P = rawzk
    for acl in ([], [P.ACL(31, "nosuch", "x")], [P.ACL(31, "digest", "nocolon")],
                [P.ACL(31, "ip", "300.1.1.1")], [P.ACL(31, "world", "someone")]):
        err = c.call_err(P.OP_CREATE, P.encode_create(f"{base}/bad", acl=acl))
        assert err == P.INVALID_ACL, (acl, err)
    assert c.exists(f"{base}/bad") is None


def test_ip_acl_with_cidr(zk, base):
    """ip scheme: exact address and CIDR ranges that contain 127.0.0.1 grant access;
    others do not."""
    ok = {"exact": "127.0.0.1", "cidr8": "127.0.0.0/8", "cidr24": "127.0.0.0/24",
          "cidr32": "127.0.0.1/32"}
    no = {"other": "10.1.2.3", "cidr16": "10.0.0.0/16", "cidrmiss": "127.0.1.0/24"}
    for name, ip in {**ok, **no}.items():
        zk.create(f"{base}/{name}", b"v", acl=[make_acl("ip", ip, read=True),
                                                make_acl("world", "anyone", admin=True)])
    for name in ok:
        assert zk.get(f"{base}/{name}")[0] == b"v", name
    for name in no:
        with pytest.raises(NoAuthError):
            zk.get(f"{base}/{name}")


def test_world_read_only(zk, base):
    """world:anyone READ allows reads, denies writes."""
    zk.create(f"{base}/ro", b"r", acl=READ_ACL_UNSAFE)
    assert zk.get(f"{base}/ro")[0] == b"r"
    with pytest.raises(NoAuthError):
        zk.set(f"{base}/ro", b"w")
    with pytest.raises(NoAuthError):
        zk.create(f"{base}/ro/kid")


def test_super_digest_from_config(kazoo_factory, zk, server, base):
    """The superDigest from the config grants everything on every node, including
    nodes whose ACL names nobody the superuser is."""
    zk.add_auth("digest", "owner:pw")
    p = f"{base}/locked"
    zk.create(p, b"x", acl=[make_digest_acl("owner", "pw", all=True)])
    su = kazoo_factory(server.hostport, auth_data=[("digest", f"{SUPER_USER}:{SUPER_PASSWORD}")])
    assert su.get(p)[0] == b"x"
    su.set(p, b"y")
    su.create(f"{p}/k")
    su.delete(f"{p}/k")
    acls, _ = su.get_acls(p)
    assert acls[0].id.id == make_digest_acl_credential("owner", "pw")
    su.set_acls(p, OPEN_ACL_UNSAFE)
    notsu = kazoo_factory(server.hostport, auth_data=[("digest", f"{SUPER_USER}:wrong")])
    assert notsu.get(p)[0] == b"y"


def test_auth_failed_closes_connection(raw):
    """An auth packet for an unknown scheme → AuthFailed (-115) and the connection is
    closed; others keep working."""
    c = raw()
    assert c.add_auth("nosuchscheme", b"whatever") == rawzk.AUTH_FAILED
    assert c.wait_closed(5)[0]
    assert raw().exists("/") is not None


def test_kazoo_auth_failed(kazoo_factory, server):
    """kazoo reports AuthFailedError for an auth with an unknown scheme."""
    c = kazoo_factory(server.hostport)
    with pytest.raises(AuthFailedError):
        c.add_auth("nosuchscheme", "x")


def test_watch_events_need_read(raw, base):
    """A watcher without READ on a node is not told of its changes (CVE-2024-23944, fixed in
    3.8.4 and in Debian's 3.8.0 package): a recursive watch on a subtree reports the open
    node's events but not the secret node's; NodeChildrenChanged is judged by the parent's
    ACL; a one-shot watch whose event is withheld is used up all the same."""
    owner = raw()
    assert owner.add_auth("digest", b"owner:pw") == 0
    secret_acl = [rawzk.ACL(rawzk.PERM_ALL, "digest", rawzk.digest_id("owner", "pw"))]
    watcher = raw()
    watcher.add_watch(base, rawzk.AW_PERSISTENT_RECURSIVE)
    owner.create(f"{base}/open", b"o")
    owner.create(f"{base}/secret", b"s", acl=secret_acl)
    owner.set_data(f"{base}/secret", b"s2")
    owner.set_data(f"{base}/open", b"o2")
    assert sorted(watcher.get_children(base, watch=True)) == ["open", "secret"]
    owner.create(f"{base}/closed", b"", acl=secret_acl)
    seen = [(e.type, e.path) for e in watcher.quiet_events(0.5)]
    assert seen == [(1, f"{base}/open"), (3, f"{base}/open"), (4, base)]

    one_shot = raw()
    assert one_shot.call_err(rawzk.OP_EXISTS, rawzk.encode_path_watch(f"{base}/later", True)) \
        == rawzk.NO_NODE
    owner.create(f"{base}/later", b"", acl=secret_acl)   # withheld, and the watch is gone
    owner.set_acl(f"{base}/later", rawzk.OPEN_ACL_UNSAFE)
    owner.delete(f"{base}/later")                         # would be visible, but no watch is left
    assert one_shot.quiet_events(0.5) == []
