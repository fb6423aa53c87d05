"""Releasing the oracle objects test modules cache, once a module's last test has run.

The oracle modules keep their vLLM parsers, transformers tokenizers (each a copy of the tiny
Llama 3's 128k-token tokenizer with a family's markers added) and render apps in
``functools.cache`` functions and ``functools.cached_property`` attributes of module-level
objects, so that a module builds each once. Nothing released them after the module: an xdist
worker that ran a dozen such modules held all of their objects (one tests/chat worker reached
8.9 GB). :func:`release_module_caches` clears them, for every test module loaded, at each module
boundary (tests/conftest.py); a later module that calls a cleared function builds its object
again. The process-wide caches of tests/support (the tiny models' directories, the one loaded
tokenizer that each family copies) are kept: they are shared by every module, on purpose.
"""

from __future__ import annotations

import functools
import gc
import sys
import types
from collections.abc import Iterable
from typing import Any

_KEPT_PREFIX = "tests.support."


def _test_modules() -> list[types.ModuleType]:
    return [
        module
        for name, module in list(sys.modules.items())
        if name.startswith("tests.") and not name.startswith(_KEPT_PREFIX) and module is not None
    ]


def _cached_property_names(cls: type) -> list[str]:
    return [
        name
        for klass in cls.__mro__
        for name, value in vars(klass).items()
        if isinstance(value, functools.cached_property)
    ]


def _forget_cached_properties(value: Any) -> int:
    """Drop the cached properties of ``value`` (and of the items of a module-level dict, list or
    tuple); how many were dropped."""
    if isinstance(value, dict):
        items: list[Any] = list(value.values())
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        items = [value]
    dropped = 0
    for item in items:
        if isinstance(item, type) or not hasattr(item, "__dict__"):
            continue
        names = _cached_property_names(type(item))
        state = vars(item)
        for name in names:
            if name in state:
                del state[name]
                dropped += 1
    return dropped


def release_module_caches(params: Iterable[Any] = ()) -> int:
    """Clear the ``functools`` caches that the loaded test modules (``tests.*`` outside
    ``tests.support``) define, and the cached properties of their module-level objects and of
    ``params`` (a finished module's parametrize values, which pytest keeps for the session);
    then collect the garbage (if anything was cleared). Returns how many caches were non-empty."""
    cleared = sum(_forget_cached_properties(value) for value in params)
    for module in _test_modules():
        for value in list(vars(module).values()):
            if getattr(value, "__module__", None) == module.__name__ and callable(
                getattr(value, "cache_clear", None)
            ):
                info = getattr(value, "cache_info", None)
                if info is None or info().currsize:
                    value.cache_clear()
                    cleared += 1
            elif not isinstance(value, (types.ModuleType, types.FunctionType)):
                cleared += _forget_cached_properties(value)
    if cleared:
        gc.collect()
    return cleared
