"""release_module_caches clears what test modules cached and keeps tests/support's caches."""

from __future__ import annotations

import functools
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.module_caches import release_module_caches


class _Family:
    @functools.cached_property
    def parser(self) -> object:
        return object()


def _module(name: str) -> types.ModuleType:
    module = types.ModuleType(name)

    @functools.cache
    def built(key: str) -> object:
        return object()

    built.__module__ = name
    module.built = built  # type: ignore[attr-defined]
    module.FAMILY = _Family()  # type: ignore[attr-defined]
    module.FAMILIES = {"a": _Family(), "b": _Family()}  # type: ignore[attr-defined]
    return module


@pytest.fixture
def modules() -> Iterator[dict[str, Any]]:
    names = {"test": "tests.fake_oracle_module", "support": "tests.support.fake_shared_module"}
    made = {kind: _module(name) for kind, name in names.items()}
    sys.modules.update({names[kind]: module for kind, module in made.items()})
    yield made
    for name in names.values():
        sys.modules.pop(name, None)


def test_a_test_modules_caches_are_cleared(modules: dict[str, Any]) -> None:
    module = modules["test"]
    first = module.built("x")
    family = module.FAMILY.parser
    entries = [f.parser for f in module.FAMILIES.values()]
    assert release_module_caches() >= 4
    assert module.built.cache_info().currsize == 0
    assert module.built("x") is not first
    assert module.FAMILY.parser is not family
    assert [f.parser for f in module.FAMILIES.values()] != entries


def test_tests_support_caches_are_kept(modules: dict[str, Any]) -> None:
    module = modules["support"]
    first = module.built("x")
    family = module.FAMILY.parser
    release_module_caches()
    assert module.built("x") is first
    assert module.FAMILY.parser is family


def test_nothing_cached_is_nothing_cleared(modules: dict[str, Any]) -> None:
    release_module_caches()
    assert modules["test"].built.cache_info().currsize == 0
    assert release_module_caches() == 0


def test_parametrize_values_lose_their_cached_properties() -> None:
    family = _Family()
    parser = family.parser
    assert release_module_caches([family, "a string", 3]) >= 1
    assert family.parser is not parser
