"""TLS on the client port (issue 15), against ringkeeper and Apache ZooKeeper 3.8 with the same
zoo.cfg: secureClientPort with PEM key and trust stores, ssl.clientAuth need/want,
client.portUnification, x509: ACL ids from client certificates, kazoo (use_ssl) and zkCli over
Netty TLS; refusals: a plain client on the TLS port, an untrusted certificate, an expired
certificate, no certificate where one is needed. ringkeeper only: store files reloaded when
they change, and stores it cannot use refuse the start naming the key.

Certificates are made per module with the openssl CLI (the expired one under faketime) in a
temporary directory: a CA, a server certificate for 127.0.0.1, two client certificates, and a
client certificate from a CA nobody trusts."""

import os
import shutil
import socket
import ssl
import subprocess
import time

import pytest

import helpers
import rawzk
from helpers import APACHE_CLASSPATH, JAVA, RK_BIN, free_port, wait_until

CLIENT1_DN = "CN=client1,OU=Test,O=Ringkeeper"
CLIENT2_DN = "CN=client2,OU=Test,O=Ringkeeper"
X509_PROVIDER = "org.apache.zookeeper.server.auth.X509AuthenticationProvider"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    p = helpers.test_pki(tmp_path_factory, "pki", "/O=Ringkeeper/CN=Test CA")
    p.make_cert("server", "/O=Ringkeeper/CN=server", server=True)
    p.make_cert("server2", "/O=Ringkeeper/CN=server2", server=True)
    p.make_cert("client1", "/O=Ringkeeper/OU=Test/CN=client1")
    p.make_cert("client2", "/O=Ringkeeper/OU=Test/CN=client2")
    p.make_cert("rogue", "/O=Ringkeeper/OU=Test/CN=client1", ca="rogue-ca")
    if shutil.which("faketime"):
        # valid for 30 days from 2020-01-01: long expired
        p.make_cert("expired", "/O=Ringkeeper/OU=Test/CN=client1", faketime="2020-01-01 00:00:00")
    p.key_store("server")
    p.key_store("server2")
    p.key_store("client1")
    return p


def tls_config(pki, **extra):
    """The same keys for both servers. Apache needs its Netty connection factory for TLS and
    the x509 provider registered; ringkeeper accepts both keys (it has one provider)."""
    cfg = helpers.default_config()
    cfg.update({
        "secureClientPort": str(free_port()),
        "serverCnxnFactory": "org.apache.zookeeper.server.NettyServerCnxnFactory",
        "authProvider.x509": X509_PROVIDER,
        "ssl.keyStore.location": pki.path("server-store.pem"),
        "ssl.keyStore.type": "PEM",
        "ssl.trustStore.location": pki.path("ca.pem"),
        "ssl.trustStore.type": "PEM",
    })
    cfg.update(extra)
    return cfg


def secure_hostport(s):
    return f"127.0.0.1:{s.config['secureClientPort']}"


def client_context(pki, cert="client1", ca="ca.pem"):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(pki.path(ca))
    if cert:
        ctx.load_cert_chain(pki.path(f"{cert}.crt"), pki.path(f"{cert}.key"))
    return ctx


class TlsConn(rawzk.RawConn):
    """rawzk over TLS: the handshake, then a ConnectRequest."""

    def __init__(self, hostport, ctx, io_timeout=10.0):
        super().__init__(hostport, handshake=False, io_timeout=io_timeout)
        self.sock = ctx.wrap_socket(self.sock, server_hostname="127.0.0.1")
        self.session = self.handshake()


def refused(hostport, ctx):
    """True if the server refuses this TLS client: the handshake fails, or (TLS 1.3 checks the
    client's certificate after the client's side of the handshake ended) the connection is
    closed with an alert instead of a ConnectResponse."""
    try:
        with TlsConn(hostport, ctx, io_timeout=10.0) as c:
            return c.session is None
    except (ssl.SSLError, rawzk.ConnectionClosed, ConnectionResetError, BrokenPipeError):
        return True


def kazoo_tls(kazoo_factory, hostport, pki, cert="client1"):
    return kazoo_factory(hostport, use_ssl=True, verify_certs=True, ca=pki.path("ca.pem"),
                         certfile=pki.path(f"{cert}.crt"), keyfile=pki.path(f"{cert}.key"))


def test_tls_kazoo_reads_and_writes_and_x509_acls_decide(make_server, kazoo_factory, pki, kind):
    from kazoo.exceptions import NoAuthError
    from kazoo.security import ACL, Id, Permissions
    s = make_server(tls_config(pki))
    hp = secure_hostport(s)
    zk1 = kazoo_tls(kazoo_factory, hp, pki, "client1")
    zk1.create("/tls", b"over tls")
    assert zk1.get("/tls")[0] == b"over tls"
    # a node only client1's certificate may read and write
    mine = [ACL(Permissions.ALL, Id("x509", CLIENT1_DN))]
    zk1.create("/tls/mine", b"secret", acl=mine)
    assert zk1.get("/tls/mine")[0] == b"secret"
    acl, _ = zk1.get_acls("/tls/mine")
    assert [(a.id.scheme, a.id.id, a.perms) for a in acl] == [("x509", CLIENT1_DN, Permissions.ALL)]
    # "auth" expands to the certificate's id
    zk1.create("/tls/auth", b"a", acl=[ACL(Permissions.ALL, Id("auth", ""))])
    acl, _ = zk1.get_acls("/tls/auth")
    assert [(a.id.scheme, a.id.id) for a in acl] == [("x509", CLIENT1_DN)]
    zk2 = kazoo_tls(kazoo_factory, hp, pki, "client2")
    with pytest.raises(NoAuthError):
        zk2.get("/tls/mine")
    plain = kazoo_factory(s.hostport)
    with pytest.raises(NoAuthError):
        plain.get("/tls/mine")
    assert plain.get("/tls")[0] == b"over tls"  # one tree behind both ports


def test_tls_port_refuses_plain_untrusted_expired_and_missing_certificates(make_server, pki, kind):
    s = make_server(tls_config(pki))
    hp = secure_hostport(s)
    with TlsConn(hp, client_context(pki)) as c:  # the control: a good client gets a session
        assert c.session.timeout > 0
    # a plain ConnectRequest on the TLS port gets no session: at most a TLS alert, then EOF
    with socket.create_connection(rawzk.parse_hostport(hp), timeout=10) as sock:
        sock.sendall(rawzk.frame(rawzk.encode_connect()))
        got = helpers.recv_until_closed(sock)
        assert got == b"" or got[0] == 0x15, f"a plain client got an answer on the TLS-only port: {got[:16]!r}"
    assert refused(hp, client_context(pki, cert="rogue")), "a certificate from an untrusted CA was accepted"
    assert refused(hp, client_context(pki, cert=None)), "no client certificate, yet ssl.clientAuth=need"
    if os.path.exists(pki.path("expired.crt")):
        assert refused(hp, client_context(pki, cert="expired")), "an expired certificate was accepted"
    # the server does not present a certificate the client cannot trust either way: a client
    # trusting only the rogue CA refuses the server
    with pytest.raises(ssl.SSLError):
        TlsConn(hp, client_context(pki, ca="rogue-ca.pem"))
    # and it still serves
    with TlsConn(hp, client_context(pki)) as c:
        assert c.session.timeout > 0


def test_tls_client_auth_want_takes_clients_without_certificates(make_server, pki, kind):
    s = make_server(tls_config(pki, **{"ssl.clientAuth": "want"}))
    hp = secure_hostport(s)
    with TlsConn(hp, client_context(pki, cert=None)) as anon:
        assert anon.session.timeout > 0
        anon.create("/anon", b"x")
        assert anon.get_data("/anon")[0] == b"x"
    with TlsConn(hp, client_context(pki)) as c:  # a certificate still proves its id
        c.create("/cert", b"y", acl=[rawzk.ACL(rawzk.PERM_ALL, "x509", CLIENT1_DN)])
        assert c.get_data("/cert")[0] == b"y"
    with TlsConn(hp, client_context(pki, cert=None)) as anon:
        with pytest.raises(rawzk.ZKError) as e:
            anon.get_data("/cert")
        assert e.value.code == rawzk.NO_AUTH


def test_tls_port_unification_serves_tls_and_plain_on_one_port(make_server, kazoo_factory, pki, kind):
    cfg = tls_config(pki, **{"client.portUnification": "true"})
    del cfg["secureClientPort"]
    s = make_server(cfg)
    zk_tls = kazoo_tls(kazoo_factory, s.hostport, pki)
    zk_tls.create("/unified", b"both")
    plain = kazoo_factory(s.hostport)
    assert plain.get("/unified")[0] == b"both"
    with TlsConn(s.hostport, client_context(pki)) as c:
        assert c.get_data("/unified")[0] == b"both"


def zkcli_tls(hostport, pki, commands, timeout=90.0):
    """zkCli (ZooKeeperMain) over Netty TLS with PEM stores; output lines."""
    flags = [
        "-Dzookeeper.clientCnxnSocket=org.apache.zookeeper.ClientCnxnSocketNetty",
        "-Dzookeeper.client.secure=true",
        f"-Dzookeeper.ssl.keyStore.location={pki.path('client1-store.pem')}",
        "-Dzookeeper.ssl.keyStore.type=PEM",
        f"-Dzookeeper.ssl.trustStore.location={pki.path('ca.pem')}",
        "-Dzookeeper.ssl.trustStore.type=PEM",
    ]
    classpath = APACHE_CLASSPATH + ":/usr/share/java/netty-handler.jar:/usr/share/java/netty-buffer.jar" \
        ":/usr/share/java/netty-transport.jar:/usr/share/java/netty-common.jar"
    script = "\n".join(commands) + "\nquit\n"
    p = subprocess.run([JAVA, "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xmx128m", *flags,
                        "-cp", classpath, "org.apache.zookeeper.ZooKeeperMain", "-server", hostport],
                       input=script.encode(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    return p.stdout.decode(errors="replace")


def test_tls_zkcli_over_netty(make_server, pki, kind):
    s = make_server(tls_config(pki))
    out = zkcli_tls(secure_hostport(s), pki, [
        "create /zkcli-tls hello",
        "setAcl /zkcli-tls auth::cdrwa",  # (zkCli splits ACLs at commas: a DN goes in via auth)
        "get /zkcli-tls",
        "getAcl /zkcli-tls",
    ])
    assert "Created /zkcli-tls" in out, out
    assert "\nhello\n" in out, out
    assert "'x509,'" + CLIENT1_DN.replace(",", "%2C") in out, out  # zkCli URL-encodes the id


def rk_cli(hostport, pki, *args, tls=True, ca="ca.pem"):
    """`ringkeeper cli` (our Rust client) over TLS with client1's PEM key store."""
    flags = ["--tls-ca", pki.path(ca), "--tls-cert", pki.path("client1-store.pem")] if tls else []
    return subprocess.run([RK_BIN, "cli", "-s", hostport, "-t", "4000", *flags, *args],
                          capture_output=True, text=True, timeout=60)


def test_tls_ringkeeper_cli_and_client(make_server, pki, kind):
    s = make_server(tls_config(pki))
    hp = secure_hostport(s)
    r = rk_cli(hp, pki, "create", "/rkcli-tls", "hi")
    assert r.returncode == 0, r.stderr
    r = rk_cli(hp, pki, "setAcl", "/rkcli-tls", "auth::cdrwa")
    assert r.returncode == 0, r.stderr
    r = rk_cli(hp, pki, "get", "/rkcli-tls")
    assert (r.returncode, r.stdout.strip()) == (0, "hi"), r.stderr
    r = rk_cli(hp, pki, "getAcl", "/rkcli-tls")
    assert "'x509,'" + CLIENT1_DN.replace(",", "%2C") in r.stdout, r.stdout + r.stderr
    # by the host name the certificate also holds
    r = rk_cli(f"localhost:{s.config['secureClientPort']}", pki, "get", "/rkcli-tls")
    assert (r.returncode, r.stdout.strip()) == (0, "hi"), r.stderr
    # plain on the TLS port, or trusting the wrong CA: no session
    assert rk_cli(hp, pki, "get", "/rkcli-tls", tls=False).returncode != 0
    assert rk_cli(hp, pki, "get", "/rkcli-tls", ca="rogue-ca.pem").returncode != 0


def _server_cert_cn(hostport, pki):
    ctx = client_context(pki)
    host, port = rawzk.parse_hostport(hostport)
    with socket.create_connection((host, port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as t:
            subject = dict(x[0] for x in t.getpeercert()["subject"])
            return subject["commonName"]


def _negotiated_suite(hostport, pki):
    """The protocol and suite the server picks for a client that offers OpenSSL's default
    order (AES-256-GCM before AES-128-GCM, in TLS 1.3 and in TLS 1.2)."""
    with TlsConn(hostport, client_context(pki)) as c:
        return c.sock.version(), c.sock.cipher()[0]


def test_tls_server_prefers_aes_128_gcm_unless_ssl_ciphersuites_says(make_server, pki, kind):
    """Without ssl.ciphersuites the server's order decides (AES-128-GCM first: the cheaper
    AEAD), as Apache's Java server does; naming suites in ssl.ciphersuites leaves the client's
    order to decide among them (ringkeeper only)."""
    s = make_server(tls_config(pki))
    version, suite = _negotiated_suite(secure_hostport(s), pki)
    # Apache 3.8 speaks TLS 1.2 unless ssl.protocol says otherwise (its Java picks
    # ECDHE-ECDSA-AES128-GCM-SHA256); ringkeeper TLS 1.3
    assert "AES128GCM" in suite.replace("_", "").replace("-", ""), (version, suite)
    if kind != "ringkeeper":
        return
    s.stop()
    s = make_server(tls_config(pki, **{"ssl.ciphersuites": "TLS_AES_128_GCM_SHA256,TLS_AES_256_GCM_SHA384"}))
    assert _negotiated_suite(secure_hostport(s), pki) == ("TLSv1.3", "TLS_AES_256_GCM_SHA384")


@pytest.mark.ringkeeper_only
def test_tls_store_files_are_reloaded_when_they_change(make_server, pki, kind):
    if kind != "ringkeeper":
        pytest.skip("ringkeeper reloads the client port's stores always (Apache 3.8 only with its own switch)")
    store = os.path.join(pki.dir, "reload-store.pem")
    shutil.copy(pki.path("server-store.pem"), store)
    s = make_server(tls_config(pki, **{"ssl.keyStore.location": store}))
    hp = secure_hostport(s)
    assert _server_cert_cn(hp, pki) == "server"
    tmp = store + ".new"
    shutil.copy(pki.path("server2-store.pem"), tmp)
    os.replace(tmp, store)
    wait_until(lambda: _server_cert_cn(hp, pki) == "server2", timeout=10, interval=0.3,
               what="new connections to get the reloaded certificate")
    # a store that changes into garbage keeps the last good one
    with open(tmp, "w") as f:
        f.write("not a PEM file\n")
    os.replace(tmp, store)
    time.sleep(1.5)
    assert _server_cert_cn(hp, pki) == "server2"
    wait_until(lambda: "keeping the previous one" in open(s.log_path, errors="replace").read(), timeout=10,
               what="the refused reload to be logged")


@pytest.mark.ringkeeper_only
@pytest.mark.parametrize("keys,says", [
    ({"secureClientPort": "2281"}, "ssl.keyStore.location"),
    ({"client.portUnification": "true"}, "ssl.keyStore.location"),
    ({"ssl.keyStore.location": "/etc/zk/keystore.pem"}, "secureClientPort"),
])
def test_tls_half_configured_refuses_the_start(make_server, kind, keys, says):
    """TLS keys that do not make a TLS port (a port without a key store, a key store without
    a port) stop the start naming what is missing: the operator asked for TLS."""
    s = make_server(start=False, **{k.replace(".", "__"): v for k, v in keys.items()})
    s.spawn()
    assert s.proc.wait(timeout=30) != 0, "started with half a TLS configuration"
    assert says in s.log_tail(), s.log_tail()


@pytest.mark.ringkeeper_only
@pytest.mark.parametrize("key,value,says", [
    ("ssl.keyStore.location", "/nonexistent/store.pem", "/nonexistent/store.pem"),
    ("ssl.keyStore.type", "JKS", "ssl.keyStore.type"),
    ("ssl.keyStore.password", "changeit", "ssl.keyStore.password"),
    ("ssl.enabledProtocols", "TLSv1.1", "ssl.enabledProtocols"),
    ("ssl.ocsp", "true", "ssl.ocsp"),
])
def test_tls_settings_it_cannot_honour_refuse_the_start(make_server, pki, kind, key, value, says):
    if kind != "ringkeeper":
        pytest.skip("ringkeeper's refusals")
    s = make_server(tls_config(pki, **{key: value}), start=False)
    s.spawn()
    assert s.proc.wait(timeout=30) != 0, "started with a TLS setting it cannot honour"
    assert says in s.log_tail(), s.log_tail()


@pytest.mark.parametrize("encryption", ["aes", "legacy"])
def test_tls_pkcs12_key_store_with_a_password(make_server, kazoo_factory, pki, kind, encryption):
    """A PKCS12 key store made by `openssl pkcs12 -export` (OpenSSL 3's default AES-256 /
    PBKDF2 / SHA-256 MAC, or -legacy: RC2-40 and 3DES with a SHA-1 MAC), with its password:
    the same keys on both servers."""
    store = pki.pkcs12("server", f"server-{encryption}.p12", "storepw", legacy=encryption == "legacy")
    s = make_server(tls_config(pki, **{"ssl.keyStore.location": store, "ssl.keyStore.type": "PKCS12",
                                       "ssl.keyStore.password": "storepw"}))
    hp = secure_hostport(s)
    assert _server_cert_cn(hp, pki) == "server"
    zk = kazoo_tls(kazoo_factory, hp, pki)
    zk.create("/p12", b"pkcs12")
    assert zk.get("/p12")[0] == b"pkcs12"


@pytest.mark.ringkeeper_only
def test_tls_pkcs12_trust_store_and_store_type_from_the_file_name(make_server, kazoo_factory, pki, kind):
    """A PKCS12 trust store (certificates only) and a key store typed by its .p12 name; a
    client whose CA is not in the PKCS12 trust store is refused."""
    if kind != "ringkeeper":
        pytest.skip("Java reads a PKCS12 trust store only with its own trusted-certificate attribute")
    key_store = pki.pkcs12("server", "server-named.p12", "storepw")
    trust = pki.path("trust.p12")
    helpers.openssl("pkcs12", "-export", "-nokeys", "-in", pki.path("ca.pem"), "-out", trust, "-passout", "pass:trustpw")
    cfg = tls_config(pki, **{"ssl.keyStore.location": key_store, "ssl.keyStore.password": "storepw",
                             "ssl.trustStore.location": trust, "ssl.trustStore.type": "PKCS12",
                             "ssl.trustStore.password": "trustpw"})
    del cfg["ssl.keyStore.type"]  # PKCS12 by its .p12 name
    s = make_server(cfg)
    hp = secure_hostport(s)
    zk = kazoo_tls(kazoo_factory, hp, pki)
    zk.create("/p12-trust", b"t")
    assert refused(hp, client_context(pki, cert="rogue")), "a client of a CA outside the PKCS12 trust store got in"


@pytest.mark.ringkeeper_only
@pytest.mark.parametrize("store,keys,says", [
    ("p12", {"ssl.keyStore.type": "PKCS12", "ssl.keyStore.password": "wrong"}, "PKCS12"),
    ("jks", {}, "keytool -importkeystore"),
])
def test_tls_pkcs12_wrong_password_and_jks_refuse_the_start(make_server, pki, kind, store, keys, says):
    if kind != "ringkeeper":
        pytest.skip("ringkeeper's refusals")
    path = pki.pkcs12("server", "server-pw.p12", "storepw")
    if store == "jks":
        path = pki.path("server.jks")
        shutil.copy(pki.path("server-pw.p12"), path)
    cfg = tls_config(pki, **{"ssl.keyStore.location": path, **keys})
    if store == "jks":
        del cfg["ssl.keyStore.type"]  # a JKS store by its .jks name
    s = make_server(cfg, start=False)
    s.spawn()
    assert s.proc.wait(timeout=30) != 0, "started with a key store it cannot read"
    assert says in s.log_tail() and path in s.log_tail(), s.log_tail()
