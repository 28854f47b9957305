"""Shared helpers for the client integration tests: starting and stopping servers
(ringkeeper or Apache ZooKeeper), free ports, polling, and the external clients
(zkCli.sh, cli_mt)."""

import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time

import rawzk

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# The build the tests run: target/release by default; scripts/test.sh builds with `--profile ci`
# and sets RK_BUILD_DIR=target/ci. The server, ringkeeper-bench and the examples come from it.
BUILD_DIR = os.environ.get("RK_BUILD_DIR", os.path.join(REPO, "target", "release"))
RK_BIN = os.environ.get("RK_BIN", os.path.join(BUILD_DIR, "ringkeeper"))
BENCH_BIN = os.path.join(BUILD_DIR, "ringkeeper-bench")
ZKCLI = os.environ.get("ZKCLI", "/usr/share/zookeeper/bin/zkCli.sh")
CLI_MT = os.environ.get("CLI_MT", "/usr/lib/zookeeper/bin/cli_mt")
# cli_mt writes with stdio; unbuffer it so that output can be polled through a pipe
STDBUF = ["stdbuf", "-o0", "-e0"] if shutil.which("stdbuf") else []
JAVA = os.environ.get("JAVA", shutil.which("java") or "/usr/bin/java")

# Debian's zookeeper.jar manifest lists most dependencies in its Class-Path; these are
# the ones it lacks (see DESIGN.md §7).
APACHE_CLASSPATH = ":".join(
    "/usr/share/java/%s.jar" % j
    for j in ("zookeeper", "netty-codec", "netty-resolver",
              "netty-transport-native-unix-common", "slf4j-simple")
)
APACHE_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"

# superuser "super" with password "superpw"
SUPER_USER, SUPER_PASSWORD = "super", "superpw"
SUPER_DIGEST = rawzk.digest_id(SUPER_USER, SUPER_PASSWORD)

# The peer protocol version a member's hello carries (src/proto/peer.rs PEER_PROTOCOL_VERSION).
PEER_PROTOCOL_VERSION = 4


def peer_hello(sid):
    """The hello member `sid` opens a peer connection with (docs/peer-protocol.md)."""
    return b"RKPR" + struct.pack(">HQ", PEER_PROTOCOL_VERSION, sid)


# Keys that Apache ZooKeeper only takes as Java system properties; ringkeeper reads them
# from the config file under the same names.
SYSTEM_PROPERTY_KEYS = (
    "zookeeper.extendedTypesEnabled",
    "jute.maxbuffer",
    "zookeeper.DigestAuthenticationProvider.superDigest",
    "znode.container.checkIntervalMs",
    "zookeeper.nio.sessionlessCnxnTimeout",
    "zookeeper.maxCnxns",
    "zookeeper.globalOutstandingLimit",
    # the JAAS file (SASL): a JVM property for Apache, a zoo.cfg key of the same name for ringkeeper
    "java.security.auth.login.config",
)

TICK_MS = 500

ALL_KINDS = ("ringkeeper", "apache")


def apache_version():
    """The version of Debian's zookeeper package as a tuple, e.g. (3, 8, 0)."""
    try:
        v = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "zookeeper"],
                           capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return (0, 0, 0)
    m = re.match(r"(?:\d+:)?(\d+)\.(\d+)\.(\d+)", v)
    return tuple(int(x) for x in m.groups()) if m else (0, 0, 0)


def exists_checks_read(kind):
    """Whether exists() on an existing node needs READ. Apache added the check in 3.8.4
    and 3.9.2 (before, exists checked nothing; Debian's 3.8.0 package does not carry it);
    ringkeeper follows the current releases."""
    if kind == "ringkeeper":
        return True
    v = apache_version()
    return v >= (3, 9, 2) or ((3, 8, 4) <= v < (3, 9, 0))


def selected_kinds():
    raw = os.environ.get("RK_SERVERS", ",".join(ALL_KINDS))
    kinds = [k.strip() for k in raw.split(",") if k.strip()]
    for k in kinds:
        if k not in ALL_KINDS:
            raise ValueError(f"RK_SERVERS: unknown server kind {k!r}")
    return kinds


# free_port's ports: below the kernel's ephemeral range (32768 and up here), where a port the
# kernel hands out to some client's outgoing connection cannot take it between the pick and
# the server's bind (a CI run lost Apache's secureClientPort that way), and under the ensembles'
# 20000-40300. Each pytest-xdist worker picks from a slice of its own.
FREE_PORT_FIRST = 10000
FREE_PORT_COUNT = 10000
# Per slice: the offset free_port tries next.
_FREE_PORT_NEXT = {}


def _port_bindable(port):
    for host in ("127.0.0.1", "0.0.0.0"):  # Apache binds some ports on every address
        s = socket.socket()
        try:
            s.bind((host, port))
        except OSError:
            return False
        finally:
            s.close()
    return True


def xdist_worker():
    """(this pytest-xdist worker's index, the number of workers); (0, 1) without xdist."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    workers = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    index = int(worker[2:]) % workers if worker[2:].isdigit() else 0
    return index, workers


def free_port():
    index, workers = xdist_worker()
    size = FREE_PORT_COUNT // workers
    first = FREE_PORT_FIRST + index * size
    # In turn through the slice, from a random start: a port handed out is not handed out
    # again until the slice wraps, so two picks made before either is bound never collide
    # (random picks did: two members of one ensemble got the same election port).
    cursor = _FREE_PORT_NEXT.setdefault(first, random.randrange(size))
    for k in range(size):
        offset = (cursor + k) % size
        if _port_bindable(first + offset):
            _FREE_PORT_NEXT[first] = (offset + 1) % size
            return first + offset
    raise RuntimeError(f"no free port in {first}..{first + size - 1}")


def wait_until(pred, timeout=10.0, interval=0.05, what="condition"):
    """Poll pred() until it returns a truthy value; return it or raise AssertionError."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        last = pred()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what} (last={last!r})")
        time.sleep(interval)


def default_config(extended_types=True):
    cfg = {
        "tickTime": str(TICK_MS),
        "maxClientCnxns": "0",
        "snapCount": "100000",
        "zookeeper.DigestAuthenticationProvider.superDigest": SUPER_DIGEST,
        # Apache reaps empty containers every 60 s by default; make it 500 ms. ringkeeper
        # may treat the key as unknown (a warning) — the container test polls for a while.
        "znode.container.checkIntervalMs": "500",
    }
    if extended_types:
        cfg["zookeeper.extendedTypesEnabled"] = "true"
    return cfg


class Server:
    """One server process on 127.0.0.1 with its own temporary data directory.

    kind: "ringkeeper" or "apache".  `config` holds extra zoo.cfg keys (values as
    strings); dataDir, dataLogDir, clientPort and clientPortAddress are filled in."""

    def __init__(self, kind, config=None, port=None):
        self.kind = kind
        self.config = dict(default_config() if config is None else config)
        self.port = port or free_port()
        self.tmp = tempfile.mkdtemp(prefix=f"rk-{kind}-")
        self.data_dir = os.path.join(self.tmp, "data")
        self.log_dir = os.path.join(self.tmp, "log")
        os.makedirs(self.data_dir)
        os.makedirs(self.log_dir)
        self.cfg_path = os.path.join(self.tmp, "zoo.cfg")
        self.proc = None
        self.log_path = None
        self.starts = 0
        self.extra_lines = []  # raw lines appended to the config (for bad-config tests)

    # -- configuration --------------------------------------------------------

    @property
    def hostport(self):
        return f"127.0.0.1:{self.port}"

    def full_config(self):
        cfg = {
            "dataDir": self.data_dir,
            "dataLogDir": self.log_dir,
            "clientPort": str(self.port),
            "clientPortAddress": "127.0.0.1",
        }
        cfg.update(self.config)
        if self.kind == "ringkeeper":
            cfg.setdefault("ringkeeper.clientCores", "1")
            cfg.setdefault("ringkeeper.cpuPinning", "false")
            cfg.setdefault("admin.enableServer", "false")
        return cfg

    def write_config(self):
        cfg = self.full_config()
        lines = []
        for k, v in cfg.items():
            if self.kind == "apache" and (k in SYSTEM_PROPERTY_KEYS or k.startswith("ringkeeper.")):
                continue
            lines.append(f"{k}={v}")
        if self.kind == "apache":
            lines.append("admin.enableServer=false")
            if "4lw.commands.whitelist" not in cfg:
                lines.append("4lw.commands.whitelist=*")
        lines += self.extra_lines
        with open(self.cfg_path, "w") as f:
            f.write("\n".join(lines) + "\n")

    def command(self):
        if self.kind == "ringkeeper":
            return [RK_BIN, "serve", "--config", self.cfg_path]
        cfg = self.full_config()
        props = [f"-D{k}={cfg[k]}" for k in SYSTEM_PROPERTY_KEYS if k in cfg]
        return [JAVA, "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                "-Dzookeeper.admin.enableServer=false", *props,
                "-cp", APACHE_CLASSPATH, APACHE_MAIN, self.cfg_path]

    # -- lifecycle ----------------------------------------------------------------

    def spawn(self):
        """Start the process without waiting for it to answer."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.write_config()
        self.starts += 1
        self.log_path = os.path.join(self.tmp, f"server-{self.starts}.log")
        logf = open(self.log_path, "wb")
        env = dict(os.environ)
        env.setdefault("RUST_BACKTRACE", "1")
        self.proc = subprocess.Popen(self.command(), stdout=logf, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env,
                                     start_new_session=True)
        logf.close()
        return self.proc

    def start(self, timeout=30.0):
        self.spawn()
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout=30.0):
        """Wait until a ConnectRequest gets a valid ConnectResponse (the session is
        then closed again)."""
        deadline = time.monotonic() + timeout
        last_err = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} exited with {self.proc.returncode} during "
                                   f"startup:\n{self.log_tail()}")
            try:
                with rawzk.RawConn(self.hostport, timeout_ms=4000, io_timeout=2.0) as c:
                    if c.session.timeout > 0:
                        c.close_session()
                        return
            except (OSError, rawzk.ConnectionClosed, rawzk.ReadTimeout, ValueError) as e:
                last_err = e
            time.sleep(0.1)
        raise RuntimeError(f"{self.kind} did not answer on {self.hostport} within {timeout}s "
                           f"({last_err}):\n{self.log_tail()}")

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout=10.0):
        """SIGTERM, then SIGKILL after `timeout`; returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._killpg()
                self.proc.wait(10)
        return self.proc.returncode

    def _killpg(self):
        # the server runs in its own session/process group: take any children with it
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def kill9(self):
        """SIGKILL the server (its whole process group) and reap it."""
        if self.proc is not None and self.proc.poll() is None:
            self._killpg()
            self.proc.wait(10)

    def restart(self, kill=False, timeout=30.0):
        """Stop (SIGTERM, or kill -9 with kill=True) and start again on the same data dir."""
        if kill:
            self.kill9()
        else:
            self.stop()
        return self.start(timeout)

    def cleanup(self):
        try:
            self.stop(timeout=5.0)
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def log_text(self):
        out = []
        for i in range(1, self.starts + 1):
            p = os.path.join(self.tmp, f"server-{i}.log")
            try:
                with open(p, "rb") as f:
                    out.append(f.read().decode(errors="replace"))
            except OSError:
                pass
        return "\n".join(out)

    def log_tail(self, n=40):
        return "\n".join(self.log_text().splitlines()[-n:])

    def __repr__(self):
        return f"<Server {self.kind} {self.hostport}>"


# ---------------------------------------------------------------------------
# zkCli.sh
# ---------------------------------------------------------------------------

_ZKCLI_NOISE = re.compile(r"^(SLF4J:|\s*$|Connecting to |Welcome to ZooKeeper|JLine support|"
                          r"WATCHER::|WatchedEvent state:(SyncConnected|Closed) type:None)")


def zkcli(hostport, commands, timeout=60.0):
    """Run several zkCli.sh commands in one JVM (commands piped on stdin) and return the
    output lines (stdout+stderr merged) with the connection/logging noise removed."""
    script = "\n".join(commands) + "\nquit\n"
    env = dict(os.environ)
    env["CLIENT_JVMFLAGS"] = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xmx128m"
    p = subprocess.run([ZKCLI, "-server", hostport], input=script.encode(),
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout,
                       env=env)
    text = p.stdout.decode(errors="replace")
    return [l for l in text.splitlines() if not _ZKCLI_NOISE.match(l)]


def zkcli_oneshot(hostport, args, timeout=60.0):
    """zkCli.sh -server HP cmd args... (one command, its exit code and output)."""
    env = dict(os.environ)
    env["CLIENT_JVMFLAGS"] = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xmx128m"
    p = subprocess.run([ZKCLI, "-server", hostport, *args], stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout,
                       env=env)
    text = p.stdout.decode(errors="replace")
    return p.returncode, [l for l in text.splitlines() if not _ZKCLI_NOISE.match(l)]


# ---------------------------------------------------------------------------
# cli_mt (the C client's shell)
# ---------------------------------------------------------------------------

class CliMt:
    """Drives /usr/lib/zookeeper/bin/cli_mt through a pipe. Output is collected by a
    reader thread; send() writes one command; wait_for() polls the output."""

    def __init__(self, hostport):
        self.p = subprocess.Popen([*STDBUF, CLI_MT, hostport], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.out = bytearray()
        self.lock = threading.Lock()
        self.t = threading.Thread(target=self._reader, daemon=True)
        self.t.start()

    def _reader(self):
        while True:
            b = self.p.stdout.read1(65536)
            if not b:
                return
            with self.lock:
                self.out += b

    def text(self):
        with self.lock:
            return self.out.decode(errors="replace")

    def send(self, cmd):
        self.p.stdin.write((cmd + "\n").encode())
        self.p.stdin.flush()

    def wait_for(self, pattern, timeout=10.0, count=1):
        rx = re.compile(pattern, re.M)
        return wait_until(lambda: len(rx.findall(self.text())) >= count, timeout,
                          what=f"cli_mt output {pattern!r} x{count}\n--- output:\n{self.text()}")

    def run(self, cmd, pattern, timeout=10.0):
        """Send cmd and wait for one more match of pattern than there was before."""
        n = len(re.findall(pattern, self.text(), re.M))
        self.send(cmd)
        self.wait_for(pattern, timeout, n + 1)

    def close(self):
        try:
            if self.p.poll() is None:
                try:
                    self.send("quit")
                except (BrokenPipeError, OSError):
                    pass
                try:
                    self.p.wait(5)
                except subprocess.TimeoutExpired:
                    self.p.kill()
                    self.p.wait(5)
        finally:
            self.t.join(2)


def openssl(*args, faketime=None, cwd=None):
    cmd = ["openssl", *args]
    if faketime:
        cmd = ["faketime", faketime, *cmd]
    subprocess.run(cmd, check=True, capture_output=True, cwd=cwd, timeout=60)


class Pki:
    """Test certificates made with the openssl CLI, PEM files under `dir`: a CA is NAME.pem +
    NAME.key; a certificate NAME.crt + NAME.key (an unencrypted PKCS#8 key); `key_store`
    makes NAME-store.pem (key, certificate, CA: ZooKeeper's PEM key store)."""

    def __init__(self, d):
        self.dir = str(d)

    def path(self, name):
        return os.path.join(self.dir, name)

    def make_ca(self, name, subject):
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-keyout", self.path(f"{name}.key"), "-out", self.path(f"{name}.pem"), "-days", "30",
                 "-subj", subject, "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign")

    def make_cert(self, name, subject, ca="ca", server=False, faketime=None, peer_host=None):
        """A client certificate; `server`: for 127.0.0.1 and localhost; `peer_host`: an
        ensemble member's, naming that host (IP addresses, comma-separated) and good for both
        ends of a peer connection."""
        key, csr, crt = self.path(f"{name}.key"), self.path(f"{name}.csr"), self.path(f"{name}.crt")
        # OpenSSL 3 writes the key as unencrypted PKCS#8, what every PEM reader (Java's too) takes
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key,
                 "-out", csr, "-subj", subject)
        ext = self.path(f"{name}.ext")
        with open(ext, "w") as f:
            f.write("basicConstraints=CA:FALSE\n")
            if peer_host:
                san = ",".join(f"IP:{h}" for h in peer_host.split(","))
                f.write(f"subjectAltName={san}\nextendedKeyUsage=serverAuth,clientAuth\n")
            elif server:
                f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
            else:
                f.write("extendedKeyUsage=clientAuth\n")
        openssl("x509", "-req", "-in", csr, "-CA", self.path(f"{ca}.pem"), "-CAkey", self.path(f"{ca}.key"),
                 "-CAcreateserial", "-out", crt, "-days", "30", "-extfile", ext, faketime=faketime)

    def key_store(self, name, ca="ca"):
        """NAME.pem: the private key, the certificate and the CA (ZooKeeper's PEM key store)."""
        out = self.path(f"{name}-store.pem")
        with open(out, "w") as f:
            for part in (f"{name}.key", f"{name}.crt", f"{ca}.pem"):
                with open(self.path(part)) as p:
                    f.write(p.read())
        return out

    def pkcs12(self, name, out, password, legacy=False, ca="ca"):
        """`openssl pkcs12 -export` of NAME's key and certificate with the CA (OpenSSL 3's
        default AES-256-CBC / PBKDF2 / SHA-256 MAC, or -legacy: RC2-40 and 3DES, SHA-1 MAC)."""
        path = self.path(out)
        openssl("pkcs12", "-export", "-in", self.path(f"{name}.crt"), "-inkey", self.path(f"{name}.key"),
                "-certfile", self.path(f"{ca}.pem"), "-out", path, "-passout", f"pass:{password}",
                *(["-legacy"] if legacy else []))
        return path


def test_pki(tmp_path_factory, name, ca_subject):
    """A module's Pki (skipped without the openssl CLI) with its CA `ca` and a `rogue-ca`
    nobody trusts."""
    import pytest
    if not shutil.which("openssl"):
        pytest.skip("needs the openssl CLI")
    p = Pki(tmp_path_factory.mktemp(name))
    p.make_ca("ca", ca_subject)
    p.make_ca("rogue-ca", "/O=Nobody/CN=Rogue CA")
    return p


def recv_until_closed(sock):
    """Everything a peer sends on `sock` until it closes the connection."""
    got = b""
    while True:
        chunk = sock.recv(4096)
        if not chunk:
            return got
        got += chunk
