"""The contract's wire format in pure Python: postcard bytes to and from
the shapes a Python policy sees and answers.

Views and decisions travel between the scheduler and a policy as postcard
(see plugin-sdk/CONTRACT.md). This module reads and writes exactly the Rust
SDK's bytes, driven by the schema of the contract's types that the SDK
generates (``_wire_schema.py``), so the same code serves a Python policy
run natively by the scheduler and one compiled to a sandboxed Wasm
component (``python -m gangway.componentize``). It imports nothing but the
standard library and the schema: it runs inside the component too.

Shapes, the same as serde's JSON form of the SDK's types:

- a struct is a :class:`View` (attribute access: ``view.jobs[0].gpus``);
- an id or level (a newtype) is its integer;
- an enum's unit variant is its name (``"Backfill"``), any other variant a
  one-field :class:`View` named after the variant
  (``View(Quota=...)``; ``reason.Quota``);
- an ``Option`` is ``None`` or the value, a tuple a list.

Encoding takes the same shapes, and also dicts, dataclasses, objects with
the fields as attributes and :class:`enum.Enum` members (by value, or by
name when the value is not a string).

>>> from gangway import wire
>>> data = wire.encode_decision("fairness", {"order": [{"job": 7, "eligible": True}]})
>>> data.hex()
'010701'
>>> wire.decode_decision("fairness", data).order[0].job
7

Contract 2.2's typed messages (a fairness or reclaim policy that takes
the cluster's GPU types): the view, then the ``TypesView``'s bytes, their
length (4 bytes, little-endian) and the byte 2 (:data:`TYPED`); a typed
reply is the decision, then the ``TypeChoices``' bytes, their length and 2.

>>> choices = {"choices": [{"job": 9, "gpu_type": 1}]}
>>> reply = wire.encode_typed_reply("fairness", {"order": []}, choices)
>>> reply.hex()  # no jobs; one choice: job 9, type 1; 3 bytes; TYPED
'000109010300000002'
>>> decision, back = wire.decode_typed_reply("fairness", reply)
>>> back.choices[0].gpu_type
1
"""

from __future__ import annotations

import dataclasses
import enum
import struct
from typing import Any, Callable, Dict, List, Tuple

from ._wire_schema import SCHEMA

__all__ = [
    "View",
    "WireError",
    "CONTRACT",
    "SLOTS",
    "decode",
    "encode",
    "decode_view",
    "encode_view",
    "decode_decision",
    "encode_decision",
    "encode_manifest",
    "decode_manifest",
    "TYPED",
    "TYPED_SLOTS",
    "split_typed",
    "append_typed",
    "decode_typed_view",
    "encode_typed_view",
    "decode_typed_reply",
    "encode_typed_reply",
]

#: The contract version the schema was generated from.
CONTRACT: str = SCHEMA["contract"]

#: Every slot's name, with its call and its view and decision types.
SLOTS: Dict[str, Dict[str, str]] = SCHEMA["slots"]


class View:
    """A struct of the contract (a view, a part of one, or a decoded
    decision), with attribute access to its fields."""

    def __init__(self, fields: dict) -> None:
        self.__dict__.update(fields)

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self.__dict__.items())
        return f"View({inner})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, View) and vars(self) == vars(other)


try:  # natively, in the package's hierarchy; inside a component there is no _native
    from ._native import GangwayError

    _BASES: Tuple[type, ...] = (GangwayError, ValueError)
except ImportError:
    _BASES = (ValueError,)


class WireError(*_BASES):  # type: ignore[misc]
    """Bytes that do not read as the type, or a value that does not write
    as it; the message names the type and the place (``order[3].job``)."""


_Reader = Callable[[bytes, int], Tuple[Any, int]]
_Writer = Callable[[Any, bytearray, str], None]

_TYPES: Dict[str, Any] = SCHEMA["types"]
_READERS: Dict[str, _Reader] = {}
_WRITERS: Dict[str, _Writer] = {}

#: A struct's shape as the variant format of the same shape (see _variant).
_SHAPES = {"NEWTYPESTRUCT": "NEWTYPE", "TUPLESTRUCT": "TUPLE", "STRUCT": "STRUCT"}

_UNSIGNED = {"U16": 16, "U32": 32, "U64": 64, "U128": 128}
_SIGNED = {"I16": 16, "I32": 32, "I64": 64, "I128": 128}


# ---------------------------------------------------------------- reading


def _varint(data: bytes, pos: int, bits: int) -> Tuple[int, int]:
    value = 0
    shift = 0
    most = (bits + 6) // 7
    for _ in range(most):
        if pos >= len(data):
            raise WireError(f"the bytes end inside a varint at byte {pos}")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            if value >> bits:
                raise WireError(f"a varint at byte {pos - 1} is larger than a u{bits}")
            return value, pos
        shift += 7
    raise WireError(f"a varint at byte {pos - 1} is longer than a u{bits} can be")


def _unzigzag(value: int) -> int:
    return (value >> 1) ^ -(value & 1)


def _take(data: bytes, pos: int, n: int) -> Tuple[bytes, int]:
    end = pos + n
    if end > len(data):
        raise WireError(f"the bytes end at byte {len(data)}, inside {n} bytes from byte {pos}")
    return data[pos:end], end


def _reader(fmt: Any) -> _Reader:
    if isinstance(fmt, str):
        return _primitive_reader(fmt)
    ((kind, inner),) = fmt.items()
    if kind == "TYPENAME":
        name = inner

        def named(data: bytes, pos: int) -> Tuple[Any, int]:
            return _READERS[name](data, pos)

        _container_reader(name)
        return named
    if kind == "OPTION":
        some = _reader(inner)

        def option(data: bytes, pos: int) -> Tuple[Any, int]:
            tag, pos = _take(data, pos, 1)
            if tag[0] == 0:
                return None, pos
            if tag[0] == 1:
                return some(data, pos)
            raise WireError(f"an option's tag at byte {pos - 1} is {tag[0]}, not 0 or 1")

        return option
    if kind == "SEQ":
        item = _reader(inner)

        def seq(data: bytes, pos: int) -> Tuple[Any, int]:
            n, pos = _varint(data, pos, 64)
            if n > len(data) - pos and n > 0 and _min_size(inner) > 0:
                raise WireError(f"a sequence of {n} at byte {pos} is longer than the bytes")
            out = []
            for _ in range(n):
                value, pos = item(data, pos)
                out.append(value)
            return out, pos

        return seq
    if kind == "MAP":
        key, value_reader = _reader(inner["KEY"]), _reader(inner["VALUE"])

        def mapping(data: bytes, pos: int) -> Tuple[Any, int]:
            n, pos = _varint(data, pos, 64)
            out = {}
            for _ in range(n):
                k, pos = key(data, pos)
                v, pos = value_reader(data, pos)
                out[k] = v
            return out, pos

        return mapping
    if kind == "TUPLE":
        items = [_reader(f) for f in inner]

        def tuple_(data: bytes, pos: int) -> Tuple[Any, int]:
            out = []
            for item in items:
                value, pos = item(data, pos)
                out.append(value)
            return out, pos

        return tuple_
    if kind == "TUPLEARRAY":
        item, size = _reader(inner["CONTENT"]), inner["SIZE"]

        def array(data: bytes, pos: int) -> Tuple[Any, int]:
            out = []
            for _ in range(size):
                value, pos = item(data, pos)
                out.append(value)
            return out, pos

        return array
    raise WireError(f"the schema has a format this codec does not know: {fmt!r}")


def _min_size(fmt: Any) -> int:
    """Whether a value of the format takes at least a byte (a sequence of
    zero-size values may be long on few bytes)."""
    if fmt in ("UNIT",):
        return 0
    if isinstance(fmt, dict) and "TYPENAME" in fmt:
        container = _TYPES[fmt["TYPENAME"]]
        if container == "UNITSTRUCT":
            return 0
        if isinstance(container, dict) and "STRUCT" in container and not container["STRUCT"]:
            return 0
    return 1


def _primitive_reader(fmt: str) -> _Reader:
    if fmt == "UNIT":
        return lambda data, pos: (None, pos)
    if fmt == "BOOL":

        def boolean(data: bytes, pos: int) -> Tuple[Any, int]:
            byte, pos = _take(data, pos, 1)
            if byte[0] > 1:
                raise WireError(f"a bool at byte {pos - 1} is {byte[0]}, not 0 or 1")
            return byte[0] == 1, pos

        return boolean
    if fmt == "U8":

        def u8(data: bytes, pos: int) -> Tuple[Any, int]:
            byte, pos = _take(data, pos, 1)
            return byte[0], pos

        return u8
    if fmt == "I8":

        def i8(data: bytes, pos: int) -> Tuple[Any, int]:
            byte, pos = _take(data, pos, 1)
            return struct.unpack("<b", byte)[0], pos

        return i8
    if fmt in _UNSIGNED:
        bits = _UNSIGNED[fmt]
        return lambda data, pos: _varint(data, pos, bits)
    if fmt in _SIGNED:
        bits = _SIGNED[fmt]

        def signed(data: bytes, pos: int) -> Tuple[Any, int]:
            value, pos = _varint(data, pos, bits)
            return _unzigzag(value), pos

        return signed
    if fmt in ("F32", "F64"):
        code, size = ("<f", 4) if fmt == "F32" else ("<d", 8)

        def floating(data: bytes, pos: int) -> Tuple[Any, int]:
            raw, pos = _take(data, pos, size)
            return struct.unpack(code, raw)[0], pos

        return floating
    if fmt in ("STR", "CHAR", "BYTES"):
        text = fmt != "BYTES"

        def blob(data: bytes, pos: int) -> Tuple[Any, int]:
            n, pos = _varint(data, pos, 64)
            raw, pos = _take(data, pos, n)
            if not text:
                return bytes(raw), pos
            try:
                return bytes(raw).decode("utf-8"), pos
            except UnicodeDecodeError as e:
                raise WireError(f"a string at byte {pos - n} is not UTF-8: {e}") from None

        return blob
    raise WireError(f"the schema has a format this codec does not know: {fmt!r}")


def _fields(named: List[Dict[str, Any]]) -> List[Tuple[str, Any]]:
    return [next(iter(entry.items())) for entry in named]


def _container_reader(name: str) -> None:
    if name in _READERS:
        return
    # A placeholder first: recursive types refer to themselves.
    _READERS[name] = lambda data, pos: _READERS[name](data, pos)
    container = _TYPES.get(name)
    if container is None:
        raise WireError(f"the schema has no type {name}")
    if container == "UNITSTRUCT":
        _READERS[name] = lambda data, pos: (View({}), pos)
        return
    ((kind, inner),) = container.items()
    if kind in _SHAPES:
        _READERS[name] = _variant({_SHAPES[kind]: inner}, _reader, _struct_reader)
    elif kind == "ENUM":
        variants = {}
        for index, entry in inner.items():
            ((variant, vfmt),) = entry.items()
            variants[int(index)] = (variant, _variant(vfmt, _reader, _struct_reader))

        def enum_(data: bytes, pos: int) -> Tuple[Any, int]:
            at = pos
            index, pos = _varint(data, pos, 32)
            found = variants.get(index)
            if found is None:
                raise WireError(f"{name} has no variant {index} (byte {at})")
            variant, read = found
            if read is None:
                return variant, pos
            value, pos = read(data, pos)
            return View({variant: value}), pos

        _READERS[name] = enum_
    else:
        raise WireError(f"the schema's type {name} is a {kind}, which this codec does not know")


def _struct_reader(fields: List[Tuple[str, Any]]) -> _Reader:
    readers = [(field, _reader(fmt)) for field, fmt in fields]

    def struct_(data: bytes, pos: int) -> Tuple[Any, int]:
        out = {}
        for field, read in readers:
            out[field], pos = read(data, pos)
        return View(out), pos

    return struct_


def _variant(vfmt: Any, one: Callable[[Any], Any], struct_of: Callable[[Any], Any]) -> Any:
    """A variant's (or a struct's, its shape given as a variant's) reader
    or writer (``one`` makes it for a format, ``struct_of`` for named
    fields); ``None`` for a unit variant."""
    if vfmt == "UNIT":
        return None
    ((kind, inner),) = vfmt.items()
    if kind == "NEWTYPE":
        return one(inner)
    if kind == "TUPLE":
        return one({"TUPLE": inner})
    if kind == "STRUCT":
        return struct_of(_fields(inner))
    raise WireError(f"the schema has a variant format this codec does not know: {vfmt!r}")


# ---------------------------------------------------------------- writing


def _write_varint(value: int, out: bytearray) -> None:
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _integer(value: Any, at: str, kind: str) -> int:
    if isinstance(value, enum.Enum):
        value = value.value
    if isinstance(value, bool) or not isinstance(value, int):
        raise WireError(f"{at or 'the value'}: {value!r} is not an integer ({kind.lower()})")
    return value


def _get(value: Any, field: str, at: str) -> Any:
    if isinstance(value, dict):
        if field in value:
            return value[field]
    elif dataclasses.is_dataclass(value) or hasattr(value, field):
        if hasattr(value, field):
            return getattr(value, field)
    raise WireError(f"{at or 'the value'}: has no field {field!r} ({type(value).__name__})")


def _join(at: str, field: str) -> str:
    return f"{at}.{field}" if at else field


def _writer(fmt: Any) -> _Writer:
    if isinstance(fmt, str):
        return _primitive_writer(fmt)
    ((kind, inner),) = fmt.items()
    if kind == "TYPENAME":
        name = inner

        def named(value: Any, out: bytearray, at: str) -> None:
            _WRITERS[name](value, out, at)

        _container_writer(name)
        return named
    if kind == "OPTION":
        some = _writer(inner)

        def option(value: Any, out: bytearray, at: str) -> None:
            if value is None:
                out.append(0)
            else:
                out.append(1)
                some(value, out, at)

        return option
    if kind in ("SEQ", "TUPLE", "TUPLEARRAY"):
        if kind == "SEQ":
            items = None
            item = _writer(inner)
            size = None
        elif kind == "TUPLE":
            items = [_writer(f) for f in inner]
            item = None
            size = len(inner)
        else:
            items = None
            item = _writer(inner["CONTENT"])
            size = inner["SIZE"]

        def seq(value: Any, out: bytearray, at: str) -> None:
            if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__iter__"):
                raise WireError(f"{at or 'the value'}: {type(value).__name__} is not a list")
            values = list(value)
            if size is not None and len(values) != size:
                raise WireError(f"{at or 'the value'}: {len(values)} items, not {size}")
            if kind == "SEQ":
                _write_varint(len(values), out)
            for i, v in enumerate(values):
                (items[i] if items is not None else item)(v, out, f"{at}[{i}]")

        return seq
    if kind == "MAP":
        key, val = _writer(inner["KEY"]), _writer(inner["VALUE"])

        def mapping(value: Any, out: bytearray, at: str) -> None:
            if not isinstance(value, dict):
                raise WireError(f"{at or 'the value'}: {type(value).__name__} is not a dict")
            _write_varint(len(value), out)
            for k, v in value.items():
                key(k, out, f"{at}[{k!r}]")
                val(v, out, f"{at}[{k!r}]")

        return mapping
    raise WireError(f"the schema has a format this codec does not know: {fmt!r}")


def _primitive_writer(fmt: str) -> _Writer:
    if fmt == "UNIT":
        return lambda value, out, at: None
    if fmt == "BOOL":

        def boolean(value: Any, out: bytearray, at: str) -> None:
            if not isinstance(value, bool):
                raise WireError(f"{at or 'the value'}: {value!r} is not a bool")
            out.append(1 if value else 0)

        return boolean
    if fmt in ("U8", "I8"):
        low, high = (0, 255) if fmt == "U8" else (-128, 127)

        def byte(value: Any, out: bytearray, at: str) -> None:
            value = _integer(value, at, fmt)
            if not low <= value <= high:
                raise WireError(f"{at or 'the value'}: {value} is out of range for a {fmt.lower()}")
            out.append(value & 0xFF)

        return byte
    if fmt in _UNSIGNED:
        bits = _UNSIGNED[fmt]

        def unsigned(value: Any, out: bytearray, at: str) -> None:
            value = _integer(value, at, fmt)
            if value < 0 or value >> bits:
                raise WireError(f"{at or 'the value'}: {value} is out of range for a u{bits}")
            _write_varint(value, out)

        return unsigned
    if fmt in _SIGNED:
        bits = _SIGNED[fmt]

        def signed(value: Any, out: bytearray, at: str) -> None:
            value = _integer(value, at, fmt)
            if not -(1 << (bits - 1)) <= value < (1 << (bits - 1)):
                raise WireError(f"{at or 'the value'}: {value} is out of range for an i{bits}")
            _write_varint((value << 1) ^ (value >> (bits - 1)), out)

        return signed
    if fmt in ("F32", "F64"):
        code = "<f" if fmt == "F32" else "<d"

        def floating(value: Any, out: bytearray, at: str) -> None:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise WireError(f"{at or 'the value'}: {value!r} is not a number")
            try:
                out += struct.pack(code, value)
            except (OverflowError, struct.error) as e:
                raise WireError(f"{at or 'the value'}: {value!r}: {e}") from None

        return floating
    if fmt in ("STR", "CHAR", "BYTES"):

        def blob(value: Any, out: bytearray, at: str) -> None:
            if fmt == "BYTES":
                if not isinstance(value, (bytes, bytearray, memoryview)):
                    raise WireError(f"{at or 'the value'}: {type(value).__name__} is not bytes")
                raw = bytes(value)
            else:
                if not isinstance(value, str) or (fmt == "CHAR" and len(value) != 1):
                    raise WireError(f"{at or 'the value'}: {value!r} is not a {fmt.lower()}")
                raw = value.encode("utf-8")
            _write_varint(len(raw), out)
            out += raw

        return blob
    raise WireError(f"the schema has a format this codec does not know: {fmt!r}")


def _container_writer(name: str) -> None:
    if name in _WRITERS:
        return
    _WRITERS[name] = lambda value, out, at: _WRITERS[name](value, out, at)
    container = _TYPES.get(name)
    if container is None:
        raise WireError(f"the schema has no type {name}")
    if container == "UNITSTRUCT":
        _WRITERS[name] = lambda value, out, at: None
        return
    ((kind, inner),) = container.items()
    if kind in _SHAPES:
        _WRITERS[name] = _variant({_SHAPES[kind]: inner}, _writer, _struct_writer)
    elif kind == "ENUM":
        variants = {}
        for index, entry in inner.items():
            ((variant, vfmt),) = entry.items()
            variants[variant] = (int(index), _variant(vfmt, _writer, _struct_writer))

        def enum_(value: Any, out: bytearray, at: str) -> None:
            if isinstance(value, enum.Enum):
                value = value.value if isinstance(value.value, str) else value.name
            if isinstance(value, View):
                value = vars(value)
            if isinstance(value, str):
                variant, payload = value, None
            elif isinstance(value, dict) and len(value) == 1:
                ((variant, payload),) = value.items()
            else:
                raise WireError(
                    f"{at or 'the value'}: {value!r} is not a {name} (a variant's name, "
                    f"or a one-entry dict of a variant's name and its value)"
                )
            found = variants.get(variant)
            if found is None:
                raise WireError(
                    f"{at or 'the value'}: {variant!r} is not a {name}: one of {', '.join(variants)}"
                )
            index, write = found
            if (write is None) != isinstance(value, str):
                need = "no value" if write is None else "a value"
                raise WireError(f"{at or 'the value'}: {name}::{variant} takes {need}")
            _write_varint(index, out)
            if write is not None:
                write(payload, out, _join(at, variant))

        _WRITERS[name] = enum_
    else:
        raise WireError(f"the schema's type {name} is a {kind}, which this codec does not know")


def _struct_writer(fields: List[Tuple[str, Any]]) -> _Writer:
    writers = [(field, _writer(fmt)) for field, fmt in fields]

    def struct_(value: Any, out: bytearray, at: str) -> None:
        for field, write in writers:
            write(_get(value, field, at), out, _join(at, field))

    return struct_


# ---------------------------------------------------------------- the API


def decode(type_name: str, data: bytes) -> Any:
    """Reads ``data`` as the contract's type ``type_name`` (e.g.
    ``"FairnessView"``); every byte must be used."""
    if type_name not in _TYPES:
        raise WireError(f"the contract has no type {type_name!r}")
    _container_reader(type_name)
    data = bytes(data)
    try:
        value, end = _READERS[type_name](data, 0)
    except WireError as e:
        raise WireError(f"{type_name}: {e}") from None
    if end != len(data):
        raise WireError(f"{type_name}: {len(data) - end} bytes left over after byte {end}")
    return value


def encode(type_name: str, value: Any) -> bytes:
    """Writes ``value`` as the contract's type ``type_name``."""
    if type_name not in _TYPES:
        raise WireError(f"the contract has no type {type_name!r}")
    _container_writer(type_name)
    out = bytearray()
    try:
        _WRITERS[type_name](value, out, "")
    except WireError as e:
        raise WireError(f"{type_name}: {e}") from None
    return bytes(out)


def _slot(slot: str) -> Dict[str, str]:
    found = SLOTS.get(slot)
    if found is None:
        raise WireError(f"no slot {slot!r}: one of {', '.join(SLOTS)}")
    return found


def decode_view(slot: str, data: bytes) -> Any:
    """Reads the view of ``slot`` (``"fairness"``, ``"locality"``, ...)."""
    return decode(_slot(slot)["view"], data)


def encode_view(slot: str, view: Any) -> bytes:
    """Writes a view of ``slot``."""
    return encode(_slot(slot)["view"], view)


def decode_decision(slot: str, data: bytes) -> Any:
    """Reads a decision of ``slot``."""
    return decode(_slot(slot)["decision"], data)


def encode_decision(slot: str, decision: Any) -> bytes:
    """Writes a decision of ``slot``."""
    return encode(_slot(slot)["decision"], decision)


def encode_manifest(
    queue_order: Any = "All",
    running: Any = "All",
    gpu_types: bool = False,
    server_types: bool = False,
) -> bytes:
    """The manifest a policy answers ``init`` with: which pending jobs a
    fairness policy needs to see (``"All"``, ``"Submit"``, ``"Smallest"``
    or ``{"AttainedBands": [...]}``), which running jobs a reclaim
    policy needs (``"All"`` or ``"Borrowed"``), whether it takes the GPU
    types (contract 2.2) and, for a reclaim policy that does, the view's
    servers' types (``TypesView.servers``). As the Rust SDK writes it, the
    fields it does not take are left out at the end: without the servers'
    types, contract 2.2's layout; without the types, contract 2.1's, so it
    loads on hosts of those layouts too."""
    data = encode(
        SCHEMA["manifest"],
        {
            "queue_order": queue_order,
            "running": running,
            "view_changes": False,
            "gpu_types": bool(gpu_types),
            "server_types": bool(server_types),
        },
    )
    if server_types:
        return data
    return data[:-1] if gpu_types else data[:-2]


def decode_manifest(data: bytes) -> Any:
    """Reads a manifest (empty bytes are the default one; the layouts
    without the last fields, ``server_types`` and then ``gpu_types``, read
    as not taking them)."""
    if not data:
        return View(
            {
                "queue_order": "All",
                "running": "All",
                "view_changes": False,
                "gpu_types": False,
                "server_types": False,
            }
        )
    try:
        return decode(SCHEMA["manifest"], data)
    except WireError:
        try:
            return decode(SCHEMA["manifest"], data + b"\x00")
        except WireError:
            return decode(SCHEMA["manifest"], data + b"\x00\x00")


# ------------------------------------------------- contract 2.2: GPU types

#: The last byte of a view or reply message that carries contract 2.2's
#: GPU types after it (a plain message ends in 0 or 1, a bare view in any
#: byte).
TYPED: int = 2

#: The slots whose policies may take the GPU types: the type names of the
#: types beside a view (``"types"``) and of the choices beside a reply
#: (``"choices"``).
TYPED_SLOTS = ("fairness", "reclaim")

_TYPES_VIEW: str = SCHEMA["typed"]["types"]
_TYPE_CHOICES: str = SCHEMA["typed"]["choices"]


def split_typed(data: bytes) -> Tuple[bytes, Any]:
    """Splits a message that may carry the GPU types: the message before
    them and their bytes, or the message whole and ``None`` when its last
    byte is not :data:`TYPED`. A message that ends in it but is shorter
    than the length it gives is a :class:`WireError`."""
    data = bytes(data)
    if not data or data[-1] != TYPED:
        return data, None
    if len(data) < 5:
        raise WireError("typed message: shorter than its length")
    (length,) = struct.unpack("<I", data[-5:-1])
    body = data[:-5]
    if length > len(body):
        raise WireError("typed message: its types are longer than the message")
    at = len(body) - length
    return body[:at], body[at:]


def append_typed(type_name: str, value: Any, message: bytes) -> bytes:
    """``message`` with ``value`` (of the contract's type ``type_name``:
    ``"TypesView"`` or ``"TypeChoices"``) after it, their length and
    :data:`TYPED`."""
    extra = encode(type_name, value)
    return bytes(message) + extra + struct.pack("<I", len(extra)) + bytes([TYPED])


def _typed_slot(slot: str) -> None:
    _slot(slot)
    if slot not in TYPED_SLOTS:
        raise WireError(f"the {slot} slot is not shown GPU types: only {', '.join(TYPED_SLOTS)}")


def decode_typed_view(slot: str, data: bytes) -> Tuple[Any, Any]:
    """Reads a view of ``slot`` as the host sends it to a policy that takes
    the GPU types: ``(view, types)``, ``types`` the ``TypesView`` beside the
    view, or ``None`` on a cluster of one type.

    A Python policy takes its views bare, so the host sends such a policy
    every view typed (a bare view could end in the byte 2 too), with a
    ``TypesView`` of no types on a cluster of one type: a message that is
    not typed is an error."""
    _typed_slot(slot)
    body, extra = split_typed(data)
    if extra is None:
        raise WireError(
            "a view for a policy that takes the GPU types must end in their length and the byte 2 "
            "(contract 2.2)"
        )
    types = _decode_types(extra)
    return decode_view(slot, body), (types if types.types else None)


def _decode_types(data: bytes) -> Any:
    """Reads a ``TypesView``. Its last field, ``servers``, is trailing: the
    host writes it only beside a reclaim view, to a module whose manifest
    takes it, and only when not empty, so bytes without it read as an empty
    list."""
    try:
        return decode(_TYPES_VIEW, data)
    except WireError:
        return decode(_TYPES_VIEW, bytes(data) + b"\x00")


def _encode_types(types: Any) -> bytes:
    """Writes a ``TypesView``, its trailing ``servers`` only when not
    empty (as the Rust SDK writes it)."""
    types = dict(vars(types)) if isinstance(types, View) else dict(types)
    servers = list(types.get("servers") or [])
    types["servers"] = servers
    data = encode(_TYPES_VIEW, types)
    return data if servers else data[:-1]


def encode_typed_view(slot: str, view: Any, types: Any) -> bytes:
    """Writes a view of ``slot`` with the GPU types ``types`` beside it
    (``None``: a ``TypesView`` of no types), as the host sends it to a
    policy that takes the types and its views bare."""
    _typed_slot(slot)
    if types is None:
        types = {"types": [], "jobs": [], "vcs": [], "speeds": []}
    extra = _encode_types(types)
    return encode_view(slot, view) + extra + struct.pack("<I", len(extra)) + bytes([TYPED])


def decode_typed_reply(slot: str, data: bytes) -> Tuple[Any, Any]:
    """Reads a reply to a typed call: ``(decision, choices)``; a reply
    without choices chooses none."""
    _typed_slot(slot)
    body, extra = split_typed(data)
    choices = decode(_TYPE_CHOICES, extra) if extra is not None else View({"choices": []})
    return decode_decision(slot, body), choices


def encode_typed_reply(slot: str, decision: Any, choices: Any = None) -> bytes:
    """Writes a reply to a typed call: ``decision``, then the type choices
    (``{"choices": [{"job": ..., "gpu_type": ...}]}``, a list of such
    choices, or ``None`` for none). Always typed, even without choices: the
    host reads a typed call's reply by its last byte."""
    _typed_slot(slot)
    if choices is None:
        choices = {"choices": []}
    elif isinstance(choices, (list, tuple)):
        choices = {"choices": list(choices)}
    return append_typed(_TYPE_CHOICES, choices, encode_decision(slot, decision))
