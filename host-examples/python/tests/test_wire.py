"""The pure-Python wire codec (gangway.wire) writes and reads exactly the
Rust SDK's postcard bytes: on the conformance kit's views and the built-in
policies' decisions, and on random values of every view and decision type
(hypothesis), checked byte for byte against the SDK."""

from __future__ import annotations

import pytest

import gangway
from gangway import _native, wire

SLOTS = sorted(wire.SLOTS)


def test_the_schema_has_every_slot_of_the_registry() -> None:
    assert SLOTS == sorted(_native.SLOTS)
    assert "fairness" in SLOTS and "defragment" in SLOTS


@pytest.mark.parametrize("slot", SLOTS)
def test_the_kits_views_and_builtin_decisions_read_and_write_back_byte_for_byte(slot: str) -> None:
    samples = _native.wire_samples(slot, 24, 7)
    assert len(samples) == 24
    assert any(len(view) > 50 for view, _ in samples), "the kit's views should not all be tiny"
    for view, decision in samples:
        assert wire.encode_view(slot, wire.decode_view(slot, view)) == view
        assert wire.encode_decision(slot, wire.decode_decision(slot, decision)) == decision


def _strategies():
    st = pytest.importorskip("hypothesis.strategies")
    types = wire.SCHEMA["types"]
    ints = {
        "U8": (0, 2**8 - 1),
        "U16": (0, 2**16 - 1),
        "U32": (0, 2**32 - 1),
        "U64": (0, 2**64 - 1),
        "I8": (-(2**7), 2**7 - 1),
        "I16": (-(2**15), 2**15 - 1),
        "I32": (-(2**31), 2**31 - 1),
        "I64": (-(2**63), 2**63 - 1),
    }
    made: dict = {}

    def of(fmt):
        if isinstance(fmt, str):
            if fmt in ints:
                return st.integers(*ints[fmt])
            if fmt == "BOOL":
                return st.booleans()
            if fmt == "F64":
                return st.floats(allow_nan=False)
            if fmt == "F32":
                return st.floats(allow_nan=False, width=32)
            if fmt == "STR":
                return st.text(max_size=8)
            if fmt == "UNIT":
                return st.none()
            raise AssertionError(f"no strategy for {fmt}")
        ((kind, inner),) = fmt.items()
        if kind == "TYPENAME":
            return st.deferred(lambda: named(inner))
        if kind == "OPTION":
            return st.none() | of(inner)
        if kind == "SEQ":
            return st.lists(of(inner), max_size=4)
        if kind == "TUPLE":
            return st.tuples(*[of(f) for f in inner]).map(list)
        raise AssertionError(f"no strategy for {fmt}")

    def fields(named_fields):
        pairs = [next(iter(f.items())) for f in named_fields]
        return st.fixed_dictionaries({name: of(f) for name, f in pairs})

    def named(name):
        if name in made:
            return made[name]
        container = types[name]
        if container == "UNITSTRUCT":
            made[name] = st.just({})
            return made[name]
        ((kind, inner),) = container.items()
        if kind == "NEWTYPESTRUCT":
            made[name] = of(inner)
        elif kind == "STRUCT":
            made[name] = fields(inner)
        elif kind == "TUPLESTRUCT":
            made[name] = of({"TUPLE": inner})
        elif kind == "ENUM":
            options = []
            for entry in inner.values():
                ((variant, vfmt),) = entry.items()
                if vfmt == "UNIT":
                    options.append(st.just(variant))
                else:
                    ((vkind, vinner),) = vfmt.items()
                    payload = (
                        of(vinner)
                        if vkind == "NEWTYPE"
                        else fields(vinner)
                        if vkind == "STRUCT"
                        else of({"TUPLE": vinner})
                    )
                    options.append(payload.map(lambda v, n=variant: {n: v}))
            made[name] = st.one_of(options)
        else:
            raise AssertionError(f"no strategy for {name}: {kind}")
        return made[name]

    return st, named


@pytest.mark.parametrize("slot", SLOTS)
@pytest.mark.parametrize("kind", ["view", "decision"])
def test_random_values_write_as_the_sdk_writes_them(slot: str, kind: str) -> None:
    hypothesis = pytest.importorskip("hypothesis")
    st, named = _strategies()
    type_name = wire.SLOTS[slot][kind]

    @hypothesis.settings(max_examples=60, deadline=None, derandomize=True, database=None)
    @hypothesis.given(named(type_name))
    def roundtrip(value) -> None:
        data = wire.encode(type_name, value)
        assert _native.wire_reencode(slot, kind, data) == data
        assert wire.encode(type_name, wire.decode(type_name, data)) == data

    roundtrip()


def test_bad_bytes_and_bad_values_are_wire_errors_that_say_where() -> None:
    view = _native.wire_samples("fairness", 1, 3)[0][0]
    with pytest.raises(wire.WireError, match="FairnessView: the bytes end"):
        wire.decode_view("fairness", view[:-1])
    with pytest.raises(wire.WireError, match="1 bytes left over"):
        wire.decode_view("fairness", view + b"\0")
    with pytest.raises(wire.WireError, match=r"order\[1\]\.job: -1 is out of range for a u64"):
        wire.encode_decision("fairness", {"order": [{"job": 1, "eligible": True}, {"job": -1, "eligible": True}]})
    with pytest.raises(wire.WireError, match=r"order\[0\]: has no field 'eligible'"):
        wire.encode_decision("fairness", {"order": [{"job": 1}]})
    with pytest.raises(wire.WireError, match="'Wait' is not a GangAction: one of"):
        wire.encode_decision("gang", {"on_blocked": ["Wait"], "max_reservations": 0})
    with pytest.raises(gangway.GangwayError):
        wire.decode_decision("gang", b"\xff")
    assert issubclass(wire.WireError, ValueError)


def test_the_manifest_is_the_sdks() -> None:
    assert wire.decode_manifest(b"").queue_order == "All"
    data = wire.encode_manifest({"AttainedBands": [3600, 36000]}, "Borrowed")
    back = wire.decode_manifest(data)
    assert back.queue_order == wire.View({"AttainedBands": [3600, 36000]})
    assert back.running == "Borrowed" and back.view_changes is False
