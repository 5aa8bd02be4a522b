"""The latency-throughput plot across runs puts each run at its steady interior's output tok/s (its `delivery`
block), not at its completions over ramp and drain (a sweep's rate 20 read 15.4 there, where it ran at 19.3)."""

from __future__ import annotations

from orchestration.report.plots import latency_throughput_figure
from orchestration.report.postprocess import RunData
from vllm_users.measure import metric_keys as K
from vllm_users.measure.delivered import steady


def _run(name: str, whole: float, interior: float | None) -> RunData:
    res = {K.OUTPUT_THROUGHPUT: whole, K.TTFT.key("median"): 10.0, K.TPOT.key("median"): 5.0}
    if interior is not None:
        res[K.DELIVERY] = {"achieved_rate": interior / 16, K.OUTPUT_THROUGHPUT: interior}
    return RunData(run_dir=name, name=name, result=res, source="records")


def test_the_plot_reads_the_steady_interior() -> None:
    runs = [_run("a", 150.0, 190.0), _run("b", 300.0, None)]  # b: a result written before the block
    plot = latency_throughput_figure(runs)
    assert plot is not None
    x = list(plot.figure.axes[0].lines[0].get_xdata())
    assert x == [190.0, 300.0]
    assert steady(runs[0].result, K.REQUEST_THROUGHPUT) == 190.0 / 16
    assert steady(runs[1].result, K.REQUEST_THROUGHPUT) is None
