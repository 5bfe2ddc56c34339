"""``gangway.ray``: gangs on a real Ray cluster, placed by Gangway.

The :class:`Launcher` reads the cluster from Ray (nodes labelled
``gangway/server`` and ``gangway/rack``, their GPU counts), keeps a
:class:`gangway.Scheduler` over it, and each round launches the jobs Gangway
started: one Ray placement group per job, one bundle per server Gangway
chose, pinned there with ``bundle_label_selector``, and one Ray task (or
actor) per GPU whose ``CUDA_VISIBLE_DEVICES`` is the exact GPU index Gangway
chose (Ray itself would hand out the lowest free ids). When all of a gang's
tasks return, the attempt ends ``passed``; a task that raises fails the
whole gang (retried up to ``max_retries`` times); a node that dies becomes
``server_down`` and its gangs wait again, whole, for a new placement.

Inside a task, :func:`gang_context` says which job, rank, server and GPU it
is::

    import ray, gangway.ray

    def train(steps):
        ctx = gangway.ray.gang_context()
        ...  # ctx.rank of ctx.world_size, on ctx.server, GPU ctx.gpu
        return steps

    ray.init(address="HOST:PORT")
    launcher = gangway.ray.Launcher(policies="locality-first")
    launcher.submit(16, train, args=(1000,), vc="research")
    jobs = launcher.run()
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import ray
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from ._native import Scheduler, Topology
from .raycluster import RACK_LABEL, SERVER_LABEL, LocalCluster

__all__ = [
    "Attempt",
    "GangContext",
    "GangJob",
    "Launcher",
    "LocalCluster",
    "NOSET_CUDA",
    "RACK_LABEL",
    "SERVER_LABEL",
    "gang_context",
    "topology_from_ray",
]

#: Tells Ray not to overwrite the CUDA_VISIBLE_DEVICES the launcher sets.
NOSET_CUDA = "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"

Placement = List[Tuple[str, List[int]]]


@dataclass(frozen=True)
class GangContext:
    """Where one member of a gang runs, as Gangway placed it."""

    #: The job's id.
    job: int
    #: Which attempt of the job (1 for the first).
    attempt: int
    #: This member's rank, 0 .. world_size - 1, in placement order.
    rank: int
    #: GPUs of the gang.
    world_size: int
    #: The server (``gangway/server`` label) this member runs on.
    server: str
    #: The GPU index on that server (also in ``CUDA_VISIBLE_DEVICES``).
    gpu: int
    #: The whole gang: ``(server, [GPU indices])`` per server.
    placement: Placement


_context: Optional[GangContext] = None


def gang_context() -> GangContext:
    """The :class:`GangContext` of the gang member running in this process.
    Raises RuntimeError outside a task or actor started by a Launcher."""
    if _context is None:
        raise RuntimeError(
            "gang_context() is only known inside a task or actor started by gangway.ray.Launcher"
        )
    return _context


def _set_context(ctx: GangContext) -> None:
    global _context
    _context = ctx


# One process per GPU task (Ray does not reuse a worker after a GPU task), so
# the process starts with the CUDA_VISIBLE_DEVICES of its runtime_env.
@ray.remote(num_gpus=1, num_cpus=0, max_retries=0)
def _gpu_task(fn: Callable[..., Any], ctx: GangContext, args: Sequence[Any], kwargs: Dict[str, Any]) -> Any:
    _set_context(ctx)
    return fn(*args, **kwargs)


@ray.remote(num_gpus=1, num_cpus=0, max_restarts=0)
class _GpuActor:
    """Holds one instance of the user's class on one GPU."""

    def __init__(self, cls: type, ctx: GangContext, args: Sequence[Any], kwargs: Dict[str, Any]) -> None:
        _set_context(ctx)
        self.obj = cls(*args, **kwargs)

    def call(self, method: str) -> Any:
        return getattr(self.obj, method)()


@dataclass
class Attempt:
    """One attempt of a gang."""

    #: 1 for the first attempt.
    number: int
    #: Where Gangway placed it: ``(server, [GPU indices])`` per server.
    placement: Placement
    #: Seconds since the launcher started, when Gangway started it.
    started_s: float
    #: Seconds from creating its placement group to Ray reporting it ready
    #: (``None`` if it never became ready).
    pg_ready_s: Optional[float] = None
    #: When it ended (seconds since the launcher started).
    ended_s: Optional[float] = None
    #: ``passed``, ``failed``, ``interrupted`` (a server died) or ``killed``.
    outcome: Optional[str] = None
    #: Why it failed or was interrupted.
    error: Optional[str] = None
    #: What each rank returned (``passed`` attempts).
    results: List[Any] = field(default_factory=list)


@dataclass
class GangJob:
    """A job of the launcher and everything that happened to it."""

    id: int
    gpus: int
    vc: str
    name: str
    max_retries: int
    #: ``pending``, ``running``, ``passed``, ``failed`` or ``killed``.
    status: str = "pending"
    attempts: List[Attempt] = field(default_factory=list)
    # What to run.
    _target: Any = field(default=None, repr=False)
    _kind: str = field(default="task", repr=False)
    _method: str = field(default="run", repr=False)
    _args: Sequence[Any] = field(default=(), repr=False)
    _kwargs: Dict[str, Any] = field(default_factory=dict, repr=False)
    # The running attempt.
    _pg: Optional[PlacementGroup] = field(default=None, repr=False)
    _pg_created: float = field(default=0.0, repr=False)
    _pg_ready_ref: Any = field(default=None, repr=False)
    _refs: Dict[Any, int] = field(default_factory=dict, repr=False)
    _actors: List[Any] = field(default_factory=list, repr=False)
    _results: Dict[int, Any] = field(default_factory=dict, repr=False)
    _suspect_since: Optional[float] = field(default=None, repr=False)
    _suspect_error: Optional[str] = field(default=None, repr=False)
    _failures: int = field(default=0, repr=False)

    @property
    def finished(self) -> bool:
        """Whether the job is done for good."""
        return self.status in ("passed", "failed", "killed")


def _alive_servers(server_label: str) -> Dict[str, Dict[str, Any]]:
    return {
        n["Labels"][server_label]: n
        for n in ray.nodes()
        if n.get("Alive") and server_label in n.get("Labels", {})
    }


#: The resource prefix Ray gives a node whose GPUs are of a known type
#: (``accelerator_type:A100``), and that tasks ask with ``accelerator_type=``.
ACCELERATOR_PREFIX = "accelerator_type:"


def accelerator_type(node: Dict[str, Any]) -> Optional[str]:
    """The accelerator type of a node of ``ray.nodes()``: the type its
    ``accelerator_type:<type>`` resource names (the first by name if it has
    several), or None."""
    types = sorted(
        k[len(ACCELERATOR_PREFIX) :] for k in node.get("Resources", {}) if k.startswith(ACCELERATOR_PREFIX)
    )
    return types[0] if types else None


def topology_from_ray(server_label: str = SERVER_LABEL, rack_label: str = RACK_LABEL) -> Topology:
    """The topology of the connected Ray cluster: every live node labelled
    ``server_label`` with its GPU count and accelerator type (Ray's
    ``accelerator_type:<type>`` resource; a node without one is of the type
    ``gpu``), in racks by ``rack_label`` (nodes without one share a rack
    ``default``); racks and servers sorted by name. Raises RuntimeError when
    no node is labelled."""
    racks: Dict[str, Dict[str, Any]] = {}
    for server, node in sorted(_alive_servers(server_label).items()):
        gpus = int(node.get("Resources", {}).get("GPU", 0))
        if gpus > 0:
            rack = node["Labels"].get(rack_label, "default")
            kind = accelerator_type(node)
            racks.setdefault(rack, {})[server] = (gpus, kind) if kind else gpus
    if not racks:
        raise RuntimeError(f"no live Ray node with GPUs carries the label {server_label!r}")
    return Topology.from_racks({r: racks[r] for r in sorted(racks)})


def _is_user_error(e: BaseException) -> bool:
    """An exception the gang's own code raised (or its environment could not
    be set up), rather than a dead worker, node or object."""
    return isinstance(e, (ray.exceptions.RayTaskError, ray.exceptions.RuntimeEnvSetupError))


class Launcher:
    """Runs gangs on the connected Ray cluster where Gangway places them.

    ``policies`` names a preset (``gangway.presets()``; ``None`` is the
    core's defaults) and ``placement`` its tie-break. Connects with
    ``ray.init(address=address)`` unless Ray is initialized already. Time in
    the scheduler is whole seconds since the launcher started, so policy
    settings in seconds (delay scheduling, reservations) mean seconds. The scheduler
    is :attr:`scheduler`, for wait reasons, invariants or policy swaps.
    """

    def __init__(
        self,
        policies: Optional[str] = None,
        *,
        placement: Optional[str] = None,
        address: Optional[str] = None,
        server_label: str = SERVER_LABEL,
        rack_label: str = RACK_LABEL,
        tick_s: float = 0.02,
        health_every_s: float = 0.25,
        failure_grace_s: float = 10.0,
    ) -> None:
        if not ray.is_initialized():
            ray.init(address=address)
        self.server_label = server_label
        self.rack_label = rack_label
        self.tick_s = tick_s
        self.health_every_s = health_every_s
        self.failure_grace_s = failure_grace_s
        #: The cluster as Gangway sees it.
        self.topology = topology_from_ray(server_label, rack_label)
        #: The scheduler deciding placements.
        self.scheduler = Scheduler(self.topology, policies=policies, placement=placement)
        #: Every job, by id.
        self.jobs: Dict[int, GangJob] = {}
        #: What happened, in order: ``(seconds, event, details)``.
        self.events: List[Tuple[float, str, Dict[str, Any]]] = []
        self._t0 = time.monotonic()
        self._next_id = 1
        self._down: set = set()
        self._last_health = -1.0

    # -- time and events --------------------------------------------------
    def _elapsed(self) -> float:
        return time.monotonic() - self._t0

    def _now(self) -> int:
        return int(self._elapsed())

    def _event(self, kind: str, **details: Any) -> None:
        self.events.append((self._elapsed(), kind, details))

    # -- jobs ---------------------------------------------------------------
    def submit(
        self,
        gpus: int,
        target: Any,
        *,
        args: Sequence[Any] = (),
        kwargs: Optional[Dict[str, Any]] = None,
        vc: str = "default",
        user: int = 0,
        max_retries: int = 0,
        method: str = "run",
        name: Optional[str] = None,
        accelerator_type: Union[None, str, Sequence[str]] = None,
    ) -> int:
        """Submits a gang of ``gpus`` GPUs; returns its job id. ``target``
        runs once per GPU: a function (plain or ``@ray.remote``) called with
        ``args`` and ``kwargs``, or a class (plain or ``@ray.remote``)
        instantiated with them whose ``method`` is then called. Failed
        attempts are retried up to ``max_retries`` times.
        ``accelerator_type`` (as in Ray's own task options, or a list most
        preferred first) is the GPU type the gang may run on; None: any. The
        gang runs on one type; a type no node has raises SchedulerError."""
        types = [accelerator_type] if isinstance(accelerator_type, str) else accelerator_type
        kind = "task"
        if isinstance(target, ray.remote_function.RemoteFunction):
            target = target._function
        elif isinstance(target, ray.actor.ActorClass):
            target = target.__ray_metadata__.modified_class  # type: ignore[attr-defined]
            kind = "actor"
        elif isinstance(target, type):
            kind = "actor"
        elif not callable(target):
            raise TypeError(f"target must be a function or a class, got {target!r}")
        job = GangJob(
            id=self._next_id,
            gpus=gpus,
            vc=vc,
            name=name or str(getattr(target, "__name__", "job")),
            max_retries=max_retries,
            _target=target,
            _kind=kind,
            _method=method,
            _args=tuple(args),
            _kwargs=dict(kwargs or {}),
        )
        self.scheduler.submit(
            job.id,
            gpus,
            vc=vc,
            user=user,
            submitted=self._now(),
            gpu_types=list(types) if types is not None else None,
        )
        self.jobs[job.id] = job
        self._next_id += 1
        self._event("submit", job=job.id, gpus=gpus, vc=vc)
        return job.id

    def kill(self, job_id: int) -> None:
        """Kills a pending or running job."""
        job = self.jobs[job_id]
        now = self._now()
        if job.status == "running":
            self._stop_attempt(job, "killed", "killed by the host")
        self.scheduler.kill(job_id, now)
        job.status = "killed"
        self._event("kill", job=job_id)

    # -- one step -----------------------------------------------------------
    def step(self) -> None:
        """One pass: notice dead (or returning) servers, collect finished
        and failed tasks, run a scheduling round and launch what it started."""
        if self._elapsed() - self._last_health >= self.health_every_s:
            self._check_servers()
            self._last_health = self._elapsed()
        self._collect()
        now = self._now()
        round_ = self.scheduler.round(now)
        # The reclaim slot stopped these: they wait again in Gangway.
        for job_id in round_.preempted:
            job = self.jobs[job_id]
            self._stop_attempt(job, "preempted", "preempted by the reclaim policy")
            job.status = "pending"
            self._event("preempt", job=job_id)
        # The defragment slot moved these: stopped and started where they run now.
        for move in round_.migrations:
            job = self.jobs[move.job]
            self._stop_attempt(job, "migrated", "moved by the defragment policy")
            self._event("migrate", job=move.job, placement=move.placement)
            self._launch(job, move.placement)
        # The retry slot gave up on these.
        for job_id, action in round_.retries:
            if action == "give-up":
                self.jobs[job_id].status = "failed"
                self._event("give-up", job=job_id)
        for start in round_.starts:
            self._launch(self.jobs[start.job], start.placement)

    def run(self, timeout_s: Optional[float] = None) -> Dict[int, GangJob]:
        """Steps until every job is finished (or ``timeout_s`` passed, then
        raises TimeoutError naming the unfinished jobs); returns the jobs."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not all(j.finished for j in self.jobs.values()):
            self.step()
            if deadline is not None and time.monotonic() > deadline:
                waiting = {
                    j.id: (j.status, self.scheduler.why_pending(j.id))
                    for j in self.jobs.values()
                    if not j.finished
                }
                raise TimeoutError(f"jobs not finished after {timeout_s} s: {waiting}")
            time.sleep(self.tick_s)
        return self.jobs

    # -- launching ----------------------------------------------------------
    def _launch(self, job: GangJob, placement: Placement) -> None:
        attempt = Attempt(number=len(job.attempts) + 1, placement=placement, started_s=self._elapsed())
        job.attempts.append(attempt)
        job.status = "running"
        job._results = {}
        job._refs = {}
        job._actors = []
        job._suspect_since = None
        bundles = [{"GPU": float(len(gpus))} for _, gpus in placement]
        selectors = [{self.server_label: server} for server, _ in placement]
        job._pg_created = time.perf_counter()
        job._pg = placement_group(
            bundles,
            strategy="PACK",
            bundle_label_selector=selectors,
            name=f"gangway-job{job.id}-{attempt.number}",
        )
        job._pg_ready_ref = job._pg.ready()
        world = sum(len(g) for _, g in placement)
        target = ray.put(job._target)
        rank = 0
        for index, (server, gpus) in enumerate(placement):
            strategy = PlacementGroupSchedulingStrategy(job._pg, placement_group_bundle_index=index)
            for gpu in gpus:
                ctx = GangContext(job.id, attempt.number, rank, world, server, gpu, placement)
                options = dict(
                    scheduling_strategy=strategy,
                    runtime_env={"env_vars": {"CUDA_VISIBLE_DEVICES": str(gpu), NOSET_CUDA: "1"}},
                )
                if job._kind == "task":
                    ref = _gpu_task.options(**options).remote(target, ctx, job._args, job._kwargs)
                else:
                    actor = _GpuActor.options(**options).remote(  # type: ignore[attr-defined]
                        target, ctx, job._args, job._kwargs
                    )
                    job._actors.append(actor)
                    ref = actor.call.remote(job._method)
                job._refs[ref] = rank
                rank += 1
        self._event("start", job=job.id, attempt=attempt.number, placement=placement)

    def _stop_attempt(self, job: GangJob, outcome: str, error: Optional[str]) -> None:
        """Ends the running attempt: cancels what still runs, frees the
        placement group."""
        for ref in job._refs:
            try:
                ray.cancel(ref, force=True)
            except (ray.exceptions.RayError, TypeError, ValueError):
                pass
        for actor in job._actors:
            try:
                ray.kill(actor)
            except (ray.exceptions.RayError, ValueError):
                pass
        if job._pg is not None:
            try:
                remove_placement_group(job._pg)
            except (ray.exceptions.RayError, ValueError):
                pass
        attempt = job.attempts[-1]
        attempt.ended_s = self._elapsed()
        attempt.outcome = outcome
        attempt.error = error
        if outcome == "passed":
            attempt.results = [job._results[r] for r in sorted(job._results)]
        job._pg = None
        job._pg_ready_ref = None
        job._refs = {}
        job._actors = []
        job._suspect_since = None

    # -- watching -----------------------------------------------------------
    def _check_servers(self) -> None:
        alive = _alive_servers(self.server_label)
        for server in (s.name for s in self.topology.servers):
            if server not in alive and server not in self._down:
                now = self._now()
                hit = self.scheduler.server_down(server, now)
                self._down.add(server)
                self._event("server_down", server=server, jobs=hit)
                for job_id in hit:
                    job = self.jobs[job_id]
                    self._stop_attempt(job, "interrupted", f"server {server} died")
                    job.status = "pending"
                    self._event("requeue", job=job_id, server=server)
            elif server in alive and server in self._down:
                self.scheduler.server_up(server)
                self._down.discard(server)
                self._event("server_up", server=server)

    def _collect(self) -> None:
        running = [j for j in self.jobs.values() if j.status == "running"]
        refs = [r for j in running for r in j._refs if j._refs[r] not in j._results]
        ready_refs = [j._pg_ready_ref for j in running if j._pg_ready_ref is not None]
        everything = refs + ready_refs
        if not everything:
            return
        done, _ = ray.wait(everything, num_returns=len(everything), timeout=0)
        done_set = set(done)
        for job in running:
            if job._pg_ready_ref is not None and job._pg_ready_ref in done_set:
                job.attempts[-1].pg_ready_s = time.perf_counter() - job._pg_created
                job._pg_ready_ref = None
            for ref, rank in list(job._refs.items()):
                if ref not in done_set or rank in job._results:
                    continue
                try:
                    job._results[rank] = ray.get(ref)
                except ray.exceptions.RayError as e:
                    if _is_user_error(e):
                        self._fail(job, f"rank {rank}: {e}")
                        break
                    # A dead worker or node: wait for the health check to
                    # say which server died before calling it a failure.
                    if job._suspect_since is None:
                        job._suspect_since = self._elapsed()
                        job._suspect_error = f"rank {rank}: {type(e).__name__}: {e}"
            if job.status != "running":
                continue
            if len(job._results) == len(job._refs) and job._refs:
                self._stop_attempt(job, "passed", None)
                self.scheduler.end_attempt(job.id, self._now(), "passed")
                job.status = "passed"
                self._event("end", job=job.id, outcome="passed")
            elif (
                job._suspect_since is not None and self._elapsed() - job._suspect_since > self.failure_grace_s
            ):
                self._fail(job, job._suspect_error or "a gang member died")

    def _fail(self, job: GangJob, error: str) -> None:
        self._stop_attempt(job, "failed", error)
        job._failures += 1
        retry = job._failures <= job.max_retries
        # Not the last attempt: the retry slot decides at the next round.
        self.scheduler.end_attempt(job.id, self._now(), "failed", last=not retry)
        job.status = "pending" if retry else "failed"
        self._event("end", job=job.id, outcome="failed", retry=retry, error=error)

    # -- figures --------------------------------------------------------------
    def pg_ready_latencies(self) -> List[float]:
        """Seconds from creating each placement group to Ray reporting it
        ready, over every attempt that became ready (measured with the
        launcher's polling, so within about ``tick_s``)."""
        return [a.pg_ready_s for j in self.jobs.values() for a in j.attempts if a.pg_ready_s is not None]

    def close(self) -> None:
        """Stops every running attempt (its tasks and placement group)."""
        for job in self.jobs.values():
            if job.status == "running":
                self._stop_attempt(job, "killed", "launcher closed")
                job.status = "killed"
