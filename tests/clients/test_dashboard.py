"""The Grafana dashboard's query parser: it finds the metric names a query reads, and flags a
name no server exports. (Every name is checked against a live leader's /metrics in
test_ensemble.py's leader-kill test, where the ensemble-only gauges exist too.)"""
import json

from dashboard import exported_names, metric_names, missing_metrics, queries


def test_metric_names_skip_functions_labels_ranges_and_strings():
    expr = ('histogram_quantile(0.99, sum by (le, stage) (rate(ringkeeper_stage_latency_seconds_bucket'
            '{instance=~"$instance", stage!="prep"}[$__rate_interval])))')
    assert metric_names(expr) == {"ringkeeper_stage_latency_seconds_bucket"}
    assert metric_names('rate(fsynctime_sum{instance=~"$instance"}[5m]) / rate(fsynctime_count[5m])') == {
        "fsynctime_sum", "fsynctime_count"}
    assert metric_names('server_state{instance=~"a"} == 1 and on (instance) quorum_size > 2e3') == {
        "server_state", "quorum_size"}
    assert metric_names("label_values(znode_count, instance)") == {"znode_count"}


def test_a_misspelled_metric_is_flagged(tmp_path):
    dash = {"panels": [{"targets": [{"expr": "rate(packets_recieved[1m])"}, {"expr": "znode_count"}]}],
            "templating": {"list": [{"type": "query", "query": {"query": "label_values(watch_count, instance)"}}]}}
    path = tmp_path / "d.json"
    path.write_text(json.dumps(dash))
    exported = exported_names({"packets_received": 1.0, "znode_count{x=\"1\"}": 2.0, "watch_count": 0.0})
    assert missing_metrics(exported, str(path)) == ["packets_recieved"]


def test_the_dashboard_covers_what_an_operator_watches():
    used = set().union(*(metric_names(q) for q in queries()))
    for name in ("packets_received", "ringkeeper_stage_latency_seconds_bucket", "fsynctime_sum", "global_sessions",
                 "watch_count", "elections", "ringkeeper_core_packets_received", "proposal_count"):
        assert name in used, name
