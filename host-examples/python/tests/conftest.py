"""The `gangway` Python tests run in a network namespace of their own.

Before any test (and any thread) starts, the test process moves into a new
network namespace whose only interface is ``lo``, so the Ray clusters the
tests start can reach nothing but loopback (Ray binds the host's address even
when told 127.0.0.1). Where that is impossible (not root and no user
namespaces) the Ray tests skip, loudly, rather than run on the host network.
"""

from __future__ import annotations

import os
import secrets
import sys

import helpers
import netns
import pytest


def pytest_configure(config: pytest.Config) -> None:
    helpers.NETNS_ERROR = netns.enter_private_netns()
    # Every Ray these tests start uses token authentication with one token of
    # their own (else Ray 2.60 makes one and writes it to ~/.ray).
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)
    if helpers.NETNS_ERROR is not None:
        sys.stderr.write(f"SKIPPED Ray tests: no private network namespace: {helpers.NETNS_ERROR}\n")
