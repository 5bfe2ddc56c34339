"""gangway.sweep: a grid of replays as Ray tasks on a local Ray (inside this
test's network namespace) gives the same reports as running them one by one."""

from __future__ import annotations

import csv
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import require_ray, skip_loudly

import gangway

LOCAL_RAY = {"num_cpus": 2, "include_dashboard": False, "log_to_driver": False}


def small_cluster(tmp_path: Path) -> str:
    """16 servers of 8 GPUs: busy enough with a thousand jobs for the
    policies to differ."""
    machines = tmp_path / "machines.csv"
    machines.write_text(
        "machineId, number of GPUs, single GPU mem\n" + "".join(f"m{i},8, 24GB\n" for i in range(16))
    )
    return str(machines)


def test_a_sweep_over_ray_equals_the_replays_one_by_one(tmp_path: Path) -> None:
    require_ray()
    grid = {"policies": ["philly", "fifo", "tiresias", "locality-first"], "seed": [1, 2]}
    base = dict(jobs=300, machines=small_cluster(tmp_path), rack_size=8)
    result = gangway.sweep(grid, ray_init=LOCAL_RAY, **base)
    assert len(result.points) == 8
    assert result.points[1] == {"policies": "philly", "seed": 2}
    started = time.perf_counter()
    for point, report in zip(result.points, result.reports):
        alone = gangway.replay(**base, **point, echo=False)
        assert report.json == alone.json, point
        assert report.runs[0]["name"] == point["policies"]
    one_by_one = time.perf_counter() - started
    rows = result.rows()
    assert [(r["policies"], r["seed"], r["run"]) for r in rows] == [
        (p["policies"], p["seed"], p["policies"]) for p in result.points
    ]
    assert all(r["jobs.submitted"] == 300 for r in rows)
    # The seed changes the workload, the policies change the outcome.
    assert len({r["jct_s.p50"] for r in rows if r["seed"] == 1}) > 2
    assert {r["jct_s.p50"] for r in rows if r["seed"] == 1} != {
        r["jct_s.p50"] for r in rows if r["seed"] == 2
    }
    sys.stderr.write(
        f"\nsweep of 8 replays: {result.wall_s:.1f} s on Ray (replays {sum(result.seconds):.1f} s in tasks), "
        f"{one_by_one:.1f} s one by one in-process\n"
    )


def test_the_comparison_plot(tmp_path: Path) -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        skip_loudly("matplotlib is not installed (pip install matplotlib): the sweep plot is not drawn")
    result = gangway.sweep({"policies": ["philly", "fifo"]}, jobs=300, native=True, use_ray=False)
    svg = tmp_path / "sweep.svg"
    result.plot("jct_s.p50", svg)
    text = svg.read_text()
    assert "<svg" in text and "jct_s.p50" in text
    for run in ("philly", "fifo"):
        assert f"[{run}]" in text
    with pytest.raises(KeyError, match="no metric"):
        result.plot("no.such.metric")


def test_a_failing_point_names_itself() -> None:
    with pytest.raises(gangway.ReplayError, match=r"sweep point 1 \(policies=nope\)"):
        gangway.sweep({"policies": ["fifo", "nope"]}, jobs=50, native=True, use_ray=False)
    with pytest.raises(ValueError, match="out"):
        gangway.sweep({"seed": [1]}, out="somewhere", use_ray=False)
    with pytest.raises(TypeError, match="list of values"):
        gangway.sweep({"seed": 1}, use_ray=False)


def test_the_sweep_command(tmp_path: Path) -> None:
    require_ray()
    grid = tmp_path / "grid.toml"
    grid.write_text(
        'metric = "jct_s.p90"\n[base]\njobs = 800\nnative = true\n[grid]\npolicies = ["philly", "fifo"]\n'
    )
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "gangway.sweep", str(grid), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "2 replays in" in done.stdout
    with open(out / "sweep.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["policies"] for r in rows] == ["philly", "fifo"]
    alone = gangway.replay(jobs=800, native=True, policies="fifo", echo=False)
    assert float(rows[1]["jct_s.p90"]) == alone.runs[0]["jct_s"]["p90"]
    assert (out / "reports.json").exists()

    bad = tmp_path / "bad.toml"
    bad.write_text("[grid\n")
    done = subprocess.run(
        [sys.executable, "-m", "gangway.sweep", str(bad)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert str(bad) in done.stderr
