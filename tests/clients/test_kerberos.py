"""SASL GSSAPI (Kerberos) on client connections (issue 15), against ringkeeper and Apache
ZooKeeper 3.8 with the same JAAS `Server` section (`Krb5LoginModule` with the service's
`keyTab` and `principal` zookeeper/localhost@RINGKEEPER.TEST): a KDC of the test's own
(`kdc.py`: krb5kdc on 127.0.0.1 with a temporary realm, principals and keytabs from
kadmin.local, stopped after), kazoo through pure-sasl's GSSAPI (the `kerberos` package) with a
ticket from kinit: `sasl:` ids with and without `kerberos.removeHostFromPrincipal` /
`removeRealmFromPrincipal`, ACLs granting and denying; a ticket for a service whose key the
server lacks gets AuthFailed and a closed connection.
ringkeeper only: a Kerberos Server section without a usable keytab refuses the start."""

import os

import pytest

import helpers
from kdc import REALM, Kdc, kdc_available
from test_sasl import JAAS_KEY, SASL_PROVIDER, small_config

pytestmark = pytest.mark.skipif(kdc_available() is not None, reason=kdc_available() or "")


@pytest.fixture(scope="module")
def kdc(tmp_path_factory):
    d = tmp_path_factory.mktemp("kdc")
    k = Kdc(d).start()
    k.service_keytab = str(d / "zookeeper.keytab")
    k.service = k.principal("zookeeper/localhost", keytab=k.service_keytab)
    for user in ("app1", "app2", "ops/host1"):
        k.principal(user, keytab=str(d / f"{user.replace('/', '_')}.keytab"))
    yield k
    k.stop()


@pytest.fixture
def krb_env(kdc, monkeypatch):
    """The KDC's krb5.conf for this process (kazoo's pure-sasl), the servers it starts, and
    Apache's JVM (JDK_JAVA_OPTIONS)."""
    for k, v in kdc.env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("JDK_JAVA_OPTIONS", f"-Djava.security.krb5.conf={kdc.krb5_conf}")
    return kdc


def server_jaas(kdc, tmp_path, keytab=None):
    p = tmp_path / "server-jaas.conf"
    p.write_text(f"""Server {{
    com.sun.security.auth.module.Krb5LoginModule required
    useKeyTab=true
    keyTab="{keytab or kdc.service_keytab}"
    storeKey=true
    useTicketCache=false
    principal="{kdc.service}";
}};
""")
    return str(p)


def krb_config(kdc, tmp_path, **extra):
    cfg = small_config()
    cfg.update({JAAS_KEY: server_jaas(kdc, tmp_path), "authProvider.1": SASL_PROVIDER})
    cfg.update(extra)
    return cfg


def as_user(kdc, user):
    """This process's credential cache holds `user`'s ticket (kinit from its keytab)."""
    keytab = os.path.join(kdc.dir, f"{user.replace('/', '_')}.keytab")
    kdc.kinit(f"{user}@{REALM}", keytab)


def kazoo_gssapi(kazoo_factory, s, **kw):
    return kazoo_factory(f"localhost:{s.port}", sasl_options={"mechanism": "GSSAPI", "service": "zookeeper"}, **kw)


def test_kerberos_kazoo_gssapi_and_sasl_acls(make_server, kazoo_factory, krb_env, tmp_path, kind):
    from kazoo.exceptions import NoAuthError
    from kazoo.security import ACL, Id, Permissions
    kdc = krb_env
    s = make_server(krb_config(kdc, tmp_path, **{"kerberos.removeHostFromPrincipal": "true",
                                                 "kerberos.removeRealmFromPrincipal": "true"}))
    as_user(kdc, "app1")
    app1 = kazoo_gssapi(kazoo_factory, s)
    app1.create("/krb", b"open")
    app1.create("/krb/app1", b"app1 only", acl=[ACL(Permissions.ALL, Id("sasl", "app1"))])
    # "auth" expands to the connection's sasl id: the short name (realm removed)
    app1.create("/krb/auth", b"a", acl=[ACL(Permissions.ALL, Id("auth", ""))])
    acl, _ = app1.get_acls("/krb/auth")
    assert [(a.id.scheme, a.id.id) for a in acl] == [("sasl", "app1")]
    assert app1.get("/krb/app1")[0] == b"app1 only"
    # another principal is another id
    as_user(kdc, "app2")
    app2 = kazoo_gssapi(kazoo_factory, s)
    with pytest.raises(NoAuthError):
        app2.get("/krb/app1")
    # ops/host1@REALM loses host and realm: sasl:ops
    as_user(kdc, "ops/host1")
    ops = kazoo_gssapi(kazoo_factory, s)
    ops.create("/krb/ops", b"o", acl=[ACL(Permissions.ALL, Id("auth", ""))])
    acl, _ = ops.get_acls("/krb/ops")
    assert [(a.id.scheme, a.id.id) for a in acl] == [("sasl", "ops")]
    plain = kazoo_factory(s.hostport)
    with pytest.raises(NoAuthError):
        plain.get("/krb/app1")
    if kind == "ringkeeper":
        assert 'SASL GSSAPI authenticated "app1@RINGKEEPER.TEST" as sasl:app1' in s.log_text()


def test_kerberos_principal_kept_whole_without_the_rules(make_server, kazoo_factory, krb_env, tmp_path, kind):
    from kazoo.security import ACL, Id, Permissions
    kdc = krb_env
    s = make_server(krb_config(kdc, tmp_path))
    as_user(kdc, "ops/host1")
    ops = kazoo_gssapi(kazoo_factory, s)
    ops.create("/whole", b"o", acl=[ACL(Permissions.ALL, Id("auth", ""))])
    acl, _ = ops.get_acls("/whole")
    # ZooKeeper's defaults keep host and realm
    assert [(a.id.scheme, a.id.id) for a in acl] == [("sasl", f"ops/host1@{REALM}")]


def first_gssapi_token(service, host="localhost"):
    """The first token of a GSSAPI exchange from this process's ticket to `service@host`."""
    import base64
    import kerberos
    _, ctx = kerberos.authGSSClientInit(f"{service}@{host}",
                                        gssflags=kerberos.GSS_C_MUTUAL_FLAG | kerberos.GSS_C_INTEG_FLAG)
    kerberos.authGSSClientStep(ctx, "")
    return base64.b64decode(kerberos.authGSSClientResponse(ctx))


def test_kerberos_ticket_for_another_service_is_refused(make_server, krb_env, tmp_path, kind):
    """A valid ticket, but for a service whose key the server does not hold: AuthFailed with a
    null token, and the connection closed (as a wrong DIGEST-MD5 password)."""
    import rawzk
    kdc = krb_env
    kdc.principal("other/localhost")
    s = make_server(krb_config(kdc, tmp_path))
    as_user(kdc, "app1")
    with rawzk.RawConn(s.hostport) as c:
        x = c.send_request(rawzk.OP_SASL, rawzk.Writer().buffer(first_gssapi_token("other")).bytes())
        hdr, r = c.read_reply(x)
        assert (hdr.err, hdr.zxid) == (rawzk.AUTH_FAILED, 0)
        assert r.buffer() is None
        closed, frames = c.wait_closed(timeout=10)
        assert closed and not frames
    if kind == "ringkeeper":
        assert "failed to SASL authenticate: GSSAPI: gss_accept_sec_context" in s.log_text(), s.log_tail()


@pytest.mark.ringkeeper_only
def test_kerberos_server_section_without_a_usable_keytab_refuses_the_start(make_server, krb_env, tmp_path, kind):
    if kind != "ringkeeper":
        pytest.skip("ringkeeper's refusals")
    kdc = krb_env
    s = make_server(start=False)
    s.config.update(small_config())
    s.config[JAAS_KEY] = server_jaas(kdc, tmp_path, keytab=str(tmp_path / "missing.keytab"))
    s.spawn()
    assert s.proc.wait(timeout=30) != 0, "started with a keytab that is not there"
    assert "gss_acquire_cred" in s.log_text() and "panicked" not in s.log_text(), s.log_tail()


# ---- quorum SASL over Kerberos (ringkeeper ensembles) ----


def quorum_krb_keys(kdc, tmp_path, ids, identity):
    """The quorum SASL keys over Kerberos for members `ids`: member i's JAAS file (@ID@) holds
    the keytab and principal `identity(i)` names (a zkquorum/<host> service principal)."""
    d = tmp_path / "quorum-jaas"
    d.mkdir()
    for i in ids:
        host = identity(i)
        keytab = os.path.join(kdc.dir, f"zkquorum-{host}.keytab")
        if not os.path.exists(keytab):
            kdc.principal(f"zkquorum/{host}", keytab=keytab)
        module = (f'com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true keyTab="{keytab}" '
                  f'storeKey=true principal="zkquorum/{host}@{REALM}";')
        (d / f"member{i}.conf").write_text(f"QuorumServer {{ {module} }};\nQuorumLearner {{ {module} }};\n")
    return {JAAS_KEY: str(d / "member@ID@.conf"), "quorum.auth.enableSasl": "true",
            "quorum.auth.learnerRequireSasl": "true", "quorum.auth.serverRequireSasl": "true",
            "quorum.auth.kerberos.servicePrincipal": "zkquorum/_HOST"}


def quorum_krb_ensemble(kdc, tmp_path, identity):
    """A 3-member ensemble (not started), members on 127.0.0.i, with quorum SASL over Kerberos:
    member i's QuorumServer and QuorumLearner sections hold the keytab and principal
    `identity(i)` names (a zkquorum/<host> service principal)."""
    from test_ensemble import Ensemble
    keys = quorum_krb_keys(kdc, tmp_path, (1, 2, 3), identity)
    e = Ensemble(3, tmp_path)
    e.env.update(RK_PEER_HOSTS="distinct", RK_EXTRA_CONFIG="\n".join(f"{k}={v}" for k, v in keys.items()))
    return e


@pytest.fixture
def krb_ensembles():
    made = []
    yield made
    for e in made:
        e.stop()


@pytest.mark.ringkeeper_only
def test_quorum_kerberos_members_authenticate_and_serve(krb_env, tmp_path, krb_ensembles, kazoo_factory, kind):
    if kind != "ringkeeper":
        pytest.skip("a ringkeeper ensemble")
    from test_ensemble import client
    from test_quorum_tls import writes_read_everywhere
    e = quorum_krb_ensemble(krb_env, tmp_path, lambda i: f"127.0.0.{i}")
    krb_ensembles.append(e.start())
    e.wait_serving([1, 2, 3], timeout=40.0)
    for i in (1, 2, 3):
        assert f'quorum SASL (GSSAPI): dialing as "zkquorum/127.0.0.{i}@{REALM}"' in e.log(i), e.tail(i)
        for j in (1, 2, 3):
            if j != i:
                helpers.wait_until(lambda: f"authenticated to peer {j} by quorum SASL" in e.log(i)
                                   and f'as "zkquorum/127.0.0.{j}@{REALM}"' in e.log(i),
                                   what=f"member {i} to authenticate to member {j} and accept it")
    writes_read_everywhere([client(kazoo_factory, e.hostport(i)) for i in (1, 2, 3)], "/qk", 20)


@pytest.mark.ringkeeper_only
def test_quorum_kerberos_member_with_another_hosts_identity_is_refused(krb_env, tmp_path, krb_ensembles, kind):
    """Member 3 holds member 2's keys (zkquorum/127.0.0.2): dialing it, members 1 and 2 ask for
    zkquorum/127.0.0.3, whose key it lacks; accepting it, they find its principal does not name
    127.0.0.3. It never serves; both sides log why."""
    if kind != "ringkeeper":
        pytest.skip("a ringkeeper ensemble")
    e = quorum_krb_ensemble(krb_env, tmp_path, lambda i: "127.0.0.2" if i == 3 else f"127.0.0.{i}")
    krb_ensembles.append(e.start())
    e.wait_serving([1, 2], timeout=40.0)
    for i in (1, 2):
        helpers.wait_until(lambda: f'its principal "zkquorum/127.0.0.2@{REALM}" does not name 127.0.0.3' in e.log(i),
                           timeout=20.0, what=f"member {i} to refuse member 3's borrowed identity")
        helpers.wait_until(lambda: "quorum SASL to peer 3" in e.log(i) and "refused our credentials" in e.log(i),
                           timeout=20.0, what=f"member {i} to log that member 3 refused it")
    roles = e.roles()
    assert roles[3] not in ("leader", "follower"), f"a member with another host's identity serves: {roles}"
