"""Gangway from Python.

Gangway decides where deep-learning training jobs run on a shared GPU cluster
(gang allocation, locality-aware placement, pluggable fairness / locality /
gang policies, natively or as sandboxed Wasm modules). This package runs its
Rust engine in-process:

* :func:`replay` runs the ``replay`` simulator with the command's own
  arguments and returns its report (``report.json``, byte for byte).
* :class:`Scheduler` and :class:`Topology` embed the scheduler in a Python
  host: submit, round, end_attempt, server_down, wait reasons, policy swaps.
* :mod:`gangway.ray` launches gangs on a Ray cluster where Gangway placed
  them; :func:`sweep` runs a grid of replays as Ray tasks;
  :func:`calibrate` fits the model to observed targets (on Ray with an address),
  :func:`targets_from_log` measures them in a cluster's own job log;
* :mod:`gangway.policy`: policies written in Python fill any slot of a
  :class:`Scheduler` natively; :func:`check_policy` runs the conformance kit.

>>> import gangway
>>> topo = gangway.Topology.uniform(2, 4, 8)
>>> sched = gangway.Scheduler(topo, policies="locality-first")
>>> sched.submit(1, gpus=16, vc="research")
>>> [s.locality for s in sched.round(0).starts]
['rack']
"""

from ._native import (
    GangwayError,
    InvariantViolation,
    PolicyError,
    ReplayError,
    Round,
    Scheduler,
    SchedulerError,
    Server,
    Start,
    Topology,
    TopologyBuilder,
    TopologyError,
    __version__,
    builtin_policies,
    policy_module,
    policy_module_names,
    presets,
)
from .replay import (
    Report,
    ReplayArgumentError,
    ReplayFileNotFoundError,
    replay,
    replay_args,
    replay_help,
)
from .calibrate import Calibration, calibrate, targets_from_log
from .policy import check_policy
from .sweep import SweepResult, sweep

__all__ = [
    "Calibration",
    "GangwayError",
    "InvariantViolation",
    "PolicyError",
    "ReplayArgumentError",
    "ReplayError",
    "ReplayFileNotFoundError",
    "Report",
    "Round",
    "Scheduler",
    "SchedulerError",
    "Server",
    "Start",
    "SweepResult",
    "Topology",
    "TopologyBuilder",
    "TopologyError",
    "__version__",
    "builtin_policies",
    "calibrate",
    "targets_from_log",
    "check_policy",
    "policy_module",
    "policy_module_names",
    "presets",
    "replay",
    "replay_args",
    "replay_help",
    "sweep",
]
