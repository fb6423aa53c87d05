"""A ``response_template`` (tokenizer_config.json metadata) loaded and checked.

The declarative description of a checkpoint's assistant output that vLLM 0.32's ``hf`` parsers
read (``vllm/parser/chat_parsing/response_templates.py``, a copy of transformers'
``utils/chat_parsing``): named *fields* (``thinking``, ``content``, ``tool_calls``), each a
region of the output between an opening and a closing delimiter, a literal (or list of literals)
or a regular expression, and a *start anchor* that marks where the assistant's turn begins in
the prompt. Delimiters are compiled with the ``regex`` package (as vLLM does), whose partial
matching lets the streaming scanner hold back a delimiter cut by a chunk boundary.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import msgspec

from vllm_frontend.chat.response_template.content import CONTENT_PARSERS, check_transform
from vllm_frontend.chat.response_template.fields import Anchor, Field, regex_module

__all__ = [
    "Anchor",
    "Field",
    "ResponseTemplate",
    "load_response_template",
    "regex_module",
]

logger = logging.getLogger(__name__)

_TEMPLATE_KEYS = frozenset(
    {"version", "defaults", "fields", "start_anchor", "start_anchor_pattern"}
)
_FIELD_KEYS = frozenset(
    {
        "open",
        "open_pattern",
        "close",
        "close_pattern",
        "content",
        "content_args",
        "repeats",
        "join",
        "optional",
        "transform",
        "transform_each",
    }
)


class ResponseTemplate(msgspec.Struct, frozen=True):
    """A loaded template: its fields in declaration order and where the turn starts."""

    defaults: dict[str, Any]
    fields: dict[str, Field]
    start_anchor: Anchor
    implicit: str | None
    """The field without an opener: text outside every other region goes there."""

    def after_last_anchor(self, text: str) -> str:
        """``text`` after the last start anchor (all of it when there is none)."""
        last = None
        for m in self.start_anchor.pattern.finditer(text):
            last = m.end()
        if last is None:
            logger.info(
                "response_template: the start anchor is not in the prompt; parsing all of it"
            )
            return text
        return text[last:]


def _anchor(where: str, spec: dict[str, Any], literal_key: str, pattern_key: str) -> Anchor | None:
    rx = regex_module()
    if literal_key in spec and pattern_key in spec:
        raise ValueError(f"{where}: cannot specify both '{literal_key}' and '{pattern_key}'")
    if literal_key in spec:
        raw = spec[literal_key]
        if isinstance(raw, str):
            literals = [raw]
        elif isinstance(raw, list):
            if not raw:
                raise ValueError(f"{where}: '{literal_key}' list must contain at least one literal")
            if not all(isinstance(s, str) for s in raw):
                raise ValueError(f"{where}: '{literal_key}' list must contain only strings")
            literals = list(dict.fromkeys(raw))
        else:
            raise ValueError(
                f"{where}: '{literal_key}' must be a string or list of strings, "
                f"got {type(raw).__name__}"
            )
        if "" in literals:
            raise ValueError(f"{where}: '{literal_key}' literals cannot be empty strings")
        # The longest alternative first, so that it wins where two match at one place.
        alternation = "|".join(rx.escape(s) for s in sorted(literals, key=len, reverse=True))
        extends = any(a != b and a.startswith(b) for a in literals for b in literals)
        return Anchor(rx.compile(alternation, rx.DOTALL), tuple(literals), extends)
    if pattern_key in spec:
        try:
            return Anchor(rx.compile(spec[pattern_key], rx.DOTALL), None, False)
        except rx.error as e:
            raise ValueError(f"{where}: invalid {pattern_key} regex: {e}") from e
    return None


def _field(name: str, spec: Any) -> Field:
    where = f"Field '{name}'"
    if not isinstance(spec, dict):
        raise ValueError(f"{where} must be a dict")
    if unknown := set(spec) - _FIELD_KEYS:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}")
    content = spec.get("content", "text")
    if content not in CONTENT_PARSERS:
        raise ValueError(
            f"{where}: unknown content parser '{content}'. Available: {sorted(CONTENT_PARSERS)}"
        )
    opener = _anchor(where, spec, "open", "open_pattern")
    closer = _anchor(where, spec, "close", "close_pattern")
    join = spec.get("join")
    if join is not None and not isinstance(join, str):
        raise ValueError(f"{where}: 'join' must be a string, got {type(join).__name__}")
    if join is not None and not spec.get("repeats", False):
        raise ValueError(f"{where}: 'join' requires 'repeats': true")
    transform = spec.get("transform")
    each = spec.get("transform_each", False)
    if not isinstance(each, bool):
        raise ValueError(f"{where}: transform_each must be a bool, got {type(each).__name__}")
    if each and transform is None:
        raise ValueError(f"{where}: transform_each is set but no transform was provided")
    if transform is not None:
        check_transform(where, transform)
    else:
        groups: set[str] = set()
        for anchor in (opener, closer):
            if anchor is not None:
                groups |= set(anchor.pattern.groupindex)
        if groups:
            raise ValueError(
                f"{where}: open_pattern/close_pattern declares named group(s) {sorted(groups)}, "
                "but the field has no 'transform' to use them"
            )
    return Field(
        name=name,
        open=opener,
        close=closer,
        content=content,
        content_args=spec.get("content_args", {}),
        repeats=spec.get("repeats", False),
        join=join,
        optional=spec.get("optional", True),
        transform=transform,
        transform_each=each,
    )


def load_response_template(spec: Any) -> ResponseTemplate:
    """Check and compile a ``response_template`` dict (:class:`ValueError` names what is
    wrong; :class:`ImportError` without the ``regex`` package)."""
    if not isinstance(spec, dict):
        raise ValueError(f"response_template must be a dict, got {type(spec).__name__}")
    version = spec.get("version", 1)
    if version != 1:
        raise ValueError(f"Unsupported response_template version: {version}")
    if unknown := set(spec) - _TEMPLATE_KEYS:
        raise ValueError(f"Unknown keys in response_template: {sorted(unknown)}")
    if not isinstance(spec.get("defaults", {}), dict):
        raise ValueError("response_template.defaults must be a dict")
    raw_fields = spec.get("fields", {})
    if not isinstance(raw_fields, dict) or not raw_fields:
        raise ValueError("response_template.fields must be a non-empty dict")
    fields = {name: _field(name, raw) for name, raw in raw_fields.items()}
    implicit = [name for name, f in fields.items() if f.open is None]
    if len(implicit) > 1:
        raise ValueError(
            "At most one field may omit 'open'/'open_pattern' (that field becomes the "
            f"implicit-open / leftover sink). Found: {', '.join(implicit)}"
        )
    start = _anchor("response_template", spec, "start_anchor", "start_anchor_pattern")
    if start is None:
        raise ValueError("response_template must define 'start_anchor' or 'start_anchor_pattern'.")
    return ResponseTemplate(
        defaults=copy.deepcopy(spec.get("defaults", {})),
        fields=fields,
        start_anchor=start,
        implicit=implicit[0] if implicit else None,
    )
