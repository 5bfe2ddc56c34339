"""The examples in the package's docstrings run and say what they show."""

from __future__ import annotations

import doctest
import importlib


def test_docstring_examples() -> None:
    # By module name: `gangway.replay` and `gangway.sweep` are also functions.
    attempted = 0
    for name in (
        "gangway", "gangway.replay", "gangway.sweep", "gangway.policy", "gangway.wire", "gangway.componentize",
    ):
        module = importlib.import_module(name)
        result = doctest.testmod(module, report=True)
        assert result.failed == 0, name
        attempted += result.attempted
    assert attempted >= 8
