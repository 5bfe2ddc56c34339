"""Policies written in Python fill scheduler slots natively: their
decisions are checked by the slot's rules, a failing one falls back and is
quarantined, and the conformance kit runs on them."""

from __future__ import annotations

import gangway


class SmallestFirst:
    """Fairness: smallest gangs first, all eligible."""

    def order(self, view):
        jobs = sorted(view.jobs, key=lambda j: (j.gpus, j.submitted_s, j.id))
        return {"order": [{"job": j.id, "eligible": True} for j in jobs]}


class ListsAJobTwice:
    """Fairness, broken: lists the first job again in place of the last."""

    def order(self, view):
        ids = [j.id for j in view.jobs]
        return {"order": [{"job": i, "eligible": True} for i in ids[:-1] + ids[:1]]}


class Raises:
    def decide(self, view):
        raise RuntimeError("boom")


def sched():
    s = gangway.Scheduler(gangway.Topology.uniform(1, 2, 8))
    for job, gpus in [(1, 16), (2, 4), (3, 8)]:
        s.submit(job, gpus=gpus, vc="a")
    return s


def test_a_python_policy_decides_the_round() -> None:
    s = sched()
    assert s.use_policy("fairness", SmallestFirst()) == "python:SmallestFirst"
    starts = [st.job for st in s.round(0).starts]
    # Smallest first: 4 and 8 GPUs start; the 16-GPU gang waits for both servers.
    assert starts == [2, 3]
    status = s.slot_status("fairness")
    assert status["active"] == "python:SmallestFirst" and status["failures"] == 0
    s.check_invariants()


def test_a_function_fills_a_slot_and_enums_are_names() -> None:
    s = sched()
    s.use_policy("gang", lambda view: {"on_blocked": ["Block"] * len(view.jobs), "max_reservations": 0})
    s.use_policy("locality", lambda view: {"limits": [{"level": 0, "max_servers": 0} for _ in view.jobs]})
    s.round(0)
    assert s.slot_status("gang")["failures"] == 0
    assert s.slot_status("locality")["failures"] == 0


def test_a_broken_or_raising_policy_falls_back_and_is_quarantined() -> None:
    for policy, said in [(ListsAJobTwice(), "invalid decision"), (Raises(), "boom")]:
        s = sched()
        s.use_policy("fairness", policy)
        for t in range(5):
            s.round(t * 10)
            s.check_invariants()
        status = s.slot_status("fairness")
        assert status["quarantined"], status
        assert status["failures"] >= 3
        assert any(said in str(e) for e in status["events"]), status["events"]
        # The built-in policy decided meanwhile: jobs started all the same.
        assert s.pending < 3


def test_the_conformance_kit_runs_on_python_policies() -> None:
    assert gangway.check_policy("fairness", SmallestFirst(), cases=32, scenarios=2) is None
    finding = gangway.check_policy("fairness", ListsAJobTwice(), cases=32, scenarios=0)
    assert finding is not None and "fairness policy python:ListsAJobTwice" in finding


class PyFifo:
    """The `fifo` fairness policy, in Python: arrival order, all eligible;
    like the Rust one it declares that order, so a round shows it only each
    VC's oldest jobs."""

    queue_order = "Submit"

    def order(self, view):
        jobs = sorted(view.jobs, key=lambda j: (j.submitted_s, j.id))
        return {"order": [{"job": j.id, "eligible": True} for j in jobs]}


def test_a_python_policy_replays_like_its_rust_twin() -> None:
    base = dict(jobs=3000, policies="fifo", native=True, echo=False)
    rust = gangway.replay(**base)
    python = gangway.replay(fairness=PyFifo(), **base)
    assert python.runs[0]["name"] == "fifo+fairness=python:PyFifo"
    assert python.runs[0]["policies"]["fairness"] == "python:PyFifo"
    assert python.runs[0]["policy_errors"] == 0
    # The same views and decisions: the same report but for the names.
    for key in ("jobs", "by_size", "jct_s", "gpu_allocation_mean", "reclaim", "per_vc"):
        assert python.runs[0][key] == rust.runs[0][key], key
