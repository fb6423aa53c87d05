"""Modules imported when first used rather than at startup.

numpy costs ~0.1 s to import, a tenth of the frontend's time to ``/health``, and only requests
with tensors or beam search need it; jinja2 ~0.05 s, and only chat requests need it. A module
that uses one binds a :class:`LazyModule` under the usual name: the first attribute read imports
the real module and rebinds the name to it in that module's globals, so from then on lookups
cost what a plain global costs. Type checkers are given the real import (under ``TYPE_CHECKING``).
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType
from typing import Any

__all__ = ["LazyModule", "loaded"]


class LazyModule:
    """Stands in for module ``name`` bound as ``alias`` in ``namespace`` until first used;
    ``submodules`` (e.g. ``"jinja2.meta"``) are imported with it, for ``name.sub.X`` uses."""

    __slots__ = ("_alias", "_name", "_namespace", "_submodules")

    def __init__(
        self, name: str, namespace: dict[str, Any], alias: str, submodules: tuple[str, ...] = ()
    ) -> None:
        self._name = name
        self._namespace = namespace
        self._alias = alias
        self._submodules = submodules

    def __getattr__(self, attr: str) -> Any:
        module = importlib.import_module(self._name)
        for submodule in self._submodules:
            importlib.import_module(submodule)
        if self._namespace.get(self._alias) is self:
            self._namespace[self._alias] = module
        return getattr(module, attr)

    def __repr__(self) -> str:
        return f"<lazy module {self._name!r}>"


def loaded(name: str) -> ModuleType | None:
    """Module ``name`` if something imported it already, else None (a value cannot be one of
    its types before it is imported: an ``isinstance`` check needs no import to say no)."""
    return sys.modules.get(name)
