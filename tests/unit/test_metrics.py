from lazy_mlir import metrics


def test_counters_and_report():
    metrics.reset()
    metrics.counter_inc("MarkStep")
    metrics.counter_inc("MarkStep", 2)
    metrics.add_sample("CompileTime", 0.25)
    assert metrics.counter_value("MarkStep") == 3
    assert metrics.counter_value("Nope") == 0
    assert metrics.counter_names() == ["MarkStep"]
    report = metrics.metrics_report()
    assert "Counter: MarkStep\n  Value: 3" in report
    assert "Metric: CompileTime" in report and "250.000ms" in report
    metrics.reset()
    assert metrics.counter_names() == []
