"""Policies written in Python, run natively by the scheduler (for prototyping).

Any slot of :class:`gangway.Scheduler` takes a Python policy:
``sched.use_policy("fairness", MyPolicy())``. A policy is an object with a
method named after the slot's call (``order`` for fairness, ``spread`` for
locality, ``on_blocked`` for gang, ``reclaim``, ``retry``, ``defragment``)
or ``decide``, or a plain function of the view. It gets the view as objects
(attribute access: ``view.jobs[0].gpus``, ``view.vcs``) and returns the
decision as a dict (or an object with the same fields), in the form of the
Rust SDK's types (see plugin-sdk/CONTRACT.md): ids and levels are integers,
enums their variant names (``"Backfill"``).

A fairness policy that orders each VC's jobs by a fixed rule may say so
with a ``queue_order`` attribute (``"Submit"``, ``"Smallest"`` or
``{"AttainedBands": [3600, 36000]}``; default ``"All"``): a round then
shows it only each VC's first jobs in that order, as for a Rust policy. A
reclaim policy may set ``running = "Borrowing"``.

The scheduler checks every decision by the slot's rules, as for a Wasm
module: a policy that raises, answers what does not read as the slot's
decision or breaks a rule falls back to the built-in policy for that round
and is quarantined after repeated failures (``sched.slot_status(slot)``
says so). :func:`check_policy` runs the conformance kit on a policy.

>>> import gangway
>>> class SmallestFirst:
...     def order(self, view):
...         jobs = sorted(view.jobs, key=lambda j: (j.gpus, j.submitted_s, j.id))
...         return {"order": [{"job": j.id, "eligible": True} for j in jobs]}
>>> sched = gangway.Scheduler(gangway.Topology.uniform(1, 1, 8))
>>> sched.use_policy("fairness", SmallestFirst())
'python:SmallestFirst'
>>> sched.submit(1, gpus=8); sched.submit(2, gpus=2)
>>> [s.job for s in sched.round(0).starts]
[2]
>>> check_policy("fairness", SmallestFirst(), cases=16, scenarios=1) is None
True
"""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any, Optional

from . import _native

__all__ = ["View", "check_policy"]


class View:
    """A view (or a part of one) with attribute access to its fields."""

    def __init__(self, fields: dict) -> None:
        self.__dict__.update(fields)

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items())
        return f"View({inner})"


def _plain(value: Any) -> Any:
    """A decision as JSON-ready data: dicts, lists, numbers, strings."""
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if hasattr(value, "__dict__"):
        return {k: _plain(v) for k, v in vars(value).items() if not k.startswith("_")}
    raise TypeError(f"cannot send {type(value).__name__} as part of a decision")


def _call(policy: Any, slot: str, call: str, view_json: str) -> str:
    """Called by the scheduler: decodes the view, asks the policy, encodes
    its decision."""
    view = json.loads(view_json, object_hook=View)
    method = getattr(policy, call, None) or getattr(policy, "decide", None)
    if method is None:
        if not callable(policy):
            raise TypeError(
                f"a {slot} policy needs a method {call}(view) or decide(view), or must be a function"
            )
        method = policy
    return json.dumps(_plain(method(view)))


def check_policy(
    slot: str, policy: Any, *, cases: int = 64, scenarios: int = 4, seed: int = 1
) -> Optional[str]:
    """Runs the conformance kit on ``policy`` for ``slot``: ``cases``
    generated views and ``scenarios`` scheduler runs, checking every rule
    of the contract. Returns ``None`` if it passed, else what failed, with
    the smallest failing view (for a pytest ``assert check_policy(...) is None``)."""
    return _native.check_policy(slot, policy, cases, scenarios, seed)
