"""gangway.ray on a real Ray cluster: 4 fake 8-GPU nodes in 2 racks, started
with `ray start` inside this test's network namespace. A dozen gangs of 1-16
GPUs run where Gangway placed them; a node is killed under a running gang,
which waits again and runs elsewhere."""

from __future__ import annotations

import os
import sys
import time
from collections import defaultdict
from typing import Any, Dict, Iterator, List, Tuple

import pytest
from helpers import loopback_only_connections, require_ray


def member(seconds: float) -> Dict[str, Any]:
    """One gang member: reports where it runs, holds its GPU a while."""
    import ray

    import gangway.ray

    ctx = gangway.ray.gang_context()
    labels = ray.get_runtime_context().get_node_labels()
    start = time.time()
    time.sleep(seconds)
    return {
        "job": ctx.job,
        "rank": ctx.rank,
        "chosen": (ctx.server, ctx.gpu),
        "node_server": labels.get("gangway/server"),
        "node_rack": labels.get("gangway/rack"),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "start": start,
        "end": time.time(),
    }


def flaky(seconds: float) -> Dict[str, Any]:
    """Rank 0 fails the gang's first attempt; the retry passes."""
    import gangway.ray

    ctx = gangway.ray.gang_context()
    if ctx.attempt == 1 and ctx.rank == 0:
        raise RuntimeError("flaky on its first attempt")
    return member(seconds)


def broken(seconds: float) -> Dict[str, Any]:
    """Always fails."""
    raise ValueError(f"broken after {seconds} s")


class Member:
    """The same as an actor class: constructed per GPU, then `run`."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def run(self) -> Dict[str, Any]:
        return member(self.seconds)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    require_ray()
    import ray
    import ray.cloudpickle

    from gangway.ray import LocalCluster

    # The workers cannot import this test module: send its functions by value.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    started = time.perf_counter()
    with LocalCluster(nodes=4, gpus_per_node=8, racks=2) as c:
        sys.stderr.write(f"\nRay cluster of 4 nodes up in {time.perf_counter() - started:.1f} s\n")
        c.connect(log_to_driver=False)
        try:
            yield c
        finally:
            ray.shutdown()


# (gpus, target, seconds, retries): a dozen gangs of 1 to 16 GPUs; the first
# is the long one whose node gets killed; one fails once and is retried, one
# always fails.
WORKLOAD: List[Tuple[int, Any, float, int]] = [
    (16, member, 12.0, 0),
    (8, member, 2.0, 0),
    (4, Member, 2.0, 0),
    (2, flaky, 2.0, 1),
    (1, member, 2.0, 0),
    (1, Member, 2.0, 0),
    (2, member, 2.0, 0),
    (4, member, 2.0, 0),
    (8, member, 2.0, 0),
    (3, member, 2.0, 0),
    (1, broken, 0.0, 0),
    (12, member, 2.0, 0),
]


def test_gangs_run_where_gangway_placed_them_and_a_dead_node_requeues(cluster: Any) -> None:
    import gangway.ray

    launcher = gangway.ray.Launcher()
    topo = launcher.topology
    assert sorted(s.name for s in topo.servers) == ["s0", "s1", "s2", "s3"]
    assert {s.name: s.rack for s in topo.servers} == {"s0": "r0", "s1": "r0", "s2": "r1", "s3": "r1"}
    assert topo.total_gpus == 32

    ids = [
        launcher.submit(g, target, args=(secs,), vc="research" if i % 2 else "prod", max_retries=retries)
        for i, (g, target, secs, retries) in enumerate(WORKLOAD)
    ]
    flaky_job = launcher.jobs[ids[3]]
    broken_job = launcher.jobs[ids[10]]
    long_job = launcher.jobs[ids[0]]
    killed = None
    killed_at = 0.0
    non_loopback: List[str] = []
    deadline = time.monotonic() + 400
    last_sample = 0.0
    while not all(j.finished for j in launcher.jobs.values()):
        launcher.step()
        launcher.scheduler.check_invariants()
        if time.monotonic() - last_sample > 0.5:
            non_loopback += loopback_only_connections()
            last_sample = time.monotonic()
        attempt = long_job.attempts[-1] if long_job.attempts else None
        if (
            killed is None
            and attempt is not None
            and attempt.pg_ready_s is not None
            and launcher._elapsed() - attempt.started_s > 6
        ):
            killed = attempt.placement[0][0]
            cluster.kill_node(killed)
            killed_at = time.time()
        assert time.monotonic() < deadline, {
            j.id: (j.status, launcher.scheduler.why_pending(j.id)) for j in launcher.jobs.values()
        }
        time.sleep(launcher.tick_s)

    assert killed is not None, "the long gang never ran"
    assert not non_loopback, non_loopback
    assert gangway.ray.topology_from_ray is not None

    # Every gang passed but the broken one; the one on the dead node ran
    # twice, elsewhere; the flaky one failed once and passed on its retry.
    expected = {i: "passed" for i in ids}
    expected[broken_job.id] = "failed"
    assert {j.id: j.status for j in launcher.jobs.values()} == expected
    assert [a.outcome for a in broken_job.attempts] == ["failed"]
    assert "broken after" in (broken_job.attempts[0].error or "")
    assert launcher.scheduler.job(broken_job.id)["status"] == "failed"
    assert [a.outcome for a in flaky_job.attempts] == ["failed", "passed"]
    assert "flaky on its first attempt" in (flaky_job.attempts[0].error or "")
    assert launcher.scheduler.job(flaky_job.id)["attempts"] == 2
    assert [a.outcome for a in long_job.attempts] == ["interrupted", "passed"]
    assert killed in {s for s, _ in long_job.attempts[0].placement}
    assert killed not in {s for s, _ in long_job.attempts[1].placement}
    downs = [e for e in launcher.events if e[1] == "server_down"]
    assert [(d[2]["server"], d[2]["jobs"]) for d in downs] == [(killed, [long_job.id])]
    for job in launcher.jobs.values():
        if job not in (long_job, flaky_job, broken_job):
            assert [a.outcome for a in job.attempts] == ["passed"], (job.id, job.attempts)

    # Each member ran on the server and GPU Gangway chose, and saw exactly it.
    racks = {s.name: s.rack for s in topo.servers}
    by_gpu: Dict[Tuple[str, int], List[Tuple[float, float, int]]] = defaultdict(list)
    for job in launcher.jobs.values():
        if job is broken_job:
            continue
        attempt = job.attempts[-1]
        chosen = [(server, gpu) for server, gpus in attempt.placement for gpu in gpus]
        assert len(chosen) == job.gpus
        assert [r["rank"] for r in attempt.results] == list(range(job.gpus))
        for r in attempt.results:
            server, gpu = chosen[r["rank"]]
            assert tuple(r["chosen"]) == (server, gpu)
            assert r["node_server"] == server
            assert r["node_rack"] == racks[server]
            assert r["cuda_visible_devices"] == str(gpu)
            by_gpu[(server, gpu)].append((r["start"], r["end"], job.id))
        servers = {s for s, _ in attempt.placement}
        assert len({racks[s] for s in servers}) == 1, "a gang of <= 16 GPUs spans one rack"
    # No GPU index was used by two gang members at once.
    for key, spans in by_gpu.items():
        spans.sort()
        for (_, e1, j1), (s2, _, j2) in zip(spans, spans[1:]):
            assert s2 >= e1, f"{key} used by jobs {j1} and {j2} at once"
    # Nothing ran on the dead server after it died.
    assert all(
        start < killed_at for (srv, _), spans in by_gpu.items() if srv == killed for start, _, _ in spans
    )

    latencies = launcher.pg_ready_latencies()
    assert len(latencies) >= len(WORKLOAD) + 1
    sys.stderr.write(
        "placement group ready per gang: median {:.1f} ms, max {:.1f} ms over {} gangs\n".format(
            sorted(latencies)[len(latencies) // 2] * 1000, max(latencies) * 1000, len(latencies)
        )
    )
    free = launcher.scheduler.free_gpus
    assert free == 24, "all GPUs free but the dead server's"
