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
    assert a.score("best", "holdout") is not None
    rows = a.fit_rows()
    assert rows[0]["target"] == "first wait 4 p50 (min)"
    assert {"start.train", "best.holdout"} <= set(rows[0])
    assert a.best_args and all(isinstance(x, str) for x in a.best_args)
    assert "Calibration(4 candidates" in repr(a)


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
