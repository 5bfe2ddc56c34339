"""A policy written in Python, compiled to a sandboxed Wasm component with
``python -m gangway.componentize`` (componentize-py), loads in every host
like a Rust-built module and decides exactly as the same class run
natively and as its Rust twin (plugins/example-smallest-first)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import helpers
import pytest

import gangway

EXAMPLES = helpers.REPO / "host-examples" / "python" / "examples"


def _compare(report: "gangway.Report") -> list:
    """The runs without their names and policy lists, which differ."""
    return [{k: v for k, v in run.items() if k not in ("name", "policies")} for run in report.runs]


@pytest.fixture(scope="module")
def component(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        import componentize_py  # noqa: F401
    except ImportError:
        helpers.skip_loudly(
            "componentize-py is not installed (pip install componentize-py): "
            "the componentized Python policy tests need it"
        )
    out = tmp_path_factory.mktemp("component") / "smallest_first.wasm"
    done = subprocess.run(
        [sys.executable, "-m", "gangway.componentize", "smallest_first:SmallestFirst",
         "--slot", "fairness", "-o", str(out), "-p", str(EXAMPLES)],
        capture_output=True, text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "wrote" in done.stdout and out.stat().st_size > 1_000_000
    return out


def _smallest_first():
    sys.path.insert(0, str(EXAMPLES))
    try:
        from smallest_first import SmallestFirst
    finally:
        sys.path.remove(str(EXAMPLES))
    return SmallestFirst


def test_the_component_replays_as_the_native_class_and_the_rust_twin(component: Path) -> None:
    common = dict(jobs=1500, seed=3, echo=False)
    rust = gangway.replay(fairness="example-smallest-first", **common)
    native = gangway.replay(fairness=_smallest_first()(), **common)
    sandboxed = gangway.replay(fairness=str(component), large_policies=True, **common)
    fifo = gangway.replay(fairness="fifo-quota", **common)
    assert _compare(sandboxed) == _compare(rust)
    assert _compare(native) == _compare(rust)
    assert sandboxed.runs[0]["policy_errors"] == 0
    assert sandboxed.jobs(0).equals(rust.jobs(0))
    # Not a comparison that any policy passes: FIFO decides otherwise here.
    assert not fifo.jobs(0).equals(rust.jobs(0))


def test_the_component_passes_the_conformance_kit(component: Path) -> None:
    assert gangway.check_policy("fairness", _smallest_first()(), cases=32, scenarios=2) is None
    checker = helpers.REPO / "target" / "debug" / "policy-check"
    if not checker.exists():
        helpers.skip_loudly(f"{checker} is not built (cargo build --bin policy-check)")
    done = subprocess.run(
        [str(checker), "--large-policies", "--views", "100", "--scenarios", "4", str(component)],
        capture_output=True, text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "every decision valid and deterministic" in done.stdout
    # Without the option it is refused, and the refusal says what to do.
    done = subprocess.run([str(checker), str(component)], capture_output=True, text=True)
    assert done.returncode == 1 and done.stdout.startswith("FAIL: ") and "--large-policies" in done.stderr


def test_the_component_fills_a_scheduler_slot_and_takes_its_configuration(
    component: Path, tmp_path: Path
) -> None:
    topo = gangway.Topology.uniform(1, 1, 8)
    with pytest.raises(gangway.PolicyError, match="large_policies=True"):
        gangway.Scheduler(topo).use_policy("fairness", str(component))
    sched = gangway.Scheduler(topo, large_policies=True)
    sched.use_policy("fairness", str(component))
    sched.submit(1, gpus=8)
    sched.submit(2, gpus=4)
    sched.submit(3, gpus=4)
    assert sorted(s.job for s in sched.round(0).starts) == [2, 3]
    assert sched.slot_status("fairness")["failures"] == 0
    # A configuration reaches configure(); an unknown option is refused at load.
    sched.use_policy("fairness", str(component), config="starve_after_s = 60\n")
    with pytest.raises(gangway.PolicyError, match="unknown option 'nope'"):
        sched.use_policy("fairness", str(component), config="nope = 1\n")
    sched.check_invariants()


def test_a_policy_that_reaches_for_the_clock_traps_and_is_refused(tmp_path: Path) -> None:
    (tmp_path / "clocky.py").write_text(
        "import time\n"
        "class Clocky:\n"
        "    def order(self, view):\n"
        "        time.time()\n"
        "        return {'order': [{'job': j.id, 'eligible': True} for j in view.jobs]}\n"
    )
    out = tmp_path / "clocky.wasm"
    from gangway.componentize import componentize

    componentize("clocky:Clocky", "fairness", out, path=[tmp_path])
    sched = gangway.Scheduler(gangway.Topology.uniform(1, 1, 8), large_policies=True)
    # The WASI clock is a trapping stub: the module fails the call the
    # scheduler tries it with before it takes the slot, and is refused.
    with pytest.raises(gangway.PolicyError, match="failed its warm-up call.*trapped"):
        sched.use_policy("fairness", str(out))
    sched.submit(1, gpus=8)
    sched.submit(2, gpus=4)
    assert [s.job for s in sched.round(0).starts] == [1]
    assert sched.slot_status("fairness")["active"] == "fifo-quota"
    sched.check_invariants()


def test_componentize_errors_are_gangway_errors() -> None:
    from gangway.componentize import ComponentizeError, componentize

    with pytest.raises(ComponentizeError, match="no slot 'fair'"):
        componentize("m:C", "fair", "x.wasm")
    with pytest.raises(ComponentizeError, match="is not MODULE:Class"):
        componentize("just_a_module", "fairness", "x.wasm")
    assert issubclass(ComponentizeError, gangway.GangwayError)


def test_a_guest_trap_after_ray_init_falls_back_instead_of_killing_python(tmp_path: Path) -> None:
    """Ray's driver installs its own SIGILL/SIGSEGV handlers on ray.init; a
    guest trap that relied on the engine's signal handlers would then kill
    the interpreter. The package's engines check explicitly instead."""
    helpers.require_ray()
    import ray

    (tmp_path / "sometimes.py").write_text(
        "import time\n"
        "class Sometimes:\n"
        "    def order(self, view):\n"
        "        if view.jobs:\n"
        "            time.time()  # a trapping WASI stub\n"
        "        return {'order': [{'job': j.id, 'eligible': True} for j in view.jobs]}\n"
    )
    from gangway.componentize import componentize

    out = componentize("sometimes:Sometimes", "fairness", tmp_path / "sometimes.wasm", path=[tmp_path])
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        sched = gangway.Scheduler(gangway.Topology.uniform(1, 1, 8), large_policies=True)
        sched.use_policy("fairness", str(out))
        sched.submit(1, gpus=8)
        sched.submit(2, gpus=4)
        # The warm-up call (no jobs) passes; this round's call traps, FIFO
        # decides, and the process lives on.
        assert [s.job for s in sched.round(0).starts] == [1]
        assert sched.slot_status("fairness")["failures"] >= 1
        sched.check_invariants()
    finally:
        ray.shutdown()
