"""Fixtures: a mock engine in this process, joined to a fake frontend built on vLLM's structs."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.mock.fake_frontend import FakeFrontend, connected
from vllm_frontend.mock.engine import MockEngineGroup


@pytest.fixture
def mock_pair() -> Iterator[tuple[FakeFrontend, MockEngineGroup]]:
    """One mock engine (1 ms steps) connected to one fake frontend."""
    with connected() as pair:
        yield pair
