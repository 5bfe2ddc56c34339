"""The guest side of a Python policy compiled to a Wasm component.

``python -m gangway.componentize`` generates an app module that calls
:func:`export` for the policy's slot; componentize-py then compiles it
with CPython into a component of the slot's world (``plugin-sdk/wit``).
The export answers the host's calls as a Rust policy built with the SDK
does:

- ``init(config)`` makes the policy (its class called with no arguments),
  hands it a non-empty configuration through ``configure(config: bytes)``
  (a policy without that method refuses one), and answers the manifest of
  its ``queue_order``, ``running`` and ``GPU_TYPES`` attributes;
- each call decodes the view with :mod:`gangway.wire`, asks the policy
  (the method named after the slot's call, or ``decide``) and encodes its
  decision. An exception becomes the call's ``error``: the host falls back
  for that round, as for any failing module;
- a fairness or reclaim policy with ``GPU_TYPES = True`` (contract 2.2)
  gets, on a cluster of several GPU types, the types after its view (a
  typed message) and is asked ``order_typed(view, types)`` or
  ``reclaim_typed(view, types)``; its ``(decision, choices)`` is written as
  a typed reply. Its views always come typed (they travel bare, so only the
  framing tells them apart): on a cluster of one type with no types, which
  is the plain call.

This module runs inside the component: it imports only :mod:`gangway.wire`
and the bindings componentize-py generates.
"""

from __future__ import annotations

from typing import Any, Callable

from . import wire

__all__ = ["export", "method_of", "takes_types", "answer_typed"]


def method_of(policy: Any, slot: str) -> Callable[[Any], Any]:
    """The policy's method for ``slot``'s call (``order``, ``spread``,
    ``on_blocked``, ``reclaim``, ``retry``, ``plan``), else ``decide``,
    else the policy itself if it is a function."""
    call = wire.SLOTS[slot]["call"].replace("-", "_")
    method = getattr(policy, call, None) or getattr(policy, "decide", None)
    if method is not None:
        return method
    if callable(policy):
        return policy
    raise TypeError(
        f"a {slot} policy needs a method {call}(view) or decide(view), or must be a function"
    )


def takes_types(policy: Any, slot: str) -> bool:
    """Whether ``policy`` takes the GPU types in ``slot`` (contract 2.2): a
    true ``GPU_TYPES`` attribute, in the fairness or reclaim slot."""
    return slot in wire.TYPED_SLOTS and bool(getattr(policy, "GPU_TYPES", False))


def _typed_method(policy: Any, slot: str) -> Callable[[Any, Any], Any]:
    call = wire.SLOTS[slot]["call"].replace("-", "_") + "_typed"
    method = getattr(policy, call, None) or getattr(policy, "decide_typed", None)
    if method is None:
        raise TypeError(f"a {slot} policy with GPU_TYPES = True needs a method {call}(view, types)")
    return method


def answer_typed(policy: Any, slot: str, message: bytes) -> bytes:
    """The reply of ``policy`` (which takes the GPU types) to a view message
    of ``slot``: to a typed message, its typed method's ``(decision,
    choices)`` as a typed reply; to a plain one, its plain method's
    decision."""
    view, types = wire.decode_typed_view(slot, message)
    if types is None:
        return wire.encode_decision(slot, method_of(policy, slot)(view))
    answer = _typed_method(policy, slot)(view, types)
    if isinstance(answer, tuple) and len(answer) == 2:
        decision, choices = answer
    else:
        decision, choices = answer, None
    return wire.encode_typed_reply(slot, decision, choices)


def _manifest(policy: Any, slot: str) -> bytes:
    return wire.encode_manifest(
        getattr(policy, "queue_order", "All"),
        getattr(policy, "running", "All"),
        gpu_types=takes_types(policy, slot),
        server_types=takes_types(policy, slot) and slot == "reclaim",
    )


def export(slot: str, make: Callable[[], Any], err: Callable[[str], BaseException]) -> type:
    """The class componentize-py exports for ``slot``: its ``init`` makes
    the policy with ``make()``, its call answers the slot's views. ``err``
    makes the exception that componentize-py turns into the call's
    ``error(message)``."""
    call = wire.SLOTS[slot]["call"].replace("-", "_")
    state: dict = {}

    def init(self: Any, config: bytes) -> bytes:
        try:
            policy = make()
            if config:
                configure = getattr(policy, "configure", None)
                if configure is None:
                    raise ValueError(
                        f"policy: {type(policy).__name__} takes no configuration "
                        f"(it has no configure(config: bytes) method)"
                    )
                configure(bytes(config))
            state["method"] = method_of(policy, slot)
            if takes_types(policy, slot):
                _typed_method(policy, slot)
                state["typed"] = policy
            return _manifest(policy, slot)
        except Exception as e:  # every failure is the call's error
            raise err(f"{type(e).__name__}: {e}") from None

    def answer(self: Any, view: bytes) -> bytes:
        try:
            method = state.get("method")
            if method is None:
                raise RuntimeError(f"{call} was called before init")
            typed = state.get("typed")
            if typed is not None:
                return answer_typed(typed, slot, bytes(view))
            return wire.encode_decision(slot, method(wire.decode_view(slot, view)))
        except Exception as e:
            raise err(f"{type(e).__name__}: {e}") from None

    return type(slot.capitalize(), (), {"init": init, call: answer})
