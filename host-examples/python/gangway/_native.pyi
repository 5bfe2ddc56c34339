"""Types of gangway._native, the Rust half of the gangway package."""

from os import PathLike
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

__version__: str
#: The contract's WIT (plugin-sdk/wit/policy.wit), for ``python -m gangway.componentize``.
POLICY_WIT: str
#: The contract's slots, from its registry, in declaration order (``fairness``, ...).
SLOTS: Tuple[str, ...]

class GangwayError(Exception):
    """Base of every error Gangway raises."""

class ReplayError(GangwayError):
    """A replay that could not run; the message is the one the `replay` command prints."""

class TopologyError(GangwayError):
    """A topology that cannot be built or loaded (names the file and line)."""

class SchedulerError(GangwayError):
    """An event the scheduler refused; the scheduler is unchanged."""

class PolicyError(GangwayError):
    """A policy, preset, configuration or Wasm module that cannot be used."""

class InvariantViolation(GangwayError):
    """The scheduler's state disagrees with itself (a bug: please report it)."""

def replay_json(
    args: List[str],
    progress: Optional[Callable[[int, str, int, int, int], Any]] = None,
    policies: Optional[Dict[str, Any]] = None,
) -> str:
    """Runs `replay` with `args` and returns the report.json it wrote to `--out`;
    about every 0.1 s lets Python handle signals (Ctrl-C stops it) and calls
    `progress(set_index, set_name, jobs_done, jobs, simulated_s)` if given;
    `policies` maps slots to Python policy objects replacing them in every set."""

def replay_help() -> str:
    """The text of `replay --help`."""

def calibrate_json(
    args: List[str],
    evaluate: Optional[Callable[[List[List[str]]], List[Tuple[Optional[str], Optional[str]]]]] = None,
) -> str:
    """Runs `replay calibrate` with `args` (after `calibrate`) and returns the
    calibrate.json it wrote; `evaluate(argvs)`, if given, runs each batch of
    candidate replays (e.g. as Ray tasks) and returns `(report_text, None)` or
    `(None, error)` per replay, else they run on threads in-process."""

def targets_toml(log: str, min_run_s: int = 0, name: str = "observed") -> str:
    """The targets file (TOML) `replay targets` measures in the Philly job log
    at `log`."""

def check_policy(slot: str, policy: Any, cases: int = 64, scenarios: int = 4, seed: int = 1) -> Optional[str]:
    """Runs the conformance kit on a Python policy; None if it passed, else the finding."""

def wire_samples(slot_name: str, cases: int = 32, seed: int = 1) -> List[Tuple[bytes, bytes]]:
    """Seeded views of the slot from the conformance kit with the built-in
    policy's decision for each, as the SDK's postcard bytes."""

def wire_reencode(slot_name: str, kind: str, data: bytes) -> bytes:
    """The SDK's reading of ``data`` (``kind``: "view" or "decision"),
    written again; raises PolicyError if it does not read."""

def presets() -> List[str]:
    """The names of the presets in the built-in catalog."""

def builtin_policies(slot: str) -> List[str]:
    """The built-in policy names of a slot (`fairness`, `locality`, `gang`)."""

def policy_module_names() -> List[str]:
    """The names of the built-in policies' Wasm modules."""

def policy_module(name: str) -> bytes:
    """The bytes of a built-in policy's Wasm module."""

_Path = Union[str, PathLike[str]]

class Server:
    """One server of a topology."""

    @property
    def id(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def gpus(self) -> int: ...
    @property
    def rack(self) -> Optional[str]: ...
    @property
    def domains(self) -> List[str]: ...
    @property
    def gpu_type(self) -> str: ...

class Topology:
    """An immutable cluster topology: cluster > racks > servers > GPUs."""

    @staticmethod
    def uniform(racks: int, servers_per_rack: int, gpus_per_server: int) -> Topology: ...
    @staticmethod
    def from_machine_list(path: _Path, rack_grouping: str = "same-sku", rack_size: int = 32) -> Topology: ...
    @staticmethod
    def from_machine_list_text(
        text: str, rack_grouping: str = "same-sku", rack_size: int = 32, name: str = "<machine list>"
    ) -> Topology: ...
    @staticmethod
    def from_file(path: _Path) -> Topology: ...
    @staticmethod
    def from_toml(text: str, name: str = "<topology>") -> Topology: ...
    @staticmethod
    def from_racks(
        racks: Union[
            Mapping[str, Mapping[str, Union[int, Tuple[int, str]]]],
            Sequence[Tuple[str, Sequence[Union[Tuple[str, int], Tuple[str, int, Optional[str]]]]]],
        ],
        gpu_types: Optional[Mapping[str, int]] = None,
    ) -> Topology: ...
    @property
    def gpu_types(self) -> List[Tuple[str, int]]: ...
    @property
    def servers(self) -> List[Server]: ...
    def server(self, name: str) -> Optional[Server]: ...
    @property
    def racks(self) -> List[str]: ...
    @property
    def level_names(self) -> List[str]: ...
    @property
    def total_gpus(self) -> int: ...
    def __len__(self) -> int: ...

class TopologyBuilder:
    """Builds a topology domain by domain and server by server."""

    def __init__(self) -> None: ...
    @property
    def root(self) -> int: ...
    def level_names(self, names: List[str]) -> None: ...
    def add_domain(self, parent: int, name: str) -> int: ...
    def add_server(self, parent: int, name: str, gpus: int) -> int: ...
    def build(self) -> Topology: ...

class Start:
    """A job started by a round."""

    @property
    def job(self) -> int: ...
    @property
    def placement(self) -> List[Tuple[str, List[int]]]: ...
    @property
    def locality(self) -> str: ...
    @property
    def servers(self) -> int: ...
    @property
    def probe_s(self) -> Optional[int]: ...

class Round:
    """What one round decided."""

    @property
    def now(self) -> int: ...
    @property
    def starts(self) -> List[Start]: ...
    @property
    def waiting(self) -> List[Tuple[int, str]]: ...
    @property
    def reservations(self) -> List[Tuple[int, int]]: ...
    @property
    def preempted(self) -> List[int]: ...
    @property
    def migrations(self) -> List[Start]: ...
    @property
    def retries(self) -> List[Tuple[int, str]]: ...
    @property
    def policy_errors(self) -> List[str]: ...

_Policy = Union[str, bytes, PathLike[str], Any]  # a built-in name, a .wasm path or bytes, or a Python policy object

class Scheduler:
    """Gangway's scheduler, embedded in a Python host."""

    def __init__(
        self,
        topology: Topology,
        policies: Optional[str] = None,
        placement: Optional[str] = None,
        policy_fuel: Optional[int] = None,
        large_policies: bool = False,
    ) -> None: ...
    @property
    def topology(self) -> Topology: ...
    def virtual_cluster(
        self, name: str, quota: Optional[int] = None, weight: Optional[int] = None
    ) -> int: ...
    def set_quota(self, vc: Union[str, int], quota: Optional[int]) -> None: ...
    def virtual_clusters(self) -> List[Dict[str, Any]]: ...
    def submit(
        self,
        job: int,
        gpus: int,
        vc: Union[str, int] = "default",
        user: int = 0,
        submitted: int = 0,
        gpu_types: Optional[Sequence[str]] = None,
        min_gpu_memory_gb: int = 0,
    ) -> None: ...
    def round(self, now: int) -> Round: ...
    def end_attempt(
        self,
        job: int,
        now: int,
        outcome: str = "passed",
        failure_class: Optional[str] = None,
        last: bool = False,
    ) -> None: ...
    def kill(self, job: int, now: int) -> None: ...
    def server_down(self, server: Union[str, int], now: int) -> List[int]: ...
    def server_up(self, server: Union[str, int]) -> None: ...
    def drain(self, server: Union[str, int]) -> None: ...
    def why_pending(self, job: int) -> Optional[str]: ...
    def job(self, job: int) -> Optional[Dict[str, Any]]: ...
    def jobs(self) -> List[int]: ...
    @property
    def pending(self) -> int: ...
    @property
    def free_gpus(self) -> int: ...
    def check_invariants(self) -> None: ...
    def use_policy(self, slot: str, policy: _Policy, config: Union[str, bytes, None] = None) -> str: ...
    def use_preset(self, name: str) -> None: ...
    def rollback(self, slot: str) -> None: ...
    def slot_status(self, slot: str) -> Dict[str, Any]: ...
