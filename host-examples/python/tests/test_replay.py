"""gangway.replay against the `replay` command: same arguments, same bytes."""

from __future__ import annotations

import re
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import run_replay_cli

import gangway

TRACE = """id,submit_s,gpus,vc,user,attempts,status
j1,0,8,a,alice,3600,passed
j2,10,4,b,bob,120;600,failed
j3,20,1,b,bob,60,killed
j4,30,16,a,carol,1800,passed
j5,45,2,c,dan,900,passed
j6,50,8,c,dan,300;300;1200,passed
"""

MACHINES = "machineId, number of GPUs, single GPU mem\nm0,8, 24GB\nm1,8, 24GB\nm2,8, 24GB\nm3,4, 12GB\n"


def _cli_report(cli_args, out: Path) -> bytes:
    done = run_replay_cli(cli_args + ["--out", str(out)])
    assert done.returncode == 0, done.stderr
    return (out / "report.json").read_bytes()


def test_generated_workload_report_is_the_commands_byte_for_byte(tmp_path: Path) -> None:
    options = dict(jobs=3000, compare=["philly", "fifo"], time_scale=0.5, seed=7)
    expected = _cli_report(gangway.replay_args(**options, no_plots=True), tmp_path / "cli")
    report = gangway.replay(**options, echo=False)
    assert report.json.encode() == expected
    kept = gangway.replay(**options, out=tmp_path / "py", no_plots=True, echo=False)
    assert (tmp_path / "py" / "report.json").read_bytes() == expected
    assert kept.json == report.json
    assert [r["name"] for r in report.runs] == ["philly", "fifo"]
    # Started warm: the jobs of the lead-in still running come on top.
    workload = report.data["workload"]
    assert workload["jobs"] - workload["warm"] == 3000 and workload["warm"] > 0


def test_trace_file_report_is_the_commands_byte_for_byte(tmp_path: Path) -> None:
    trace = tmp_path / "jobs.csv"
    trace.write_text(TRACE)
    machines = tmp_path / "machines.csv"
    machines.write_text(MACHINES)
    options = dict(trace=str(trace), format="csv", machines=str(machines), rack_size=2, native=True)
    expected = _cli_report(gangway.replay_args(**options, no_plots=True), tmp_path / "cli")
    report = gangway.replay(**options, policies="locality-first", echo=False)
    other = _cli_report(
        gangway.replay_args(**options, policies="locality-first", no_plots=True), tmp_path / "cli2"
    )
    assert report.json.encode() == other
    assert gangway.replay(**options, echo=False).json.encode() == expected
    jobs = report.runs[0]["jobs"]
    assert jobs["submitted"] == 6
    assert jobs["passed"] + jobs["failed"] + jobs["killed"] + jobs["unfinished"] + jobs["never_started"] == 6


def test_same_arguments_give_the_same_bytes_and_the_seed_matters() -> None:
    a = gangway.replay(jobs=1500, seed=3, native=True, echo=False)
    b = gangway.replay(jobs=1500, seed=3, native=True, echo=False)
    c = gangway.replay(jobs=1500, seed=4, native=True, echo=False)
    assert a.json == b.json
    assert a.json != c.json


def test_errors_are_the_commands_messages(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("id,submit_s,gpus,vc,user,attempts,status\n1,0,many,vc1,u1,60,Pass\n")
    done = run_replay_cli(["--trace", str(bad), "--format", "csv", "--out", str(tmp_path / "o")])
    assert done.returncode != 0
    with pytest.raises(gangway.ReplayError) as err:
        gangway.replay(trace=bad, format="csv", echo=False)
    assert f"replay: {err.value}" == done.stderr.strip()
    assert str(bad) in str(err.value)

    with pytest.raises(gangway.ReplayError, match="unknown preset|no preset|philly"):
        gangway.replay(policies="no-such-preset", jobs=10, echo=False)


def test_arguments_are_typed_and_checked_before_the_run(tmp_path: Path) -> None:
    import inspect

    params = inspect.signature(gangway.replay).parameters
    assert {"jobs", "time_scale", "compare", "native", "policy_fuel", "without"} <= set(params)

    # A misspelt keyword: Python's own error, naming it.
    with pytest.raises(TypeError, match="time_scal"):
        gangway.replay(time_scal=0.5, echo=False)  # type: ignore[call-arg]

    # A bad value: named as the Python argument, in the package's hierarchy.
    for kwargs, name in [
        (dict(jobs=-5), "jobs"),
        (dict(jobs="many"), "jobs"),
        (dict(time_scale=0), "time_scale"),
        (dict(native="yes"), "native"),
        (dict(compare="philly"), "compare"),
    ]:
        with pytest.raises(gangway.ReplayArgumentError) as err:
            gangway.replay(echo=False, **kwargs)  # type: ignore[arg-type]
        assert isinstance(err.value, gangway.GangwayError)
        assert isinstance(err.value, ValueError)
        assert f"replay({name}=" in str(err.value)

    # A missing input file: a FileNotFoundError naming the file.
    missing = tmp_path / "no-such-trace.csv"
    with pytest.raises(FileNotFoundError) as err:
        gangway.replay(trace=missing, format="csv", echo=False)
    assert isinstance(err.value, gangway.ReplayFileNotFoundError)
    assert isinstance(err.value, gangway.ReplayError)
    assert err.value.filename == str(missing)
    with pytest.raises(FileNotFoundError):
        gangway.replay(fairness=tmp_path / "mine.wasm", echo=False)
    with pytest.raises(FileNotFoundError):
        gangway.replay(config={"fairness": tmp_path / "mine.toml"}, echo=False)


def test_report_tables(monkeypatch: pytest.MonkeyPatch) -> None:
    report = gangway.replay(jobs=1000, compare=["philly", "tiresias"], native=True, echo=False)
    assert set(report.table_names()) >= {"runs", "by_size", "per_vc"}
    runs = report.rows("runs")
    assert [r["run"] for r in runs] == ["philly", "tiresias"]
    assert "name" not in runs[0], "one name for the run: `run`, in every table"
    assert runs[0]["jobs.submitted"] == 1000
    assert runs[0]["jct_s.p50"] == report.runs[0]["jct_s"]["p50"]
    by_size = report.rows("by_size")
    assert {(r["run"], r["size"]) for r in by_size} == {
        (n, b) for n in ("philly", "tiresias") for b in report.runs[0]["by_size"]
    }
    assert {r["vc"] for r in report.rows("per_vc")} == set(report.runs[0]["per_vc"])
    spanned = [c for c in by_size[-1] if c.startswith("servers_spanned.")]
    numbers = [int(c.split(".")[1]) for c in spanned]
    assert numbers == sorted(numbers), f"servers_spanned columns in order: {spanned}"
    assert sum(r["jobs"] for r in by_size if r["run"] == "philly") == 1000
    with pytest.raises(KeyError, match="no table"):
        report.rows("nope")
    try:
        import pandas
    except ImportError:
        pandas = None
    if pandas is not None:
        frame = report.table("by_size")
        assert isinstance(frame, pandas.DataFrame)
        assert len(frame) == len(by_size)
        assert list(frame["jobs"]) == [r["jobs"] for r in by_size]
    # Without pandas (an optional dependency) the tables are lists of dicts.
    monkeypatch.setitem(sys.modules, "pandas", None)
    assert report.table("by_size") == by_size
    assert report.tables()["runs"] == runs


def test_replay_releases_the_gil() -> None:
    ticks = []
    stop = threading.Event()

    def tick() -> None:
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.01)

    t = threading.Thread(target=tick)
    t.start()
    try:
        start = time.perf_counter()
        gangway.replay(jobs=50000, native=True, echo=False)
        end = time.perf_counter()
    finally:
        stop.set()
        t.join()
    during = [x for x in ticks if start < x < end]
    # With the GIL held for the whole replay the other thread could not tick
    # (at most once, at the start).
    assert end - start > 0.1, "the replay was too short to tell"
    assert len(during) >= max(3, (end - start) / 0.01 / 4)


def test_replay_args_and_help() -> None:
    assert gangway.replay_args(time_scale=0.5, native=True, no_plots=False, config={"gang": "g.toml"}) == [
        "--time-scale",
        "0.5",
        "--native",
        "--config",
        "gang=g.toml",
    ]
    assert "--time-scale" in gangway.replay_help()


def test_progress_is_reported_and_a_raising_callback_stops_the_replay() -> None:
    calls = []

    def progress(index: int, name: str, done: int, jobs: int, now_s: int) -> None:
        calls.append((index, name, done, jobs, now_s))

    gangway.replay(jobs=20000, compare=["philly", "fifo"], native=True, echo=False, progress=progress)
    assert calls, "a replay of 20,000 jobs reports progress"
    assert {c[1] for c in calls} <= {"philly", "fifo"}
    # (The workload's jobs include the warm start's lead-in.)
    assert all(0 <= done <= jobs and jobs >= 20000 for _, _, done, jobs, _ in calls)
    times = [c[4] for c in calls if c[0] == calls[0][0]]
    assert times == sorted(times), "simulated time moves forward"

    class Stop(Exception):
        pass

    def stop(*_: object) -> None:
        raise Stop()

    with pytest.raises(Stop):
        gangway.replay(jobs=20000, native=True, echo=False, progress=stop)
    with pytest.raises(gangway.ReplayArgumentError):
        gangway.replay(jobs=10, echo=False, progress="yes")  # type: ignore[arg-type]


def test_ctrl_c_stops_a_running_replay_within_a_second() -> None:
    import os
    import signal
    import threading
    import time

    # Python's own Ctrl-C handling, whatever an earlier test in this
    # process (Ray's, a library's) left installed: that is what a user's
    # interpreter has.
    found = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGINT))
    started = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            gangway.replay(jobs=400000, native=True, echo=False)
        stopped = time.monotonic() - started
    except pytest.fail.Exception:
        raise AssertionError(
            f"the replay ran to its end, {time.monotonic() - started:.1f} s, through a Ctrl-C at 0.5 s "
            f"(the SIGINT handler before this test: {found!r})"
        ) from None
    finally:
        timer.join()
        signal.signal(signal.SIGINT, found)
    assert stopped < 0.5 + 1.0, f"stopped {stopped:.2f} s after the start, the signal came at 0.5 s"


def test_progress_true_draws_tqdm_bars(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("tqdm")
    report = gangway.replay(jobs=20000, native=True, echo=False, progress=True)
    assert report.json
    assert "philly" in capsys.readouterr().err, "a tqdm bar named after the set, on stderr"


def test_per_job_rows_of_each_run() -> None:
    report = gangway.replay(jobs=3000, compare=["philly", "fifo"], native=True, echo=False)
    philly = report.jobs(0)
    rows = philly.to_dict("records") if hasattr(philly, "to_dict") else philly
    assert len(rows) == report.runs[0]["jobs"]["submitted"]
    assert {"id", "vc", "gpus", "status", "first_start_s", "wait_fragmentation_s"} <= set(rows[0])
    fifo = report.jobs("fifo")
    assert len(fifo) == len(philly)
    with pytest.raises(KeyError, match="no run"):
        report.jobs("tiresias")
    with pytest.raises(KeyError, match="jobs_csv=True"):
        gangway.replay(jobs=300, native=True, echo=False, jobs_csv=False).jobs(0)


def test_the_standard_plots_draw_every_run() -> None:
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    report = gangway.replay(jobs=3000, compare=["philly", "fifo"], native=True, echo=False)
    for kind in gangway.Report.PLOTS:
        ax = report.plot(kind)
        labels = [t.get_text() for t in ax.get_legend().get_texts()]
        assert any(l.startswith("philly") for l in labels), (kind, labels)
        assert any(l.startswith("fifo") for l in labels), (kind, labels)
        assert ax.lines or ax.patches, kind
    with pytest.raises(ValueError, match="no plot"):
        report.plot("pie")


def test_what_the_command_prints_goes_through_sys_stdout(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    gangway.replay(jobs=500, native=True)
    out = capsys.readouterr().out
    assert ": replayed " in out, out
    assert "wrote" not in out, "no line names the temporary folder, gone by now"
    kept = tmp_path / "kept"
    gangway.replay(jobs=500, native=True, out=kept, no_plots=True)
    assert f"wrote {kept}" in capsys.readouterr().out
    gangway.replay(jobs=500, native=True, echo=False)
    assert capsys.readouterr().out == ""


def test_every_flag_of_the_command_has_a_keyword() -> None:
    import inspect

    params = set(inspect.signature(gangway.replay).parameters)
    # Flags whose Python face has another name (or none is needed).
    other = {"set": "settings", "quiet": "echo", "help": None, "version": None}
    flags = re.findall(r"^\s*(?:-\w, )?--([a-z-]+)", gangway.replay_help(), re.MULTILINE)
    assert len(flags) > 30, flags
    for flag in flags:
        name = other.get(flag, flag.replace("-", "_"))
        assert name is None or name in params, f"--{flag} has no keyword in gangway.replay"


def test_settings_and_fit_reach_the_command() -> None:
    report = gangway.replay(
        jobs=300,
        settings={"locality.widen_after_s": [30, 600]},
        fit="philly",
        echo=False,
    )
    assert "--set" in report.argv and "locality.widen_after_s=[30, 600]" in report.argv
    assert "fit" in report.runs[0], list(report.runs[0])
    with pytest.raises(gangway.ReplayArgumentError, match="settings"):
        gangway.replay(settings={"widen_after_s": 1}, echo=False)
    with pytest.raises(gangway.ReplayArgumentError, match="settings"):
        gangway.replay(settings={"locality.widen_after_s": object()}, echo=False)
