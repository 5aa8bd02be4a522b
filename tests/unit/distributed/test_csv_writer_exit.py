"""Locust's --csv writer at exit: it must be stopped before Locust closes its files, or it can wake once more and
die with 'I/O operation on closed file' (seen in a master's output after a run that went well on a busy box)."""

from __future__ import annotations

from pathlib import Path

import gevent
from locust import events
from locust.env import Environment
from locust.stats import PERCENTILES_TO_REPORT, StatsCSVFileWriter

from vllm_users.distributed import plugin


def _writer(tmp_path: Path) -> tuple[StatsCSVFileWriter, gevent.Greenlet]:
    env = Environment(events=events)
    env.create_local_runner()
    w = StatsCSVFileWriter(env, PERCENTILES_TO_REPORT, str(tmp_path / "locust"), full_history=True)
    g = gevent.spawn(w.stats_writer)
    gevent.sleep(0.05)  # it wrote its headers and sleeps until its next pass
    return w, g


def test_closing_under_a_running_writer_is_the_failure_this_guards(tmp_path: Path) -> None:
    w, g = _writer(tmp_path)
    w.close_files()  # what Locust's shutdown does, without the quit listener
    g.join(timeout=3)
    assert isinstance(g.exception, ValueError) and "closed file" in str(g.exception)


def test_the_quit_event_stops_the_writer_before_the_files_close(tmp_path: Path) -> None:
    w, g = _writer(tmp_path)
    assert not g.dead
    events.quit.fire(exit_code=0)  # the plugin's listener; Locust closes the files right after it
    assert g.dead and g.exception is None
    w.close_files()
    gevent.sleep(1.2)  # a writer left alive would wake here and raise
    assert (tmp_path / "locust_stats.csv").read_text().startswith("Type,Name")
    assert plugin.stop_csv_writers() == 0
