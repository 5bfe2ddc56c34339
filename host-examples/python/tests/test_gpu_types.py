"""GPU types from Python: a topology of typed servers, jobs that ask for
types or memory, one gang on one type, requests no server satisfies refused;
and on a real Ray cluster, nodes typed by Ray's ``accelerator_type`` resource
and gangs that ask for one."""

from __future__ import annotations

import sys
import time
from typing import Any, Dict

import pytest
from helpers import require_ray

import gangway


def typed() -> gangway.Topology:
    """Two racks: r0 with two 8-GPU A100 servers (80 GB), r1 with two 8-GPU
    V100 servers (16 GB)."""
    return gangway.Topology.from_racks(
        {"r0": {"a0": (8, "A100"), "a1": (8, "A100")}, "r1": [("v0", 8, "V100"), ("v1", 8, "V100")]},
        gpu_types={"A100": 80, "V100": 16},
    )


def test_a_topology_knows_its_gpu_types() -> None:
    topo = typed()
    assert topo.gpu_types == [("A100", 80), ("V100", 16)]
    assert {s.name: s.gpu_type for s in topo.servers} == {
        "a0": "A100",
        "a1": "A100",
        "v0": "V100",
        "v1": "V100",
    }
    assert gangway.Topology.uniform(1, 1, 8).gpu_types == [("gpu", 0)]


def servers_of(sched: gangway.Scheduler, rnd: Any, job: int) -> set:
    return {server for s in rnd.starts if s.job == job for server, _ in s.placement}


def test_jobs_ask_for_types_and_memory_and_a_gang_stays_on_one_type() -> None:
    sched = gangway.Scheduler(typed())
    sched.submit(1, 8, gpu_types=["V100"])
    sched.submit(2, 8, min_gpu_memory_gb=40)
    rnd = sched.round(1)
    assert servers_of(sched, rnd, 1) <= {"v0", "v1"}
    assert servers_of(sched, rnd, 2) <= {"a0", "a1"}
    sched.check_invariants()
    # One server of each type free: 16 GPUs, but a 16-GPU gang of any type
    # waits rather than span two types.
    sched.submit(3, 16, submitted=2)
    rnd = sched.round(3)
    assert not servers_of(sched, rnd, 3)
    assert sched.pending == 1
    # Refused at once, with the reason: a type no server has, memory no
    # type has, a gang larger than any one type.
    with pytest.raises(gangway.SchedulerError, match="H100"):
        sched.submit(4, 8, gpu_types=["H100"])
    with pytest.raises(gangway.SchedulerError, match="96 GB"):
        sched.submit(5, 8, min_gpu_memory_gb=96)
    with pytest.raises(gangway.SchedulerError, match="32 GPUs of one type"):
        sched.submit(6, 32)


@pytest.fixture(scope="module")
def typed_ray() -> Any:
    require_ray()
    import ray
    import ray.cloudpickle

    from gangway.ray import LocalCluster

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    with LocalCluster(nodes=2, gpus_per_node=4, racks=1, accelerator_types=["A100", "V100"]) as c:
        c.connect(log_to_driver=False)
        try:
            yield c
        finally:
            ray.shutdown()


def where(seconds: float) -> Dict[str, Any]:
    """A gang member: the node it ran on."""
    import ray

    time.sleep(seconds)
    return {"server": ray.get_runtime_context().get_node_labels().get("gangway/server")}


def test_ray_nodes_are_typed_by_accelerator_type_and_gangs_ask_for_one(typed_ray: Any) -> None:
    import gangway.ray

    launcher = gangway.ray.Launcher()
    topo = launcher.topology
    assert {s.name: s.gpu_type for s in topo.servers} == {"s0": "A100", "s1": "V100"}
    v100 = launcher.submit(4, where, args=(0.5,), accelerator_type="V100")
    a100 = launcher.submit(2, where, args=(0.5,), accelerator_type=["A100"])
    with pytest.raises(gangway.SchedulerError, match="H100"):
        launcher.submit(1, where, args=(0.0,), accelerator_type="H100")
    # 8 GPUs of one type do not exist: refused, not left waiting forever.
    with pytest.raises(gangway.SchedulerError):
        launcher.submit(8, where, args=(0.0,))
    jobs = launcher.run(timeout_s=120)
    assert jobs[v100].status == "passed" and jobs[a100].status == "passed"
    assert {r["server"] for r in jobs[v100].attempts[-1].results} == {"s1"}
    assert {r["server"] for r in jobs[a100].attempts[-1].results} == {"s0"}
    launcher.scheduler.check_invariants()


def test_replay_reads_a_gavel_trace_folder_with_its_throughputs(tmp_path: Any) -> None:
    """``gangway.replay`` takes Gavel's traces (a folder of per-VC files)
    and the throughput table; on a typed cluster the report has a section
    per GPU type."""
    traces = tmp_path / "traces"
    traces.mkdir()
    line = "A3C\tpython3 main.py\t--max-steps\t0\t{steps}\t{at}.000000\t1\n"
    (traces / "a.trace").write_text("".join(line.format(steps=1000 * (i + 1), at=30 * i) for i in range(6)))
    table = tmp_path / "throughputs.json"
    table.write_text('{"k80": {"(\'A3C\', 1)": {"null": 0.5}}, "v100": {"(\'A3C\', 1)": {"null": 2.0}}}')
    report = gangway.replay(
        trace=traces, format="gavel", throughputs=table, cluster="2x1:k80,2x1:v100", echo=False
    )
    run = report.data["runs"][0]
    assert run["jobs"]["submitted"] == 6 and run["jobs"]["unfinished"] == 0
    names = [t["name"] for t in run["gpu_types"]["types"]]
    assert names == ["k80", "v100"]
    with pytest.raises(gangway.ReplayFileNotFoundError):
        gangway.replay(trace=traces, format="gavel", throughputs=tmp_path / "none.json", echo=False)
