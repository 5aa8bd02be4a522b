"""Run the test suite as several pytest processes side by side, and report it as one run.

Most of the suite waits (a simulator, a Locust master and its workers start for a few seconds of load), so
a 2-core machine sits idle under one pytest. This runner keeps `--jobs` pytest processes busy, longest
job first, each with its own log and JUnit XML, then prints one summary: every failure's traceback, the
combined `-ra` lines (skips with their reasons), the slowest tests, and the wall time of each tier.

Why processes and not pytest-xdist: importing Locust monkey-patches `threading` with gevent, which kills
an xdist worker's execnet channel ("LoopExit: This operation would block forever"), and the tests rely on
that patching. A separate pytest per job runs exactly as the single-process suite does.

A job is a test file, or a folder whose tests share an expensive fixture (tests/e2e shares its vLLM
servers, so it is one job). The expected times in tests/durations.json order the jobs; `--record` rewrites
that file from this run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
DURATIONS = TESTS / "durations.json"
COUNTS = re.compile(
    r"^\d+ (passed|failed|skipped|errors?|deselected)\b.* in [\d.]+s"
)  # pytest -q's last line
EXCLUSIVE = "mark.exclusive"  # how a test file marks the tests that must not share the machine
# tests run in one process because they share servers that cost minutes to start: the image tier's build, and the
# e2e tier's vLLM servers. The e2e tier is two groups, run side by side: the files that use the tier's one normal
# server (tests/e2e/conftest.py) and the files that start servers of their own (LoRA, pooling, MoE, sweeps)
E2E_OWN_SERVERS = (
    "test_capacity_real_vllm.py",
    "test_classes_real_vllm.py",
    "test_endpoints_real_vllm.py",
    "test_make_moe_model.py",
    "test_platform.py",
)
GROUPS = ("tests/integration/deploy", "tests/e2e[vllm_server]", "tests/e2e[own servers]")
# what test.sh builds beside the suite (`--setups DIR`: each setup writes DIR/NAME.log, then DIR/NAME.rc) and the
# test paths that wait for it. The other jobs start at once: vLLM's venv (~2.5 min the first time, mostly
# downloads) builds while they run, not before them
SETUPS = {
    "vllm": ("tests/e2e/",),
    "litellm": ("tests/integration/gateways/test_python_gateway.py",),
}
# a setup that failed: these jobs run with this variable set to why (the e2e tier then skips, saying so)
SETUP_FAILED_ENV = {"vllm": "VLLM_LOCUST_E2E_UNAVAILABLE"}


def group_of(path: str) -> str:
    """The group a test file runs in (one of GROUPS), or the file itself when it runs on its own."""
    if path.startswith("tests/integration/deploy/"):
        return GROUPS[0]
    if path.startswith("tests/e2e/"):
        return GROUPS[2] if path.rsplit("/", 1)[-1] in E2E_OWN_SERVERS else GROUPS[1]
    return path


# the expected seconds of a file that tests/durations.json does not know, by tier
DEFAULT_S = {"unit": 3.0, "integration": 30.0, "e2e": 60.0, "deploy": 300.0}


@dataclass
class Job:
    """One pytest process: its test paths, expected seconds, and, once run, its outcome."""

    paths: list[str]
    expected_s: float
    key: str = ""  # tests/durations.json's key: a group's name, or "" for the file(s) the job runs
    marks: str = ""  # a -m expression: the exclusive tests and the rest of their files run apart
    env: dict[str, str] = field(default_factory=dict)  # set for this job only (a failed setup's reason)
    log: Path | None = None
    xml: Path | None = None
    rc: int | None = None
    wall_s: float = 0.0
    cpu_s: float = 0.0  # user + system seconds of the process and the children it waited for
    started: float = 0.0
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        """The job as the summary names it."""
        if self.key:
            return f"{self.key} ({len(self.paths)} files)"
        return self.paths[0] if len(self.paths) == 1 else f"{self.paths[0]} (+{len(self.paths) - 1})"

    @property
    def needs(self) -> list[str]:
        """The setups (SETUPS) this job waits for."""
        return [name for name, pre in SETUPS.items() if any(p.startswith(pre) for p in self.paths)]

    @property
    def tier(self) -> str:
        """unit, integration or e2e."""
        return self.paths[0].split("/")[1]


def _rel(p: Path) -> str:
    return p.resolve().relative_to(ROOT).as_posix()


def _default(path: str) -> float:
    return DEFAULT_S["deploy" if "/deploy/" in path and "integration" in path else path.split("/")[1]]


def collect_jobs(selected: list[str], expected: dict[str, float]) -> list[Job]:
    """The jobs for the test files under `selected` (paths relative to the root), longest expected first."""
    files: list[str] = []
    for s in selected:
        p = (ROOT / s).resolve()
        found = [p] if p.is_file() else sorted(p.rglob("test_*.py"))
        files += [_rel(f) for f in found if "/data/" not in _rel(f)]
    groups: dict[str, list[str]] = {}
    for f in dict.fromkeys(files):
        groups.setdefault(group_of(f), []).append(f)
    jobs: list[Job] = []
    unit_small: list[str] = []
    for key, paths in groups.items():
        t = expected.get(key, sum(expected.get(p, _default(p)) for p in paths))
        if key.startswith("tests/unit/") and t < 15:
            unit_small.append(key)  # many quick files share one process: pytest's start-up is paid once
            continue
        jobs.append(Job(paths, t, key=key if key in GROUPS else ""))
    # the quick unit files, in two batches so that neither is the last job left running
    unit_small.sort()
    for batch in (unit_small[0::2], unit_small[1::2]):
        if batch:
            jobs.append(Job(batch, sum(expected.get(p, _default(p)) for p in batch)))
    jobs.sort(key=lambda j: -j.expected_s)
    return jobs


def exclusive_files(jobs: list[Job]) -> list[str]:
    """The files that hold tests marked `exclusive` (timing at the floor: they run alone, at the end)."""
    return [p for j in jobs for p in j.paths if (ROOT / p).is_file() and EXCLUSIVE in (ROOT / p).read_text()]


def split_exclusive(jobs: list[Job]) -> tuple[list[Job], list[Job]]:
    """The parallel jobs (exclusive tests deselected) and the one job of exclusive tests that runs alone."""
    files = exclusive_files(jobs)
    for j in jobs:
        if any(p in files for p in j.paths):
            j.marks = "not exclusive"
    alone = [Job(files, 0.0, marks="exclusive")] if files else []
    return jobs, alone


def _start(job: Job, work: Path, index: int, pytest_args: list[str]) -> None:
    job.log = work / f"job{index:03d}.log"
    job.xml = work / f"job{index:03d}.xml"
    marks = ["-m", job.marks] if job.marks else []
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-ra",
        "-p",
        "no:cacheprovider",
        f"--junitxml={job.xml}",
        "-o",
        "junit_family=xunit2",
        *marks,
        *pytest_args,
        *job.paths,
    ]
    job.started = time.monotonic()
    with open(job.log, "wb") as out:
        job.proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **job.env} if job.env else None,
        )


def _counts(xml: Path | None) -> dict[str, int]:
    c = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
    for case in _cases(xml):
        kinds = {child.tag for child in case}
        if "failure" in kinds:
            c["failed"] += 1
        elif "error" in kinds:
            c["error"] += 1
        elif "skipped" in kinds:
            c["skipped"] += 1
        else:
            c["passed"] += 1
    return c


def _cases(xml: Path | None) -> list[ET.Element]:
    if xml is None or not xml.exists():
        return []
    try:
        return list(ET.parse(xml).getroot().iter("testcase"))
    except ET.ParseError:
        return []


def _section(log: str, title: str) -> str:
    """A `=== title ===` section of a pytest log, up to the next top-level section."""
    m = re.search(rf"^=+ {title} =+$", log, re.M)
    if not m:
        return ""
    rest = log[m.end() :]
    end = re.search(r"^=+ (?!_)[^=]*=+$", rest, re.M)  # the next section (not a `___ test ___` header)
    return rest[: end.start() if end else len(rest)].strip("\n")


def _fmt(s: float) -> str:
    return f"{int(s) // 60}:{int(s) % 60:02d}"


def run(
    jobs: list[Job],
    n: int,
    pytest_args: list[str],
    work: Path,
    alone: list[Job] | None = None,
    setups_dir: Path | None = None,
) -> int:
    """Run the jobs `n` at a time (a job that needs a setup once it has ended), then the `alone` ones one by one
    with nothing beside them, printing a line as each ends; returns the suite's exit status."""
    t0 = time.monotonic()
    alone = alone or []
    everything = jobs + alone
    setups = Setups(setups_dir, t0)
    cpu0 = _cpu_times()
    _phase(jobs, n, pytest_args, work, t0, len(everything), 0, setups)
    busy = _busy_share(cpu0, _cpu_times())
    if alone:
        print(f"[{_fmt(time.monotonic() - t0)}] the exclusive tests, alone on the machine:", flush=True)
        _phase(alone, 1, pytest_args, work, t0, len(everything), len(jobs), setups)
    rc = _report(everything, time.monotonic() - t0)
    if (
        busy is not None
    ):  # well under 100 %: more jobs at once would finish sooner; near it, fewer tests would
        print(f"the machine's {os.cpu_count()} CPUs were {busy:.0%} busy while the jobs ran side by side")
    return rc


def _cpu_times() -> tuple[int, int] | None:
    """(busy, total) jiffies of all CPUs from /proc/stat, or None where there is none."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields[:8]) - idle, sum(fields[:8])


def _busy_share(a: tuple[int, int] | None, b: tuple[int, int] | None) -> float | None:
    if a is None or b is None or b[1] <= a[1]:
        return None
    return (b[0] - a[0]) / (b[1] - a[1])


class Setups:
    """The setups test.sh started beside the suite (`--setups DIR`): whether each has ended, and how."""

    LIMIT_S = 1800.0  # a setup still running after this is taken as failed: its jobs run and skip

    def __init__(self, folder: Path | None, t0: float) -> None:
        self.folder, self.t0 = folder, t0
        self.ended: dict[str, str | None] = {}  # name -> None (it worked) or why it failed

    def ready(self, job: Job) -> bool:
        """True when every setup the job needs has ended; a failed one's reason goes into the job's env."""
        for name in job.needs:
            if self.folder is None:
                continue
            if name not in self.ended and not self._check(name):
                return False
            why = self.ended[name]
            if why is not None and name in SETUP_FAILED_ENV:
                job.env[SETUP_FAILED_ENV[name]] = why
        return True

    def _check(self, name: str) -> bool:
        assert self.folder is not None
        rc_file, log_file = self.folder / f"{name}.rc", self.folder / f"{name}.log"
        waited = time.monotonic() - self.t0
        if not log_file.exists() and not rc_file.exists():  # never started (test.sh was told to skip it)
            self.ended[name] = None
            return True
        if not rc_file.exists() and waited < self.LIMIT_S:
            return False
        log = log_file.read_text(errors="replace") if log_file.exists() else ""
        rc = rc_file.read_text().strip() if rc_file.exists() else "still running"
        if rc == "0":
            self.ended[name] = None
            print(f"[{_fmt(waited)}] setup {name}: ready", flush=True)
            return True
        lines = [ln for ln in log.splitlines() if ln.strip() and not ln.startswith("[setup_")]
        why = f"setup {name} {'exited ' + rc if rc.isdigit() else rc}: {lines[-1] if lines else 'no message'}"
        self.ended[name] = why
        print(f"[{_fmt(waited)}] SETUP FAILED, its tests will be skipped: {why}\n{log[-3000:]}", flush=True)
        return True


def _phase(
    jobs: list[Job],
    n: int,
    pytest_args: list[str],
    work: Path,
    t0: float,
    total: int,
    done: int,
    setups: Setups,
) -> None:
    queue = list(jobs)
    running: list[Job] = []
    index = done
    while queue or running:
        while len(running) < n:
            job = next((j for j in queue if setups.ready(j)), None)  # longest first among those ready
            if job is None:
                break
            queue.remove(job)
            _start(job, work, index, pytest_args)
            index += 1
            running.append(job)
        time.sleep(0.2)
        for job in list(running):
            assert job.proc is not None
            # wait4, not poll: the process's CPU seconds (and those of the children it waited for) come with it
            pid, status, usage = os.wait4(job.proc.pid, os.WNOHANG)
            if pid == 0:
                continue
            rc = job.proc.returncode = os.waitstatus_to_exitcode(status)
            running.remove(job)
            done += 1
            job.rc, job.wall_s = rc, time.monotonic() - job.started
            job.cpu_s = usage.ru_utime + usage.ru_stime
            c = _counts(job.xml)
            state = "ok" if rc in (0, 5) else f"FAILED (exit {rc})"
            counts = ", ".join(f"{v} {k}" for k, v in c.items() if v)
            print(
                f"[{_fmt(time.monotonic() - t0)}] {done:3d}/{total} {state:<16} {job.wall_s:6.1f} s "
                f"({job.cpu_s:6.1f} s CPU)  "
                f"{job.name}{' -m ' + repr(job.marks) if job.marks else ''}  ({counts or 'no tests'})",
                flush=True,
            )


def _report(jobs: list[Job], wall: float) -> int:
    logs = {id(j): (j.log.read_text(errors="replace") if j.log and j.log.exists() else "") for j in jobs}
    failed = [j for j in jobs if j.rc not in (0, 5)]
    for j in failed:
        text = logs[id(j)]
        body = _section(text, "FAILURES") + "\n" + _section(text, "ERRORS")
        print(f"\n{'=' * 30} {j.name}: exit {j.rc} {'=' * 30}")
        # a job that died before its summary (a crash, a collection error) shows the end of its log
        print(body.strip() or "\n".join(text.splitlines()[-60:]))
    lines: list[str] = []
    extra: list[str] = []
    for j in jobs:
        summary = _section(logs[id(j)], "short test summary info").splitlines()
        lines += [ln for ln in summary if ln.strip() and not COUNTS.search(ln)]
        for title in re.findall(r"^=+ ([^=]*tier[^=]*) =+$", logs[id(j)], re.M):
            extra.append(f"{title}:\n" + _section(logs[id(j)], re.escape(title)))
    print("\n" + "=" * 30 + " short test summary info " + "=" * 30)
    print("\n".join(sorted(lines, key=lambda ln: not ln.startswith(("FAILED", "ERROR")))) or "(none)")
    for e in extra:
        print("\n" + e)
    cases = [
        (float(c.get("time", 0)), f"{c.get('classname', '')}::{c.get('name', '')}")
        for j in jobs
        for c in _cases(j.xml)
    ]
    print("\n" + "=" * 30 + " slowest 20 tests (setup + call + teardown) " + "=" * 30)
    for t, name in sorted(cases, reverse=True)[:20]:
        print(f"{t:8.2f} s  {name}")
    print("\n" + "=" * 30 + " tiers " + "=" * 30)
    for tier in ("unit", "integration", "e2e"):
        tj = [j for j in jobs if j.tier == tier]
        if tj:
            busy, cpu = sum(j.wall_s for j in tj), sum(j.cpu_s for j in tj)
            print(
                f"{tier:<12} {len(tj):3d} jobs, {busy:7.1f} s of pytest processes ({cpu:7.1f} s CPU), "
                f"longest {max(j.wall_s for j in tj):6.1f} s"
            )
    # again at the very end, one line each: a log viewer that keeps only the head and the tail still shows why
    why = [
        f"{c.get('classname', '')}::{c.get('name', '')}: "
        + " ".join((bad.get("message") or "").split())[:400]
        for j in jobs
        for c in _cases(j.xml)
        for bad in c
        if bad.tag in ("failure", "error")
    ]
    if why:
        print("\n" + "=" * 30 + " why each failed " + "=" * 30)
        print("\n".join(why))
    total = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
    for j in jobs:
        for k, v in _counts(j.xml).items():
            total[k] += v
    print(
        f"\n{total['passed']} passed, {total['failed']} failed, {total['error']} errors, {total['skipped']} "
        f"skipped in {wall:.0f} s ({_fmt(wall)}) wall, {len(jobs)} pytest processes"
    )
    return 1 if failed else 0


def record(jobs: list[Job]) -> None:
    """Write each file's measured seconds to tests/durations.json (a folder run whole: one key, its wall time)."""
    old = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    measured: dict[str, float] = {}
    for j in jobs:
        if j.key:
            measured[j.key] = measured.get(j.key, 0.0) + j.wall_s
            continue
        for c in _cases(j.xml):
            f = c.get("classname", "").replace(".", "/")
            f = next((p for p in j.paths if f.startswith(p[:-3])), f)
            measured[f] = measured.get(f, 0.0) + float(c.get("time", 0))
    old.update({k: round(v, 1) for k, v in measured.items()})
    DURATIONS.write_text(json.dumps(dict(sorted(old.items())), indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    """Parse the command line, run the jobs, print the summary; the exit status is the suite's."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="*", default=["tests"], help="test files or folders (default: tests)")
    ap.add_argument(
        "--jobs",
        "-j",
        type=int,
        default=int(os.environ.get("VLLM_LOCUST_TEST_JOBS", "4")),
        help="pytest processes at once (default 4, or $VLLM_LOCUST_TEST_JOBS)",
    )
    ap.add_argument(
        "--shuffle",
        type=int,
        metavar="SEED",
        default=int(os.environ["VLLM_LOCUST_TEST_SHUFFLE"])
        if os.environ.get("VLLM_LOCUST_TEST_SHUFFLE")
        else None,
        help="the jobs and the tests in each in a random order, an isolation check ($VLLM_LOCUST_TEST_SHUFFLE)",
    )
    ap.add_argument("--record", action="store_true", help="rewrite tests/durations.json from this run")
    ap.add_argument(
        "--pytest", action="append", default=[], metavar="ARG", help="an extra argument for every pytest"
    )
    ap.add_argument("--logs", metavar="DIR", help="keep each pytest process's log and JUnit XML in DIR")
    ap.add_argument(
        "--setups",
        metavar="DIR",
        help="setups running beside the suite write DIR/NAME.log and then DIR/NAME.rc; the jobs that need "
        "one (SETUPS) start once it has ended",
    )
    a = ap.parse_args(argv)
    if a.jobs < 1:
        ap.error(f"--jobs {a.jobs}: need at least 1")
    expected = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    jobs, alone = split_exclusive(collect_jobs(a.paths, expected))
    if a.shuffle is not None:
        random.Random(a.shuffle).shuffle(jobs)
        a.pytest += [f"--random-order-seed={a.shuffle}"]
        print(f"jobs, and the tests in each, in a random order (--shuffle {a.shuffle})")
    print(f"{len(jobs)} pytest processes, {a.jobs} at a time, then {len(alone)} alone", flush=True)
    with tempfile.TemporaryDirectory(prefix="vllm-locust-tests-") as tmp:
        work = Path(a.logs) if a.logs else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        try:
            rc = run(jobs, a.jobs, a.pytest, work, alone, Path(a.setups) if a.setups else None)
        except KeyboardInterrupt:
            for j in jobs + alone:
                if j.proc is not None and j.proc.poll() is None:
                    j.proc.terminate()
            raise
        if a.record:
            record(jobs + alone)
    return rc


if __name__ == "__main__":
    sys.exit(main())
