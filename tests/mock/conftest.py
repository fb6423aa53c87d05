"""Fixtures: a mock engine in this process, joined to a fake frontend built on vLLM's structs."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # the fake frontend imports vLLM: only the oracle tests that use it load it
    from tests.mock.fake_frontend import FakeFrontend
    from vllm_frontend.mock.engine import MockEngineGroup


@pytest.fixture
def mock_pair() -> Iterator[tuple[FakeFrontend, MockEngineGroup]]:
    """One mock engine (1 ms steps) connected to one fake frontend."""
    from tests.mock.fake_frontend import connected

    with connected() as pair:
        yield pair
