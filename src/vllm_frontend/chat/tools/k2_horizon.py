"""K2 Horizon tool calls, as vLLM 0.32's ``k2_horizon`` parser reads them: one
``<ifm|tool_calls>`` block of ``<ifm|tool_call>`` calls, each a JSON ``{"name", "arguments"}``
object or (the default) ``NAME<ifm|arg_key>K</ifm|arg_key>[<ifm|arg_type>T</ifm|arg_type>]
<ifm|arg_value>V</ifm|arg_value>…``, as the request's ``tool_call_format`` chat template kwarg
says (``json``, ``xml`` or ``xml_typed``; anything else is refused). A block that is not all
valid calls of the request's tools is content. vLLM streams it on its parser-engine path: the
text before the block as it comes (leading whitespace held until something else follows), the
block's calls once it closes, and what is left at the end."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from vllm_frontend.chat.engine.coerce import coerce_text, has_tool, schema_types, tool_properties
from vllm_frontend.chat.parsed import OutputDelta, ToolCallDelta, new_tool_call_id
from vllm_frontend.chat.tools.base import ExtractedToolCalls, ToolParser
from vllm_frontend.chat.tools.base import tag_overlap as _tag_overlap

__all__ = ["K2HorizonToolParser"]

_FORMATS = ("json", "xml", "xml_typed")
CALLS_START, CALLS_END = "<ifm|tool_calls>", "</ifm|tool_calls>"
_CALL = re.compile(
    re.escape("<ifm|tool_call>") + r"(.*?)" + re.escape("</ifm|tool_call>"), re.DOTALL
)
_KEY_START, _KEY_END = "<ifm|arg_key>", "</ifm|arg_key>"
_TYPE_START, _TYPE_END = "<ifm|arg_type>", "</ifm|arg_type>"
_VALUE_START, _VALUE_END = "<ifm|arg_value>", "</ifm|arg_value>"
_ARG = re.compile(
    f"{re.escape(_KEY_START)}(.*?){re.escape(_KEY_END)}\\s*"
    f"(?:{re.escape(_TYPE_START)}(.*?){re.escape(_TYPE_END)}\\s*)?"
    f"{re.escape(_VALUE_START)}(.*?){re.escape(_VALUE_END)}",
    re.DOTALL,
)
_ARG_MARKERS = (_KEY_START, _KEY_END, _TYPE_START, _TYPE_END, _VALUE_START, _VALUE_END)


def tool_call_format(request_kwargs: Mapping[str, Any]) -> str:
    """The request's ``tool_call_format`` (``xml`` when missing), refused with vLLM's message
    when it is not one K2 Horizon writes."""
    fmt = request_kwargs.get("tool_call_format", "xml")
    if not isinstance(fmt, str) or fmt not in _FORMATS:
        raise ValueError(
            f"Unsupported tool_call_format {fmt!r}. Supported values: {', '.join(_FORMATS)}."
        )
    return fmt


def _blank_to_none(text: str) -> str | None:
    return text if text.strip() else None


class K2HorizonToolParser(ToolParser):
    """``k2_horizon``: required and named tool choices are read in this format."""

    name = "k2_horizon"
    supports_required_and_named = False
    engine_based = True
    reads_request = True

    @classmethod
    def check_request(cls, request_chat_template_kwargs: Mapping[str, Any]) -> None:
        """Refuse an unknown ``tool_call_format``."""
        tool_call_format(request_chat_template_kwargs)

    def __init__(self, vocab: Mapping[str, int], tools: Sequence[Mapping[str, Any]] = ()) -> None:
        """See :class:`ToolParser`."""
        super().__init__(vocab, tools)
        self._text = ""
        self._cursor = 0
        self._block_at: int | None = None
        self._resolved = False
        self._pending = ""
        self._content_seen = False

    # -- reading calls -----------------------------------------------------------------------

    def _checked_name(self, name: Any) -> str:
        if not isinstance(name, str) or not name or any(ch.isspace() for ch in name):
            raise ValueError("IFM tool call has an invalid function name.")
        if self.tools and not has_tool(self.tools, name):
            raise ValueError(f"Unknown IFM tool name: {name}.")
        choice = self.tool_choice
        named = choice.get("function", {}).get("name") if isinstance(choice, Mapping) else None
        if named is not None and name != named:
            raise ValueError(f"Unexpected IFM tool name: {name}.")
        return name

    def _json_call(self, body: str) -> tuple[str, dict[str, Any]]:
        call = json.loads(body.strip())
        if not isinstance(call, dict):
            raise ValueError("IFM JSON tool call must be an object.")
        name = self._checked_name(call.get("name"))
        args = call.get("arguments", {})
        if not isinstance(args, dict):
            raise ValueError("IFM JSON tool-call arguments must be an object.")
        props = tool_properties(self.tools, name)
        typed = {}
        for key, value in args.items():
            schema = props.get(key)
            if isinstance(schema, dict):
                raw = (
                    value
                    if isinstance(value, str)
                    else json.dumps(value, ensure_ascii=False, allow_nan=False)
                )
                value = coerce_text(raw, schema_types(schema))
            typed[key] = value
        return name, typed

    def _xml_call(self, body: str, fmt: str) -> tuple[str, dict[str, Any]]:
        first = body.find(_KEY_START)
        if first == -1:
            if any(marker in body for marker in _ARG_MARKERS):
                raise ValueError("Malformed IFM XML argument tags.")
            return self._checked_name(body.strip()), {}
        name = self._checked_name(body[:first].strip())
        props = tool_properties(self.tools, name)
        args: dict[str, Any] = {}
        pos = first
        for m in _ARG.finditer(body, first):
            if body[pos : m.start()].strip():
                raise ValueError("Malformed IFM XML argument tags.")
            key = m.group(1).strip()
            if not key:
                raise ValueError("IFM XML argument is missing a name.")
            if key in args:
                raise ValueError(f"Duplicate IFM XML argument: {key}.")
            declared = m.group(2).strip() if m.group(2) is not None else None
            if fmt == "xml" and declared is not None:
                raise ValueError("Unexpected type tag in IFM XML tool call.")
            if fmt == "xml_typed" and not declared:
                raise ValueError("IFM typed XML argument is missing a type.")
            args[key] = self._xml_value(m.group(3), props.get(key), declared)
            pos = m.end()
        if pos == first or body[pos:].strip():
            raise ValueError("Malformed IFM XML argument tags.")
        return name, args

    @staticmethod
    def _xml_value(value: str, schema: Any, declared: str | None) -> Any:
        base = declared.split("[", 1)[0].strip().lower() if declared else None
        types = schema_types(schema)
        if isinstance(schema, dict):
            if base in types and len(set(types)) > 1:
                types = [base]
        elif base == "any":
            return value
        elif base:
            types = [base]
        return coerce_text(value if "string" in types else value.strip(), types)

    def _read(self, text: str) -> tuple[list[tuple[str, str]], str | None] | None:
        """(calls, content) of an output whose block is all valid calls, else ``None``."""
        fmt = tool_call_format(self.request_kwargs)
        if self.tool_choice == "none":
            return None
        start = text.find(CALLS_START)
        if start == -1:
            return None
        body_at = start + len(CALLS_START)
        end = text.find(CALLS_END, body_at)
        if end == -1:
            return None
        body = text[body_at:end]
        found = list(_CALL.finditer(body))
        if not found or _CALL.sub("", body).strip():
            return None
        try:
            calls = []
            for m in found:
                body_ = m.group(1)
                name, args = self._json_call(body_) if fmt == "json" else self._xml_call(body_, fmt)
                calls.append((name, json.dumps(args, ensure_ascii=False, allow_nan=False)))
        except (TypeError, ValueError):
            return None
        content = text[:start] + text[end + len(CALLS_END) :]
        return calls, _blank_to_none(content)

    def extract(self, text: str) -> ExtractedToolCalls:
        """The block's calls and the text around it, or (any problem) all content."""
        read = self._read(text)
        if read is None:
            return ExtractedToolCalls(False, content=_blank_to_none(text))
        calls, content = read
        return ExtractedToolCalls(True, calls, content)

    # -- streaming ---------------------------------------------------------------------------

    def _emit(self, addition: str, final: bool = False) -> str | None:
        """Content to send: whitespace before any other content is held."""
        if addition:
            if self._content_seen:
                return addition
            self._pending += addition
            if self._pending.strip():
                self._content_seen = True
                out, self._pending = self._pending, ""
                return out
        if final:
            self._pending = ""
        return None

    def stream(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> OutputDelta | None:
        """Content up to the block, the block's calls once it closes, content after it."""
        tool_call_format(self.request_kwargs)
        if self.tool_choice == "none" or self._resolved:
            if self.tool_choice != "none":
                self._text += delta_text
            out = self._emit(delta_text)
            return OutputDelta(content=out) if out is not None else None
        self._text += delta_text
        content: str | None = None
        if self._block_at is None:
            at = self._text.find(CALLS_START, self._cursor)
            if at == -1:
                held = _tag_overlap(self._text[self._cursor :], CALLS_START)
                sendable = len(self._text) - held
                content = self._emit(self._text[self._cursor : sendable])
                self._cursor = sendable
                return OutputDelta(content=content) if content is not None else None
            self._block_at = at
            content = self._emit(self._text[self._cursor : at])
            self._cursor = at
        body_at = self._block_at + len(CALLS_START)
        end = self._text.find(CALLS_END, body_at)
        if end == -1:
            return OutputDelta(content=content) if content is not None else None
        end += len(CALLS_END)
        read = self._read(self._text[self._block_at : end])
        self._resolved = True
        if read is None:
            failed = self._emit(self._text[self._cursor :])
            self._cursor = len(self._text)
            joined = (content or "") + (failed or "")
            return OutputDelta(content=joined) if joined else None
        pieces = []
        for i, (name, arguments) in enumerate(read[0]):
            self.prev_calls.append({"name": name, "arguments": json.loads(arguments)})
            self.streamed_args.append(arguments)
            pieces.append(ToolCallDelta(i, id=new_tool_call_id(), name=name, arguments=arguments))
        after = self._emit(self._text[end:])
        self._cursor = len(self._text)
        return OutputDelta(
            content=((content or "") + (after or "")) or None, tool_calls=pieces, content_set=True
        )

    def finish_stream(self) -> OutputDelta | None:
        """Text still held: the rest when no block resolved (whitespace alone dropped)."""
        if not self._resolved:
            content = self._emit(self._text[self._cursor :], final=True)
            self._cursor = len(self._text)
            self._resolved = True
        else:
            content = self._emit("", final=True)
        return OutputDelta(content=content) if content is not None else None
