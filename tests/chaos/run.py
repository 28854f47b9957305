"""One chaos run (issue 18), started by scripts/chaos.sh inside the client namespace of a rig
that scripts/netns.sh has brought up: starts the ensemble (ringkeeper or Apache ZooKeeper),
runs the workloads (tests/chaos/workloads.py) under the seeded nemesis (nemesis.py) for the
given minutes, heals every fault, reads every member's final state and runs the checkers
(checkers.py). Writes a JSON summary (--out) and prints it; exit status 1 when a checker found
a violation, 2 when the rig itself failed.
Rules: the same seed gives the same schedule of faults and op choices (timings differ); every
fault is healed and the ensemble stopped before exit; the ensemble is left for chaos.sh to
tear down with the namespaces."""

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "clients"))

import checkers  # noqa: E402
import rawzk  # noqa: E402
import workloads  # noqa: E402
from history import INFO, OK, History  # noqa: E402
from nemesis import ALL, NETNS_SH, Nemesis  # noqa: E402
from test_crash import dump_tree  # noqa: E402

WORKLOADS_ALL = list(workloads.WORKLOADS)
WRITES = ("cas", "create", "seq", "sset", "wset", "eph")
SETTLE_S = 5.0  # workloads keep running this long after healing, before they stop
FINAL_WAIT_S = 90.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--minutes", type=float, default=1.0)
    ap.add_argument("--nemesis", default=",".join(ALL))
    ap.add_argument("--workloads", default=",".join(WORKLOADS_ALL))
    ap.add_argument("--kind", choices=["rk", "zk"], default="rk")
    ap.add_argument("--dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--members", type=int, default=3, help="voting members")
    ap.add_argument("--observers", type=int, default=0, help="observers (members N+1..N+K)")
    ap.add_argument("--overlap", action="store_true", help="two faults active at once")
    ap.add_argument("--mutant", action="store_true", help="the server is the mutant build (recorded)")
    a = ap.parse_args()
    kinds = [k for k in a.nemesis.split(",") if k]
    names = [w for w in a.workloads.split(",") if w]
    for k in kinds:
        if k not in ALL:
            sys.exit(f"unknown nemesis {k} (known: {','.join(ALL)})")
    t_start = time.monotonic()
    log_f = open(os.path.join(a.dir, "chaos.log"), "a")

    def log(msg):
        line = f"[{time.monotonic() - t_start:8.2f}] {msg}"
        log_f.write(line + "\n")
        log_f.flush()
        print(line, flush=True)

    ens = os.path.join(a.dir, "ensemble")
    os.makedirs(ens, exist_ok=True)
    a.voters = a.members
    a.members += a.observers  # every member below: voters and observers alike
    nem = Nemesis(a.seed, kinds, a.kind, ens, a.members, log, overlap=a.overlap)
    summary = {"kind": a.kind, "mutant": a.mutant, "seed": a.seed, "minutes": a.minutes, "nemesis": kinds, "workloads": names,
               "voters": a.voters, "observers": a.observers, "overlap": a.overlap}
    try:
        if "disk" in kinds or "ioerror" in kinds:
            nem.make_volumes("disk" in kinds, "ioerror" in kinds)
        r = subprocess.run([NETNS_SH, "ensemble-start", a.kind, ens], capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise RuntimeError(f"ensemble-start: {r.stderr.strip()}")
        hosts = subprocess.run([NETNS_SH, "conn"], capture_output=True, text=True).stdout.strip().split(",")
        log(f"{a.kind} ensemble serving at {hosts}; workloads {names}; nemesis {kinds}; seed {a.seed}")
        workloads.setup(hosts)
        history = History()
        ctx = workloads.Context(hosts, history, a.seed)
        threads = workloads.start(ctx, names)
        stop_nemesis = threading.Event()
        nt = threading.Thread(target=nem.run, args=(stop_nemesis,), daemon=True)
        nt.start()
        time.sleep(a.minutes * 60)
        stop_nemesis.set()
        nt.join()
        nem.heal_all()
        log("all faults healed")
        if not nem.wait_serving(range(1, a.members + 1), timeout=FINAL_WAIT_S):
            log("not every member serves after healing")
        time.sleep(SETTLE_S)
        ctx.stop.set()
        for t in threads:
            t.join(30)
        if any(t.is_alive() for t in threads):
            ctx.errors.append("a worker did not stop")
        summary.update(final_checks(a, hosts, history, ctx, nem, log))
    except Exception as e:
        summary["rig_error"] = f"{type(e).__name__}: {e}"
        log(f"rig error: {summary['rig_error']}\n{traceback.format_exc()}")
    finally:
        try:
            nem.heal_all()
            subprocess.run([NETNS_SH, "ensemble-stop", ens], capture_output=True, timeout=60)
        finally:
            nem.drop_volumes()
    summary["wall_minutes"] = round((time.monotonic() - t_start) / 60, 2)
    with open(a.out, "w") as f:
        json.dump(summary, f, indent=1)
    print_summary(summary)
    if summary.get("rig_error") or summary.get("rig_errors"):
        return 2
    return 1 if summary.get("violations_total") else 0


def final_checks(a, hosts, history, ctx, nem, log):
    members = range(1, a.members + 1)
    final_children, final_data, final_eph, dumps = {}, {}, {}, {}
    acked_paths = [o.key for o in history.ops if o.f == "create" and o.type == OK]
    set_keys = sorted({o.key for o in history.ops if o.f in ("sset", "wset", "cas")})
    unserved = []
    for m in members:
        try:
            read_member(m, hosts, history, final_children, final_data, acked_paths, set_keys)
        except (rawzk.ZKError, *workloads.LOST) as e:
            unserved.append(f"member {m} does not serve after healing: {type(e).__name__}: {e}")
    members = [m for m in members if not any(u.startswith(f"member {m} ") for u in unserved)]
    # ephemerals: every session has ended; expiry needs a leader and the session timeout
    deadline = time.monotonic() + FINAL_WAIT_S
    same = []
    try:
        while True:
            for m in members:
                with rawzk.RawConn(hosts[m - 1], timeout_ms=10000, io_timeout=30) as c:
                    c.sync("/")
                    final_eph[m] = c.get_children(f"{workloads.ROOT}/eph")
                    c.close_session()
            if not any(final_eph.values()) or time.monotonic() > deadline:
                break
            time.sleep(1.0)
        # trees: followers apply what they have logged shortly after the leader
        deadline = time.monotonic() + FINAL_WAIT_S
        while True:
            dumps = {m: dump_tree(hosts[m - 1]) for m in members}
            same = checkers.check_same_trees(dumps)
            if not same or time.monotonic() > deadline:
                break
            time.sleep(2.0)
    except (rawzk.ZKError, *workloads.LOST) as e:
        unserved.append(f"a member stopped serving during the final reads: {type(e).__name__}: {e}")
    log("final state read from every member")
    save_history(a.dir, history)
    return run_checkers(history, ctx, nem, final_children, final_data, final_eph, dumps, same, unserved, log)


def save_history(d, history):
    """DIR/history.jsonl: every op (times relative to the first invocation), for post-mortems."""
    t0 = min((o.t_invoke for o in history.ops), default=0.0)
    with open(os.path.join(d, "history.jsonl"), "w") as f:
        for o in history.ops:
            f.write(json.dumps({"client": o.client, "f": o.f, "key": o.key, "value": repr(o.value),
                                "t0": round(o.t_invoke - t0, 4),
                                "t1": None if o.t_complete == float("inf") else round(o.t_complete - t0, 4),
                                "type": o.type, "result": repr(o.result), "session": o.session,
                                "member": o.member}) + "\n")


def read_member(m, hosts, history, final_children, final_data, acked_paths, set_keys):
    """Member m's final state, read after sync: the registers (as final reads in the
    history), the sequential parents' children, acknowledged creates' data, set nodes'
    versions."""
    with rawzk.RawConn(hosts[m - 1], timeout_ms=10000, io_timeout=30) as c:
        c.sync("/")
        for key in sorted({o.key for o in history.ops if o.f in ("cas", "read")}):
            op = history.invoke(f"final-m{m}", "read", key, member=m)
            c.sync(key)
            data, st = c.get_data(key)
            history.complete(op, OK, (st.version, data))
        final_children[m] = {p: c.get_children(p) for p in
                             sorted({o.key for o in history.ops if o.f == "seq"})}
        present = set(c.get_children(f"{workloads.ROOT}/acked"))
        data = {p: (c.get_data(p)[0] if p.rsplit("/", 1)[1] in present else None) for p in acked_paths}
        for k in set_keys:
            st = c.exists(k)
            data[k] = st.version if st else None
        final_data[m] = data
        c.close_session()


def run_checkers(history, ctx, nem, final_children, final_data, final_eph, dumps, same, unserved, log):
    out = {}
    t0 = time.monotonic()
    reg_violations, reg_unknown = checkers.check_register(history.ops)
    log(f"register search took {time.monotonic() - t0:.1f} s")
    results = {
        "linearizable register": reg_violations,
        "sessions (FIFO, monotonic reads, read-your-writes)": checkers.check_sessions(history.ops) +
        list(ctx.wire_violations),
        "watches (order, one-shot once, persistent complete)": [
            v for kind, where, lg in ctx.streams
            for v in (checkers.check_oneshot_stream if kind == "oneshot" else checkers.check_persistent_stream)(
                lg, where)],
        "sequential names": checkers.check_sequential(history.ops, final_children),
        "acknowledged writes present": checkers.check_acked(history.ops, final_data),
        "ephemerals of ended sessions gone": checkers.check_ephemerals(final_eph),
        "identical trees": same,
        "faults (bit flips)": nem.findings,
        "members serve after healing": unserved,
    }
    out["checkers"] = {k: {"violations": len(v), "first": v[:5]} for k, v in results.items()}
    out["violations_total"] = sum(len(v) for v in results.values())
    out["register_unknown_keys"] = reg_unknown
    ops = [o for o in history.ops if not o.client.startswith("final")]
    per = {}
    for o in ops:
        d = per.setdefault(o.f, {"ops": 0, "ok": 0, "fail": 0, "info": 0})
        d["ops"] += 1
        d[o.type] += 1
    out["ops"] = len(ops)
    out["ops_by_member"] = {str(m): sum(1 for o in ops if o.member == m) for m in sorted({o.member for o in ops})}
    out["ops_by_kind"] = per
    out["acked_writes"] = sum(1 for o in ops if o.f in WRITES and o.type == OK)
    out["unknown_outcome"] = sum(1 for o in ops if o.type == INFO)
    out["watch_streams"] = len(ctx.streams)
    out["watch_events"] = sum(1 for _, _, lg in ctx.streams for it in lg if it[0] == "event")
    out["ephemeral_sessions"] = ctx.ephemeral_sessions
    out["faults"] = nem.counts
    if nem.overlap:
        out["overlapping_faults"] = nem.overlaps
    if any(nem.tcp.values()):
        out["tcp_counters_during_packet_faults"] = nem.tcp
    out["nodes"] = max((len(d) for d in dumps.values()), default=0)
    if ctx.errors or nem.rig_errors:
        out["rig_errors"] = (nem.rig_errors + ctx.errors)[:10]
    return out


def print_summary(s):
    print("\n==== chaos summary ====")
    print(f"server {s['kind']}, seed {s['seed']}, {s['minutes']} min (wall {s.get('wall_minutes')}), "
          f"nemesis {','.join(s['nemesis'])}, faults {s.get('faults')}")
    print(f"members: {s.get('voters', 3)} voters + {s.get('observers', 0)} observers; "
          f"overlapping faults: {s.get('overlapping_faults') if s.get('overlap') else 'off'}")
    if s.get("tcp_counters_during_packet_faults"):
        print(f"TCP counters during dup/reorder faults: {s['tcp_counters_during_packet_faults']}")
    if "rig_error" in s:
        print(f"RIG ERROR: {s['rig_error']}")
        return
    print(f"ops {s['ops']}, acknowledged writes {s['acked_writes']}, unknown outcome {s['unknown_outcome']}, "
          f"watch events {s['watch_events']}, ephemeral sessions {s['ephemeral_sessions']}, nodes {s['nodes']}")
    for k, v in s["checkers"].items():
        print(f"  {k:55s} {v['violations']} violations")
        for line in v["first"]:
            print(f"      {line}")
    if s.get("register_unknown_keys"):
        print(f"  (register search gave up on {s['register_unknown_keys']})")
    for e in s.get("rig_errors", []):
        print(f"  RIG ERROR: {e}")
    print(f"violations: {s['violations_total']}")


if __name__ == "__main__":
    sys.exit(main())
