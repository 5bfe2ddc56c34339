"""gangway.calibrate: the same search as `replay calibrate`, in process or
with its candidate replays as Ray tasks, giving the same result."""

import json
from pathlib import Path

import pytest
from helpers import require_ray

import gangway

LOCAL_RAY = {"num_cpus": 2, "include_dashboard": False, "log_to_driver": False}

SMALL = dict(jobs=1200, cluster="4x8x8", seed=5, candidates=4, echo=False)


def test_calibration_in_process_is_deterministic_and_never_worse(tmp_path: Path) -> None:
    a = gangway.calibrate(out=tmp_path, **SMALL)
    b = gangway.calibrate(**SMALL)
    assert a.text == b.text
    assert json.loads((tmp_path / "calibrate.json").read_text()) == a.data
    assert a.score("best") <= a.score("start")
    assert a.windows() == ["seed 5", "seed 6 held-out"]
    assert a.score("best", "seed 6 held-out") is not None
    assert a.score("best", "no such window") is None
    rows = a.fit_rows()
    assert rows[0]["target"] == "first wait 4 p50 (min)"
    assert {"start.seed 5", "best.seed 6 held-out"} <= set(rows[0])
    assert a.best_args and all(isinstance(x, str) for x in a.best_args)
    assert "Calibration(4 candidates" in repr(a)
    sens = a.sensitivity_rows()
    assert {r["knob"] for r in sens} == {"time_scale", "quota_factor"}
    assert all(0 < r["gpu_allocation_mean"] <= 1 for r in sens)
    assert "first wait 5-8 p50 (min)" in sens[0]


def test_calibration_on_ray_matches_in_process() -> None:
    require_ray()
    local = gangway.calibrate(**SMALL)
    on_ray = gangway.calibrate(address="local", ray_init=LOCAL_RAY, **SMALL)
    assert on_ray.text == local.text


def test_calibration_errors_are_gangway_errors() -> None:
    with pytest.raises(gangway.ReplayError, match="calibrate sets --time-scale itself"):
        gangway.calibrate(time_scale=0.5, jobs=300, candidates=2, echo=False)
    with pytest.raises(ValueError, match="fit"):
        gangway.calibrate(jobs=300, fit="philly")


def _philly_log(n: int) -> str:
    """A Philly-format job log of `n` jobs of 1-16 GPUs, a job a minute,
    first attempts waiting 0 to about 3 hours (seeded), some spread."""
    import random
    from datetime import datetime, timedelta

    rng = random.Random(7)
    t0 = datetime(2017, 10, 7)
    at = lambda s: (t0 + timedelta(seconds=s)).strftime("%Y-%m-%d %H:%M:%S")  # noqa: E731
    jobs = []
    for i in range(n):
        gpus = rng.choice([1, 1, 1, 2, 4, 8, 8, 16])
        servers = 2 if gpus > 8 or (gpus > 1 and rng.random() < 0.25) else 1
        wait = int(rng.random() ** 3 * 10_000)
        submit = i * 60
        detail = [
            {"ip": f"m{(i + m) % 16}", "gpus": [f"gpu{g}" for g in range(gpus // servers)]}
            for m in range(servers)
        ]
        jobs.append(
            {
                "status": rng.choice(["Pass", "Pass", "Killed", "Failed"]),
                "vc": f"vc{i % 3}",
                "jobid": f"application_1_{i}",
                "user": "u",
                "submitted_time": at(submit),
                "attempts": [
                    {"start_time": at(submit + wait), "end_time": at(submit + wait + 1800), "detail": detail}
                ],
            }
        )
    return json.dumps(jobs)


def test_targets_measured_in_a_log_calibrate_a_replay_of_it(tmp_path: Path) -> None:
    import tomllib

    log = tmp_path / "log.json"
    log.write_text(_philly_log(500))
    text = gangway.targets_from_log(log, name="mine", out=tmp_path / "mine.toml")
    assert (tmp_path / "mine.toml").read_text() == text
    targets = tomllib.loads(text)
    assert targets["name"] == "mine"
    assert [w["name"] for w in targets["first_wait"]] == ["1", "2-4", "5-8", ">8"]
    assert {"passed", "killed", "failed"} == set(targets["gpu_time_by_status"])
    cal = gangway.calibrate(
        targets=str(tmp_path / "mine.toml"),
        trace=str(log),
        format="philly",
        jobs=500,
        cluster="2x8x8",
        candidates=3,
        echo=False,
    )
    assert cal.data["best"]["train"][0]["fit"]["targets"] == "mine"
    assert cal.score("best") <= cal.score("start")
    with pytest.raises(gangway.ReplayError, match="no such file|cannot read"):
        gangway.targets_from_log(tmp_path / "missing.json")
