"""Markdown rows for docs/reliability.md from chaos runs' JSON summaries (scripts/chaos.sh
--out, default target/chaos/*/summary.json):

    target/venv/bin/python tests/chaos/table.py target/chaos/*/summary.json

One row per run: server (with its observers and overlapping fault pairs, if any), seed,
nemesis (faults injected), minutes, then per workload the ops /
acknowledged writes, and the violations per checker (0 = all passed).
Rules: reads the summaries only; prints, never edits the docs."""

import json
import sys

WORKLOADS = {"register": ("cas", "read"), "creates": ("create", "seq"), "sessions": ("sset", "sget"),
             "watches": ("wset",), "ephemerals": ("eph",)}
WRITES = ("cas", "create", "seq", "sset", "wset", "eph")


def is_mutant(s, path):
    return bool(s.get("mutant")) or "-mutant-" in path


def row(s, path):
    by = s.get("ops_by_kind", {})
    cells = []
    for w, fs in WORKLOADS.items():
        ops = sum(by.get(f, {}).get("ops", 0) for f in fs)
        acked = sum(by.get(f, {}).get("ok", 0) for f in fs if f in WRITES)
        extra = f", {s.get('watch_events', 0)} events" if w == "watches" else ""
        cells.append(f"{ops} / {acked}{extra}")
    faults = ", ".join(f"{k} {v}" for k, v in sorted(s.get("faults", {}).items()))
    if "checkers" in s:
        bad = [f"{k}: {v['violations']}" for k, v in s["checkers"].items() if v["violations"]]
        verdict = "0" if not bad else "**" + "; ".join(bad) + "**"
    else:
        verdict = f"rig error: {s.get('rig_error')}"
    server = {"rk": "ringkeeper", "zk": "ZooKeeper 3.8"}[s["kind"]] + (" **mutant**" if is_mutant(s, path) else "")
    if s.get("observers"):
        server += f", **{s.get('voters', 3)} + {s['observers']} observers**"
    if s.get("overlap"):
        pairs = ", ".join(f"{k} {v}" for k, v in sorted(s.get("overlapping_faults", {}).items()))
        server += f", **overlapping** ({pairs})"
    return (f"| {server} | {s['seed']} | {','.join(s['nemesis'])} ({faults}) | {s['minutes']:g} | "
            f"{s.get('ops', 0)} | {s.get('acked_writes', 0)} | " + " | ".join(cells) + f" | {verdict} |")


def main(paths):
    print("| server | seed | nemesis (faults injected) | min | ops | acked writes | register ops / acked | "
          "creates+seq ops / acked | sessions ops / acked | watches writes / acked, events | "
          "ephemerals / acked | violations |")
    print("|" + " --- |" * 12)
    total = {}
    for p in paths:
        with open(p) as f:
            s = json.load(f)
        print(row(s, p))
        t = total.setdefault(s["kind"] + (" mutant" if is_mutant(s, p) else ""), [0.0, 0, 0, 0])
        t[0] += s["minutes"]
        t[1] += s.get("ops", 0)
        t[2] += s.get("acked_writes", 0)
        t[3] += s.get("violations_total", 0)
    for k, (m, ops, acked, v) in sorted(total.items()):
        print(f"\n{k}: {m:g} minutes, {ops} ops, {acked} acknowledged writes, {v} violations")


if __name__ == "__main__":
    main(sys.argv[1:])
