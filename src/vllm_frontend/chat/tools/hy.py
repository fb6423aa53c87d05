"""Hunyuan V3 / V4 tool calls, as vLLM 0.32's ``hy_v3`` and ``hy_v4`` parsers read them::

    <tool_calls><tool_call>NAME<tool_sep><arg_key>K</arg_key><arg_value>V</arg_value>…
    </tool_call>…</tool_calls>

(V4 has no ``<tool_sep>``: the name ends at the first ``<arg_key>`` or ``</tool_call>``.) Every
marker may carry a per-checkpoint suffix (``<tool_call:6124c78e>``). Argument values are raw
text typed by the tool's JSON schema. Streaming starts once the ``<tool_calls>`` token is among
the ids, sends a call's name first, then its arguments as a JSON object written piece by piece
(string values as they grow, other values once closed, the closing ``}`` with the call's end).
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from vllm_frontend.chat.parsed import OutputDelta, ToolCallDelta, new_tool_call_id
from vllm_frontend.chat.reasoning.base import ModelFacts
from vllm_frontend.chat.reasoning.think_tags import hy_token_suffix
from vllm_frontend.chat.tools.base import ExtractedToolCalls, ToolParser, tag_overlap

__all__ = ["HYV3ToolParser", "HYV4ToolParser", "hy_argument_value"]

_ALIASES = {
    "str": "string", "text": "string", "varchar": "string", "char": "string",
    "enum": "string", "bool": "boolean", "binary": "boolean", "int": "integer",
    "float": "number", "double": "number", "list": "array", "dict": "object",
    "map": "object",
}  # fmt: skip
_INTEGER_PREFIXES = ("int", "uint", "long", "short", "unsigned")
_NUMBER_PREFIXES = ("num", "float")
_SCALARS = {"string", "boolean", "integer", "number"}


def _type_name(raw: Any) -> Any:
    if (alias := _ALIASES.get(raw)) is not None:
        return alias
    lower = raw.lower()
    if lower.startswith(_INTEGER_PREFIXES):
        return "integer"
    if lower.startswith(_NUMBER_PREFIXES):
        return "number"
    return raw


def _property_schema(tools: Sequence[Mapping[str, Any]], tool: str, key: str) -> Any:
    for t in tools:
        function = t.get("function") or {}
        if function.get("name") == tool:
            parameters = function.get("parameters")
            if parameters is None:
                return {}
            return parameters.get("properties", {}).get(key, {})
    return {}


def _types(tools: Sequence[Mapping[str, Any]], tool: str, key: str) -> set[Any]:
    """The non-null types the schema allows for ``key`` (a missing schema: string)."""
    schema = _property_schema(tools, tool, key)
    if "type" in schema:
        kind = schema["type"]
        options = [{"type": t} for t in kind] if isinstance(kind, list) else [schema]
    elif "anyOf" in schema:
        options = schema["anyOf"]
    elif "oneOf" in schema:
        options = schema["oneOf"]
    else:
        options = [{"type": "string"}]
    return {_type_name(o.get("type", "string")) for o in options} - {"null"}


def _number(value: str) -> int | float | None:
    try:
        if "." in value or "e" in value or "E" in value:
            return float(value)
        return int(value)
    except ValueError:
        return None


def hy_argument_value(value: str, tool: str, key: str, tools: Sequence[Mapping[str, Any]]) -> Any:
    """A raw argument value typed by the tool's schema: boolean, integer, number, other JSON
    types in that order of preference, then the text itself for strings; without a usable
    type, JSON, else a Python literal, else the text."""
    types = _types(tools, tool, key)
    if "boolean" in types and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if "integer" in types:
        try:
            return int(value)
        except ValueError:
            pass
    if "number" in types and (number := _number(value)) is not None:
        return number
    if types - _SCALARS:
        try:
            return json.loads(value)
        except ValueError:
            pass
    if "string" in types:
        return value
    try:
        return json.loads(value)
    except Exception:
        pass
    try:
        return ast.literal_eval(value)
    except Exception:
        return value


def _only_string(tools: Sequence[Mapping[str, Any]], tool: str, key: str) -> bool:
    return _types(tools, tool, key) == {"string"}


class _HYToolParser(ToolParser):
    """What the V3 and V4 parsers share: markers, typed values and the argument stream."""

    suffix: ClassVar[str] = ""
    required_tokens: ClassVar[tuple[str, ...]] = ("<tool_calls>", "</tool_calls>")
    _KEY_VALUE_GAP: ClassVar[str] = ""
    """What may stand between ``</arg_key>`` and ``<arg_value>`` (a regex)."""

    @classmethod
    def _with_suffix(cls, suffix: str) -> type[ToolParser]:
        if not suffix:
            return cls
        attrs = {
            "suffix": suffix,
            "required_tokens": (f"<tool_calls{suffix}>", f"</tool_calls{suffix}>"),
        }
        return type(cls.__name__, (cls,), attrs)

    def __init__(self, vocab: Mapping[str, int], tools: Sequence[Mapping[str, Any]] = ()) -> None:
        """See :class:`ToolParser`."""
        super().__init__(vocab, tools)
        s = self.suffix
        self.calls_start, self.calls_end = f"<tool_calls{s}>", f"</tool_calls{s}>"
        self.call_start, self.call_end = f"<tool_call{s}>", f"</tool_call{s}>"
        self.key_start, self.key_end = f"<arg_key{s}>", f"</arg_key{s}>"
        self.value_start, self.value_end = f"<arg_value{s}>", f"</arg_value{s}>"
        self.calls_start_id = vocab[self.calls_start]
        e = re.escape
        self._pairs = re.compile(
            f"{e(self.key_start)}(.*?){e(self.key_end)}{self._KEY_VALUE_GAP}"
            f"{e(self.value_start)}(.*?){e(self.value_end)}",
            re.DOTALL,
        )
        self._buffer = ""
        self._name: str | None = None
        self._done: dict[str, Any] = {}
        self._sent = 0
        self._current = -1

    def _arguments(self, body: str, tool: str) -> str:
        """The JSON arguments of a call body's pairs (keys as written)."""
        args = {k: hy_argument_value(v, tool, k, self.tools) for k, v in self._pairs.findall(body)}
        return json.dumps(args, ensure_ascii=False)

    def _escape_partial(self, value: str) -> str:
        raise NotImplementedError

    def _partial_value(self, raw: str) -> str:
        return raw

    def _argument_diff(self) -> tuple[str | None, bool]:
        """The argument text the buffer adds to the current call, and whether the call ended
        (then recorded, and the buffer left with what follows it)."""
        buf = self._buffer
        complete = self.call_end in buf
        if complete:
            at = buf.find(self.call_end)
            args_text, rest = buf[:at], buf[at + len(self.call_end) :]
        else:
            args_text, rest = buf, ""
        tool = self._name or ""
        last_end = 0
        for m in self._pairs.finditer(args_text):
            key = m.group(1).strip()
            if key not in self._done:
                self._done[key] = hy_argument_value(m.group(2), tool, key, self.tools)
            last_end = m.end()
        tail = args_text[last_end:]
        open_key: str | None = None
        open_value: str | None = None
        k = tail.find(self.key_start)
        if k != -1:
            k_end = tail.find(self.key_end, k + len(self.key_start))
            if k_end != -1:
                open_key = tail[k + len(self.key_start) : k_end].strip()
                v = tail.find(self.value_start, k_end)
                if v != -1 and _only_string(self.tools, tool, open_key):
                    open_value = self._partial_value(tail[v + len(self.value_start) :])
        diff: str | None = None
        if complete:
            final = json.dumps(self._done, ensure_ascii=False)
            if self._sent < len(final):
                diff = final[self._sent :]
            self.prev_calls.append({"name": self._name, "arguments": self._done})
            self.streamed_args.append(final)
            self._name, self._done, self._sent = None, {}, 0
            self._buffer = rest
            return diff, True
        parts = [
            f"{json.dumps(k, ensure_ascii=False)}: {json.dumps(v, ensure_ascii=False)}"
            for k, v in self._done.items()
        ]
        if open_key is not None and open_value is not None:
            quoted = json.dumps(open_key, ensure_ascii=False)
            parts.append(f'{quoted}: "{self._escape_partial(open_value)}')
        # The object so far without its closing brace (an open string stays unquoted).
        end = len("{" + ", ".join(parts))
        if end > self._sent:
            snapshot = "{" + ", ".join(parts)
            diff = snapshot[self._sent : end]
            self._sent = end
        return diff, False

    def _enter_calls(self, delta_text: str) -> str | None:
        """Buffer the delta's text after ``<tool_calls>``; the text before it is content."""
        content = None
        if self.calls_start in delta_text:
            parts = delta_text.split(self.calls_start)
            self._buffer += parts[-1]
            content = parts[0] or None
        else:
            self._buffer += delta_text
        return content

    def _close_if_done(self, current_text: str) -> None:
        # The block's end after a call's end closes a call left open in the buffer.
        ends = self.call_end + self.calls_end
        if ends in current_text and self.call_end not in self._buffer:
            self._buffer += ends


class HYV3ToolParser(_HYToolParser):
    """``hy_v3``."""

    name = "hy_v3"
    _KEY_VALUE_GAP = r"\s*"

    @classmethod
    def for_model(cls, model: Any) -> type[ToolParser]:
        """The markers carry the tokenizer config's ``token_suffix``."""
        facts = model if isinstance(model, ModelFacts) else ModelFacts()
        return cls._with_suffix(facts.tokenizer_config.get("token_suffix") or "")

    def __init__(self, vocab: Mapping[str, int], tools: Sequence[Mapping[str, Any]] = ()) -> None:
        """See :class:`ToolParser`."""
        super().__init__(vocab, tools)
        e = re.escape
        start, sep, end = e(self.call_start), e(f"<tool_sep{self.suffix}>"), e(self.call_end)
        self.sep = f"<tool_sep{self.suffix}>"
        self._whole = re.compile(f"{start}(.*?){sep}(.*?){end}", re.DOTALL)
        self._open = re.compile(f"{start}(.*?){sep}(.*)", re.DOTALL)
        self._call_id = ""

    def _escape_partial(self, value: str) -> str:
        return (
            value.replace("\\", "\\\\")
            .replace('"', '\\"')
            .replace("\n", "\\n")
            .replace("\r", "\\r")
            .replace("\t", "\\t")
        )

    def _calls(self, text: str) -> list[tuple[str, str]]:
        """Closed calls, then an open one after the last close (or the open one alone)."""
        try:
            found = self._whole.findall(text)
            if found:
                found += self._open.findall(text.split(self.call_end)[-1])
            else:
                found = self._open.findall(text)
            return [(n.strip(), self._arguments(a.strip(), n.strip())) for n, a in found]
        except Exception:
            return []

    def extract(self, text: str) -> ExtractedToolCalls:
        """Calls are read once ``<tool_calls>`` is in the text (even when none is readable)."""
        if self.calls_start not in text:
            return ExtractedToolCalls(False, content=text)
        content = text[: text.find(self.calls_start)]
        return ExtractedToolCalls(True, self._calls(text), content or None)

    def stream(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> OutputDelta | None:
        """One step of the buffered state machine."""
        if self.calls_start_id not in current_ids:
            return OutputDelta(content=delta_text)
        content = self._enter_calls(delta_text)
        self._close_if_done(current_text)
        text = self._buffer
        start = text.find(self.call_start)
        if start == -1 and self._name is None:
            if content is not None:
                return OutputDelta(content=content)
            self._buffer = ""
            return None
        named: ToolCallDelta | None = None
        if self._name is None:
            sep = text.find(self.sep)
            if sep == -1:
                self._buffer = text[start:]
                return None if content is None else OutputDelta(content=content)
            self._name = text[start + len(self.call_start) : sep].strip()
            self._buffer = text[sep + len(self.sep) :]
            self._current += 1
            self._call_id = new_tool_call_id()
            named = ToolCallDelta(self._current, id=self._call_id, name=self._name)
            if self.call_end not in self._buffer:
                # vLLM's name_delta.content = content_delta: "content": null too
                return OutputDelta(content=content, tool_calls=[named], content_set=True)
        diff, complete = self._argument_diff()
        msg: OutputDelta | None = None
        if named is not None:
            if diff:
                named.arguments = diff
            msg = OutputDelta(content=content, tool_calls=[named], content_set=True)
        elif diff:
            msg = OutputDelta(tool_calls=[ToolCallDelta(self._current, arguments=diff)])
        if complete and (drained := self._drain()):
            if msg is None:
                return OutputDelta(tool_calls=drained)
            msg.tool_calls.extend(drained)
        return msg

    def _drain(self) -> list[ToolCallDelta]:
        """Whole calls already in the buffer after the one just closed, sent at once."""
        out: list[ToolCallDelta] = []
        while (start := self._buffer.find(self.call_start)) != -1:
            end = self._buffer.find(self.call_end, start)
            if end == -1:
                break
            end += len(self.call_end)
            call, self._buffer = self._buffer[start:end], self._buffer[end:]
            for name, args in self._calls(call):
                self._current += 1
                self.prev_calls.append({"name": name, "arguments": json.loads(args)})
                self.streamed_args.append(args)
                out.append(
                    ToolCallDelta(self._current, id=new_tool_call_id(), name=name, arguments=args)
                )
        return out


class HYV4ToolParser(_HYToolParser):
    """``hy_v4``: whole outputs must be well formed (one ``<tool_calls>`` block, balanced
    markers, nothing but pairs in a call, a name), else they are content; required and named
    tool choices are read in this format."""

    name = "hy_v4"
    supports_required_and_named = False

    @classmethod
    def for_model(cls, model: Any) -> type[ToolParser]:
        """The markers carry the suffix of the checkpoint's structural tokens."""
        facts = model if isinstance(model, ModelFacts) else ModelFacts()
        return cls._with_suffix(hy_token_suffix(facts))

    def __init__(self, vocab: Mapping[str, int], tools: Sequence[Mapping[str, Any]] = ()) -> None:
        """See :class:`ToolParser`."""
        super().__init__(vocab, tools)
        e = re.escape
        self._call = re.compile(f"{e(self.call_start)}(.*?){e(self.call_end)}", re.DOTALL)

    def _escape_partial(self, value: str) -> str:
        return json.dumps(value, ensure_ascii=False)[1:-1]

    def _partial_value(self, raw: str) -> str:
        # A value's end marker may be on its way: hold back its beginning.
        return raw[: len(raw) - tag_overlap(raw, self.value_end)]

    def _enter_guided(self, previous_text: str, current_text: str) -> str | None:
        """The content this delta adds before the block's start (a possible start at the end
        held back), and the block text it adds, buffered (vLLM's guided path: text held back
        that turns out not to start the block is not sent)."""
        marker = self.calls_start
        at = current_text.find(marker)
        if at == -1:
            safe = len(current_text) - tag_overlap(current_text, marker)
            return current_text[len(previous_text) : safe] or None
        content = current_text[len(previous_text) : at] or None
        body = at + len(marker)
        self._buffer += current_text[body + max(len(previous_text) - body, 0) :]
        return content

    def _strict_calls(self, text: str) -> list[tuple[str, str]]:
        start, end = text.find(self.calls_start), text.find(self.calls_end)
        if start == -1 or end == -1 or end < start:
            raise ValueError("malformed tool block")
        block = text[start + len(self.calls_start) : end]
        opened = block.count(self.call_start)
        bodies = self._call.findall(block)
        if opened != block.count(self.call_end) or opened != len(bodies):
            raise ValueError("malformed tool call")
        calls = []
        for body in bodies:
            at = body.find(self.key_start)
            name = body.strip() if at == -1 else body[:at].strip()
            args = "" if at == -1 else body[at:].strip()
            if not name:
                raise ValueError("a call without a name")
            if args.count(self.key_start) != args.count(self.key_end) or args.count(
                self.value_start
            ) != args.count(self.value_end):
                raise ValueError("unbalanced argument markers")
            if self._pairs.sub("", args).strip():
                raise ValueError("text between arguments")
            calls.append((name, self._arguments(args, name)))
        if not calls:
            raise ValueError("no call")
        return calls

    def extract(self, text: str) -> ExtractedToolCalls:
        """The calls of a well-formed block, and the text before it as content."""
        if self.calls_start not in text:
            return ExtractedToolCalls(False, content=text)
        try:
            calls = self._strict_calls(text)
        except Exception:
            return ExtractedToolCalls(False, content=text)
        content = text[: text.find(self.calls_start)]
        return ExtractedToolCalls(True, calls, content or None)

    def stream(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> OutputDelta | None:
        """One step of the buffered state machine; one delta may carry several calls. Under a
        structural tag (:attr:`guided`) the block's start is found in the text."""
        if self.guided:
            content = self._enter_guided(previous_text, current_text)
            if self.calls_start not in current_text:
                return OutputDelta(content=content) if content else None
        elif self.calls_start_id not in current_ids:
            return OutputDelta(content=delta_text)
        else:
            content = self._enter_calls(delta_text)
        self._close_if_done(current_text)
        calls: list[ToolCallDelta] = []
        while True:
            text = self._buffer
            start = text.find(self.call_start)
            if start == -1 and self._name is None:
                keep = tag_overlap(text, self.call_start)
                self._buffer = text[len(text) - keep :] if keep else ""
                break
            named: ToolCallDelta | None = None
            if self._name is None:
                key_at = text.find(self.key_start, start)
                end_at = text.find(self.call_end, start)
                if key_at == -1 and end_at == -1:
                    self._buffer = text[start:]
                    break
                name_end = key_at if key_at != -1 else end_at
                self._name = text[start + len(self.call_start) : name_end].strip()
                self._buffer = text[name_end:]
                self._current += 1
                named = ToolCallDelta(self._current, id=new_tool_call_id(), name=self._name)
                if self.call_end not in self._buffer:
                    calls.append(named)
                    break
            diff, _ = self._argument_diff()
            if named is not None:
                named.arguments = diff or None
                calls.append(named)
            elif diff:
                calls.append(ToolCallDelta(self._current, arguments=diff))
            if self._name is None and self._buffer.startswith(self.call_start):
                continue
            break
        if content is not None or calls:
            return OutputDelta(content=content, tool_calls=calls)
        return None
