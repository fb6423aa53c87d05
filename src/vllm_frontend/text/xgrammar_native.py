"""The few xgrammar conversions vLLM 0.32's frontend runs on requests (Lark → EBNF, JSON schema →
EBNF, regex → EBNF, EBNF and structural tags read), called in xgrammar's native library without
importing its Python package.

xgrammar's package imports torch; its library ``libxgrammar_bindings.so`` only needs tvm-ffi
(package ``apache-tvm-ffi``), whose Python module is loaded here with ``import torch`` refused
(tvm-ffi tries it first, and takes the refusal as torch being absent). Install xgrammar without
its dependencies (torch among them): ``pip install apache-tvm-ffi==0.1.15.post2 && pip install
--no-deps xgrammar==0.2.8`` (the tvm-ffi release tested with it). Loaded on first use; where it
is missing, the request that needs it answers 501 with that install line.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
import threading
from pathlib import Path
from typing import Any

__all__ = [
    "TVM_FFI_VERSION",
    "XGRAMMAR_VERSION",
    "XgrammarUnavailable",
    "compile_structural_tag",
    "ebnf_to_grammar",
    "json_schema_to_ebnf",
    "lark_to_ebnf",
    "regex_to_ebnf",
    "unavailable_reason",
]

XGRAMMAR_VERSION = "0.2.8"
"""The xgrammar release vLLM 0.32 pins: its conversions' output is what vLLM sends."""
TVM_FFI_VERSION = "0.1.15.post2"
"""The tvm-ffi release the library is loaded with in the tests (install line only)."""

_INSTALL = (
    f"pip install apache-tvm-ffi=={TVM_FFI_VERSION} && "
    f"pip install --no-deps xgrammar=={XGRAMMAR_VERSION}"
)
_GRAMMAR_TYPE = "xgrammar.tvm_ffi_binding.Grammar"
_lock = threading.Lock()


class XgrammarUnavailable(NotImplementedError):
    """xgrammar's native library cannot be loaded here (HTTP 501 for the request needing it)."""


def unavailable_reason() -> str | None:
    """Why the library cannot be used (``None``: it loads); for a startup message."""
    try:
        _methods()
    except XgrammarUnavailable as e:
        return str(e)
    return None


def lark_to_ebnf(lark: str) -> str:
    """xgrammar's ``str(Grammar.from_lark(lark))``. Raises RuntimeError for a grammar xgrammar
    cannot read, :class:`XgrammarUnavailable` without the library."""
    methods = _methods()
    return str(methods["to_string"](methods["from_lark"](lark, None, [], [])))


def json_schema_to_ebnf(schema: str) -> str:
    """xgrammar's ``str(Grammar.from_json_schema(schema))`` with its defaults (any whitespace,
    strict mode), for a schema given as JSON text. Raises RuntimeError for a schema xgrammar
    cannot convert, :class:`XgrammarUnavailable` without the library."""
    methods = _methods()
    grammar = methods["from_json_schema"](schema, True, None, None, True, None, False, False)
    return str(methods["to_string"](grammar))


def regex_to_ebnf(regex: str) -> str:
    """xgrammar's ``str(Grammar.from_regex(regex))``. Raises RuntimeError for a regex xgrammar
    cannot read, :class:`XgrammarUnavailable` without the library."""
    methods = _methods()
    return str(methods["to_string"](methods["from_regex"](regex, False)))


def ebnf_to_grammar(ebnf: str) -> str:
    """xgrammar's ``str(Grammar.from_ebnf(ebnf))`` (root rule ``root``): the grammar as xgrammar
    reads it. Raises RuntimeError for a grammar xgrammar cannot read, :class:`XgrammarUnavailable`
    without the library."""
    methods = _methods()
    return str(methods["to_string"](methods["from_ebnf"](ebnf, "root")))


def compile_structural_tag(tag: str) -> None:
    """Build xgrammar's grammar of a structural tag given as JSON text (its current form), as
    vLLM's check of a request's tag does. Raises RuntimeError where xgrammar refuses the tag,
    :class:`XgrammarUnavailable` without the library."""
    _methods()["from_structural_tag"](tag)


def _methods() -> dict[str, Any]:
    with _lock:
        return _load()


@functools.cache
def _load() -> dict[str, Any]:
    # (A failed load is not cached: it is retried, and fails again, on the next call.)
    # importlib.metadata (with the email package) costs ~20 ms to import: not at startup.
    from importlib import metadata

    try:
        version = metadata.version("xgrammar")
        spec = importlib.util.find_spec("xgrammar")
    except (metadata.PackageNotFoundError, ImportError, ValueError):
        version, spec = None, None
    if version is None or spec is None or not spec.submodule_search_locations:
        raise XgrammarUnavailable(
            "This request needs xgrammar's native library (vLLM builds its constraint with "
            f"xgrammar), which is not installed. Install it with:\n    {_INSTALL}"
        )
    if version != XGRAMMAR_VERSION:
        raise XgrammarUnavailable(
            f"This request needs xgrammar {XGRAMMAR_VERSION} (the release vLLM 0.32 builds its "
            f"constraints with); xgrammar {version} is installed. Install it with:\n    {_INSTALL}"
        )
    library = Path(next(iter(spec.submodule_search_locations))) / "libxgrammar_bindings.so"
    try:
        ffi = _import_tvm_ffi()
        ffi.load_module(str(library))
        info = ffi.core._lookup_or_register_type_info_from_type_key(_GRAMMAR_TYPE)
    except (ImportError, OSError, RuntimeError, AttributeError) as e:
        raise XgrammarUnavailable(
            f"xgrammar's native library ({library}) cannot be loaded ({e}). Install it and "
            f"tvm-ffi with:\n    {_INSTALL}"
        ) from e
    return {method.name: method.func for method in info.methods}


def _import_tvm_ffi() -> Any:
    # tvm-ffi imports torch when it can; refuse it unless it is loaded already.
    blocked = "torch" not in sys.modules
    if blocked:
        sys.modules["torch"] = None  # type: ignore[assignment]
    try:
        import tvm_ffi
        import tvm_ffi.core
    finally:
        if blocked and sys.modules.get("torch", 0) is None:
            del sys.modules["torch"]
    return tvm_ffi
