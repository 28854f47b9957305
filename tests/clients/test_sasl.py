"""SASL DIGEST-MD5 on client connections (issue 15), against ringkeeper and Apache ZooKeeper
3.8 with the same settings: a JAAS file with a `Server` section (users bob, alice, admin) given
to Apache as -Djava.security.auth.login.config and to ringkeeper as the zoo.cfg key of that
name, `authProvider.1=...SASLAuthenticationProvider`, `superUser=admin`. Covered: kazoo through
pure-sasl, a wrong password and an unknown user refused (AuthFailed, a null token, the
connection closed; the session then expires like any other), `sasl:` ACLs granting and
denying, `auth` expanding to the sasl id, the super user, zkCli with a JAAS `Client` section,
our CLI, enforce.auth / sessionRequireClientSASLAuth refusing unauthenticated sessions,
ringkeeper-bench `--sasl` (its znodes then `sasl:<user>` alone: it must authenticate to run;
a wrong password or no SASL fails the run).
ringkeeper only: JAAS files it cannot use refuse the start naming the file."""

import csv
import os
import subprocess

import pytest

import helpers
import rawzk
from helpers import RK_BIN, ZKCLI, wait_until

SASL_PROVIDER = "org.apache.zookeeper.server.auth.SASLAuthenticationProvider"
JAAS_KEY = "java.security.auth.login.config"
USERS = {"bob": "bob-secret", "alice": "alice-secret", "admin": "admin-secret"}
SESSION_CLOSED_REQUIRE_SASL_AUTH = -124

SERVER_JAAS = """// the users ZooKeeper's DIGEST-MD5 server knows
Server {
    org.apache.zookeeper.server.auth.DigestLoginModule required
    %s;
};
/* sections of other programs are skipped */
Other { com.example.Nothing optional debug=true; };
""" % "\n    ".join(f'user_{u}="{p}"' for u, p in USERS.items())


@pytest.fixture(scope="module")
def jaas(tmp_path_factory):
    d = tmp_path_factory.mktemp("jaas")
    server = d / "server-jaas.conf"
    server.write_text(SERVER_JAAS)

    def client(user, password):
        p = d / f"client-{user}-{abs(hash(password))}.conf"
        p.write_text('Client {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n'
                     f'  username="{user}"\n  password="{password}";\n}};\n')
        return str(p)

    return {"server": str(server), "client": client}


def small_config(**extra):
    """The harness's default config with 4 MiB log segments (disk is not what these test)."""
    return {**helpers.default_config(), "preAllocSize": "4096", **extra}


def sasl_config(jaas, **extra):
    cfg = small_config()
    cfg.update({JAAS_KEY: jaas["server"], "authProvider.1": SASL_PROVIDER, "superUser": "admin"})
    cfg.update(extra)
    return cfg


def kazoo_sasl(kazoo_factory, hostport, user, password, **kw):
    return kazoo_factory(hostport, sasl_options={"mechanism": "DIGEST-MD5", "username": user,
                                                 "password": password}, **kw)


def sasl_exchange(conn, user, password):
    """DIGEST-MD5 through pure-sasl over a rawzk connection, as kazoo runs it; returns the
    header of the last reply (err != 0 ends the exchange)."""
    import puresasl.client
    cli = puresasl.client.SASLClient(host="zk-sasl-md5", service="zookeeper", mechanism="DIGEST-MD5",
                                     username=user, password=password)
    challenge = None
    while True:
        token = cli.process(challenge)
        if cli.complete and not token:
            return hdr
        x = conn.send_request(rawzk.OP_SASL, rawzk.Writer().buffer(token or b"").bytes())
        hdr, r = conn.read_reply(x)
        if hdr.err != 0:
            # the error reply still carries a SetSASLResponse with a null token
            assert r.buffer() is None
            return hdr
        challenge = r.buffer()


def test_sasl_kazoo_digest_md5_and_sasl_acls(make_server, kazoo_factory, jaas, kind):
    from kazoo.exceptions import NoAuthError
    from kazoo.security import ACL, Id, Permissions
    s = make_server(sasl_config(jaas))
    bob = kazoo_sasl(kazoo_factory, s.hostport, "bob", USERS["bob"])
    bob.create("/sasl", b"open")
    bob.create("/sasl/bob", b"bob only", acl=[ACL(Permissions.ALL, Id("sasl", "bob"))])
    assert bob.get("/sasl/bob")[0] == b"bob only"
    # "auth" expands to the connection's sasl id
    bob.create("/sasl/auth", b"a", acl=[ACL(Permissions.ALL, Id("auth", ""))])
    acl, _ = bob.get_acls("/sasl/auth")
    assert [(a.id.scheme, a.id.id, a.perms) for a in acl] == [("sasl", "bob", Permissions.ALL)]
    alice = kazoo_sasl(kazoo_factory, s.hostport, "alice", USERS["alice"])
    with pytest.raises(NoAuthError):
        alice.get("/sasl/bob")
    with pytest.raises(NoAuthError):
        alice.set("/sasl/auth", b"x")
    plain = kazoo_factory(s.hostport)
    with pytest.raises(NoAuthError):
        plain.get("/sasl/bob")
    assert plain.get("/sasl")[0] == b"open"
    # superUser=admin: the admin's sasl id also carries super
    admin = kazoo_sasl(kazoo_factory, s.hostport, "admin", USERS["admin"])
    assert admin.get("/sasl/bob")[0] == b"bob only"
    admin.set("/sasl/bob", b"by admin")
    assert bob.get("/sasl/bob")[0] == b"by admin"


def test_sasl_whoami_and_raw_exchange(make_server, jaas, kind):
    s = make_server(sasl_config(jaas))
    with rawzk.RawConn(s.hostport) as c:
        hdr = sasl_exchange(c, "bob", USERS["bob"])
        assert (hdr.err, hdr.zxid) == (0, 0)
        assert ("sasl", "bob") in c.whoami()
        c.create("/raw-sasl", b"x", acl=[rawzk.ACL(rawzk.PERM_ALL, "sasl", "bob")])
        assert c.get_acl("/raw-sasl")[0] == [rawzk.ACL(rawzk.PERM_ALL, "sasl", "bob")]
        # a sasl id ZooKeeper's KerberosName cannot parse is not a valid ACL id
        body = rawzk.Writer().ustring("/bad-sasl").buffer(b"").acls(
            [rawzk.ACL(rawzk.PERM_ALL, "sasl", "a@b@c")]).int(0).bytes()
        assert c.call_err(rawzk.OP_CREATE, body) == rawzk.INVALID_ACL


@pytest.mark.parametrize("user,password", [("bob", "wrong"), ("mallory", "whatever")],
                         ids=["wrong-password", "unknown-user"])
def test_sasl_refusal_closes_the_connection(make_server, jaas, kind, user, password):
    s = make_server(sasl_config(jaas))
    with rawzk.RawConn(s.hostport) as c:
        hdr = sasl_exchange(c, user, password)
        assert (hdr.err, hdr.zxid) == (rawzk.AUTH_FAILED, 0)
        closed, frames = c.wait_closed(timeout=10)
        assert closed and not frames


def test_sasl_kazoo_with_a_wrong_password_ends_auth_failed(make_server, kazoo_factory, jaas, kind):
    """kazoo reports CONNECTED when the session is established, runs the exchange, and on
    AuthFailed stops for good (state LOST, nothing works)."""
    from kazoo.protocol.states import KazooState
    s = make_server(sasl_config(jaas))
    states = []
    zk = kazoo_sasl(kazoo_factory, s.hostport, "bob", "not-bobs", start=False)
    zk.add_listener(states.append)
    try:
        zk.start(timeout=8)
    except Exception:
        pass  # a time-out if the failure came before start() looked
    wait_until(lambda: KazooState.LOST in states, timeout=10, what="kazoo to give up")
    assert not zk.connected
    with pytest.raises(Exception):
        zk.get("/")


def test_sasl_failed_attempt_leaves_no_session(make_server, jaas, kind):
    """The session a client opened before its exchange failed holds nothing and ends: its
    ephemeral node goes once the session's timeout passes (neither server closes it at once)."""
    s = make_server(sasl_config(jaas))
    c = rawzk.RawConn(s.hostport, timeout_ms=2000)
    try:
        c.create("/doomed", b"", flags=rawzk.EPHEMERAL)
        hdr = sasl_exchange(c, "bob", "wrong")
        assert hdr.err == rawzk.AUTH_FAILED
        assert c.wait_closed(timeout=10)[0]
    finally:
        c.close()
    with rawzk.RawConn(s.hostport) as w:
        def gone():
            try:
                w.exists("/doomed")
            except rawzk.ZKError as e:
                return e.code == rawzk.NO_NODE
            return w.exists("/doomed") is None
        wait_until(gone, timeout=15, what="the failed session's ephemeral to go")


def _enforced_refusal(s, op, body=b""):
    with rawzk.RawConn(s.hostport) as c:
        x = c.send_request(op, body, xid=rawzk.XID_PING if op == rawzk.OP_PING else None)
        hdr, _ = c.read_reply(x)
        closed, frames = c.wait_closed(timeout=10)
        return hdr, closed and not frames


@pytest.mark.parametrize("keys", [{"enforce.auth.enabled": "true", "enforce.auth.schemes": "sasl"},
                                  {"sessionRequireClientSASLAuth": "true"}],
                         ids=["enforce.auth", "sessionRequireClientSASLAuth"])
def test_sasl_enforced_refuses_unauthenticated_sessions(make_server, kazoo_factory, jaas, kind, keys):
    s = make_server(sasl_config(jaas, **keys))
    # wait_ready's probe closes its session: closeSession is refused too, but the probe does
    # not need its answer. Any request but auth and sasl: SessionClosedRequireSaslAuth, zxid
    # 0, then the connection closes.
    get = rawzk.Writer().ustring("/").bool(False).bytes()
    hdr, closed = _enforced_refusal(s, rawzk.OP_GETDATA, get)
    assert (hdr.err, hdr.zxid, closed) == (SESSION_CLOSED_REQUIRE_SASL_AUTH, 0, True)
    hdr, closed = _enforced_refusal(s, rawzk.OP_PING)
    assert (hdr.err, closed) == (SESSION_CLOSED_REQUIRE_SASL_AUTH, True)
    # a digest identity is not the enforced scheme
    with rawzk.RawConn(s.hostport) as c:
        assert c.add_auth("digest", b"bob:x") == 0
        x = c.send_request(rawzk.OP_GETDATA, get)
        assert c.read_reply(x)[0].err == SESSION_CLOSED_REQUIRE_SASL_AUTH
    # a SASL-authenticated session works
    bob = kazoo_sasl(kazoo_factory, s.hostport, "bob", USERS["bob"])
    bob.create("/enforced", b"ok")
    assert bob.get("/enforced")[0] == b"ok"
    # a failed exchange: SessionClosedRequireSaslAuth instead of AuthFailed
    with rawzk.RawConn(s.hostport) as c:
        hdr = sasl_exchange(c, "bob", "wrong")
        assert hdr.err == SESSION_CLOSED_REQUIRE_SASL_AUTH
        assert c.wait_closed(timeout=10)[0]


def test_enforce_auth_with_digest(make_server, kind):
    s = make_server(small_config(**{"enforce.auth.enabled": "true", "enforce.auth.schemes": "digest"}))
    with rawzk.RawConn(s.hostport) as c:
        assert c.add_auth("digest", b"bob:x") == 0
        assert c.call_err(rawzk.OP_GETDATA, rawzk.Writer().ustring("/").bool(False).bytes()) == 0
    hdr, closed = _enforced_refusal(s, rawzk.OP_GETDATA, rawzk.Writer().ustring("/").bool(False).bytes())
    assert (hdr.err, closed) == (SESSION_CLOSED_REQUIRE_SASL_AUTH, True)


def _zkcli_with_jaas(hostport, jaas_path, commands, timeout=90.0):
    env = dict(os.environ)
    env["CLIENT_JVMFLAGS"] = ("-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xmx128m "
                              f"-Djava.security.auth.login.config={jaas_path}")
    p = subprocess.run([ZKCLI, "-server", hostport], input=("\n".join(commands) + "\nquit\n").encode(),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout, env=env)
    return p.stdout.decode(errors="replace")


def test_sasl_zkcli_with_a_jaas_client_section(make_server, jaas, kind):
    if not os.path.exists(ZKCLI):
        pytest.skip("needs zkCli.sh")
    s = make_server(sasl_config(jaas))
    with rawzk.RawConn(s.hostport) as c:
        assert sasl_exchange(c, "bob", USERS["bob"]).err == 0
        c.create("/zkcli-sasl", b"for bob", acl=[rawzk.ACL(rawzk.PERM_ALL, "sasl", "bob")])
    out = _zkcli_with_jaas(s.hostport, jaas["client"]("bob", USERS["bob"]),
                           ["get /zkcli-sasl", "whoami", "getAcl /zkcli-sasl"])
    assert "for bob" in out, out
    assert "sasl: bob" in out, out
    assert "'sasl,'bob" in out, out
    out = _zkcli_with_jaas(s.hostport, jaas["client"]("alice", USERS["alice"]), ["get /zkcli-sasl"])
    assert "Insufficient permission" in out or "NoAuth" in out, out
    assert "for bob" not in out
    # a wrong password: the Java client sees AuthFailed and gets nothing
    out = _zkcli_with_jaas(s.hostport, jaas["client"]("bob", "wrong"), ["get /zkcli-sasl"])
    assert "state:AuthFailed" in out, out
    assert "for bob" not in out and "SaslAuthenticated" not in out, out


def _rk_cli(args, env=None, timeout=60):
    return subprocess.run([RK_BIN, "cli", *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)


def test_sasl_our_cli(make_server, jaas, kind):
    s = make_server(sasl_config(jaas))
    with rawzk.RawConn(s.hostport) as c:
        assert sasl_exchange(c, "bob", USERS["bob"]).err == 0
        c.create("/cli-sasl", b"for bob", acl=[rawzk.ACL(rawzk.PERM_ALL, "sasl", "bob")])
    bob_jaas = jaas["client"]("bob", USERS["bob"])
    r = _rk_cli(["-s", s.hostport, "--jaas-config", bob_jaas, "get", "/cli-sasl"])
    assert (r.returncode, r.stdout.strip()) == (0, "for bob"), r
    # zkEnv's way: CLIENT_JVMFLAGS names the JAAS file
    r = _rk_cli(["-s", s.hostport, "whoami"],
                env={"CLIENT_JVMFLAGS": f"-Xmx64m -Djava.security.auth.login.config={bob_jaas}"})
    assert r.returncode == 0 and "sasl: bob" in r.stdout, r
    r = _rk_cli(["-s", s.hostport, "--jaas-config", jaas["client"]("alice", USERS["alice"]),
                 "get", "/cli-sasl"])
    assert r.returncode == 1 and "Insufficient permission" in r.stderr, r
    r = _rk_cli(["-s", s.hostport, "--jaas-config", jaas["client"]("bob", "wrong"), "get", "/cli-sasl"],
                timeout=90)
    assert r.returncode != 0 and "for bob" not in r.stdout, r
    assert "AuthFailed" in r.stderr or "auth" in r.stderr.lower(), r


BENCH = helpers.BENCH_BIN


def run_bench(hostport, tmp_path, *args):
    out = str(tmp_path / "bench-results")
    return subprocess.run([BENCH, "run", "--servers", hostport, "--clients", "4", "--outstanding", "20",
                           "--znodes", "30", "--warmup-s", "0.3", "--measure-s", "0.7", "--out", out,
                           "--label", "sasl-standalone", *args], capture_output=True, text=True, timeout=120)


def test_sasl_bench_authenticates_and_owns_its_znodes(make_server, kazoo_factory, jaas, kind, tmp_path):
    from kazoo.exceptions import NoAuthError
    from kazoo.security import Permissions
    if not os.access(BENCH, os.X_OK):
        pytest.skip("ringkeeper-bench not built (cargo build --release --workspace)")
    s = make_server(sasl_config(jaas))
    r = run_bench(s.hostport, tmp_path, "--sasl", f"bob:{USERS['bob']}", "--ratios", "0,100")
    assert r.returncode == 0, r.stdout + r.stderr
    with open(tmp_path / "bench-results" / "results.csv") as f:
        rows = list(csv.DictReader(f))
    assert [(float(x["read_pct"]), int(x["errors"])) for x in rows] == [(0.0, 0), (100.0, 0)], rows
    assert all(float(x["ops_per_s"]) > 0 for x in rows), rows
    # the set-up made its znodes bob's alone, and the 0% point's setData went through them
    bob = kazoo_sasl(kazoo_factory, s.hostport, "bob", USERS["bob"])
    for path in ("/rkbench", "/rkbench/n0", "/rkbench/n29"):
        acl, _ = bob.get_acls(path)
        assert [(a.id.scheme, a.id.id, a.perms) for a in acl] == [("sasl", "bob", Permissions.ALL)], path
    assert sum(bob.get(f"/rkbench/n{i}")[1].version for i in range(30)) > 0
    plain = kazoo_factory(s.hostport)
    with pytest.raises(NoAuthError):
        plain.get("/rkbench/n0")
    # a wrong password ends every session AuthFailed; without SASL every request is NoAuth
    r = run_bench(s.hostport, tmp_path, "--sasl", "bob:wrong", "--skip-setup", "--ratios", "100")
    assert r.returncode != 0 and "AuthFailed" in r.stderr, r.stdout + r.stderr
    r = run_bench(s.hostport, tmp_path, "--skip-setup", "--ratios", "100")
    assert r.returncode != 0 and "NoAuth" in r.stderr, r.stdout + r.stderr


def test_sasl_jaas_problems_refuse_the_start(tmp_path):
    """ringkeeper only: a JAAS file it cannot read, without a Server section, or with a
    Kerberos module without its keytab and principal, and sasl required without a JAAS file,
    stop the start naming why."""
    if "ringkeeper" not in helpers.selected_kinds():
        pytest.skip("ringkeeper only")
    no_server = tmp_path / "no-server.conf"
    no_server.write_text('Client { org.apache.zookeeper.server.auth.DigestLoginModule required username="u" password="p"; };\n')
    krb = tmp_path / "krb.conf"
    krb.write_text('Server { com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true; };\n')
    broken = tmp_path / "broken.conf"
    broken.write_text('Server {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n  user_bob="x"\n};\n')
    cases = [
        ({JAAS_KEY: str(tmp_path / "missing.conf")}, "missing.conf"),
        ({JAAS_KEY: str(no_server)}, "no JAAS section named 'Server'"),
        ({JAAS_KEY: str(krb)}, "Krb5LoginModule needs keyTab and principal options"),
        ({JAAS_KEY: str(broken)}, "line 4"),
        ({"sessionRequireClientSASLAuth": "true"}, "no JAAS file"),
        ({"enforce.auth.enabled": "true"}, "enforce.auth.schemes must be configured"),
        ({"enforce.auth.enabled": "true", "enforce.auth.schemes": "kerberos"}, "kerberos is not available"),
    ]
    for keys, why in cases:
        s = helpers.Server("ringkeeper", small_config(**keys))
        try:
            s.spawn()
            s.proc.wait(30)
            assert s.proc.returncode != 0, keys
            assert why in s.log_text(), (keys, s.log_text())
        finally:
            s.cleanup()


def test_sasl_jaas_from_server_jvmflags(tmp_path, jaas, kazoo_factory):
    """ringkeeper only: without the zoo.cfg key, -Djava.security.auth.login.config in
    SERVER_JVMFLAGS (zkEnv's variable) names the JAAS file."""
    if "ringkeeper" not in helpers.selected_kinds():
        pytest.skip("ringkeeper only")
    s = helpers.Server("ringkeeper", small_config(sessionRequireClientSASLAuth="true"))
    old = os.environ.get("SERVER_JVMFLAGS")
    os.environ["SERVER_JVMFLAGS"] = f"-Xmx1g -Djava.security.auth.login.config={jaas['server']}"
    try:
        s.spawn()
    finally:
        if old is None:
            del os.environ["SERVER_JVMFLAGS"]
        else:
            os.environ["SERVER_JVMFLAGS"] = old
    try:
        wait_until(lambda: "SERVER_JVMFLAGS" in s.log_text(), timeout=20, what="the server's start")
        bob = kazoo_sasl(kazoo_factory, s.hostport, "bob", USERS["bob"])
        assert bob.get("/")[0] == b""
    finally:
        s.cleanup()


def test_sasl_shipped_example_runs(tmp_path, kazoo_factory):
    """ringkeeper only: configs/sasl-standalone.cfg with configs/sasl-jaas.conf (paths moved
    into tmp_path) starts; app1 authenticates, an unauthenticated session is refused."""
    if "ringkeeper" not in helpers.selected_kinds():
        pytest.skip("ringkeeper only")
    cfg = {}
    with open(os.path.join(helpers.REPO, "configs", "sasl-standalone.cfg")) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                k, v = line.split("=", 1)
                cfg[k] = v
    jaas_copy = tmp_path / "sasl-jaas.conf"
    with open(os.path.join(helpers.REPO, "configs", "sasl-jaas.conf")) as f:
        jaas_copy.write_text(f.read())
    cfg[JAAS_KEY] = str(jaas_copy)
    cfg["preAllocSize"] = "4096"
    del cfg["dataDir"], cfg["clientPort"]  # the harness gives its own
    s = helpers.Server("ringkeeper", cfg)
    try:
        s.spawn()
        wait_until(lambda: "SASL" in s.log_text() or not s.alive(), timeout=20, what="the server's start")
        app = wait_until(lambda: _try_kazoo(kazoo_factory, s.hostport, "app1", "change-me-app1"), timeout=20,
                         what="app1 to connect")
        app.create("/example", b"x")
        hdr, closed = _enforced_refusal(s, rawzk.OP_GETDATA, rawzk.Writer().ustring("/").bool(False).bytes())
        assert (hdr.err, closed) == (SESSION_CLOSED_REQUIRE_SASL_AUTH, True)
    finally:
        s.cleanup()


def _try_kazoo(kazoo_factory, hostport, user, password):
    try:
        return kazoo_sasl(kazoo_factory, hostport, user, password)
    except Exception:
        return None
