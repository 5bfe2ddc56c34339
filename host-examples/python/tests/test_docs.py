"""The examples in the package's docstrings run and say what they show."""

from __future__ import annotations

import doctest

import gangway
import gangway.replay
import gangway.sweep


def test_docstring_examples() -> None:
    for module in (gangway, gangway.replay, gangway.sweep):
        failed, attempted = doctest.testmod(module, raise_on_error=False, report=True)
        assert failed == 0, module.__name__
    assert doctest.testmod(gangway).attempted >= 4
