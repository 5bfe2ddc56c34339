"""Compiles a Python policy to a sandboxed Wasm component, loaded by every
host like a Rust-built module (``replay --large-policies --fairness
smallest.wasm``, ``gangway.Scheduler(large_policies=True)``).

The policy class is the one that runs natively (``use_policy(slot,
MyPolicy())``): ``componentize-py`` (``pip install componentize-py``)
compiles it with CPython and :mod:`gangway.guest`'s glue against the
contract's WIT for the slot's world. Every WASI import is replaced by a
trapping stub (``--stub-wasi``): the component imports nothing but the
contract's ``log``, so the policy has no files, clock, network or
entropy; ``random`` is seeded at build time (the same sequence on every
run) and ``time.time()`` or ``open()`` trap, which fails the call.

The component carries the interpreter (about 18 MB, some 10,000
functions), over the default per-module limits; hosts load it when asked
to (``LoadLimits::for_interpreters``: ``replay --large-policies``,
``large_policies=True``).

Command line::

    python -m gangway.componentize smallest_first:SmallestFirst \\
        --slot fairness -o smallest_first.wasm

>>> from gangway.componentize import app_source
>>> print(app_source("fairness", "my_policy", "MyPolicy"))  # doctest: +NORMALIZE_WHITESPACE
import componentize_py_types
from gangway import guest
from my_policy import MyPolicy
Fairness = guest.export("fairness", MyPolicy, componentize_py_types.Err)
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import List, Optional, Sequence, Union

from . import _native, wire

__all__ = ["componentize", "app_source", "ComponentizeError", "main"]

#: The guest's own files, copied beside the policy into the component.
_GUEST_FILES = ("wire.py", "_wire_schema.py", "guest.py")
#: The app module componentize-py wraps (not the name of any world).
_APP = "gangway_policy_app"


class ComponentizeError(_native.GangwayError):
    """The policy could not be compiled: componentize-py is missing, the
    module or class does not exist, or the build failed (its output is in
    the message)."""


def _class_name(slot: str) -> str:
    return "".join(part.capitalize() for part in slot.split("-"))


def app_source(slot: str, module: str, cls: str) -> str:
    """The app module componentize-py compiles for ``module:cls`` in ``slot``."""
    return (
        "import componentize_py_types\n"
        "from gangway import guest\n"
        f"from {module} import {cls}\n"
        f'{_class_name(slot)} = guest.export("{slot}", {cls}, componentize_py_types.Err)\n'
    )


def _tool() -> str:
    found = shutil.which("componentize-py")
    if found is None:
        beside = Path(sys.executable).with_name("componentize-py")
        if beside.exists():
            return str(beside)
        raise ComponentizeError(
            "componentize-py is not installed: pip install componentize-py "
            "(or pip install 'gangway[sandbox]')"
        )
    return found


def componentize(
    policy: str,
    slot: str,
    out: Union[str, os.PathLike],
    *,
    path: Optional[Sequence[Union[str, os.PathLike]]] = None,
) -> Path:
    """Compiles ``policy`` (``"module:Class"``, the module found on
    ``path``, by default the current folder) for ``slot`` into the
    component ``out``; returns its path. The class is called with no
    arguments when the host initialises the module."""
    if slot not in wire.SLOTS:
        raise ComponentizeError(f"no slot {slot!r}: one of {', '.join(wire.SLOTS)}")
    module, sep, cls = policy.partition(":")
    if not sep or not module or not cls.isidentifier():
        raise ComponentizeError(f"{policy!r} is not MODULE:Class (e.g. smallest_first:SmallestFirst)")
    dirs = [Path(p).resolve() for p in (path or ["."])]
    for d in dirs:
        if not d.is_dir():
            raise ComponentizeError(f"{d}: no such folder (in path)")
    tool = _tool()
    out = Path(out).resolve()
    here = Path(__file__).resolve().parent
    with tempfile.TemporaryDirectory(prefix="gangway-componentize-") as tmp:
        stage = Path(tmp)
        package = stage / "gangway"
        package.mkdir()
        (package / "__init__.py").write_text('"""Gangway\'s guest glue (inside a component)."""\n')
        for name in _GUEST_FILES:
            shutil.copyfile(here / name, package / name)
        (stage / f"{_APP}.py").write_text(app_source(slot, module, cls))
        wit = stage / "wit"
        wit.mkdir()
        (wit / "policy.wit").write_text(_native.POLICY_WIT)
        command: List[str] = [tool, "-q", "-d", str(wit), "-w", f"{slot}-policy", "componentize"]
        command += ["--stub-wasi", "-p", str(stage)]
        for d in dirs:
            command += ["-p", str(d)]
        command += ["-o", str(out), _APP]
        env = dict(os.environ)
        # Only the folders above go into the component, not a virtual
        # environment's site-packages.
        env.pop("VIRTUAL_ENV", None)
        done = subprocess.run(command, cwd=stage, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip()
        raise ComponentizeError(f"componentize-py failed on {policy} ({slot}):\n{said}")
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m gangway.componentize MODULE:Class --slot SLOT -o OUT``."""
    parser = argparse.ArgumentParser(
        prog="python -m gangway.componentize",
        description="Compile a Python policy to a sandboxed Wasm component.",
    )
    parser.add_argument("policy", help="MODULE:Class, e.g. smallest_first:SmallestFirst")
    parser.add_argument("--slot", required=True, choices=sorted(wire.SLOTS))
    parser.add_argument("-o", "--output", required=True, help="the component file to write")
    parser.add_argument(
        "-p", "--path", action="append", help="a folder to find the module in (default: .)"
    )
    args = parser.parse_args(argv)
    try:
        written = componentize(args.policy, args.slot, args.output, path=args.path)
    except ComponentizeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {written} ({written.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
