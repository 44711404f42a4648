"""What `make test` relies on from its own harness."""

from __future__ import annotations

import pytest


@pytest.mark.xdist_group("harness-check")
def test_an_xdist_group_reaches_the_scheduler(request: pytest.FixtureRequest) -> None:
    """`make test` keeps each release's Bridge conformance tests on one worker with ``xdist_group``; with pytest 9.2,
    pytest-xdist 3.8.0's group suffix no longer reached a test's id and every group was silently spread over the
    workers (the pin in pyproject.toml). Under ``--dist loadgroup`` the id carries the group."""
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("runs under `pytest -n <workers> --dist loadgroup` (make test, make test-fast)")
    assert request.node.nodeid.endswith("@harness-check")
