"""The project's own Rust client library (crates/ringkeeper-client) through its example binaries, built by
`cargo build --release --examples`: the basic-ops run on glommio and on tokio against both
servers, with and without a chroot; and failover on a 3-member ringkeeper ensemble (the
member the client is on is killed; the client resumes its session elsewhere, keeps its
ephemeral and its watch, which then fires on a change made by kazoo)."""

import os
import queue
import subprocess
import threading

import pytest

from helpers import BUILD_DIR, wait_until
from test_ensemble import client as ensemble_kazoo
from test_ensemble import ensemble  # noqa: F401  (fixture)

EXAMPLES = os.path.join(BUILD_DIR, "examples")
RUNTIMES = ["glommio", "tokio"]


def example(name):
    path = os.path.join(EXAMPLES, name)
    if not os.access(path, os.X_OK):
        pytest.skip(f"{path} not built (cargo build --release --examples)")
    return path


def run_example(name, *args):
    r = subprocess.run([example(name), *args], capture_output=True, text=True, timeout=90)
    print(r.stdout, r.stderr)
    return r


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_basic_ops(server, runtime):
    r = run_example(f"client_{runtime}", server.hostport)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"client_{runtime}: all checks passed" in r.stdout


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_basic_ops_under_a_chroot(server, zk, base, runtime):
    seen_under_base, seen_at_root = [], []
    zk.get_children(base, watch=seen_under_base.append)
    zk.get_children("/", watch=seen_at_root.append)
    r = run_example(f"client_{runtime}", server.hostport + base)
    assert r.returncode == 0, r.stdout + r.stderr
    # The client saw its own paths (chroot stripped from create's reply) ...
    assert f"created /rk-client-{runtime}-" in r.stdout
    assert base not in r.stdout
    # ... while the server saw them under the chroot, and nothing at the root.
    wait_until(lambda: seen_under_base, timeout=5, what="a child change under the chroot")
    assert seen_under_base[0].path == base
    assert not seen_at_root
    assert zk.get_children(base) == []


def test_bad_connection_string_and_no_server(server):
    r = run_example("client_tokio", "127.0.0.1:notaport")
    assert r.returncode == 1 and "bad port" in r.stderr
    r = run_example("client_glommio", "127.0.0.1:1")
    assert r.returncode == 1 and "ConnectionLoss" in r.stderr


class LineReader:
    """Collects a process's stdout lines on a thread; `wait(prefix)` returns the first line
    starting with prefix (after those already taken)."""

    def __init__(self, proc):
        self.proc = proc
        self.lines = queue.Queue()
        self.seen = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self):
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def wait(self, prefix, timeout=30.0):
        import time
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {prefix!r} line; seen {self.seen}")
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            self.seen.append(line)
            if line.startswith(prefix):
                return line[len(prefix):].strip()


@pytest.mark.ringkeeper_only
def test_failover_keeps_session_ephemeral_and_watch(kind, ensemble, kazoo_factory):  # noqa: F811
    e = ensemble(3)
    e.wait_serving([1, 2, 3])
    hosts = ",".join(e.hostport(i) for i in (1, 2, 3))
    kz = ensemble_kazoo(kazoo_factory, hosts)
    kz.create("/fo")
    proc = subprocess.Popen([example("client_failover"), hosts, "/fo"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        out = LineReader(proc)
        first = out.wait("SERVER ")
        session = int(out.wait("SESSION "), 16)
        out.wait("READY")
        member = next(i for i in (1, 2, 3) if e.hostport(i) == first)
        e.kill9(member)
        # The client resumes its session on another member within its timeout (8 s).
        again = out.wait("RECONNECTED ", timeout=20)
        assert again != first
        assert "EVENT Disconnected" in out.seen
        stat = wait_until(lambda: kz.exists("/fo/eph"), timeout=10, what="the ephemeral, seen by kazoo")
        assert stat.ephemeralOwner == session
        kz.set("/fo/watched", b"changed")
        assert out.wait("WATCH ") == "NodeDataChanged /fo/watched"
        assert out.wait("DATA ") == "changed"
        out.wait("OK")
        print("client output:", out.seen)
        assert proc.wait(timeout=20) == 0, proc.stderr.read()
        # It closed its session: the ephemeral is gone.
        wait_until(lambda: kz.exists("/fo/eph") is None, timeout=10, what="the ephemeral to go")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
