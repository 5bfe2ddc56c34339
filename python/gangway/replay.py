"""``gangway.replay``: the ``replay`` simulator, from Python.

Keyword arguments become the command's own arguments (``time_scale=0.5`` is
``--time-scale 0.5``, ``native=True`` is ``--native``, a list repeats the
flag, a dict gives ``KEY=VALUE`` values), which go through the command's own
parser and run; the result is the ``report.json`` it wrote, byte for byte.
So every flag of ``replay --help`` works here, errors carry the command's
messages, and the same arguments give the same bytes as the command.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Union

from . import _native

__all__ = ["Report", "replay", "replay_args", "replay_help"]


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def replay_args(**options: Any) -> List[str]:
    """The ``replay`` command-line arguments for these keyword arguments.

    ``None`` and ``False`` leave a flag out, ``True`` gives the bare flag, a
    list or tuple repeats the flag once per item, a dict gives one
    ``--flag KEY=VALUE`` per item, anything else is ``--flag str(value)``.

    >>> replay_args(jobs=2000, time_scale=0.5, native=True, compare=["philly", "fifo"])
    ['--jobs', '2000', '--time-scale', '0.5', '--native', '--compare', 'philly', '--compare', 'fifo']
    >>> replay_args(config={"fairness": "vcs.toml"})
    ['--config', 'fairness=vcs.toml']
    """
    argv: List[str] = []
    for name, value in options.items():
        flag = _flag(name)
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, dict):
            for k, v in value.items():
                argv += [flag, f"{k}={os.fspath(v) if isinstance(v, os.PathLike) else v}"]
        elif isinstance(value, (list, tuple)):
            for v in value:
                argv += [flag, os.fspath(v) if isinstance(v, os.PathLike) else str(v)]
        elif isinstance(value, os.PathLike):
            argv += [flag, os.fspath(value)]
        else:
            argv += [flag, str(value)]
    return argv


def replay_help() -> str:
    """The text of ``replay --help``: every argument :func:`replay` accepts."""
    return _native.replay_help()


@contextlib.contextmanager
def _stdout_to_devnull() -> Iterator[None]:
    """Sends file descriptor 1 (where the Rust side prints) to /dev/null."""
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


def replay(
    trace: Union[str, "os.PathLike[str]", None] = None,
    format: Optional[str] = None,
    machines: Union[str, "os.PathLike[str]", None] = None,
    policies: Optional[str] = None,
    compare: Optional[List[str]] = None,
    seed: Optional[int] = None,
    *,
    out: Union[str, "os.PathLike[str]", None] = None,
    echo: bool = True,
    **options: Any,
) -> "Report":
    """Runs ``replay`` with these arguments and returns its :class:`Report`.

    Arguments are the command's (see :func:`replay_help`); e.g.
    ``replay(jobs=5000, compare=["philly", "fifo"], time_scale=0.5)``. An
    entry of ``compare`` (or ``policies``) may replace and configure slots on
    its own: ``"philly+fairness=my.wasm@my.toml"``, or ``"philly+fairness@strict.toml"``
    for the preset's own policy with another configuration. With
    ``out=None`` the report is written to a temporary directory that is
    removed afterwards, and no plots are drawn (pass ``out=`` to keep
    ``report.json`` and the SVG plots, as the command does). ``echo=False``
    silences what the command prints on stdout (its summary table and
    timings). The replay releases the GIL while it runs and shows a progress
    bar on stderr when stderr is a terminal. A bad argument or input raises
    :class:`gangway.ReplayError` with the command's message.
    """
    given: Dict[str, Any] = dict(trace=trace, format=format, machines=machines, policies=policies)
    given.update(compare=compare, seed=seed)
    named = {k: v for k, v in given.items() if v is not None}
    with contextlib.ExitStack() as stack:
        if out is None:
            out = stack.enter_context(tempfile.TemporaryDirectory(prefix="gangway-replay-"))
            options.setdefault("no_plots", True)
        argv = replay_args(**named, **options) + ["--out", os.fspath(out)]
        if not echo:
            stack.enter_context(_stdout_to_devnull())
        text = _native.replay_json(argv)
    return Report(text, argv=argv)


Row = Dict[str, Any]


def _scalar(v: Any) -> bool:
    return v is None or isinstance(v, (str, int, float, bool))


def _flatten(prefix: str, value: Any, row: Row) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, row)
    elif _scalar(value):
        row[prefix] = value
    else:
        row[prefix] = json.dumps(value)


def _is_table(value: Any) -> bool:
    """A map whose values are all objects (e.g. ``by_size``, ``per_vc``)."""
    return isinstance(value, dict) and len(value) > 0 and all(isinstance(v, dict) for v in value.values())


class Report:
    """A replay's ``report.json``: the text (``.json``, byte for byte the
    command's), the parsed data (``.data``), and its metric tables.

    Tables (:meth:`rows`, :meth:`table`) are derived from the schema
    generically: ``runs`` has one row per policy set with every scalar metric
    flattened (``jobs.passed``, ``jct_s.p50``, ...); each per-key map of a run
    (``by_size``, ``per_vc``) is a table of its own with one row per run and
    key. :meth:`table` gives a pandas DataFrame when pandas is installed.
    """

    def __init__(self, text: str, argv: Optional[List[str]] = None) -> None:
        self.json: str = text
        self.data: Dict[str, Any] = json.loads(text)
        self.argv: List[str] = list(argv or [])

    @property
    def runs(self) -> List[Dict[str, Any]]:
        """One dict per policy set, as in the file."""
        return list(self.data.get("runs", []))

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def __repr__(self) -> str:
        names = ", ".join(r.get("name", "?") for r in self.runs)
        return f"Report({self.data.get('workload', {}).get('jobs', '?')} jobs; runs: {names})"

    def table_names(self) -> List[str]:
        """``runs`` and the name of every per-key map of a run."""
        names = ["runs"]
        for run in self.runs:
            for k, v in run.items():
                if _is_table(v) and k not in names:
                    names.append(k)
        return names

    def rows(self, name: str = "runs") -> List[Row]:
        """The rows of table ``name`` as dicts (see the class docs)."""
        if name not in self.table_names():
            raise KeyError(f"no table {name!r} in this report (tables: {', '.join(self.table_names())})")
        out: List[Row] = []
        for run in self.runs:
            if name == "runs":
                row: Row = {}
                for k, v in run.items():
                    if not _is_table(v):
                        _flatten(k, v, row)
                out.append(row)
            else:
                for key, value in run.get(name, {}).items():
                    row = {"run": run.get("name"), "key": key}
                    _flatten("", value, row)
                    out.append(row)
        return out

    def table(self, name: str = "runs") -> Any:
        """Table ``name`` as a pandas DataFrame, or as a list of dicts when
        pandas is not installed."""
        rows = self.rows(name)
        try:
            import pandas  # noqa: PLC0415 (optional dependency)
        except ImportError:
            return rows
        return pandas.DataFrame(rows)

    def tables(self) -> Dict[str, Any]:
        """Every table by name (see :meth:`table`)."""
        return {n: self.table(n) for n in self.table_names()}

    def write(self, path: Union[str, "os.PathLike[str]"]) -> None:
        """Writes the report's text to ``path`` (the same bytes the command writes)."""
        Path(path).write_text(self.json, encoding="utf-8")
