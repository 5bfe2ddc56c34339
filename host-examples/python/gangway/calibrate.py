"""``gangway.calibrate``: fit the model's knobs to observed targets.

The search is the ``replay calibrate`` command's (one implementation, in
Rust): a seeded Latin-hypercube search over knobs such as the arrival
scale, quota model and factor, lending, the delay ladder and per-job
relaxation deadlines, each candidate replayed on several windows of a trace
at its load and a few percent either side and scored by its worst window,
then validated on held-out windows, with a sensitivity report around the
best. With a Ray ``address`` each batch of candidate replays runs as Ray
tasks through the sweep machinery; without one they run on threads in this
process.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Any, Dict, List, Optional, Tuple, Union

from . import _native
from .replay import _frame, _stdout_captured, replay_args
from .sweep import run_point

__all__ = ["Calibration", "calibrate"]


class Calibration:
    """What a calibration found: ``data`` is ``calibrate.json`` as a dict.

    ``best_args`` are the replay arguments of the best fit (add a window's);
    ``windows()`` names the windows each setting was replayed on (training
    windows at load 1, then the held-out ones); ``fit_rows()`` / ``table()``
    hold one row per target with its observed value and the start's and
    best's values on every window; ``sensitivity_rows()`` /
    ``sensitivity_table()`` the best fit with its time scale and quota
    factor moved.
    """

    def __init__(self, text: str) -> None:
        #: The text of ``calibrate.json``.
        self.text = text
        #: ``calibrate.json`` as a dict.
        self.data: Dict[str, Any] = json.loads(text)

    @property
    def best_args(self) -> List[str]:
        """The replay arguments that set the best fit's knobs."""
        return list(self.data["best"]["args"])

    @property
    def best_knobs(self) -> Dict[str, Any]:
        """The best fit's knob values by name."""
        return dict(self.data["best"]["setting"])

    def _fits(self, which: str) -> List[Tuple[str, Dict[str, Any]]]:
        """``which``'s fits at load 1: (window name, fit), training first."""
        found = self.data[which]
        train = [(w["window"], w["fit"]) for w in found["train"] if w["load"] == 1.0]
        held = [(f"{w['window']} held-out", w["fit"]) for w in found["holdout"]]
        return train + held

    def windows(self) -> List[str]:
        """The windows' names: training windows (at load 1), then held-out
        ones (``... held-out``)."""
        return [name for name, _ in self._fits("best")]

    def score(self, which: str = "best", window: Optional[str] = None) -> Optional[float]:
        """The score (mean squared normalized error; lower is better) of
        ``which`` (``best`` or ``start``): without ``window`` the one the
        search minimised (a high quantile of its training scores, by default
        the worst), else its score on that window (a name of ``windows()``)."""
        if window is None:
            return float(self.data[which]["score"])
        for name, fit in self._fits(which):
            if name == window:
                return float(fit["score"])
        return None

    def fit_rows(self) -> List[Dict[str, Any]]:
        """One dict per target: ``target``, ``observed``, then the model's
        value and whether it is met for the start and the best on each
        window (``best.whole``, ``best.whole.met``, ...)."""
        fits = {which: self._fits(which) for which in ("start", "best")}
        rows: List[Dict[str, Any]] = []
        for i, item in enumerate(fits["best"][0][1]["detail"]):
            row: Dict[str, Any] = {"target": item["name"], "observed": item["observed"]}
            for which in ("start", "best"):
                for window, fit in fits[which]:
                    it = fit["detail"][i]
                    row[f"{which}.{window}"] = it["model"]
                    row[f"{which}.{window}.met"] = it["met"]
            rows.append(row)
        return rows

    def table(self) -> Any:
        """:meth:`fit_rows` as a pandas DataFrame, or the list without pandas."""
        return _frame(self.fit_rows())

    def sensitivity_rows(self) -> List[Dict[str, Any]]:
        """One dict per sensitivity replay: ``knob`` (``time_scale`` or
        ``quota_factor``), ``factor`` (over the best fit's), ``value``,
        ``gpu_allocation_mean``, ``score``, then every fit item's value by
        target name. Empty when the calibration made none."""
        report = self.data.get("sensitivity") or {"points": []}
        rows: List[Dict[str, Any]] = []
        for p in report["points"]:
            row: Dict[str, Any] = {
                "knob": p["knob"],
                "factor": p["factor"],
                "value": p["value"],
                "gpu_allocation_mean": p["gpu_allocation_mean"],
                "score": p["fit"]["score"],
            }
            row.update({it["name"]: it["model"] for it in p["fit"]["detail"]})
            rows.append(row)
        return rows

    def sensitivity_table(self) -> Any:
        """:meth:`sensitivity_rows` as a pandas DataFrame, or the list without pandas."""
        return _frame(self.sensitivity_rows())

    def __repr__(self) -> str:
        held = [
            f"{name} {fit['score']:.3f}" for name, fit in self._fits("best") if name.endswith(" held-out")
        ]
        return (
            f"Calibration({len(self.data['candidates'])} candidates, best score "
            f"{self.score():.3f} (start {self.score('start'):.3f})"
            + ("" if not held else ", " + ", ".join(held))
            + ")"
        )


def _ray_evaluator(address: str, num_cpus: float, ray_init: Dict[str, Any]) -> Tuple[Any, bool]:
    try:
        import ray
    except ImportError as e:
        raise ImportError("gangway.calibrate(address=...) runs on Ray: pip install ray") from e
    started = False
    if not ray.is_initialized():
        ray.init(address=address, **ray_init)
        started = True
    task = ray.remote(num_cpus=num_cpus, max_retries=0)(run_point)

    def evaluate(argvs: List[List[str]]) -> List[Tuple[Optional[str], Optional[str]]]:
        return [(text, error) for text, error, _ in ray.get([task.remote(a) for a in argvs])]

    return evaluate, started


def calibrate(
    *,
    targets: str = "philly",
    spec: Union[str, "os.PathLike[str]", None] = None,
    candidates: Optional[int] = None,
    search_seed: Optional[int] = None,
    holdout: bool = True,
    address: Optional[str] = None,
    num_cpus: float = 1,
    ray_init: Optional[Dict[str, Any]] = None,
    threads: Optional[int] = None,
    out: Union[str, "os.PathLike[str]", None] = None,
    echo: bool = True,
    **replay_options: Any,
) -> Calibration:
    """Calibrates the model to ``targets`` (``"philly"``, the study's
    figures, or a targets file) on the replay that ``**replay_options``
    describe (the arguments of :func:`gangway.replay`; with ``trace``,
    ``jobs`` and ``skip`` give the window whose parts the search replays).
    ``spec`` is a search file (knobs, ranges, start, candidates, windows,
    loads, sensitivity; default the built-in one), ``candidates`` and
    ``search_seed`` override it. ``holdout=False`` skips the held-out
    windows. With ``address`` (a Ray cluster, or ``"local"``) candidate replays
    run as Ray tasks, each asking for ``num_cpus``; else on ``threads``
    threads here. ``out`` keeps ``calibrate.json``. Prints the fit table
    unless ``echo=False``.

    >>> cal = calibrate(jobs=1500, cluster="4x8x8", candidates=4, echo=False)  # doctest: +SKIP
    >>> cal.best_args  # doctest: +SKIP
    """
    args: List[str] = ["--targets", str(targets)]
    if spec is not None:
        args += ["--spec", os.fspath(spec)]
    if candidates is not None:
        args += ["--candidates", str(int(candidates))]
    if search_seed is not None:
        args += ["--search-seed", str(int(search_seed))]
    if threads is not None:
        args += ["--threads", str(int(threads))]
    if not holdout:
        args.append("--no-holdout")
    for key in ("out", "fit", "quiet"):
        if key in replay_options:
            raise ValueError(f"calibrate chooses the replays' {key!r} itself; do not pass it")
    replay = replay_args(**replay_options)
    evaluate = None
    started = False
    if address is not None:
        evaluate, started = _ray_evaluator(address, num_cpus, ray_init or {})
    try:
        with tempfile.TemporaryDirectory(prefix="gangway-calibrate-") as tmp:
            folder = os.fspath(out) if out is not None else tmp
            with _stdout_captured() as printed:
                text = _native.calibrate_json(args + ["--out", folder, "--"] + replay, evaluate)
    finally:
        if started:
            import ray

            ray.shutdown()
    if echo:
        for line in "".join(printed).splitlines(keepends=True):
            if out is None and line.startswith("wrote "):
                continue
            sys.stdout.write(line)
        sys.stdout.flush()
    return Calibration(text)


def targets_from_log(
    log: Union[str, "os.PathLike[str]"],
    *,
    min_run_s: int = 0,
    name: str = "observed",
    out: Union[str, "os.PathLike[str]", None] = None,
) -> str:
    """Measures in a cluster's own job log (Philly ``cluster_job_log``
    JSON) the targets :func:`calibrate` fits the model to, as ``replay
    targets`` does: first-attempt wait quantiles per size bucket, one-server
    shares and GPU time by status. Only jobs that ran ``min_run_s`` seconds
    or more count for the waits. Returns the targets file's TOML text, also
    written to ``out`` when given (then ``calibrate(targets=out, ...)``).

    >>> text = targets_from_log("cluster_job_log.json", out="mine.toml")  # doctest: +SKIP
    >>> log = "cluster_job_log.json"
    >>> calibrate(targets="mine.toml", trace=log, format="philly", jobs=5000)  # doctest: +SKIP
    """
    text: str = _native.targets_toml(os.fspath(log), int(min_run_s), str(name))
    if out is not None:
        with open(os.fspath(out), "w", encoding="utf-8") as f:
            f.write(text)
    return text
