"""``gangway.sweep``: a grid of replays, each point a Ray task.

A grid is a dict of ``replay`` arguments to lists of values (the points are
their product, in order) or an explicit list of dicts; ``**base`` arguments
are shared by every point. Each point runs as one Ray task: a Rust replay in
the worker, exactly what :func:`gangway.replay` runs, returning its
``report.json``. The result is one table (a row per point and policy set)
and, with matplotlib, a comparison plot.

From a shell::

    python -m gangway.sweep GRID.toml [--address HOST:PORT] [--out DIR]

where ``GRID.toml`` has a ``[base]`` table of shared arguments and a
``[grid]`` table of lists (see ``main``).
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from .. import _native
from ..replay import Report, _frame, _stdout_captured, replay_args

__all__ = ["SweepResult", "sweep", "points_of", "main"]

Point = Dict[str, Any]
Grid = Union["Mapping[str, Sequence[Any]]", "Sequence[Mapping[str, Any]]"]


def points_of(grid: Grid) -> List[Point]:
    """The points of a grid: the product of a dict of lists (the last key
    varies fastest), or a list of dicts as given.

    >>> for point in points_of({"policies": ["philly", "fifo"], "seed": [1, 2]}):
    ...     print(point)
    {'policies': 'philly', 'seed': 1}
    {'policies': 'philly', 'seed': 2}
    {'policies': 'fifo', 'seed': 1}
    {'policies': 'fifo', 'seed': 2}
    """
    if isinstance(grid, Mapping):
        keys = list(grid.keys())
        for k in keys:
            if isinstance(grid[k], (str, bytes)) or not isinstance(grid[k], Iterable):
                raise TypeError(f"grid[{k!r}] must be a list of values, got {grid[k]!r}")
        return [dict(zip(keys, values)) for values in itertools.product(*(list(grid[k]) for k in keys))]
    return [dict(p) for p in grid]


def run_point(argv: List[str]) -> Tuple[Optional[str], Optional[str], float]:
    """Runs one replay with ``argv`` into a temporary directory, quietly.
    Returns ``(report text, None, seconds)`` or ``(None, error, seconds)``."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gangway-sweep-") as out:
        try:
            # What the command prints is dropped: a sweep reports its rows.
            with _stdout_captured():
                text = _native.replay_json(argv + ["--out", out])
        except _native.GangwayError as e:
            return None, str(e), time.perf_counter() - start
    return text, None, time.perf_counter() - start


def _label(point: Point) -> str:
    return ", ".join(f"{k}={v}" for k, v in point.items())


class SweepResult:
    """The reports of a sweep, one per point, and their table.

    ``rows()`` has one dict per point and policy set: the point's arguments,
    then ``run`` and every metric of the report's ``runs`` table
    (``jobs.passed``, ``jct_s.p50``, ``by_size`` stays in the reports).
    """

    def __init__(
        self, points: List[Point], reports: List[Report], seconds: List[float], wall_s: float
    ) -> None:
        self.points = points
        self.reports = reports
        #: Seconds each replay took inside its task.
        self.seconds = seconds
        #: Wall-clock seconds of the whole sweep.
        self.wall_s = wall_s

    def rows(self) -> List[Dict[str, Any]]:
        """One dict per point and policy set."""
        out = []
        for point, report in zip(self.points, self.reports):
            for run in report.rows("runs"):
                row: Dict[str, Any] = {
                    k: (json.dumps(v) if isinstance(v, (list, dict)) else v) for k, v in point.items()
                }
                row.update(run)
                out.append(row)
        return out

    def table(self) -> Any:
        """The rows as a pandas DataFrame, or as a list of dicts without pandas."""
        return _frame(self.rows())

    def write_csv(self, path: Union[str, "os.PathLike[str]"]) -> None:
        """Writes the rows as CSV."""
        rows = self.rows()
        columns: List[str] = []
        for r in rows:
            columns += [c for c in r if c not in columns]
        with open(path, "w", newline="", encoding="utf-8") as f:
            w = csv.DictWriter(f, fieldnames=columns)
            w.writeheader()
            w.writerows(rows)

    def plot(self, metric: str = "jct_s.p50", path: Union[str, "os.PathLike[str]", None] = None) -> Any:
        """A bar chart of ``metric`` (a column of :meth:`rows`) per point and
        policy set, with matplotlib; saved to ``path`` when given. Returns the
        figure. Raises ImportError naming matplotlib when it is missing."""
        try:
            import matplotlib

            if path is not None:
                matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError as e:
            raise ImportError("gangway.SweepResult.plot needs matplotlib (pip install matplotlib)") from e
        rows = self.rows()
        if rows and metric not in rows[0]:
            raise KeyError(
                f"no metric {metric!r} (metrics: {', '.join(k for k in rows[0] if k not in self.points[0])})"
            )
        labels = []
        for point, report in zip(self.points, self.reports):
            for run in report.runs:
                labels.append(f"{_label(point)} [{run.get('name')}]")
        values = [r[metric] for r in rows]
        fig, ax = plt.subplots(figsize=(8, 0.35 * len(rows) + 1.2))
        ax.barh(range(len(rows)), values)
        ax.set_yticks(range(len(rows)), labels, fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel(metric)
        ax.set_title(f"{metric} per sweep point")
        fig.tight_layout()
        if path is not None:
            fig.savefig(path)
        return fig

    def __repr__(self) -> str:
        return f"SweepResult({len(self.points)} points, {self.wall_s:.1f} s)"


def sweep(
    grid: Grid,
    *,
    address: Optional[str] = None,
    use_ray: bool = True,
    num_cpus: float = 1,
    ray_init: Optional[Dict[str, Any]] = None,
    **base: Any,
) -> SweepResult:
    """Runs a replay per point of ``grid`` (with ``**base`` arguments shared
    by all) as Ray tasks, and returns their :class:`SweepResult`.

    On the Ray that is already initialized, else on a cluster at
    ``address`` (or ``$RAY_ADDRESS``), else on a local Ray started for the
    sweep and stopped after it. Each task asks for ``num_cpus`` CPUs.
    Files named in arguments must be readable at the same path on every node.
    ``use_ray=False`` runs the points one by one in this process instead.
    A point that fails raises :class:`gangway.ReplayError` naming the point.

    >>> r = sweep({"policies": ["philly", "fifo"], "seed": [1, 2]}, jobs=2000, native=True)  # doctest: +SKIP
    >>> r.table()  # doctest: +SKIP
    """
    points = points_of(grid)
    for key in ("out",):
        if key in base or any(key in p for p in points):
            raise ValueError(f"sweep chooses --{key} itself; do not pass {key!r}")
    argvs = [replay_args(**{**base, **p, "no_plots": True}) for p in points]
    start = time.perf_counter()
    if use_ray:
        results = _on_ray(argvs, address=address, num_cpus=num_cpus, ray_init=ray_init or {})
    else:
        results = [run_point(a) for a in argvs]
    wall = time.perf_counter() - start
    reports = []
    for i, ((text, error, _), point, argv) in enumerate(zip(results, points, argvs)):
        if error is not None or text is None:
            raise _native.ReplayError(f"sweep point {i} ({_label(point)}): {error}")
        reports.append(Report(text, argv=argv))
    return SweepResult(points, reports, [r[2] for r in results], wall)


def _on_ray(
    argvs: List[List[str]], *, address: Optional[str], num_cpus: float, ray_init: Dict[str, Any]
) -> List[Tuple[Optional[str], Optional[str], float]]:
    try:
        import ray
    except ImportError as e:
        raise ImportError("gangway.sweep runs on Ray: pip install ray (or pass use_ray=False)") from e
    started = False
    if not ray.is_initialized():
        # "local": a Ray of our own, never a stale one a `ray start` left
        # recorded in /tmp/ray (RAY_ADDRESS still names a cluster to use).
        ray.init(address=address or os.environ.get("RAY_ADDRESS") or "local", **ray_init)
        started = True
    try:
        task = ray.remote(num_cpus=num_cpus, max_retries=0)(run_point)
        return ray.get([task.remote(a) for a in argvs])
    finally:
        if started:
            ray.shutdown()


def _load_toml(path: str) -> Dict[str, Any]:
    try:
        import tomllib  # type: ignore[import-not-found]
    except ImportError:
        import tomli as tomllib  # type: ignore[no-redef]
    with open(path, "rb") as f:
        return tomllib.load(f)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m gangway.sweep GRID.toml``: runs the sweep, prints its
    table, writes ``sweep.csv``, ``reports.json`` and (with matplotlib)
    ``sweep.svg`` to ``--out``.

    ``GRID.toml``::

        metric = "jct_s.p50"      # optional: the plotted column
        [base]                    # replay arguments shared by every point
        jobs = 3000
        time_scale = 0.5
        [grid]                    # lists: the points are their product
        policies = ["philly", "fifo", "tiresias", "locality-first"]
        seed = [1, 2]
    """
    p = argparse.ArgumentParser(
        prog="python -m gangway.sweep", description=main.__doc__.splitlines()[0] if main.__doc__ else None
    )
    p.add_argument("grid", help="the grid file (TOML: [base] and [grid] tables)")
    p.add_argument("--address", help="a Ray cluster to run on (default: a local Ray)")
    p.add_argument("--out", default="sweep-out", help="output directory (default: sweep-out)")
    p.add_argument("--metric", help="the column to plot (default: the file's `metric`, else jct_s.p50)")
    p.add_argument("--no-ray", action="store_true", help="run the points one by one in this process")
    args = p.parse_args(argv)
    try:
        spec = _load_toml(args.grid)
    except (OSError, ValueError) as e:
        print(f"gangway.sweep: {args.grid}: {e}", file=sys.stderr)
        return 2
    unknown = set(spec) - {"base", "grid", "metric"}
    if unknown or "grid" not in spec:
        print(
            f"gangway.sweep: {args.grid}: expected [base], [grid] and `metric`, got {sorted(spec)}",
            file=sys.stderr,
        )
        return 2
    metric = args.metric or spec.get("metric", "jct_s.p50")
    try:
        result = sweep(spec["grid"], address=args.address, use_ray=not args.no_ray, **spec.get("base", {}))
    except (_native.GangwayError, TypeError, ValueError) as e:
        print(f"gangway.sweep: {e}", file=sys.stderr)
        return 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = result.rows()
    keys = list(result.points[0].keys()) + [
        "run",
        "jobs.passed",
        "jct_s.p50",
        "jct_s.p90",
        "gpu_allocation_mean",
        metric,
    ]
    keys = list(dict.fromkeys(k for k in keys if rows and k in rows[0]))
    print("  ".join(keys))
    for r in rows:
        print("  ".join(_fmt(r[k]) for k in keys))
    result.write_csv(out / "sweep.csv")
    (out / "reports.json").write_text(
        json.dumps([{"point": p, "report": r.data} for p, r in zip(result.points, result.reports)], indent=1),
        encoding="utf-8",
    )
    print(
        f"\n{len(result.points)} replays in {result.wall_s:.1f} s; "
        f"wrote {out / 'sweep.csv'}, {out / 'reports.json'}"
    )
    try:
        result.plot(metric, out / "sweep.svg")
        print(f"wrote {out / 'sweep.svg'}")
    except ImportError as e:
        print(f"no plot: {e}")
    return 0
