"""Comparing a processor's output with transformers' (the test-only reference)."""

from __future__ import annotations

import ast
import pathlib
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pytest


def assert_same_outputs(
    expected: Mapping[str, Any], got: Mapping[str, np.ndarray], what: str
) -> None:
    """``got`` has ``expected``'s keys, and each value its dtype, shape and exact bytes (float
    tensors bit for bit: -0.0 and 0.0 differ, NaNs compare by payload)."""
    assert sorted(got) == sorted(expected), (what, sorted(got), sorted(expected))
    for key, value in expected.items():
        want = np.asarray(value)
        have = got[key]
        assert isinstance(have, np.ndarray), (what, key, type(have))
        assert have.dtype == want.dtype, (what, key, have.dtype, want.dtype)
        assert have.shape == want.shape, (what, key, have.shape, want.shape)
        if have.tobytes() != want.tobytes():
            diff = np.abs(have.astype(np.float64) - want.astype(np.float64))
            where = np.unravel_index(int(np.argmax(diff)), diff.shape)
            raise AssertionError(
                f"{what}: {key} differs at {int(np.count_nonzero(diff))} of {diff.size} elements, "
                f"max {float(diff.max())} at {where}"
            )


def assert_close_outputs(
    expected: Mapping[str, Any], got: Mapping[str, np.ndarray], what: str, atol: float
) -> None:
    """As :func:`assert_same_outputs`, but float tensors within ``atol`` (integers still exact)."""
    assert sorted(got) == sorted(expected), (what, sorted(got), sorted(expected))
    for key, value in expected.items():
        want = np.asarray(value)
        have = got[key]
        assert have.dtype == want.dtype and have.shape == want.shape, (
            what,
            key,
            have.dtype,
            want.dtype,
            have.shape,
            want.shape,
        )
        if np.issubdtype(want.dtype, np.floating):
            diff = float(np.max(np.abs(have - want), initial=0.0))
            assert diff <= atol, f"{what}: {key} differs by {diff} > {atol}"
        else:
            assert np.array_equal(have, want), (what, key)


def assert_same_or_both_fail(
    reference: Callable[..., Mapping[str, Any]],
    ours: Callable[..., Mapping[str, np.ndarray]],
    items: list[Any],
    what: str,
    **kwargs: Any,
) -> bool:
    """:func:`assert_same_outputs` of ``reference(items, return_tensors="np", **kwargs)`` and
    ``ours(items, **kwargs)``, or both calls raise (an input the reference refuses, such as a size
    that rounds to 0 pixels, is refused by ours too). Whether the reference answered."""
    try:
        expected = reference(items, return_tensors="np", **kwargs)
    except Exception as error:
        with pytest.raises(Exception):  # noqa: B017
            ours(items, **kwargs)
        print(f"both refuse {what}: {error!r}")
        return False
    assert_same_outputs(dict(expected), dict(ours(items, **kwargs)), what)
    return True


def source_function(path: str, qualname: str, namespace: dict[str, Any]) -> Callable[..., Any]:
    """The function ``qualname`` ("Class.method" or "function") of the Python file ``path``,
    compiled from its source alone in ``namespace``: the reference's own code, for modules that
    cannot be imported here (vLLM's and transformers' modules that import torchvision)."""
    tree = ast.parse(pathlib.Path(path).read_text(encoding="utf-8"))
    nodes: list[ast.stmt] = tree.body
    *owners, name = qualname.split(".")
    for owner in owners:
        nodes = next(n for n in nodes if isinstance(n, ast.ClassDef) and n.name == owner).body
    function = next(n for n in nodes if isinstance(n, ast.FunctionDef) and n.name == name)
    function.decorator_list = []
    module = ast.Module(body=[function], type_ignores=[])
    scope = dict(namespace)
    exec(compile(module, path, "exec"), scope)
    return scope[name]
