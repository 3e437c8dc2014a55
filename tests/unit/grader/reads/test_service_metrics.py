"""grader.reads.service_metrics' text format, read back by prometheus_client's parser: label
values that need escaping, a summary without observations (NaN quantiles), large counts
written whole, and the broker's figures when it cannot be read."""
from __future__ import annotations

import math

from prometheus_client.parser import text_string_to_metric_families

from grader.reads.service_metrics import Metric, _quantile, broker_metrics, exposition


def _parsed(metrics: list[Metric]) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(exposition(metrics)) for s in family.samples}


def test_labels_that_need_escaping_survive_the_round_trip() -> None:
    odd = 'a "quoted"\\slug\nwith a newline'
    metric = Metric("kg_runs", "gauge", "Runs.")
    metric.add(12345678, assignment=odd)
    assert _parsed([metric]) == {("kg_runs", (("assignment", odd),)): 12345678}
    assert "12345678" in exposition([metric])  # whole, not 1.23457e+07


def test_a_summary_without_observations_reads_nan() -> None:
    took = Metric("kg_took", "summary", "Seconds.")
    took.add(_quantile([], 0.5), assignment="hw4", quantile="0.5")
    took.add(0, "_count", assignment="hw4")
    took.add(0, "_sum", assignment="hw4")
    got = _parsed([took])
    assert math.isnan(got[("kg_took", (("assignment", "hw4"), ("quantile", "0.5")))])
    assert got[("kg_took_count", (("assignment", "hw4"),))] == 0


def test_quantiles_of_few_values() -> None:
    assert _quantile([7.0], 0.9) == 7.0
    assert _quantile([10.0, 20.0, 30.0], 0.5) == 20.0
    assert 20.0 < _quantile([10.0, 20.0, 30.0], 0.9) <= 30.0


def test_an_unreadable_broker_reads_down_with_no_queue() -> None:
    assert _parsed(broker_metrics(None)) == {("kg_broker_up", ()): 0}
    assert _parsed(broker_metrics({"grading": 4})) == {("kg_broker_up", ()): 1,
                                                        ("kg_broker_queue_length", (("queue", "grading"),)): 4}
