"""A processor's options: transformers' class defaults, overridden by the model's
``preprocessor_config.json`` and then by per-call keyword arguments (a ``None`` value keeps the
default, as transformers' ``_set_attributes`` does)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class Options:
    """The options a processor knows, with their values from defaults and the model's config."""

    def __init__(self, defaults: Mapping[str, Any], config: Mapping[str, Any]) -> None:
        self._values = dict(defaults)
        for key, value in config.items():
            if key in self._values and value is not None:
                self._values[key] = value

    def __getitem__(self, key: str) -> Any:
        """The configured value of ``key``."""
        return self._values[key]

    @property
    def names(self) -> frozenset[str]:
        """The options' names: the keyword arguments a call may override."""
        return frozenset(self._values)

    def merged(self, overrides: Mapping[str, Any]) -> dict[str, Any]:
        """The configured values with per-call ``overrides`` (``None`` keeps the configured value);
        a key the processor does not know is a ``ValueError``."""
        unknown = sorted(set(overrides) - set(self._values))
        if unknown:
            raise ValueError(f"unexpected image processor arguments: {', '.join(unknown)}")
        values = dict(self._values)
        values.update((key, value) for key, value in overrides.items() if value is not None)
        return values
