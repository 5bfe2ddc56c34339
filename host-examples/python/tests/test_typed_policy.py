"""Contract 2.2 from Python: the wire codec reads and writes the typed
messages exactly as the Rust SDK (its frozen vectors,
plugin-sdk/tests/vectors/typed.txt), and a fairness or reclaim policy with
``GPU_TYPES = True`` gets the GPU types beside its view and chooses types
for jobs, natively and through the conformance kit."""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

import pytest
from helpers import REPO

import gangway
from gangway import guest, wire

VECTORS = REPO / "plugin-sdk" / "tests" / "vectors" / "typed.txt"


def vectors() -> Dict[str, bytes]:
    """The frozen typed cases written out in full (the longer ones are
    frozen as a hash, which Python cannot decode)."""
    out = {}
    for line in VECTORS.read_text().splitlines():
        name, data = line.split(" ", 1)
        if not data.startswith("len="):
            out[name] = bytes.fromhex(data)
    return out


def cases(kind: str) -> List[Tuple[str, str, bytes]]:
    return [
        (name.split("/")[0], name, data)
        for name, data in sorted(vectors().items())
        if name.endswith("/" + kind)
    ]


def test_the_vectors_have_typed_views_and_replies_of_both_slots() -> None:
    names = {name for _, name, _ in cases("view") + cases("reply")}
    assert any(n.startswith("fairness/") and n.endswith("/view") for n in names)
    assert any(n.startswith("reclaim/") and n.endswith("/view") for n in names)
    assert sum(1 for _ in cases("view")) >= 6


@pytest.mark.parametrize("slot,name,data", cases("view"), ids=lambda c: c if isinstance(c, str) else "")
def test_a_typed_view_reads_and_writes_back_as_the_sdks(slot: str, name: str, data: bytes) -> None:
    view, types = wire.decode_typed_view(slot, data)
    assert wire.encode_typed_view(slot, view, types) == data
    assert data[-1] == wire.TYPED
    if types is None:
        # A TypesView of no types: the plain call (a cluster of one type).
        return
    # The types describe the view's jobs, in id order.
    assert [j.job for j in types.jobs] == sorted(j.job for j in types.jobs)


@pytest.mark.parametrize("slot,name,data", cases("reply"), ids=lambda c: c if isinstance(c, str) else "")
def test_a_typed_reply_reads_and_writes_back_as_the_sdks(slot: str, name: str, data: bytes) -> None:
    decision, choices = wire.decode_typed_reply(slot, data)
    assert wire.encode_typed_reply(slot, decision, choices) == data
    # The same choices as plain values (dicts) write the same bytes.
    plain = [{"job": c.job, "gpu_type": c.gpu_type} for c in choices.choices]
    assert wire.encode_typed_reply(slot, decision, plain) == data


def test_typed_framing_is_the_sdks() -> None:
    reply = wire.encode_typed_reply("fairness", {"order": []}, [{"job": 9, "gpu_type": 1}])
    # CONTRACT.md's example: no jobs, REPLY_PLAIN there (a bare reply here),
    # then one choice: job 9, type 1; 3 bytes; TYPED.
    assert reply == bytes([0x00, 0x01, 0x09, 0x01, 3, 0, 0, 0, wire.TYPED])
    assert wire.split_typed(b"\x07\x00") == (b"\x07\x00", None)
    with pytest.raises(wire.WireError, match="shorter than its length"):
        wire.split_typed(b"\x01\x02")
    with pytest.raises(wire.WireError, match="longer than the message"):
        wire.split_typed(b"\x00\x09\x00\x00\x00\x02")
    with pytest.raises(wire.WireError, match="not shown GPU types"):
        wire.decode_typed_view("gang", b"\x00")
    # On a cluster of one type the host sends no types, still framed: the
    # plain call. A bare view, which could end in 2 too, is refused.
    assert wire.decode_typed_view("fairness", _empty_fairness())[1] is None
    with pytest.raises(wire.WireError, match="must end in their length"):
        wire.decode_typed_view("fairness", _bare_fairness())


def _bare_fairness() -> bytes:
    """The empty fairness view, bare (the view of the first typed case)."""
    view, _ = wire.decode_typed_view("fairness", vectors()["fairness/typed0/view"])
    return wire.encode_view("fairness", view)


def _empty_fairness() -> bytes:
    """The empty fairness view as the host sends it on a cluster of one
    type to a policy that takes the types: framed, with no types."""
    view, _ = wire.decode_typed_view("fairness", vectors()["fairness/typed0/view"])
    return wire.encode_typed_view("fairness", view, None)


def test_a_manifest_that_takes_the_types_is_the_sdks() -> None:
    # Every field at its default but gpu_types (Python policies take their
    # views bare: view_changes false); without it, contract 2.1's layout.
    data = wire.encode_manifest(gpu_types=True)
    assert data == bytes([0, 0, 0, 1])
    assert wire.decode_manifest(data).gpu_types is True
    assert wire.encode_manifest() == bytes([0, 0, 0])
    # A reclaim policy that takes the types takes its servers' types too:
    # the layout with the last field, as the SDK writes it.
    data = wire.encode_manifest(gpu_types=True, server_types=True)
    assert data == bytes([0, 0, 0, 1, 1])
    assert wire.decode_manifest(data).server_types is True
    assert wire.decode_manifest(bytes([0, 0, 0, 1])).server_types is False


def test_the_servers_types_are_a_trailing_field() -> None:
    # Beside a reclaim view, the servers' types end the TypesView's bytes;
    # the SDK's vector reads and writes back, and types without them read
    # as an empty list and write without them.
    data = vectors()["types/servers"]
    types = wire._decode_types(data)
    assert types.servers == [1, 0, 255]
    assert wire._encode_types(types) == data
    types.servers = []
    without = wire._encode_types(types)
    assert without == data[:-4]
    assert wire._decode_types(without).servers == []


class PreferredType:
    """Arrival order; each job on its most preferred type."""

    GPU_TYPES = True

    def order(self, view: Any) -> Dict[str, Any]:
        jobs = sorted(view.jobs, key=lambda j: (j.submitted_s, j.id))
        return {"order": [{"job": j.id, "eligible": True} for j in jobs]}

    def order_typed(self, view: Any, types: Any) -> Tuple[Dict[str, Any], List[Dict[str, int]]]:
        self.seen = types
        choices = [{"job": j.job, "gpu_type": j.allowed[0]} for j in types.jobs]
        return self.order(view), choices


class OnType(PreferredType):
    """Every job on type ``t``, whether it may use it or not."""

    def __init__(self, t: int = 1) -> None:
        self.t = t

    def order_typed(self, view: Any, types: Any) -> Tuple[Dict[str, Any], List[Dict[str, int]]]:
        return self.order(view), [{"job": j.job, "gpu_type": self.t} for j in types.jobs]


class ChoosesTwice(PreferredType):
    def order_typed(self, view: Any, types: Any) -> Tuple[Dict[str, Any], List[Dict[str, int]]]:
        decision, choices = super().order_typed(view, types)
        return decision, choices + choices[:1]


def typed() -> gangway.Topology:
    return gangway.Topology.from_racks(
        {"r0": {"a0": (8, "A100")}, "r1": {"v0": (8, "V100")}},
        gpu_types={"A100": 80, "V100": 16},
    )


def servers_of(rnd: Any, job: int) -> set:
    return {server for s in rnd.starts if s.job == job for server, _ in s.placement}


def test_a_python_policy_that_takes_the_types_chooses_them() -> None:
    sched = gangway.Scheduler(typed())
    sched.use_policy("fairness", OnType(1))  # V100, type 1
    sched.submit(1, 4)
    rnd = sched.round(1)
    sched.check_invariants()
    # Job 1 may use either type: it starts on the V100 chosen for it (the
    # A100 server comes first otherwise).
    assert servers_of(rnd, 1) == {"v0"}
    assert sched.slot_status("fairness")["failures"] == 0
    # Choosing V100 for a job that may use only A100s breaks the rule: the
    # round falls back on the built-in policy, which starts it on an A100.
    sched.submit(2, 4, gpu_types=["A100"], submitted=2)
    rnd = sched.round(3)
    sched.check_invariants()
    assert servers_of(rnd, 2) == {"a0"}
    assert any("may not run on it" in e for e in rnd.policy_errors), rnd.policy_errors
    assert sched.slot_status("fairness")["failures"] == 1


def test_the_types_a_python_policy_sees() -> None:
    sched = gangway.Scheduler(typed())
    policy = PreferredType()
    sched.use_policy("fairness", policy)
    sched.submit(1, 4, gpu_types=["V100", "A100"])
    rnd = sched.round(1)
    assert servers_of(rnd, 1) == {"v0"}
    types = policy.seen
    assert [(t.id, t.memory_gb, t.total_gpus) for t in types.types] == [(0, 80, 8), (1, 16, 8)]
    assert [(j.job, j.allowed, j.running) for j in types.jobs] == [(1, [1, 0], None)]
    assert sched.slot_status("fairness")["failures"] == 0


def test_a_policy_that_does_not_take_the_types_is_asked_plainly() -> None:
    class Plain(PreferredType):
        GPU_TYPES = False

    sched = gangway.Scheduler(typed())
    policy = Plain()
    sched.use_policy("fairness", policy)
    sched.submit(1, 4)
    sched.round(1)
    assert not hasattr(policy, "seen")


def test_the_conformance_kit_drives_a_python_policys_typed_calls() -> None:
    assert gangway.check_policy("fairness", PreferredType(), cases=24, scenarios=1) is None
    for bad, said in [(OnType(7), "which may not run on it"), (ChoosesTwice(), "twice")]:
        finding = gangway.check_policy("fairness", bad, cases=24, scenarios=0)
        assert finding is not None and said in finding, finding
        assert "check_typed_view" in finding and "let types =" in finding, finding


def test_the_guest_answers_a_typed_message_as_a_module_does() -> None:
    """What a componentized policy's export does with a typed message."""
    data = vectors()["fairness/typed1/view"]
    reply = guest.answer_typed(PreferredType(), "fairness", data)
    decision, choices = wire.decode_typed_reply("fairness", reply)
    view, types = wire.decode_typed_view("fairness", data)
    assert [c.job for c in choices.choices] == [j.job for j in types.jobs]
    arrival = sorted(view.jobs, key=lambda j: (j.submitted_s, j.id))
    assert [r.job for r in decision.order] == [j.id for j in arrival]
    # A plain view: the plain call, a bare decision.
    plain = _empty_fairness()
    assert guest.answer_typed(PreferredType(), "fairness", plain) == wire.encode_decision(
        "fairness", {"order": []}
    )
    assert guest.takes_types(PreferredType(), "fairness")
    assert not guest.takes_types(PreferredType(), "gang")
