"""Policies written in Python, run natively by the scheduler (for prototyping).

Any slot of :class:`gangway.Scheduler` takes a Python policy:
``sched.use_policy("fairness", MyPolicy())``. A policy is an object with a
method named after the slot's call (``order`` for fairness, ``spread`` for
locality, ``on_blocked`` for gang, ``reclaim``, ``retry``, ``defragment``)
or ``decide``, or a plain function of the view. It gets the view as objects
(attribute access: ``view.jobs[0].gpus``, ``view.vcs``) and returns the
decision as a dict (or an object with the same fields), in the form of the
Rust SDK's types (see plugin-sdk/CONTRACT.md): ids and levels are integers,
enums their variant names (``"Backfill"``). Views and decisions travel as
postcard bytes through :mod:`gangway.wire`, the codec a policy compiled to
a sandboxed component with :mod:`gangway.componentize` runs too.

A fairness policy that orders each VC's jobs by a fixed rule may say so
with a ``queue_order`` attribute (``"Submit"``, ``"Smallest"`` or
``{"AttainedBands": [3600, 36000]}``; default ``"All"``): a round then
shows it only each VC's first jobs in that order, as for a Rust policy. A
reclaim policy may set ``running = "Borrowed"``.

On a cluster of several GPU types (contract 2.2), a fairness or reclaim
policy with ``GPU_TYPES = True`` is asked ``order_typed(view, types)`` (or
``reclaim_typed(view, types)``) instead, ``types`` the cluster's types as
objects (``types.types``, ``types.jobs[0].allowed``, ``types.vcs``,
``types.speeds``; see ``TypesView`` in plugin-sdk/CONTRACT.md). It answers
``(decision, choices)``: the decision, and type choices
(``[{"job": 3, "gpu_type": 1}]``, at most one per job, each one of the
job's allowed types; a job with a choice starts only on that type). A
reclaim policy answers its decision alone (or with no choices). On a
cluster of one type it is asked the plain call, as any policy.

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

from typing import Any, Optional

from . import _native, guest, wire
from .wire import View

__all__ = ["View", "check_policy"]


def _call(policy: Any, slot: str, view: bytes) -> bytes:
    """Called by the scheduler: decodes the view (postcard, with
    :mod:`gangway.wire`), asks the policy, encodes its decision."""
    return wire.encode_decision(slot, guest.method_of(policy, slot)(wire.decode_view(slot, view)))


def _call_typed(policy: Any, slot: str, message: bytes) -> bytes:
    """Called by the scheduler for a policy that takes the GPU types: reads
    the typed view message, asks the policy's typed method and writes its
    typed reply."""
    return guest.answer_typed(policy, slot, message)


def check_policy(
    slot: str, policy: Any, *, cases: int = 64, scenarios: int = 4, seed: int = 1
) -> Optional[str]:
    """Runs the conformance kit on ``policy`` for ``slot``: ``cases``
    generated views and ``scenarios`` scheduler runs, checking every rule
    of the contract. Returns ``None`` if it passed, else what failed, with
    the smallest failing view (for a pytest ``assert check_policy(...) is None``).
    A policy with ``GPU_TYPES = True`` is also asked its typed calls, with
    generated GPU types beside each view."""
    return _native.check_policy(slot, policy, cases, scenarios, seed)
