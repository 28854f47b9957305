"""Quorum TLS (issue 15): 3-member ensembles whose peer connections are mutual TLS
(`sslQuorum=true` with ZooKeeper's `ssl.quorum.*` keys, PEM stores), each member on its own
127.0.0.i peer address (RK_PEER_HOSTS=distinct) with a certificate naming that address.
ringkeeper: election, writes and reads through every member, failover after kill -9 of the
leader, a wiped member synced back; a plain connection to a TLS peer port, a member whose
certificate another CA signed, and a member whose certificate names another member's host
(a forged identity) are refused, and the refusing members log why. Apache ZooKeeper 3.8:
the same zoo.cfg keys form a working ensemble (the reference that the keys mean the same).
Also: hostnameVerification=false (only the chain is checked) and clientAuth want/none/need.

Certificates are made per module with the openssl CLI (helpers.Pki); each test copies the key
stores it wants into its own tmp_path, so a member's store can be swapped for a bad one."""

import os
import shutil
import socket
import ssl
import subprocess
import pytest

import helpers
from helpers import APACHE_CLASSPATH, JAVA, wait_until
from test_ensemble import Ensemble, assert_acked_on, assert_same_trees, client, write_round

pytestmark = pytest.mark.skipif(not os.access(helpers.RK_BIN, os.X_OK), reason="ringkeeper binary not built")

MEMBERS = (1, 2, 3)


def peer_ip(i):
    return f"127.0.0.{i}"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    p = helpers.test_pki(tmp_path_factory, "qpki", "/O=Ringkeeper/CN=Quorum CA")
    for i in MEMBERS:
        p.make_cert(f"m{i}", f"/O=Ringkeeper/CN=member{i}", peer_host=peer_ip(i))
        p.key_store(f"m{i}")
    # member 3's address, signed by a CA the others do not trust
    p.make_cert("rogue3", "/O=Ringkeeper/CN=member3", ca="rogue-ca", peer_host=peer_ip(3))
    p.key_store("rogue3", ca="rogue-ca")
    # signed by the ensemble's CA, but naming member 2's host: member 3 posing as member 2
    p.make_cert("forged3", "/O=Ringkeeper/CN=member2", peer_host=peer_ip(2))
    p.key_store("forged3")
    # member 1's renewed certificate (sslQuorumReloadCertFiles)
    p.make_cert("m1-renewed", "/O=Ringkeeper/CN=member1-renewed", peer_host=peer_ip(1))
    p.key_store("m1-renewed")
    # Apache ZooKeeper checks an accepted peer's certificate against the connection's source
    # address, and its members dial from 127.0.0.1 here: their certificates name that too
    for i in MEMBERS:
        p.make_cert(f"a{i}", f"/O=Ringkeeper/CN=member{i}", peer_host=f"{peer_ip(i)},127.0.0.1")
        p.key_store(f"a{i}")
    return p


EXAMPLE_CFG = os.path.join(helpers.REPO, "configs", "quorum-tls.cfg")


def quorum_tls_keys(store_pattern, trust):
    """The quorum TLS keys of configs/quorum-tls.cfg (so the example is what runs), with the
    test's store paths: the same for ringkeeper and Apache ZooKeeper 3.8."""
    paths = {"/etc/ringkeeper/tls/peer.pem": store_pattern, "/etc/ringkeeper/tls/ca.pem": trust}
    keys = {}
    with open(EXAMPLE_CFG) as f:
        for line in f:
            line = line.strip()
            if line.startswith("ssl") and "=" in line:
                k, v = line.split("=", 1)
                keys[k] = paths.get(v, v)
    assert keys["sslQuorum"] == "true" and keys["ssl.quorum.keyStore.location"] == store_pattern, keys
    return keys


def stores(pki, tmp_path, names):
    """Copies key stores into tmp_path/stores as member<i>.pem: names[i] is whose store member i
    presents. Returns the store path pattern with @ID@ for the member's id."""
    d = tmp_path / "stores"
    d.mkdir(exist_ok=True)
    for i, name in names.items():
        shutil.copy(pki.path(f"{name}-store.pem"), d / f"member{i}.pem")
    return str(d / "member@ID@.pem")


def ensemble_with(tmp_path, keys):
    """A 3-member ensemble (not started), members on 127.0.0.i, with `keys` in every zoo.cfg."""
    e = Ensemble(3, tmp_path)
    e.env.update(RK_PEER_HOSTS="distinct", RK_EXTRA_CONFIG="\n".join(f"{k}={v}" for k, v in keys.items()))
    return e


def tls_ensemble(pki, tmp_path, names=None):
    pattern = stores(pki, tmp_path, names or {i: f"m{i}" for i in MEMBERS})
    return ensemble_with(tmp_path, quorum_tls_keys(pattern, pki.path("ca.pem")))


@pytest.fixture
def tls_ensembles():
    made = []
    yield made
    for e in made:
        e.stop()


def start(made, e):
    made.append(e)
    return e.start()


def peer_port(e, i):
    return e.base + 10000 + i


def free_port_on(ip):
    with socket.socket() as s:
        s.bind((ip, 0))
        return s.getsockname()[1]


def tls_handshake_as(pki, member, ip, port):
    """A TLS handshake to a peer port from `member`'s address with its certificate; returns
    the server certificate's subject, or raises ssl.SSLError."""
    return tls_handshake_with(pki.path(f"m{member}.crt"), pki.path(f"m{member}.key"), pki, member, ip, port)


def tls_handshake_with(cert, key, pki, member, ip, port, await_refusal=False):
    """A TLS handshake to `ip`:`port` from `member`'s address, presenting `cert` (None: no
    certificate); returns the server certificate's subject, or raises. `await_refusal` reads
    once after the handshake, so a TLS 1.3 server's refusal of the client's certificate (sent
    after the client's side of the handshake ended) surfaces as an error."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(pki.path("ca.pem"))
    if cert is not None:
        ctx.load_cert_chain(cert, key)
    with socket.socket() as raw:
        raw.bind((peer_ip(member), 0))
        raw.settimeout(3 if await_refusal else 10)
        raw.connect((ip, port))
        with ctx.wrap_socket(raw, server_hostname=ip) as s:
            subject = dict(x[0] for x in s.getpeercert()["subject"])
            if await_refusal:
                try:
                    s.recv(1)  # the server waits for a hello; a refusal arrives as an alert
                except (socket.timeout, TimeoutError):
                    pass
            return subject


def writes_read_everywhere(clients, prefix, n):
    """n creates under `prefix` through the clients in turn, every one acknowledged, and all
    of them read back through every client; the acknowledged writes."""
    clients[0].ensure_path(prefix)
    acked = {}
    write_round(clients, prefix, 0, n, acked)
    assert len(acked) == n, "every write acknowledged while all members serve"
    for c in clients:
        c.sync(prefix)
        assert len(c.get_children(prefix)) == n
    return acked


def fail_over(e, leader, clients, prefix, acked, kazoo_factory):
    """kill -9 of the leader: the other two elect a new one and take 60 more writes under
    `prefix` (at least 50 acknowledged), every acknowledged write on both; the clients (one per
    member, in member order) are stopped."""
    e.kill9(leader)
    survivors = [i for i in MEMBERS if i != leader]
    clients.pop(leader - 1).stop()
    new_leader = e.wait_serving(survivors, timeout=40.0)
    assert new_leader != leader
    before = len(acked)
    write_round(clients, prefix, 100, 60, acked)
    assert len(acked) - before >= 50, f"writes go on after the election ({len(acked) - before} of 60)"
    for c in clients:
        c.stop()
    for i in survivors:
        assert_acked_on(e, i, kazoo_factory, prefix, acked)


def test_quorum_tls_elects_serves_fails_over_and_syncs_a_wiped_member(pki, tmp_path, tls_ensembles,
                                                                       kazoo_factory):
    e = start(tls_ensembles, tls_ensemble(pki, tmp_path))
    leader = e.wait_serving(list(MEMBERS), timeout=40.0)
    for i in MEMBERS:
        assert "quorum TLS: peers dialed and accepted over TLS only" in e.log(i), e.tail(i)
    clients = [client(kazoo_factory, e.hostport(i)) for i in MEMBERS]
    acked = writes_read_everywhere(clients, "/q", 90)

    # A plain peer (no TLS) from member 2's address is refused at the handshake, and logged.
    with socket.socket() as s:
        s.bind((peer_ip(2), 0))
        s.settimeout(10)
        s.connect((peer_ip(1), peer_port(e, 1)))
        s.sendall(b"\x00\x00\x00\x0cnot a TLS hello at all")
        got = helpers.recv_until_closed(s)
        assert got == b"" or got[0] == 0x15, f"a plain peer got an answer: {got[:16]!r}"
    wait_until(lambda: "TLS handshake failed" in e.log(1), what="member 1 to log the plain peer's refusal")
    # A TLS client with member 2's certificate from its address gets member 1's certificate.
    assert tls_handshake_as(pki, 2, peer_ip(1), peer_port(e, 1))["commonName"] == "member1"

    # Failover: kill -9 the leader; the other two elect over TLS and keep writing.
    fail_over(e, leader, clients, "/q", acked, kazoo_factory)

    # The old leader comes back with a wiped data dir (its id kept) and is synced over TLS.
    data = os.path.join(e.dir, str(leader), "data")
    shutil.rmtree(data)
    os.makedirs(data)
    with open(os.path.join(data, "myid"), "w") as f:
        f.write(f"{leader}\n")
    e.restart(leader)
    e.wait_serving(list(MEMBERS), timeout=40.0)
    assert_acked_on(e, leader, kazoo_factory, "/q", acked)
    c = client(kazoo_factory, e.hostport(leader))
    c.create("/q/after-wipe", b"w")
    c.stop()
    assert_same_trees(e, list(MEMBERS))

    # sslQuorumReloadCertFiles: member 1's key store file is replaced; new peer connections get
    # the renewed certificate.
    store = tmp_path / "stores" / "member1.pem"
    shutil.copy(pki.path("m1-renewed-store.pem"), str(store) + ".new")
    os.replace(str(store) + ".new", store)
    wait_until(lambda: tls_handshake_as(pki, 2, peer_ip(1), peer_port(e, 1))["commonName"] == "member1-renewed",
               timeout=15.0, interval=0.3, what="member 1 to present its renewed certificate")
    wait_until(lambda: "new peer connections use the reloaded key and trust stores" in e.log(1),
               what="member 1 to log the reload")


def refusal_logged(e, i, needle):
    return any(needle in line and "peer" in line for line in e.log(i).splitlines())


def test_a_member_signed_by_another_ca_is_refused_and_the_refusal_says_why(pki, tmp_path, tls_ensembles):
    e = start(tls_ensembles, tls_ensemble(pki, tmp_path, {1: "m1", 2: "m2", 3: "rogue3"}))
    e.wait_serving([1, 2], timeout=40.0)
    # Members 1 and 2 refuse member 3 both ways: its connections fail their handshake (its
    # certificate's issuer is unknown), and their connections to it do not trust it.
    for i in (1, 2):
        wait_until(lambda: refusal_logged(e, i, "TLS handshake failed") and "UnknownIssuer" in e.log(i),
                   timeout=20.0, what=f"member {i} to log why it refused member 3")
        wait_until(lambda: refusal_logged(e, i, "TLS to peer 3"), timeout=20.0,
                   what=f"member {i} to log that member 3's certificate is not trusted")
    roles = e.roles()
    assert roles[3] not in ("leader", "follower"), f"a member no other trusts serves: {roles}"
    assert {roles[1], roles[2]} == {"leader", "follower"}, roles


def test_a_member_presenting_another_hosts_certificate_is_refused(pki, tmp_path, tls_ensembles):
    e = start(tls_ensembles, tls_ensemble(pki, tmp_path, {1: "m1", 2: "m2", 3: "forged3"}))
    e.wait_serving([1, 2], timeout=40.0)
    for i in (1, 2):
        # accepting: the hello says server 3, the certificate names 127.0.0.2
        wait_until(lambda: refusal_logged(e, i, f"it says it is server 3, but its certificate does not name "
                                                f"{peer_ip(3)}"),
                   timeout=20.0, what=f"member {i} to refuse member 3's forged identity")
        # dialing 127.0.0.3: the certificate there is not for that host
        wait_until(lambda: refusal_logged(e, i, f"TLS to peer 3 at {peer_ip(3)}") and
                   f"certificate not valid for name \"{peer_ip(3)}\"" in e.log(i),
                   timeout=20.0, what=f"member {i} to refuse member 3's certificate as a server")
    roles = e.roles()
    assert roles[3] not in ("leader", "follower"), f"a member with a forged identity serves: {roles}"


def test_without_hostname_verification_only_the_chain_is_checked(pki, tmp_path, tls_ensembles, kazoo_factory):
    """ssl.quorum.hostnameVerification=false: member 3's certificate names member 2's host
    (refused with verification on: the test above), but its chain is the ensemble's CA, so
    all three form a quorum; a certificate from another CA is still refused."""
    names = {1: "m1", 2: "m2", 3: "forged3"}
    keys = quorum_tls_keys(stores(pki, tmp_path, names), pki.path("ca.pem"))
    keys["ssl.quorum.hostnameVerification"] = "false"
    e = start(tls_ensembles, ensemble_with(tmp_path, keys))
    e.wait_serving(list(MEMBERS), timeout=40.0)
    assert "host name verification false/false (dialed/accepted)" in e.log(1), e.tail(1)
    writes_read_everywhere([client(kazoo_factory, e.hostport(i)) for i in MEMBERS], "/nohv", 20)
    for i in MEMBERS:
        assert "does not name" not in e.log(i) and "not valid for name" not in e.log(i), e.tail(i)
    # The chain still counts: a handshake with a certificate from the rogue CA fails.
    with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
        tls_handshake_with(pki.path("rogue3.crt"), pki.path("rogue3.key"), pki, 3, peer_ip(1), peer_port(e, 1),
                           await_refusal=True)


@pytest.mark.parametrize("client_auth", ["want", "none", "need"])
def test_quorum_client_auth_want_none_need(pki, tmp_path, tls_ensembles, kazoo_factory, client_auth):
    """ssl.quorum.clientAuth: `want` and `none` let a peer without a certificate finish the
    handshake (logged as a warning at start; only the address checks stand for it), `need`
    refuses it; with a certificate every setting forms a quorum."""
    keys = quorum_tls_keys(stores(pki, tmp_path, {i: f"m{i}" for i in MEMBERS}), pki.path("ca.pem"))
    keys["ssl.quorum.clientAuth"] = client_auth
    e = start(tls_ensembles, ensemble_with(tmp_path, keys))
    e.wait_serving(list(MEMBERS), timeout=40.0)
    writes_read_everywhere([client(kazoo_factory, e.hostport(i)) for i in MEMBERS], "/ca", 10)
    warned = "a peer without a certificate can connect" in e.log(1)
    if client_auth == "need":
        assert not warned, e.tail(1)
        with pytest.raises((ssl.SSLError, ConnectionResetError, BrokenPipeError)):
            tls_handshake_with(None, None, pki, 2, peer_ip(1), peer_port(e, 1), await_refusal=True)
        wait_until(lambda: "TLS handshake failed" in e.log(1), what="member 1 to log the refusal")
    else:
        assert warned, e.tail(1)
        assert tls_handshake_with(None, None, pki, 2, peer_ip(1), peer_port(e, 1),
                                  await_refusal=True)["commonName"] == "member1"


def test_members_with_pkcs12_stores_form_a_quorum(pki, tmp_path, tls_ensembles, kazoo_factory):
    """ssl.quorum.* PKCS12 key stores (AES, with a password; member 2's legacy RC2/3DES) and a
    PKCS12 trust store of certificates only."""
    d = tmp_path / "stores"
    d.mkdir()
    for i in MEMBERS:
        made = pki.pkcs12(f"m{i}", f"m{i}-{tmp_path.name}.p12", "quorumpw", legacy=i == 2)
        shutil.move(made, d / f"member{i}.p12")
    trust = str(d / "trust.p12")
    helpers.openssl("pkcs12", "-export", "-nokeys", "-in", pki.path("ca.pem"), "-out", trust,
                    "-passout", "pass:trustpw")
    keys = quorum_tls_keys(str(d / "member@ID@.p12"), trust)
    keys.update({"ssl.quorum.keyStore.type": "PKCS12", "ssl.quorum.keyStore.password": "quorumpw",
                 "ssl.quorum.trustStore.type": "PKCS12", "ssl.quorum.trustStore.password": "trustpw"})
    e = start(tls_ensembles, ensemble_with(tmp_path, keys))
    e.wait_serving(list(MEMBERS), timeout=40.0)
    writes_read_everywhere([client(kazoo_factory, e.hostport(i)) for i in MEMBERS], "/p12", 30)
    assert tls_handshake_as(pki, 3, peer_ip(1), peer_port(e, 1))["commonName"] == "member1"


def test_port_unification_takes_plain_and_tls_peers(pki, tmp_path, tls_ensembles, kazoo_factory):
    """portUnification=true without sslQuorum (the first step of a rolling change to quorum
    TLS): members dial each other in plain and form a quorum, while the peer port also
    completes TLS handshakes."""
    keys = quorum_tls_keys(stores(pki, tmp_path, {i: f"m{i}" for i in MEMBERS}), pki.path("ca.pem"))
    keys.update({"sslQuorum": "false", "portUnification": "true"})
    e = start(tls_ensembles, ensemble_with(tmp_path, keys))
    e.wait_serving(list(MEMBERS), timeout=40.0)
    assert "peers dialed in plain, accepted over TLS or plain (portUnification)" in e.log(1), e.tail(1)
    writes_read_everywhere([client(kazoo_factory, e.hostport(i)) for i in MEMBERS], "/unified", 30)
    assert tls_handshake_as(pki, 2, peer_ip(1), peer_port(e, 1))["commonName"] == "member1"


@pytest.mark.ringkeeper_only
@pytest.mark.parametrize("keys,says", [
    ({"sslQuorum": "true"}, "ssl.quorum.keyStore.location"),
    ({"admin.forceHttps": "true"}, "ssl.quorum.keyStore.location"),
    ({"zookeeper.ssl.quorum.trustStore.location": "/etc/zk/trust.pem"}, "sslQuorum=true"),
    ({"sslQuorum": "true", "ssl.quorum.keyStore.location": "/etc/zk/q.pem", "ssl.quorum.crl": "true"},
     "ssl.quorum.crl"),
])
def test_half_configured_quorum_tls_refuses_the_start(make_server, kind, keys, says):
    """Quorum TLS (or admin HTTPS, which uses the same stores) without its key store, quorum
    stores with nothing using them, and a quorum setting ringkeeper cannot honour stop the
    start naming the key (a standalone server
    parses them as a member would)."""
    refuses_the_start(make_server, kind, keys, says)


def refuses_the_start(make_server, kind, keys, says):
    """A ringkeeper standalone server with `keys` exits non-zero and its log says `says`."""
    if kind != "ringkeeper":
        pytest.skip("ringkeeper's refusals")
    s = make_server(start=False)
    s.config.update(keys)
    s.spawn()
    assert s.proc.wait(timeout=30) != 0, f"started with {keys}"
    assert says in s.log_text() and "panicked" not in s.log_text(), s.log_tail()


class ApacheEnsemble:
    """Three Apache ZooKeeper 3.8 QuorumPeerMain processes, member i's peer ports on 127.0.0.i
    and its client port on 127.0.0.1, with the given extra zoo.cfg keys and JVM flags (a JAAS
    file, say), @ID@ in either replaced by the member's id."""

    def __init__(self, tmp_path, extra, jvm_flags=()):
        self.dir = tmp_path / "apache"
        self.procs = {}
        self.jvm_flags = list(jvm_flags)
        self.client_ports = {i: helpers.free_port() for i in MEMBERS}
        self.election_ports = {i: free_port_on(peer_ip(i)) for i in MEMBERS}
        servers = [f"server.{i}={peer_ip(i)}:{free_port_on(peer_ip(i))}:{self.election_ports[i]};"
                   f"127.0.0.1:{self.client_ports[i]}" for i in MEMBERS]
        for i in MEMBERS:
            d = self.dir / str(i)
            (d / "data").mkdir(parents=True)
            (d / "data" / "myid").write_text(f"{i}\n")
            lines = ["tickTime=500", "initLimit=10", "syncLimit=5", f"dataDir={d / 'data'}",
                     f"clientPort={self.client_ports[i]}", "clientPortAddress=127.0.0.1",
                     "admin.enableServer=false", "4lw.commands.whitelist=*", "preAllocSize=4096", *servers]
            lines += [f"{k}={v.replace('@ID@', str(i))}" for k, v in extra.items()]
            (d / "zoo.cfg").write_text("\n".join(lines) + "\n")

    def hostport(self, i):
        return f"127.0.0.1:{self.client_ports[i]}"

    def start(self):
        for i in MEMBERS:
            d = self.dir / str(i)
            log = open(d / "server.log", "wb")
            self.procs[i] = subprocess.Popen(
                [JAVA, "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                 *(f.replace("@ID@", str(i)) for f in self.jvm_flags),
                 "-cp", APACHE_CLASSPATH,
                 "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(d / "zoo.cfg")],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
            log.close()
        return self

    def log(self, i):
        return (self.dir / str(i) / "server.log").read_text(errors="replace")

    def stop(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
            p.wait(10)


def test_apache_ensemble_with_the_same_quorum_tls_keys_serves(pki, tmp_path, kazoo_factory):
    if not os.path.exists("/usr/share/java/zookeeper.jar"):
        pytest.skip("Apache ZooKeeper (Debian's zookeeper package) is not installed")
    pattern = stores(pki, tmp_path, {i: f"a{i}" for i in MEMBERS})
    a = ApacheEnsemble(tmp_path, quorum_tls_keys(pattern, pki.path("ca.pem"))).start()
    try:
        clients = [None] * 3

        def connect(i):
            clients[i - 1] = client(kazoo_factory, a.hostport(i))
            return True
        for i in MEMBERS:
            wait_until(lambda: _try(connect, i), timeout=90.0, interval=1.0, what=f"Apache member {i} to serve")
        writes_read_everywhere(clients, "/aq", 30)
        # Its election port (always open; the quorum port is the leader's only) speaks TLS
        # with the member's certificate, as ringkeeper's one peer port does.
        assert tls_handshake_as(pki, 2, peer_ip(1), a.election_ports[1])["commonName"] == "member1"
    finally:
        a.stop()


def _try(f, *args):
    try:
        return f(*args)
    except Exception:
        return False
