"""``gangway.replay``: the ``replay`` simulator, from Python.

Each keyword argument is one of the command's flags (``time_scale=0.5`` is
``--time-scale 0.5``, ``native=True`` is ``--native``, a list repeats the
flag, a dict gives ``KEY=VALUE`` values), typed so editors complete them and
checked before the run; they then go through the command's own parser and
run, and the result is the ``report.json`` it wrote, byte for byte: the same
arguments give the same bytes as the command.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

from . import _native
from ._native import ReplayError

__all__ = [
    "Report",
    "ReplayArgumentError",
    "ReplayFileNotFoundError",
    "replay",
    "replay_args",
    "replay_help",
]


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


def _toml_value(value: Any, bad: Callable[[str], Exception]) -> str:
    """``value`` (a bool, number, str or list of them) as a TOML value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v, bad) for v in value) + "]"
    raise bad("a dict of bools, numbers, strs or lists of them")


def replay_help() -> str:
    """The text of ``replay --help``: every argument :func:`replay` accepts."""
    return _native.replay_help()


@contextlib.contextmanager
def _stdout_captured() -> Iterator[List[str]]:
    """Sends file descriptor 1 (where the Rust side prints) to a temporary
    file while the block runs; the list it yields holds the text afterwards
    (to print through Python's ``sys.stdout``, which a notebook shows)."""
    sys.stdout.flush()
    saved = os.dup(1)
    captured: List[str] = []
    with tempfile.TemporaryFile() as sink:
        try:
            os.dup2(sink.fileno(), 1)
            yield captured
        finally:
            os.dup2(saved, 1)
            os.close(saved)
            sink.seek(0)
            captured.append(sink.read().decode("utf-8", errors="replace"))


class ReplayArgumentError(ReplayError, ValueError):
    """An argument of :func:`replay` of the wrong type or out of range,
    named as the Python argument (``replay(jobs=-5)``), raised before the
    run starts."""


class ReplayFileNotFoundError(ReplayError, FileNotFoundError):
    """An input file given to :func:`replay` that does not exist, raised
    before the run starts (an :class:`OSError`, as ``open`` raises)."""


PathArg = Union[str, "os.PathLike[str]"]
#: A slot's policy: a built-in name, a ``.wasm`` file, or a Python policy.
PolicyArg = Union[str, "os.PathLike[str]", Any]

#: The contract's slots, from its registry (the native module): each is a
#: keyword of :func:`replay` taking that slot's policy.
_SLOTS: Tuple[str, ...] = tuple(_native.SLOTS)

# What each keyword of replay() takes, checked before the run:
# path (an existing file), trace (an existing file or folder: Gavel's
# traces are a folder of files), module (a policy name or an existing .wasm file),
# str, count (int >= 0), positive (int >= 1), number (float > 0),
# flag (bool), strs (list of str), configs (dict or list of SLOT=FILE).
_KINDS: Dict[str, str] = dict(
    trace="trace", format="str", throughputs="path", vcs="path", machines="path", cluster="str",
    rack_grouping="str", rack_size="positive", topology="path", policies="str",
    **{slot: "module" for slot in _SLOTS}, config="configs", compare="strs",
    seed="count", jobs="positive", skip="count", time_scale="number",
    native="flag", quotas="str", round_interval="positive",
    server_mtbf_hours="number", placement="str", view_window="count",
    restart_s="count", checkpoint_s="count", policy_fuel="count",
    large_policies="flag",
    no_plots="flag", jobs_csv="flag", without="strs", verbose="count",
    settings="settings", fit="str",
)


def _check(name: str, value: Any) -> None:
    """Raises :class:`ReplayArgumentError` or :class:`ReplayFileNotFoundError`
    if ``value`` is not what keyword ``name`` takes."""
    kind = _KINDS[name]

    def bad(what: str) -> ReplayArgumentError:
        return ReplayArgumentError(f"replay({name}={value!r}): {name} must be {what}")

    def exists(path: Any, what: str) -> None:
        if not isinstance(path, (str, os.PathLike)):
            raise bad(f"{what} (a str or path)")
        if not Path(path).is_file():
            raise ReplayFileNotFoundError(
                2, f"replay({name}=...): no such file", os.fspath(path)
            )

    if kind == "path":
        exists(value, "a file")
    elif kind == "trace" and isinstance(value, (str, os.PathLike)) and Path(value).is_dir():
        pass
    elif kind == "trace":
        exists(value, "a file or folder")
    elif kind == "module":
        if not isinstance(value, (str, os.PathLike)):
            raise bad("a policy name or a .wasm file")
        if os.fspath(value).endswith(".wasm"):
            exists(value, "a .wasm file")
    elif kind == "str":
        if not isinstance(value, str):
            raise bad("a str")
    elif kind in ("count", "positive"):
        least = 0 if kind == "count" else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise bad(f"a whole number of at least {least}")
    elif kind == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise bad("a number above 0")
    elif kind == "flag":
        if not isinstance(value, bool):
            raise bad("True or False")
    elif kind == "strs":
        if isinstance(value, str) or not all(isinstance(v, str) for v in value):
            raise bad("a list of str")
    elif kind == "settings":
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and "." in k for k in value
        ):
            raise bad("a dict {'SLOT.KEY': value}")
        for v in value.values():
            _toml_value(v, bad)
    elif kind == "configs":
        items = list(value.items()) if isinstance(value, dict) else None
        if items is None:
            if isinstance(value, str) or not all(isinstance(v, str) and "=" in v for v in value):
                raise bad("a dict {slot: file} or a list of 'SLOT=FILE'")
            items = [tuple(v.split("=", 1)) for v in value]
        for _, file in items:
            exists(file, "a configuration file per slot")


def replay(
    trace: Optional[PathArg] = None,
    format: Optional[str] = None,
    machines: Optional[PathArg] = None,
    policies: Optional[str] = None,
    compare: Optional[List[str]] = None,
    seed: Optional[int] = None,
    *,
    jobs: Optional[int] = None,
    skip: Optional[int] = None,
    time_scale: Optional[float] = None,
    native: bool = False,
    throughputs: Optional[PathArg] = None,
    vcs: Optional[PathArg] = None,
    cluster: Optional[str] = None,
    rack_grouping: Optional[str] = None,
    rack_size: Optional[int] = None,
    topology: Optional[PathArg] = None,
    config: Union[Dict[str, PathArg], List[str], None] = None,
    quotas: Optional[str] = None,
    round_interval: Optional[int] = None,
    server_mtbf_hours: Optional[float] = None,
    placement: Optional[str] = None,
    view_window: Optional[int] = None,
    restart_s: Optional[int] = None,
    checkpoint_s: Optional[int] = None,
    policy_fuel: Optional[int] = None,
    large_policies: Optional[bool] = None,
    settings: Optional[Dict[str, Any]] = None,
    fit: Optional[str] = None,
    without: Optional[List[str]] = None,
    jobs_csv: Optional[bool] = None,
    no_plots: bool = False,
    verbose: int = 0,
    out: Optional[PathArg] = None,
    echo: bool = True,
    progress: Union[bool, Callable[[int, str, int, int, int], Any], None] = None,
    **slot_policies: Optional[PolicyArg],
) -> "Report":
    """Runs ``replay`` with these arguments and returns its :class:`Report`.

    Each keyword is the command's flag of the same name (``time_scale=0.5``
    is ``--time-scale 0.5``; see :func:`replay_help` for what each means);
    e.g. ``replay(jobs=5000, compare=["philly", "fifo"], time_scale=0.5)``.
    An entry of ``compare`` (or ``policies``) may replace and configure
    slots on its own: ``"philly+fairness=my.wasm@my.toml"``, or
    ``"philly+fairness@strict.toml"`` for the preset's own policy with
    another configuration. ``config`` is ``{slot: file}``. ``settings`` sets
    single options of a slot's policy in every set, ``{"SLOT.KEY": value}``
    (the command's ``--set SLOT.KEY=VALUE``; e.g.
    ``{"locality.widen_after_s": [600, 3600]}``), and ``fit="philly"`` (or
    a targets file) adds each run's fit to observed waits (``runs[i]["fit"]``). A slot keyword
    (``fairness=``, ...) takes a built-in name, a ``.wasm`` file, or a
    policy written in Python (an object or function, see
    :mod:`gangway.policy`), which then replaces that slot in every set.

    Arguments are checked before the run: a wrong type or value raises
    :class:`ReplayArgumentError` (a :class:`ReplayError` and a
    :class:`ValueError`) naming the argument, a missing input file
    :class:`ReplayFileNotFoundError` (a :class:`FileNotFoundError`), and a
    misspelt keyword Python's own :class:`TypeError`. What only the command
    can check (a malformed trace, an unknown preset) raises
    :class:`ReplayError` with the command's message.

    With ``out=None`` the report is written to a temporary directory that
    is removed afterwards, and no plots are drawn (pass ``out=`` to keep
    ``report.json`` and the SVG plots, as the command does). The per-job
    rows (:meth:`Report.jobs`) are kept unless ``jobs_csv=False``; with
    ``out=`` they are written there too (``<set>-jobs.csv``) when
    ``jobs_csv=True``. ``echo=False``
    silences what the command prints on stdout (its summary table and
    timings), which is printed through Python's ``sys.stdout`` once the
    run ends (so a notebook shows it), without the ``wrote`` lines of a
    temporary folder. The replay releases the GIL while it runs and shows a
    progress bar on stderr when stderr is a terminal.

    About every 0.1 s the running replay lets Python handle signals, so
    Ctrl-C stops it with :class:`KeyboardInterrupt`, and calls ``progress``
    if given: a callable ``progress(set_index, set_name, jobs_done, jobs,
    simulated_s)`` (an exception from it stops the replay and is raised), or
    ``True`` for a tqdm bar per policy set (``tqdm.auto``: in a notebook
    too; needs tqdm installed).
    """
    for name in slot_policies:
        if name not in _SLOTS:
            raise TypeError(f"replay() got an unexpected keyword argument {name!r}")
    given: Dict[str, Any] = dict(
        trace=trace, format=format, machines=machines, policies=policies,
        compare=compare, seed=seed, jobs=jobs, skip=skip, time_scale=time_scale,
        native=native, throughputs=throughputs, vcs=vcs, cluster=cluster,
        rack_grouping=rack_grouping,
        rack_size=rack_size, topology=topology,
        **{slot: slot_policies.get(slot) for slot in _SLOTS},
        config=config, quotas=quotas,
        round_interval=round_interval, server_mtbf_hours=server_mtbf_hours,
        placement=placement, view_window=view_window, restart_s=restart_s,
        checkpoint_s=checkpoint_s, policy_fuel=policy_fuel,
        large_policies=large_policies, without=without,
        jobs_csv=jobs_csv, no_plots=no_plots, verbose=verbose, settings=settings,
        fit=fit,
    )
    if jobs_csv is None:
        given["jobs_csv"] = out is None
    # A slot given a Python object runs that policy natively (gangway.policy).
    python_policies = {
        slot: given.pop(slot)
        for slot in _SLOTS
        if given[slot] is not None and not isinstance(given[slot], (str, os.PathLike))
    }
    named = {k: v for k, v in given.items() if v is not None}
    for name, value in named.items():
        _check(name, value)
    close: Callable[[], None] = lambda: None
    if progress is True:
        progress, close = _tqdm_bars()
    elif progress is False:
        progress = None
    elif progress is not None and not callable(progress):
        raise ReplayArgumentError(
            f"replay(progress={progress!r}): progress must be a callable, True or None"
        )
    # `verbose=N` is the command's `-v` N times; `settings` its `--set`s.
    count = named.pop("verbose", 0)
    settings_args = [
        arg
        for key, value in named.pop("settings", {}).items()
        for arg in ("--set", f"{key}={_toml_value(value, ReplayArgumentError)}")
    ]
    temporary = None
    printed: List[str] = []
    try:
        with contextlib.ExitStack() as stack:
            if out is None:
                out = temporary = stack.enter_context(
                    tempfile.TemporaryDirectory(prefix="gangway-replay-")
                )
                named["no_plots"] = True
            argv = (
                replay_args(**named)
                + settings_args
                + ["-v"] * count
                + ["--out", os.fspath(out)]
            )
            with _stdout_captured() as printed:
                text = _native.replay_json(argv, progress, python_policies or None)
            report = Report(text, argv=argv)
            if named.get("jobs_csv"):
                for run in report.runs:
                    name = str(run.get("name", ""))
                    path = Path(out) / (re.sub(r"[^A-Za-z0-9-]", "_", name) + "-jobs.csv")
                    if path.is_file():
                        report._jobs[name] = path.read_text(encoding="utf-8")
    finally:
        close()
        if echo:
            _echo("".join(printed), temporary)
    return report


def _slot_keywords(f: Callable[..., Any]) -> None:
    """Shows ``f``'s per-slot keywords (its ``**slot_policies``) in its
    signature, one per slot of the registry, before ``config``: where
    ``inspect``, ``help`` and editors look."""
    import inspect

    signature = inspect.signature(f)
    params = [
        p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD
    ]
    at = next(i for i, p in enumerate(params) if p.name == "config")
    slots = [
        inspect.Parameter(
            slot, inspect.Parameter.KEYWORD_ONLY, default=None, annotation="Optional[PolicyArg]"
        )
        for slot in _SLOTS
    ]
    setattr(f, "__signature__", signature.replace(parameters=params[:at] + slots + params[at:]))


_slot_keywords(replay)


def _frame(rows: List[Dict[str, Any]]) -> Any:
    """``rows`` as a pandas DataFrame, or as they are without pandas."""
    try:
        import pandas  # noqa: PLC0415 (optional dependency)
    except ImportError:
        return rows
    return pandas.DataFrame(rows)


def _echo(text: str, temporary: Optional[str]) -> None:
    """Prints what the command printed, without the lines naming files in
    the `temporary` folder (removed by now)."""
    for line in text.splitlines(keepends=True):
        if temporary is not None and line.startswith("wrote ") and temporary in line:
            continue
        sys.stdout.write(line)
    sys.stdout.flush()


def _tqdm_bars() -> Tuple[Callable[[int, str, int, int, int], None], Callable[[], None]]:
    """A progress callback drawing one tqdm bar per policy set, and the
    function that closes them."""
    try:
        from tqdm.auto import tqdm
    except ImportError as e:
        raise ReplayArgumentError(
            "replay(progress=True): progress bars need tqdm (pip install tqdm); "
            "or pass a callable"
        ) from e
    bars: Dict[int, Any] = {}

    def update(index: int, name: str, done: int, jobs: int, now_s: int) -> None:
        bar = bars.get(index)
        if bar is None:
            for other in bars.values():
                other.close()
            bar = bars[index] = tqdm(total=jobs, desc=name, unit="job")
        bar.n = done
        bar.set_postfix(day=now_s // 86_400, refresh=False)
        bar.refresh()

    def close() -> None:
        for bar in bars.values():
            bar.close()

    return update, close


Row = Dict[str, Any]

# What the key of each per-key table of a run is, as its column's name.
_KEY_COLUMNS = {"by_size": "size", "per_vc": "vc"}


def _number(text: Optional[str]) -> Any:
    """``text`` as an int or float if it is one, else as it is ("" is None)."""
    if text is None or text == "":
        return None
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _scalar(v: Any) -> bool:
    return v is None or isinstance(v, (str, int, float, bool))


def _flatten(prefix: str, value: Any, row: Row) -> None:
    if isinstance(value, dict):
        items = list(value.items())
        if items and all(str(k).isdigit() for k, _ in items):
            # Counts by a number (servers_spanned.1, .2, ..., .10): in order.
            items.sort(key=lambda kv: int(kv[0]))
        for k, v in items:
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
    generically: ``runs`` has one row per policy set (its name in the
    ``run`` column) with every scalar metric flattened (``jobs.passed``,
    ``jct_s.p50``, ...; counts by a number, such as ``servers_spanned.N``,
    in numeric order); each per-key map of a run is a table of its own with
    one row per run and key: ``by_size`` (columns ``run``, ``size``, ...),
    ``per_vc`` (``run``, ``vc``, ...), any other (``run``, ``key``, ...).
    :meth:`table` gives a pandas DataFrame when pandas is installed.
    """

    def __init__(self, text: str, argv: Optional[List[str]] = None) -> None:
        self.json: str = text
        self.data: Dict[str, Any] = json.loads(text)
        self.argv: List[str] = list(argv or [])
        # Each run's per-job CSV (the command's --jobs-csv), by run name.
        self._jobs: Dict[str, str] = {}

    def jobs(self, run: Union[str, int] = 0) -> Any:
        """Run ``run``'s jobs (its name, or its index among the runs), one
        row each (the command's ``--jobs-csv`` columns: ``id``, ``vc``,
        ``gpus``, ``submit_s``, ``first_start_s``, ``end_s``, ``status``,
        ``attempts``, ``servers`` and ``wait_<reason>_s``), as a pandas
        DataFrame when pandas is installed, else a list of dicts with
        numbers parsed. Kept by :func:`replay` unless ``jobs_csv=False``."""
        names = [str(r.get("name", "")) for r in self.runs]
        if isinstance(run, int):
            if not 0 <= run < len(names):
                raise IndexError(f"run {run}: this report has {len(names)} runs")
            run = names[run]
        if run not in names:
            raise KeyError(f"no run {run!r} (runs: {', '.join(names)})")
        text = self._jobs.get(run)
        if text is None:
            raise KeyError(
                f"run {run!r}: no per-job rows kept; call replay(..., jobs_csv=True) to keep them"
            )
        try:
            import pandas  # noqa: PLC0415 (optional dependency)
        except ImportError:
            return [
                {k: _number(v) for k, v in row.items()} for row in csv.DictReader(io.StringIO(text))
            ]
        return pandas.read_csv(io.StringIO(text))

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
                row: Row = {"run": run.get("name")}
                for k, v in run.items():
                    if k != "name" and not _is_table(v):
                        _flatten(k, v, row)
                out.append(row)
            else:
                column = _KEY_COLUMNS.get(name, "key")
                for key, value in run.get(name, {}).items():
                    row = {"run": run.get("name"), column: key}
                    _flatten("", value, row)
                    out.append(row)
        return out

    def table(self, name: str = "runs") -> Any:
        """Table ``name`` as a pandas DataFrame, or as a list of dicts when
        pandas is not installed."""
        return _frame(self.rows(name))

    def tables(self) -> Dict[str, Any]:
        """Every table by name (see :meth:`table`)."""
        return {n: self.table(n) for n in self.table_names()}

    #: The plots :meth:`plot` draws.
    PLOTS = ("queue_delay", "waits", "locality", "vc_share", "gpus")

    def plot(self, kind: str = "queue_delay", ax: Any = None) -> Any:
        """Draws one of the standard plots of the report, every run on the
        same axes, with matplotlib, and returns the axes (a new figure's
        unless ``ax`` is given):

        * ``queue_delay``: the CDF of each job's first queueing delay
          (submit to first start), in minutes on a log scale (the study's
          Figure 3; from :meth:`jobs`);
        * ``waits``: hours waited per job size, by reason (fair-share,
          fragmentation, queued, retry delay, ...), one bar per run and size;
        * ``locality``: the share of jobs of each size that ran on 1, 2, 3
          or more servers (the study's Table 3);
        * ``vc_share``: each virtual cluster's mean GPUs held against its
          quota;
        * ``gpus``: GPUs allocated over simulated days, with the online
          GPUs as the capacity line.
        """
        if kind not in self.PLOTS:
            raise ValueError(f"no plot {kind!r} (plots: {', '.join(self.PLOTS)})")
        try:
            import matplotlib.pyplot as plt  # noqa: PLC0415 (optional dependency)
        except ImportError as e:
            raise ImportError("Report.plot needs matplotlib (pip install matplotlib)") from e
        if ax is None:
            _, ax = plt.subplots(figsize=(8, 4.5))
        names = [str(r.get("name", "")) for r in self.runs]
        if kind == "queue_delay":
            for i, name in enumerate(names):
                rows = self.jobs(i)
                rows = rows.to_dict("records") if hasattr(rows, "to_dict") else rows
                delays = sorted(
                    max(r["first_start_s"] - r["submit_s"], 0) / 60
                    for r in rows
                    if r.get("first_start_s") not in (None, "") and r["first_start_s"] == r["first_start_s"]
                )
                if delays:
                    ys = [(k + 1) / len(delays) for k in range(len(delays))]
                    ax.step([max(d, 1 / 60) for d in delays], ys, where="post", label=name)
            ax.set_xscale("log")
            ax.set_xlabel("first queueing delay (minutes)")
            ax.set_ylabel("share of jobs")
        elif kind == "gpus":
            for i, (name, run) in enumerate(zip(names, self.runs)):
                series = run.get("gpus_over_time", {})
                days = [t / 86400 for t in series.get("t_s", [])]
                ax.plot(days, series.get("allocated", []), label=name, color=f"C{i}")
                if i == 0:
                    ax.plot(days, series.get("online", []), label="online", color="gray", linestyle="--")
            ax.set_xlabel("simulated days")
            ax.set_ylabel("GPUs allocated")
        elif kind in ("waits", "locality"):
            from matplotlib.patches import Patch  # noqa: PLC0415

            sizes = list(self.runs[0].get("by_size", {})) if self.runs else []
            width = 0.8 / max(len(names), 1)
            # One colour per reason (or span) across runs; runs by hatching.
            colours: Dict[str, str] = {}
            hatches = ["", "//", "..", "xx", "\\\\", "++"]
            for i, run in enumerate(self.runs):
                xs = [k + i * width for k in range(len(sizes))]
                bottom = [0.0] * len(sizes)
                stacks: Dict[str, List[float]] = {}
                for k, size in enumerate(sizes):
                    bucket = run.get("by_size", {}).get(size, {})
                    if kind == "waits":
                        parts = {r: v / 3600 for r, v in bucket.get("wait_s", {}).items()}
                    else:
                        spans = bucket.get("servers_spanned", {})
                        total = sum(spans.values()) or 1
                        parts = {"1 server": 0.0, "2 servers": 0.0, "3+ servers": 0.0}
                        for n, count in spans.items():
                            key = "1 server" if n == "1" else "2 servers" if n == "2" else "3+ servers"
                            parts[key] += count / total
                    for part, value in parts.items():
                        stacks.setdefault(part, [0.0] * len(sizes))[k] = value
                for part, values in stacks.items():
                    if not any(values):
                        continue
                    colour = colours.setdefault(part, f"C{len(colours)}")
                    ax.bar(
                        xs, values, width, bottom=bottom, color=colour,
                        hatch=hatches[i % len(hatches)], edgecolor="white",
                    )
                    bottom = [b + v for b, v in zip(bottom, values)]
            ax.set_xticks([k + 0.4 - width / 2 for k in range(len(sizes))], [f"{s} GPUs" for s in sizes])
            ax.set_ylabel("hours waited" if kind == "waits" else "share of jobs")
            handles = [Patch(facecolor=c, label=p) for p, c in colours.items()]
            handles += [
                Patch(facecolor="white", edgecolor="gray", hatch=hatches[i % len(hatches)], label=n)
                for i, n in enumerate(names)
            ]
            ax.set_title(kind)
            ax.legend(handles=handles, fontsize="small")
            return ax
        else:
            vcs = sorted({vc for run in self.runs for vc in run.get("per_vc", {})})
            width = 0.8 / max(len(names), 1)
            for i, run in enumerate(self.runs):
                per_vc = run.get("per_vc", {})
                xs = [k + i * width for k in range(len(vcs))]
                ax.bar(xs, [per_vc.get(vc, {}).get("mean_gpus_held", 0) for vc in vcs], width, label=names[i])
            quotas = [self.runs[0].get("per_vc", {}).get(vc, {}).get("quota_gpus") for vc in vcs] if self.runs else []
            ax.scatter(
                [k + 0.4 - width / 2 for k, q in enumerate(quotas) if q is not None],
                [q for q in quotas if q is not None],
                marker="_", s=400, color="black", label="quota",
            )
            ax.set_xticks([k + 0.4 - width / 2 for k in range(len(vcs))], vcs, rotation=45)
            ax.set_ylabel("mean GPUs held")
        ax.set_title(kind.replace("_", " "))
        ax.legend(fontsize="small")
        return ax

    def write(self, path: Union[str, "os.PathLike[str]"]) -> None:
        """Writes the report's text to ``path`` (the same bytes the command writes)."""
        Path(path).write_text(self.json, encoding="utf-8")
