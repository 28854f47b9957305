"""Unit tests of the chaos rig's checkers (tests/chaos/checkers.py, issue 18): small synthetic
histories that must pass and ones that must be flagged, so every checker is shown able to fail.
No server; runs in well under a second."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "chaos"))

from checkers import (check_acked, check_ephemerals, check_oneshot_stream, check_persistent_stream,  # noqa: E402
                      check_register, check_same_trees, check_sequential, check_sessions, linearizable)
from history import FAIL, INFO, OK, Op  # noqa: E402

INF = float("inf")


def cas(c, exp, new, t0, t1, type_=OK, key="r"):
    return Op(client=c, f="cas", key=key, value=(exp, new), t_invoke=t0, t_complete=t1 if type_ != INFO else INF,
              type=type_, result=(exp + 1) if type_ == OK else None)


def read(c, version, value, t0, t1, key="r"):
    return Op(client=c, f="read", key=key, t_invoke=t0, t_complete=t1, type=OK, result=(version, value))


def test_register_sequential_history_passes():
    h = [cas("a", 0, b"x", 0, 1), read("b", 1, b"x", 2, 3), cas("b", 1, b"y", 4, 5), read("a", 2, b"y", 6, 7)]
    assert linearizable(h, (0, b"")) is True


def test_register_concurrent_ops_may_reorder():
    # the read overlaps the write: it may see either value
    assert linearizable([cas("a", 0, b"x", 0, 10), read("b", 0, b"", 1, 2)], (0, b"")) is True
    assert linearizable([cas("a", 0, b"x", 0, 10), read("b", 1, b"x", 1, 2)], (0, b"")) is True


def test_register_stale_read_after_write_is_flagged():
    h = [cas("a", 0, b"x", 0, 1), read("b", 0, b"", 2, 3)]
    assert linearizable(h, (0, b"")) is False
    v, _ = check_register(h)
    assert len(v) == 1 and "register r" in v[0]


def test_register_lost_acknowledged_write_is_flagged():
    # two CASes from version 0 both acknowledged: one of them must have been lost
    h = [cas("a", 0, b"x", 0, 1), cas("b", 0, b"y", 2, 3)]
    assert linearizable(h, (0, b"")) is False


def test_register_unknown_outcome_may_or_may_not_happen():
    took = [cas("a", 0, b"x", 0, 1, INFO), read("b", 1, b"x", 5, 6)]
    assert linearizable(took, (0, b"")) is True
    did_not = [cas("a", 0, b"x", 0, 1, INFO), read("b", 0, b"", 5, 6)]
    assert linearizable(did_not, (0, b"")) is True
    # ...but not both: seen, then gone
    both = [cas("a", 0, b"x", 0, 1, INFO), read("b", 1, b"x", 5, 6), read("b", 0, b"", 7, 8)]
    assert linearizable(both, (0, b"")) is False


def test_register_bad_version_constrains():
    ok = [cas("a", 0, b"x", 0, 1), cas("b", 0, b"y", 2, 3, FAIL)]
    assert linearizable(ok, (0, b"")) is True
    # BadVersion for version 0 when nothing could have changed it
    bad = [cas("b", 0, b"y", 2, 3, FAIL)]
    assert linearizable(bad, (0, b"")) is False


def test_register_keys_are_independent():
    h = [cas("a", 0, b"x", 0, 1, key="k1"), cas("a", 0, b"x", 2, 3, key="k2")]
    assert check_register(h) == ([], [])


def sop(c, f, version, t0, t1, session=1, member=1):
    return Op(client=c, f=f, key="/s", t_invoke=t0, t_complete=t1, type=OK, result=version, session=session,
              member=member)


def test_sessions_pass_and_flag():
    good = [sop("a", "sset", 1, 0, 1), sop("a", "sget", 1, 2, 3, member=2), sop("a", "sset", 2, 4, 5),
            sop("a", "sget", 2, 6, 7)]
    assert check_sessions(good) == []
    ryw = [sop("a", "sset", 1, 0, 1), sop("a", "sget", 0, 2, 3, member=2)]
    assert "read-your-writes" in check_sessions(ryw)[0]
    mono = [sop("a", "sget", 3, 0, 1), sop("a", "sget", 2, 2, 3, member=3)]
    assert "monotonic" in check_sessions(mono)[0]
    fifo = [sop("a", "sset", 2, 0, 1), sop("a", "sset", 1, 0.5, 2)]
    assert "FIFO" in check_sessions(fifo)[0]
    # another session of the same client is not bound by the first one's reads
    other = [sop("a", "sget", 3, 0, 1, session=1), sop("a", "sget", 2, 2, 3, session=2)]
    assert check_sessions(other) == []


def test_oneshot_stream():
    assert check_oneshot_stream([("reg", "/w", 1), ("read", "/w", 1), ("event", "/w", 3), ("read", "/w", 2),
                                 ("reg", "/w", 2), ("event", "/w", 3)]) == []
    early = check_oneshot_stream([("reg", "/w", 1), ("read", "/w", 2), ("event", "/w", 3)])
    assert len(early) == 1 and "before the event" in early[0]
    twice = check_oneshot_stream([("reg", "/w", 1), ("event", "/w", 3), ("event", "/w", 3)])
    assert len(twice) == 1 and "fired again" in twice[0]


def test_persistent_stream():
    ok = [("pre", "/p", 4), ("added",), ("base", "/p", 5), ("event", "/p", 3), ("read", "/p", 5),
          ("event", "/p", 3), ("event", "/p", 3), ("read", "/p", 7)]
    assert check_persistent_stream(ok) == []
    missed = [("pre", "/p", 4), ("added",), ("base", "/p", 4), ("event", "/p", 3), ("read", "/p", 6)]
    assert "missed" in check_persistent_stream(missed)[0]
    spurious = [("pre", "/p", 4), ("added",), ("base", "/p", 4), ("event", "/p", 3), ("event", "/p", 3),
                ("read", "/p", 5)]
    assert "spurious" in check_persistent_stream(spurious)[0]


def seq(c, t0, name, type_=OK):
    return Op(client=c, f="seq", key="/q", t_invoke=t0, t_complete=t0 + 1 if type_ != INFO else INF, type=type_,
              result=f"/q/s-{name:010d}" if name is not None else None)


def test_sequential():
    names = [f"s-{i:010d}" for i in range(3)]
    h = [seq("a", 0, 0), seq("b", 1, 1), seq("a", 2, None, INFO), seq("a", 3, 2)]
    assert check_sequential(h, {1: {"/q": names}, 2: {"/q": names}}) == []
    dup = check_sequential([seq("a", 0, 0), seq("b", 1, 0)], {1: {"/q": names[:1]}})
    assert any("twice" in v for v in dup)
    gap = check_sequential([seq("a", 0, 0), seq("a", 1, 2)], {1: {"/q": [names[0], names[2]]}})
    assert any("gaps at [1]" in v for v in gap)
    lost = check_sequential([seq("a", 0, 0), seq("a", 1, 1)], {1: {"/q": names[:1]}})
    assert any("missing" in v for v in lost)
    phantom = check_sequential([seq("a", 0, 0)], {1: {"/q": names[:2]}})
    assert any("unknown outcome" in v for v in phantom)
    order = check_sequential([seq("a", 0, 1), seq("a", 2, 0)], {1: {"/q": names[:2]}})
    assert any("order sent" in v for v in order)


def test_acked_ephemerals_trees():
    h = [Op(client="a", f="create", key="/x", value=b"1", type=OK), Op(client="a", f="create", key="/y", value=b"2")]
    assert check_acked(h, {1: {"/x": b"1"}, 2: {"/x": b"1", "/y": None}}) == []
    assert "missing" in check_acked(h, {1: {"/x": None}})[0]
    assert "wrong data" in check_acked(h, {1: {"/x": b"0"}})[0]
    sets = [Op(client="a", f="sset", key="/s", type=OK, result=4), Op(client="a", f="sset", key="/s", result=None)]
    assert check_acked(sets, {1: {"/s": 4}, 2: {"/s": 5}}) == []
    assert "undone" in check_acked(sets, {1: {"/s": 3}})[0]
    assert check_ephemerals({1: [], 2: []}) == []
    assert "e1" in check_ephemerals({1: [], 2: ["e1"]})[0]
    t = {"/": (b"", 1, None), "/a": (b"x", 2, None)}
    assert check_same_trees({1: t, 2: dict(t)}) == []
    assert "differ" in check_same_trees({1: t, 2: {"/": (b"", 1, None), "/a": (b"x", 3, None)}})[0]
