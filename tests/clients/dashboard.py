"""The Grafana dashboard (configs/grafana/ringkeeper.json) and the metric names its queries use.

A query names a metric where an identifier is not a PromQL function, keyword or aggregation
clause and is not inside a label matcher, range or string; `label_values(METRIC, LABEL)` names
its first argument. Tests compare these names with what a server's /metrics exports."""
import json
import os
import re

DASHBOARD = os.path.join(os.path.dirname(__file__), "..", "..", "configs", "grafana", "ringkeeper.json")

_KEYWORDS = {"and", "or", "unless", "bool", "offset", "on", "ignoring", "group_left", "group_right", "inf", "nan"}
_IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def metric_names(expr):
    """The metric names one PromQL expression reads."""
    label_values = re.fullmatch(r"\s*label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(,[^)]*)?\)\s*", expr)
    if label_values:
        return {label_values.group(1)}
    s = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)  # strings
    s = re.sub(r"\{[^}]*\}", " ", s)  # label matchers
    s = re.sub(r"\[[^\]]*\]", " ", s)  # ranges
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)  # label lists
    names = set()
    for m in _IDENT.finditer(s):
        word, rest = m.group(0), s[m.end():]
        if word in _KEYWORDS or re.match(r"\s*\(", rest) or (m.start() > 0 and s[m.start() - 1].isdigit()):
            continue  # a function or aggregation, or the exponent of a number
        names.add(word)
    return names


def queries(path=DASHBOARD):
    """Every PromQL query of the dashboard: panel targets and templating queries."""
    with open(path) as f:
        dash = json.load(f)
    out = []
    for panel in dash["panels"]:
        out.extend(t["expr"] for t in panel.get("targets", []))
    for var in dash.get("templating", {}).get("list", []):
        q = var.get("query")
        if isinstance(q, dict):
            out.append(q["query"])
        elif var.get("type") == "query" and isinstance(q, str):
            out.append(q)
    return out


def missing_metrics(exported, path=DASHBOARD):
    """Names the dashboard's queries use that are not among `exported` (names without labels)."""
    used = set().union(*(metric_names(q) for q in queries(path)))
    return sorted(used - set(exported))


def exported_names(prometheus_samples):
    """Metric names of /metrics samples keyed `name{labels}` or `name`."""
    return {k.split("{", 1)[0] for k in prometheus_samples}
