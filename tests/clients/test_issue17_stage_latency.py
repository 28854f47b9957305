"""Issue 17, per-stage latency (ringkeeper only): after writes and reads on a standalone
server and on a 3-member ensemble (scripts/ensemble.sh), `mntr` (rk_stage_<stage>_count,
_p50_us, _p99_us, _max_us) and `/metrics` (ringkeeper_stage_latency_seconds, a Prometheus
histogram labelled by stage) carry every stage each member times, with counts equal to the
requests that went through it, p50 <= p99 <= max, and the two views agreeing; `srst` zeroes
them. Raw connections (rawzk) send exactly the requests counted (no pings). No timing decides
pass or fail: only counts and the order of the quantiles."""

import pytest

import rawzk
from helpers import free_port, wait_until
from test_admin_http import get
from test_ensemble import ensemble  # noqa: F401 (fixture)
from test_four_letter_words import four_letter_word, mntr

pytestmark = pytest.mark.ringkeeper_only

STAGES = ["core_to_pipeline", "prep", "propose_to_commit", "forward_to_commit", "log_fsync", "commit_to_core", "reply_to_socket", "read"]
METRIC = "ringkeeper_stage_latency_seconds"


def stages_of(hostport):
    """{stage: (count, p50, p99, max)} from mntr."""
    m = mntr(hostport)
    return {s: tuple(int(m[f"rk_stage_{s}_{k}"]) for k in ("count", "p50_us", "p99_us", "max_us")) for s in STAGES}


def histograms_of(admin_port):
    """{stage: ([(le, cumulative)], sum_s, count)} from /metrics."""
    out = {s: ([], None, None) for s in STAGES}
    for line in get(admin_port, "/metrics")[2].splitlines():
        if not line.startswith(METRIC):
            continue
        name, value = line.rsplit(" ", 1)
        stage = name.split('stage="', 1)[1].split('"', 1)[0]
        buckets, total, count = out[stage]
        if name.startswith(f"{METRIC}_bucket"):
            le = name.split('le="', 1)[1].split('"', 1)[0]
            buckets.append((float("inf") if le == "+Inf" else float(le), int(value)))
        elif name.startswith(f"{METRIC}_sum"):
            total = float(value)
        elif name.startswith(f"{METRIC}_count"):
            count = int(value)
        out[stage] = (buckets, total, count)
    return out


def check_consistent(hostport, admin_port, expected):
    """Every stage: mntr's count is `expected[stage]` (an int, or a predicate on the count);
    p50 <= p99 <= max; /metrics shows the same count (at least it, for a predicate's stage), buckets cumulative with fixed edges, the
    +Inf bucket equal to the count, and a sum within count x max."""
    def counts_reached():
        got = stages_of(hostport)
        for s, want in expected.items():
            ok = want(got[s][0]) if callable(want) else got[s][0] == want
            if not ok:
                return None
        return got
    got = wait_until(counts_reached, timeout=10, what=f"stage counts {expected}")
    for s, (count, p50, p99, mx) in got.items():
        assert p50 <= p99 <= mx, (s, got[s])
        if count == 0:
            assert (p50, p99, mx) == (0, 0, 0), (s, got[s])
    hist = histograms_of(admin_port)
    edges = None
    for s in STAGES:
        buckets, total, count = hist[s]
        # A stage given as a predicate may still be counting (a leader's own fdatasync can
        # finish after the quorum committed the txns it carried): /metrics, read after mntr,
        # shows at least mntr's count; the others are exact.
        moving = callable(expected.get(s))
        assert count >= got[s][0] if moving else count == got[s][0], (s, count, got[s])
        les = [le for le, _ in buckets]
        assert les == sorted(les) and les[-1] == float("inf") and len(set(les)) == len(les), s
        edges = edges or les
        assert les == edges, "every stage has the same bucket edges"
        cum = [c for _, c in buckets]
        assert cum == sorted(cum) and cum[-1] == count, (s, cum[-1], count)
        if moving and count != got[s][0]:
            continue  # mntr's max and p50 are of fewer records than /metrics shows
        assert total is not None and total <= count * (got[s][3] + 1) / 1e6 + 1e-9, (s, total, got[s])
        if count:
            # The bucket where the cumulative count reaches half holds mntr's p50.
            le50 = next(le for le, c in buckets if c * 2 >= count)
            assert got[s][1] < le50 * 1e6 + 1, (s, got[s], le50)
    return got


def srst(hostport):
    assert four_letter_word(hostport, "srst") == "Server stats reset.\n"


def writes_and_reads(hostport, prefix, writes, reads):
    """A session makes `writes` creates, `reads` getData and closes itself (one more write)."""
    with rawzk.RawConn(hostport) as c:
        for i in range(writes):
            c.create(f"{prefix}-{i}", b"x" * 100)
        for i in range(reads):
            c.get_data(f"{prefix}-{i % writes}")
        c.close_session()


def test_standalone_stages_follow_the_requests_and_srst_zeroes_them(make_server):
    admin = free_port()
    s = make_server(**{"4lw.commands.whitelist": "*", "admin.enableServer": "true",
                       "admin.serverAddress": "127.0.0.1", "admin.serverPort": admin})
    writes_and_reads(s.hostport, "/warm", 5, 5)
    srst(s.hostport)
    assert all(v[0] == 0 for v in stages_of(s.hostport).values()), "srst zeroes every stage"
    creates, reads = 40, 25
    writes_and_reads(s.hostport, "/s", creates, reads)
    writes = creates + 1  # closeSession
    got = check_consistent(s.hostport, admin, {
        "core_to_pipeline": writes,
        "prep": writes,
        "propose_to_commit": 0,
        "forward_to_commit": 0,
        # The session's create is a txn too; a batch holds one or more.
        "log_fsync": lambda n: 1 <= n <= writes + 1,
        "commit_to_core": writes,
        "reply_to_socket": writes + reads,
        "read": reads,
    })
    print("standalone stages (count, p50, p99, max µs):", got)


def test_ensemble_stages_on_the_leader_and_a_follower(ensemble):  # noqa: F811
    e = ensemble(3)
    leader = e.wait_serving([1, 2, 3])
    follower = next(i for i in (1, 2, 3) if i != leader)
    admin = {i: e.base + 10200 + i for i in (1, 2, 3)}
    for i in (1, 2, 3):
        srst(e.hostport(i))
    creates_leader, creates_follower, reads = 30, 20, 10
    writes_and_reads(e.hostport(leader), "/l", creates_leader, reads)
    writes_and_reads(e.hostport(follower), "/f", creates_follower, reads)
    on_leader, on_follower = creates_leader + 1, creates_follower + 1  # with closeSession
    got_leader = check_consistent(e.hostport(leader), admin[leader], {
        "core_to_pipeline": on_leader,
        # The leader preps every write, its own and the follower's.
        "prep": on_leader + on_follower,
        # ... and proposes them, with the two sessions' createSession txns.
        "propose_to_commit": on_leader + on_follower + 2,
        "forward_to_commit": 0,
        "log_fsync": lambda n: n >= 1,
        "commit_to_core": on_leader,
        "reply_to_socket": on_leader + reads,
        "read": reads,
    })
    got_follower = check_consistent(e.hostport(follower), admin[follower], {
        "core_to_pipeline": on_follower,
        "prep": 0,
        "propose_to_commit": 0,
        # Every write of its client went to the leader and came back committed (the
        # closeSession too; its createSession is not forwarded as a write).
        "forward_to_commit": on_follower,
        "log_fsync": lambda n: n >= 1,
        "commit_to_core": on_follower,
        "reply_to_socket": on_follower + reads,
        "read": reads,
    })
    print("leader stages (count, p50, p99, max µs):", got_leader)
    print("follower stages (count, p50, p99, max µs):", got_follower)
