"""``gangway.calibrate``: fit the model's knobs to observed targets.

The search is the ``replay calibrate`` command's (one implementation, in
Rust): a seeded Latin-hypercube search over knobs such as the arrival
scale, quota factor, lending, the delay ladder and per-job relaxation
deadlines, trained on the first half of a trace window and validated on the
second. With a Ray ``address`` each batch of candidate replays runs as Ray
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
    ``fit_rows()`` / ``table()`` hold one row per target with its observed
    value and the start's and best's values on both windows.
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

    def score(self, which: str = "best", window: str = "train") -> Optional[float]:
        """The score (mean squared normalized error; lower is better) of
        ``which`` (``best`` or ``start``) on ``window`` (``train`` or ``holdout``)."""
        fit = self.data[which][window]
        return None if fit is None else float(fit["score"])

    def fit_rows(self) -> List[Dict[str, Any]]:
        """One dict per target: ``target``, ``observed``, then the model's
        value and whether it is met for the start and the best on each window."""
        rows: List[Dict[str, Any]] = []
        for i, item in enumerate(self.data["best"]["train"]["detail"]):
            row: Dict[str, Any] = {"target": item["name"], "observed": item["observed"]}
            for which in ("start", "best"):
                for window in ("train", "holdout"):
                    fit = self.data[which][window]
                    if fit is None:
                        continue
                    it = fit["detail"][i]
                    row[f"{which}.{window}"] = it["model"]
                    row[f"{which}.{window}.met"] = it["met"]
            rows.append(row)
        return rows

    def table(self) -> Any:
        """:meth:`fit_rows` as a pandas DataFrame, or the list without pandas."""
        return _frame(self.fit_rows())

    def __repr__(self) -> str:
        held = self.score("best", "holdout")
        return (
            f"Calibration({len(self.data['candidates'])} candidates, best score "
            f"{self.score():.3f} (start {self.score('start'):.3f})"
            + ("" if held is None else f", held-out {held:.3f}")
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
    ``jobs`` and ``skip`` give the window split into training and held-out
    halves). ``spec`` is a search file (knobs, ranges, start, candidates;
    default the built-in one), ``candidates`` and ``search_seed`` override
    it. With ``address`` (a Ray cluster, or ``"local"``) candidate replays
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
