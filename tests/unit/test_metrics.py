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


def test_counts_from_many_threads_add_up_and_survive_their_threads():
    import threading
    metrics.reset()

    def count():
        for _ in range(2000):
            metrics.counter_inc("ThreadCount")
    for _ in range(3):  # threads that end: their shards are retired, not lost
        threads = [threading.Thread(target=count) for _ in range(4)]
        for t in threads:
            t.start()
        count()
        for t in threads:
            t.join()
    assert metrics.counter_value("ThreadCount") == 3 * 5 * 2000
    assert len(metrics._shards) <= 6  # ended threads' shards were folded away
    saved = metrics.snapshot()
    t = threading.Thread(target=metrics.counter_inc, args=("ThreadCount", 7))
    t.start()
    t.join()
    assert metrics.diff(saved) == {"ThreadCount": 7}
    metrics.restore(saved)
    assert metrics.counter_value("ThreadCount") == 30000
    metrics.reset()
    assert metrics.counter_value("ThreadCount") == 0 and metrics.counter_names() == []
