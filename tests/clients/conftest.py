"""pytest fixtures: servers (ringkeeper and Apache ZooKeeper) on 127.0.0.1 with free ports
and temporary data dirs, always stopped and removed afterwards.

Tests that take the `kind` fixture (directly or through `server`, `zk`, `raw`, ...) run once
per server kind selected by RK_SERVERS (default "ringkeeper,apache"), with ids
"ringkeeper" and "apache". Tests marked `ringkeeper_only` run against ringkeeper only
(set RK_ONLY_TESTS_ON_APACHE=1 to also run them against Apache, to validate the tests).
"""

import functools
import itertools
import os
import re
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

import helpers  # noqa: E402
import rawzk  # noqa: E402
from helpers import Server  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "ringkeeper_only: run against ringkeeper only")


def pytest_generate_tests(metafunc):
    if "kind" in metafunc.fixturenames:
        kinds = helpers.selected_kinds()
        if metafunc.definition.get_closest_marker("ringkeeper_only"):
            allowed = ["ringkeeper"]
            if os.environ.get("RK_ONLY_TESTS_ON_APACHE") == "1":
                allowed.append("apache")
            kinds = [k for k in kinds if k in allowed]
            if not kinds:
                kinds = ["ringkeeper"]  # so that it shows up as skipped, not vanished
        metafunc.parametrize("kind", kinds, ids=kinds, scope="session")


def _skip_unless_available(kind):
    if kind not in helpers.selected_kinds():
        pytest.skip(f"{kind} not selected by RK_SERVERS")
    if kind == "ringkeeper" and not os.access(helpers.RK_BIN, os.X_OK):
        pytest.skip(f"ringkeeper binary not found at {helpers.RK_BIN} "
                    "(run `cargo build --release` or scripts/test.sh)")
    if kind == "apache" and not os.path.exists("/usr/share/java/zookeeper.jar"):
        pytest.skip("Apache ZooKeeper jars missing (apt-get install zookeeper)")


_shared = {}


@pytest.fixture(scope="session")
def _shared_servers():
    yield _shared
    for s in _shared.values():
        s.cleanup()


@pytest.fixture
def server(kind, _shared_servers):
    """A server shared by all tests of one kind (default config: tickTime 500,
    extended types on, super digest "super:superpw"). Tests keep to their own subtree
    (see `base`). Restarted from scratch if a previous test left it dead."""
    _skip_unless_available(kind)
    s = _shared_servers.get(kind)
    if s is not None and not s.alive():
        print(f"shared {kind} server was dead; log tail:\n{s.log_tail()}")
        s.cleanup()
        s = None
    if s is None:
        s = Server(kind).start()
        _shared_servers[kind] = s
    yield s
    if not s.alive():
        print(f"{kind} server died during the test; log tail:\n{s.log_tail()}")


@pytest.fixture
def server_factory():
    """Factory for dedicated servers of either kind: server_factory(kind, config=None,
    start=True, **keys). Extra keyword arguments are zoo.cfg keys (use config={} for a bare
    config). All servers made are stopped and their dirs removed at teardown."""
    made = []

    def make(kind, config=None, start=True, **keys):
        _skip_unless_available(kind)
        cfg = helpers.default_config() if config is None else dict(config)
        for k, v in keys.items():
            cfg[k.replace("__", ".")] = str(v)
        s = Server(kind, cfg)
        made.append(s)
        if start:
            s.start()
        return s

    yield make
    for s in made:
        if s.proc is not None and s.starts:
            print(f"--- {s!r} log tail:\n{s.log_tail(20)}")
        s.cleanup()


@pytest.fixture
def make_server(kind, server_factory):
    """Factory for dedicated servers of this test's kind: make_server(config=None, start=True,
    **keys), as server_factory."""
    _skip_unless_available(kind)
    return functools.partial(server_factory, kind)


_counter = itertools.count()


@pytest.fixture
def base(server, request):
    """A fresh, empty persistent node for this test on the shared server."""
    name = re.sub(r"[^A-Za-z0-9_-]", "_", request.node.name)[:60]
    path = f"/t-{name}-{next(_counter)}"
    with rawzk.RawConn(server.hostport) as c:
        c.create(path)
        c.close_session()
    return path


@pytest.fixture
def zk(server, kazoo_factory):
    """A connected kazoo client on the shared server."""
    return kazoo_factory(server.hostport)


@pytest.fixture
def kazoo_factory():
    """kazoo_factory(hostport, **kw) -> started KazooClient, stopped at teardown."""
    from kazoo.client import KazooClient
    made = []

    def make(hostport, start=True, **kw):
        kw.setdefault("timeout", 10.0)
        c = KazooClient(hosts=hostport, **kw)
        made.append(c)
        if start:
            c.start(timeout=15)
        return c

    yield make
    for c in made:
        try:
            c.stop()
            c.close()
        except Exception:
            pass


@pytest.fixture
def raw(server):
    """raw(**kw) -> a handshaken rawzk.RawConn to the shared server, closed at teardown."""
    conns = []

    def make(**kw):
        c = rawzk.RawConn(server.hostport, **kw)
        conns.append(c)
        return c

    yield make
    for c in conns:
        c.close()
