"""Process lifecycle and configuration: SIGTERM/SIGINT stop the server (ringkeeper: exit
0), data survives a graceful restart, a bad config value is a clear error with a non-zero
exit, an unknown key is only a warning, a taken port is an error. Runs on both kinds;
the ringkeeper-specific expectations (exit code 0, the warning) are checked on
ringkeeper only — Apache's JVM exits 143 on SIGTERM and ignores unknown keys silently."""

import os
import shutil
import signal
import socket
import subprocess

import pytest

import helpers
import rawzk


def test_sigterm_exits_cleanly_and_data_survives(make_server):
    """SIGTERM stops the server (exit 0 for ringkeeper) and a restart on the same data
    dir has the data and the zxid sequence continues."""
    s = make_server()
    with rawzk.RawConn(s.hostport) as c:
        c.create("/keep", b"kept")
        c.set_data("/keep", b"kept2")
        z = c.last_zxid
    rc = s.stop(timeout=15)
    if s.kind == "ringkeeper":
        assert rc == 0, s.log_tail()
    else:
        assert rc in (0, 143)
    s.start()
    with rawzk.RawConn(s.hostport) as c:
        data, st = c.get_data("/keep")
        assert data == b"kept2" and st.version == 1 and st.mzxid == z
        c.create("/after")
        assert c.last_zxid > z


def test_sigint_exits(make_server):
    """SIGINT stops the server too (exit 0 for ringkeeper)."""
    s = make_server()
    s.proc.send_signal(signal.SIGINT)
    rc = s.proc.wait(15)
    if s.kind == "ringkeeper":
        assert rc == 0, s.log_tail()
    else:
        assert rc in (0, 130)


@pytest.mark.parametrize("key,value", [("tickTime", "abc"), ("clientPort", "notaport"),
                                       ("maxClientCnxns", "many")])
def test_bad_config_value_fails(make_server, key, value):
    """A malformed value for a known key: the process exits non-zero and names the key
    in its output."""
    s = make_server(start=False)
    s.config[key] = value
    s.spawn()
    try:
        rc = s.proc.wait(30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"server kept running with {key}={value}:\n{s.log_tail()}")
    assert rc != 0
    log = s.log_text()
    assert key in log or value in log, log[-3000:]
    if s.kind == "ringkeeper":
        assert "panicked" not in log, "a bad value must be an error message, not a panic"


def test_unknown_key_is_only_a_warning(make_server):
    """An unknown key does not stop the server; ringkeeper logs a warning naming it."""
    s = make_server(start=False)
    s.config["someUnknownKey.forTesting"] = "42"
    s.start()
    with rawzk.RawConn(s.hostport) as c:
        assert c.exists("/") is not None
    if s.kind == "ringkeeper":
        log = s.log_text()
        assert "someUnknownKey.forTesting" in log, log[-3000:]
        assert "warn" in log.lower(), log[-3000:]


def test_port_in_use_fails(make_server):
    """A second server on a port already in use exits non-zero."""
    a = make_server()
    b = make_server(start=False)
    b.port = a.port
    b.spawn()
    try:
        rc = b.proc.wait(30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"second server on a used port kept running:\n{b.log_tail()}")
    assert rc != 0
    with rawzk.RawConn(a.hostport) as c:
        assert c.exists("/") is not None


def test_max_client_cnxns_per_ip(make_server):
    """maxClientCnxns=3: a fourth concurrent connection from 127.0.0.1 is closed at once
    without a ConnectResponse; after one closes, a new one is accepted."""
    s = make_server(maxClientCnxns=3)
    conns = [rawzk.RawConn(s.hostport) for _ in range(3)]
    try:
        try:
            extra = rawzk.RawConn(s.hostport, handshake=False)
        except OSError:
            extra = None  # refused so fast that connect() itself saw the reset
        if extra is not None:
            try:
                try:
                    extra.send_frame(rawzk.encode_connect(timeout=10000))
                except OSError:
                    pass
                closed, frames = extra.wait_closed(5)
                assert closed and frames == []
            finally:
                extra.close()
        conns.pop().close()
        import time
        deadline = time.monotonic() + 5
        while True:  # the server notices the close asynchronously
            try:
                with rawzk.RawConn(s.hostport, io_timeout=2) as c:
                    assert c.exists("/") is not None
                break
            except (rawzk.ConnectionClosed, rawzk.ReadTimeout, OSError):
                assert time.monotonic() < deadline
                time.sleep(0.1)
    finally:
        for c in conns:
            c.close()


def test_embedded_default_from_a_fresh_directory(tmp_path):
    """`ringkeeper` with no subcommand and no config (what `cargo run --release` runs) serves
    127.0.0.1:2181 with its data under ./data of the working directory, and a restart finds
    the data there."""
    import os
    import socket
    import time
    import helpers

    if "ringkeeper" not in helpers.selected_kinds() or not os.access(helpers.RK_BIN, os.X_OK):
        pytest.skip("ringkeeper binary not selected or not built")
    probe = socket.socket()
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is no owner
    try:
        probe.bind(("127.0.0.1", 2181))
    except OSError:
        pytest.skip("127.0.0.1:2181 is taken on this machine")
    finally:
        probe.close()

    def start():
        p = subprocess.Popen([helpers.RK_BIN], cwd=tmp_path, stdout=subprocess.DEVNULL,
                             stderr=open(tmp_path / "server.log", "ab"), start_new_session=True)
        deadline = time.monotonic() + 20
        while True:
            assert p.poll() is None, (tmp_path / "server.log").read_text()
            try:
                return p, rawzk.RawConn("127.0.0.1:2181", io_timeout=2)
            except (OSError, rawzk.ConnectionClosed, rawzk.ReadTimeout):
                assert time.monotonic() < deadline, "no answer on 127.0.0.1:2181"
                time.sleep(0.1)

    def stop(p):
        p.send_signal(signal.SIGTERM)
        try:
            return p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)
            return None

    p, c = start()
    try:
        c.create("/app", b"hello")
        c.set_data("/app", b"world")
        c.close()
    finally:
        rc = stop(p)
    assert rc == 0, (tmp_path / "server.log").read_text()
    assert any(n.startswith("log.") for n in os.listdir(tmp_path / "data")), "txn log under ./data"
    p, c = start()
    try:
        data, st = c.get_data("/app")
        assert (data, st.version) == (b"world", 1)
        c.close()
    finally:
        stop(p)


def test_low_memlock_limit_is_a_clear_error():
    """Started by an unprivileged user whose RLIMIT_MEMLOCK (hard) is too low for the
    io_uring buffers, ringkeeper exits non-zero with a message naming the limit and the fix,
    and does not panic."""
    import os
    import shutil
    import helpers

    if "ringkeeper" not in helpers.selected_kinds() or not os.access(helpers.RK_BIN, os.X_OK):
        pytest.skip("ringkeeper binary not selected or not built")
    if os.geteuid() != 0 or not (shutil.which("setpriv") and shutil.which("prlimit")):
        pytest.skip("needs root, setpriv and prlimit to run as an unprivileged user")
    import tempfile
    d = tempfile.mkdtemp(prefix="rk-memlock-")   # readable by the unprivileged user
    try:
        os.chmod(d, 0o755)
        cfg = os.path.join(d, "zoo.cfg")
        with open(cfg, "w") as f:
            f.write(f"dataDir={d}/data\nclientPort={helpers.free_port()}\n"
                    "clientPortAddress=127.0.0.1\nringkeeper.cpuPinning=false\n")
        os.chmod(cfg, 0o644)
        r = subprocess.run(["prlimit", "--memlock=65536:65536", "setpriv", "--reuid=65534",
                            "--regid=65534", "--clear-groups", helpers.RK_BIN, "serve",
                            "--config", cfg], capture_output=True, text=True, timeout=30)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    out = r.stdout + r.stderr
    assert r.returncode not in (0, 101), out   # 101 is Rust's exit code for a panic
    assert "RLIMIT_MEMLOCK" in out and "ulimit -l" in out and "panicked" not in out, out


def test_ensemble_member_needs_a_myid_it_is_listed_under(make_server):
    """A config with several server.N lines makes a member of a replicated ensemble: without
    dataDir/myid, or with an id no server.N line names, it exits non-zero saying so (as
    Apache's QuorumPeerConfig does) instead of running alone."""
    s = make_server(start=False)
    if s.kind != "ringkeeper":
        pytest.skip("Apache would start a quorum peer")
    s.extra_lines = ["server.1=127.0.0.1:2888:3888", "server.2=127.0.0.1:2889:3889"]
    s.spawn()
    assert s.proc.wait(30) != 0
    assert "myid is missing" in s.log_text()
    os.makedirs(s.data_dir, exist_ok=True)
    with open(os.path.join(s.data_dir, "myid"), "w") as f:
        f.write("7\n")
    s.spawn()
    assert s.proc.wait(30) != 0
    assert "no server.7 line" in s.log_text()
    # A malformed server line is a configuration error naming the line.
    s.extra_lines = ["server.1=127.0.0.1:2888"]
    s.spawn()
    assert s.proc.wait(30) != 0
    assert "server.1" in s.log_text().splitlines()[-1]


PEER_PORT_TAKEN_STARTS = 10


def test_ensemble_member_whose_peer_port_is_taken_exits_with_the_bind_error(make_server):
    """A member whose quorum port another process holds exits 1 with the bind error as its
    last line, every time, and nothing panics on the way out. (It used to open its txn log
    first: the log's writer starts a spare segment on glommio's blocking pool, and when the
    executor stopped with that call in flight, glommio's pool thread panicked "failed to send
    response" with a backtrace, in ~1 of 4 starts, once with exit status 70.)"""
    s = make_server(start=False)
    if s.kind != "ringkeeper":
        pytest.skip("ringkeeper's start order; Apache retries its quorum port")
    holder = socket.socket()
    try:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = holder.getsockname()[1]
        s.extra_lines = [f"server.1=127.0.0.1:{taken}:{helpers.free_port()}",
                         f"server.2=127.0.0.1:{helpers.free_port()}:{helpers.free_port()}"]
        for start in range(PEER_PORT_TAKEN_STARTS):
            # A fresh data dir each time: the spare segment is made when the log first opens.
            shutil.rmtree(s.data_dir, ignore_errors=True)
            os.makedirs(s.data_dir)
            with open(os.path.join(s.data_dir, "myid"), "w") as f:
                f.write("1\n")
            s.spawn()
            rc = s.proc.wait(30)
            log = open(s.log_path, errors="replace").read()
            assert rc == 1, f"start {start}: exit status {rc}\n{log[-3000:]}"
            assert "panicked" not in log, f"start {start}:\n{log[-3000:]}"
            assert f"cannot listen for peers on 127.0.0.1:{taken}" in log.splitlines()[-1], log[-3000:]
    finally:
        holder.close()


def test_a_core_layout_on_cpus_the_machine_lacks_is_refused(make_server):
    """ringkeeper.clientCpus / pipelineCpu must name CPUs this process may run on; otherwise
    start-up stops with a message naming the key, the CPU and the usable ones."""
    s = make_server(start=False)
    if s.kind != "ringkeeper":
        pytest.skip("ringkeeper's own core layout keys")
    s.config.update({"ringkeeper.cpuPinning": "true", "ringkeeper.clientCpus": "1000"})
    s.write_config()
    s.spawn()
    assert s.proc.wait(30) != 0
    last = s.log_text().strip().splitlines()[-1]
    assert "ringkeeper.clientCpus names CPU 1000 but this process may only run on CPUs 0" in last, last


def test_server_sh_starts_reports_and_stops_a_server(make_server, tmp_path):
    """scripts/server.sh start CONFIG / status / stop, as an operator runs them."""
    s = make_server(start=False)
    if s.kind != "ringkeeper":
        pytest.skip("ringkeeper's script")
    s.write_config()
    env = dict(os.environ, RK_SERVER_DIR=str(tmp_path / "srv"), RK_BIN=helpers.RK_BIN)
    sh = os.path.join(helpers.REPO, "scripts", "server.sh")

    def run(*args):
        return subprocess.run([sh, *args], env=env, capture_output=True, text=True, timeout=60)
    assert run("status").returncode == 3
    assert run("start", s.cfg_path).returncode == 0
    try:
        out = helpers.wait_until(lambda: (lambda r: r.stdout if "Mode: standalone" in r.stdout else None)(run("status")),
                                 what="srvr through server.sh status")
        assert f"on 127.0.0.1:{s.port}" in out
        assert run("start", s.cfg_path).returncode == 1, "a second start is refused"
    finally:
        r = run("stop")
    assert r.stdout.strip() == "stopped", r.stdout
    assert run("status").stdout.strip() == "not running"


def test_log_level_comes_from_the_config_unless_rust_log_is_set(make_server, kazoo_factory):
    """ringkeeper.logLevel=warn silences info lines; a bad level is refused at start-up."""
    s = make_server(start=False, **{"ringkeeper.logLevel": "warn"})
    if s.kind != "ringkeeper":
        pytest.skip("ringkeeper's own key")
    os.environ.pop("RUST_LOG", None)
    s.start()
    kazoo_factory(s.hostport).create("/quiet")
    assert "starting ringkeeper" not in s.log_text()
    s.stop()
    s.config["ringkeeper.logLevel"] = "loud=="
    s.write_config()
    s.spawn()
    assert s.proc.wait(30) == 2
    assert "bad log level ringkeeper.logLevel=loud==" in s.log_text()
