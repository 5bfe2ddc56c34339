"""gangway.Scheduler and gangway.Topology: a scenario with invariants checked
after every event, and policies swapped for Wasm modules between rounds."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Set, Tuple

import pytest

import gangway


def gpus_of(start: gangway.Start) -> Set[Tuple[str, int]]:
    return {(server, gpu) for server, gpus in start.placement for gpu in gpus}


def test_topologies_from_every_source(tmp_path: Path) -> None:
    uniform = gangway.Topology.uniform(2, 4, 8)
    assert (len(uniform), uniform.total_gpus, uniform.racks) == (8, 64, ["r0", "r1"])
    assert uniform.server("r1-s2").rack == "r1"

    racks = gangway.Topology.from_racks({"rack-a": {"m0": 8, "m1": 8}, "rack-b": {"m2": 4}})
    assert [(s.name, s.gpus, s.rack) for s in racks.servers] == [
        ("m0", 8, "rack-a"),
        ("m1", 8, "rack-a"),
        ("m2", 4, "rack-b"),
    ]
    assert gangway.Topology.from_racks([("x", [("n0", 2)])]).total_gpus == 2

    toml = tmp_path / "topo.toml"
    toml.write_text(
        '[[domain]]\nname = "rack-a"\nservers = [ { name = "m0", gpus = 8 }, { name = "m1", gpus = 8 } ]\n'
    )
    assert gangway.Topology.from_file(toml).total_gpus == 16

    machines = tmp_path / "machines.csv"
    machines.write_text("machineId, number of GPUs, single GPU mem\nm0,8, 24GB\nm1,8, 24GB\nm2,2, 12GB\n")
    listed = gangway.Topology.from_machine_list(machines, rack_size=2)
    assert listed.total_gpus == 18

    b = gangway.TopologyBuilder()
    b.level_names(["cluster", "pod", "rack", "server"])
    pod = b.add_domain(b.root, "pod0")
    rack = b.add_domain(pod, "pod0-rack0")
    b.add_server(rack, "n0", 8)
    built = b.build()
    assert built.level_names == ["cluster", "pod", "rack", "server"]
    assert built.servers[0].domains == ["cluster", "pod0", "pod0-rack0"]
    with pytest.raises(gangway.TopologyError, match="already built"):
        b.build()


def test_topology_errors_name_the_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[[domain]]\nname = "r"\nservers = [ { name = "m0", gpus = "eight" } ]\n')
    with pytest.raises(gangway.TopologyError) as err:
        gangway.Topology.from_file(bad)
    assert str(bad) in str(err.value) and ":3" in str(err.value)
    with pytest.raises(gangway.TopologyError, match="m0"):
        gangway.Topology.from_racks({"a": {"m0": 8}, "b": {"m0": 8}})
    with pytest.raises(ValueError, match="rack_grouping"):
        gangway.Topology.from_machine_list_text("machineId, number of GPUs\nm0,8\n", rack_grouping="by-color")


def test_scenario_with_invariants_server_failure_and_wait_reasons() -> None:
    topo = gangway.Topology.uniform(2, 4, 8)  # 64 GPUs
    # The core's defaults: FIFO within hard VC quotas, strict locality, backfill.
    sched = gangway.Scheduler(topo, policies="defaults")
    sched.virtual_cluster("vision", quota=48)
    sched.virtual_cluster("speech", quota=16)
    sizes = {1: 16, 2: 8, 3: 8, 4: 4, 5: 2, 6: 1, 7: 16, 8: 8}
    vcs = {j: "vision" if j % 2 else "speech" for j in sizes}
    for j, g in sizes.items():
        sched.submit(j, g, vc=vcs[j], submitted=j)
    sched.check_invariants()

    r = sched.round(10)
    sched.check_invariants()
    held: Dict[int, Set[Tuple[str, int]]] = {s.job: gpus_of(s) for s in r.starts}
    for s in r.starts:
        assert len(gpus_of(s)) == sizes[s.job]
        assert s.servers == len(s.placement)
        assert s.locality in ("server", "rack")
    all_gpus = [g for gs in held.values() for g in gs]
    assert len(all_gpus) == len(set(all_gpus)), "a GPU was given twice"
    # speech (quota 16) cannot run jobs 2, 4, 6 and 8 (8+4+1+8 GPUs) together.
    speech = sum(sizes[j] for j in held if vcs[j] == "speech")
    assert speech <= 16
    for job, reason in r.waiting:
        assert sched.why_pending(job) == reason
        assert reason in ("fair-share", "fragmentation", "reserved", "held-by-policy", "no-capacity")
    assert {j for j, _ in r.waiting} | set(held) == set(sizes)
    assert sched.free_gpus == 64 - len(all_gpus)

    # A running job ends; a server dies under another; its gang waits again.
    first = r.starts[0].job
    sched.end_attempt(first, 100, "passed")
    sched.check_invariants()
    assert sched.job(first)["status"] == "passed"
    victim = next(s for s in r.starts if s.job != first)
    server = victim.placement[0][0]
    hit = sched.server_down(server, 110)
    assert victim.job in hit
    sched.check_invariants()
    job = sched.job(victim.job)
    assert job["state"] == "pending"
    assert job["failed_gpu_s"] > 0
    r2 = sched.round(120)
    sched.check_invariants()
    for s in r2.starts:
        assert server not in {srv for srv, _ in s.placement}
    # Refused events leave the scheduler unchanged and say why.
    with pytest.raises(gangway.SchedulerError, match="already submitted"):
        sched.submit(1, 1)
    with pytest.raises(gangway.SchedulerError, match="pending"):
        waiting = next(j for j in sched.jobs() if sched.job(j)["state"] == "pending")
        sched.end_attempt(waiting, 130)
    with pytest.raises(gangway.SchedulerError, match="no server named"):
        sched.server_down("nope", 130)
    with pytest.raises(gangway.SchedulerError, match="time went backwards"):
        sched.round(5)
    sched.server_up(server)
    # Everything eventually runs and finishes.
    now = 200
    for _ in range(20):
        sched.round(now)
        for j in sched.jobs():
            if sched.job(j)["state"] == "running":
                sched.end_attempt(j, now + 50, "passed")
        sched.check_invariants()
        now += 100
    states = {sched.job(j)["state"] for j in sched.jobs()}
    assert states == {"finished"}, [sched.job(j) for j in sched.jobs()]


def _order_test(sched: gangway.Scheduler, now: int, first_id: int) -> List[int]:
    """Fills the one 8-GPU server, then queues an 8-GPU job before two 4-GPU
    jobs; returns who starts when the server frees up."""
    sched.submit(first_id, 8, submitted=now)
    assert [s.job for s in sched.round(now).starts] == [first_id]
    sched.submit(first_id + 1, 8, submitted=now + 1)
    sched.submit(first_id + 2, 4, submitted=now + 2)
    sched.submit(first_id + 3, 4, submitted=now + 3)
    sched.round(now + 4)
    sched.end_attempt(first_id, now + 5, "passed")
    started = sorted(s.job for s in sched.round(now + 6).starts)
    sched.check_invariants()
    for j in started:
        sched.end_attempt(j, now + 7, "passed")
    for s in sched.round(now + 8).starts:
        sched.end_attempt(s.job, now + 9, "passed")
    return started


def test_wasm_module_swap_changes_decisions_and_rolls_back(tmp_path: Path) -> None:
    sched = gangway.Scheduler(gangway.Topology.uniform(1, 1, 8))
    assert sched.slot_status("fairness")["active"] == "fifo-quota"
    # The core's FIFO: the 8-GPU job that came first.
    assert _order_test(sched, 0, 1) == [2]

    module = tmp_path / "smallest_first.wasm"
    module.write_bytes(gangway.policy_module("example-smallest-first"))
    name = sched.use_policy("fairness", str(module))
    assert sched.slot_status("fairness")["active"] == "fifo-quota", "a swap waits for the next round"
    # Smallest first, as a Wasm module: the two 4-GPU jobs.
    assert _order_test(sched, 100, 11) == [13, 14]
    status = sched.slot_status("fairness")
    assert status["active"] == name
    assert status["swaps"] == 1
    assert status["previous"] == ["fifo-quota"]
    assert status["events"][0]["kind"] == "swapped"
    sched.check_invariants()

    # Back to the previous policy.
    sched.rollback("fairness")
    assert _order_test(sched, 200, 21) == [22]
    assert sched.slot_status("fairness")["active"] == "fifo-quota"

    # A built-in policy as Wasm bytes, and a preset natively.
    sched.use_policy("fairness", gangway.policy_module("fifo"))
    assert _order_test(sched, 300, 31) == [32]
    sched.use_preset("tiresias")
    sched.round(400)
    assert sched.slot_status("fairness")["active"] == "las"
    assert sched.slot_status("locality")["active"] == "delay"


def test_policy_errors_name_the_module_and_slot(tmp_path: Path) -> None:
    sched = gangway.Scheduler(gangway.Topology.uniform(1, 2, 8), policies="fifo")
    with pytest.raises(gangway.PolicyError, match="gang slot"):
        sched.use_policy("gang", gangway.policy_module("example-smallest-first"))
    junk = tmp_path / "junk.wasm"
    junk.write_bytes(b"\0asm\x01\0\0\0garbage")
    with pytest.raises(gangway.PolicyError, match="junk.wasm"):
        sched.use_policy("fairness", str(junk))
    with pytest.raises(gangway.PolicyError, match="cannot read"):
        sched.use_policy("fairness", str(tmp_path / "missing.wasm"))
    with pytest.raises(gangway.PolicyError, match="unknown fairness policy"):
        sched.use_policy("fairness", "no-such-policy")
    with pytest.raises(gangway.PolicyError):
        gangway.Scheduler(gangway.Topology.uniform(1, 1, 8), policies="no-such-preset")
    with pytest.raises(ValueError, match="unknown slot"):
        sched.use_policy("scheduling", "fifo")
    with pytest.raises(gangway.PolicyError, match="config|option|unknown field|invalid"):
        sched.use_policy("fairness", "las", config="thresholds_gpu_s = 'often'")
    assert "philly" in gangway.presets()
    assert "vc-quota" in gangway.builtin_policies("fairness")
    assert "example-smallest-first" in gangway.policy_module_names()


def _least_fuel_to_start(module: bytes) -> int:
    """The least ``policy_fuel`` with which ``module`` starts in the fairness
    slot (its instantiation and ``init`` are charged to the bound too)."""

    def starts(fuel: int) -> bool:
        sched = gangway.Scheduler(gangway.Topology.uniform(1, 1, 8), policy_fuel=fuel)
        try:
            sched.use_policy("fairness", module)
        except gangway.PolicyError as e:
            assert "used up its fuel" in str(e), e
            return False
        return True

    low, high = 1, 1
    while not starts(high):
        low, high = high, high * 2
    while low + 1 < high:
        mid = (low + high) // 2
        low, high = (low, mid) if starts(mid) else (mid, high)
    return high


def test_a_module_past_its_fuel_is_quarantined_and_the_fallback_decides() -> None:
    """``policy_fuel`` bounds what a Wasm module may use in a slot over the
    scheduler's life, its start included: too little and it does not start;
    past it its calls fail, the slot's fallback decides and the module is
    quarantined."""
    module = gangway.policy_module("example-smallest-first")
    sched = gangway.Scheduler(gangway.Topology.uniform(1, 1, 8), policy_fuel=1)
    with pytest.raises(gangway.PolicyError, match="used up its fuel"):
        sched.use_policy("fairness", module)
    # Just enough to start leaves nothing for its first call.
    for fuel, quarantined in [(_least_fuel_to_start(module), True), (None, False)]:
        sched = gangway.Scheduler(gangway.Topology.uniform(1, 1, 8), policy_fuel=fuel)
        sched.use_policy("fairness", module)
        for t in range(6):
            sched.submit(100 + t, 4, submitted=t * 10)
            for s in sched.round(t * 10 + 1).starts:
                sched.end_attempt(s.job, t * 10 + 2, "passed")
            sched.check_invariants()
        status = sched.slot_status("fairness")
        assert bool(status["quarantined"]) == quarantined, status
        if quarantined:
            assert any("used up its fuel" in str(e) for e in status["events"]), status["events"]
        # Either way every job ran.
        assert sched.pending == 0
