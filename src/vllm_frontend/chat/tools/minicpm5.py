"""MiniCPM5 tool calls, as vLLM 0.32's ``minicpm5`` parser reads them:
``<function name="NAME"><param name="KEY">value</param>…</function>`` blocks anywhere in the
output, read as XML (the standard library's parser, which vLLM uses when lxml is not installed)
or, when that fails, by pattern. A call counts only for one of the request's tools, with its
required parameters and no unknown or repeated one (a few MiniCPM5 alias names and a
``properties``/``arguments`` wrapper are mapped onto the tools); values are typed by the schema.
Text outside calls is content; after a ``</think>`` only what follows it is. Streaming sends a
call's name when its block opens, its arguments as the parameters close, the rest at its end.
"""

from __future__ import annotations

import ast
import json
import re
import uuid
import warnings
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from typing import Any

from vllm_frontend.chat.parsed import OutputDelta, ToolCallDelta, new_tool_call_id
from vllm_frontend.chat.tools.base import ExtractedToolCalls, ToolParser
from vllm_frontend.chat.tools.base import tag_overlap as _tag_overlap

__all__ = ["MiniCPM5ToolParser"]

START, END = "<function", "</function>"
_NAME = re.compile(r"<function\s+name=['\"]([^'\"]+)['\"][^>]*>")
_PARAM = re.compile(r"<param\s+name=['\"]([^'\"]+)['\"]>([\s\S]*?)</param>", re.DOTALL)
_NAMELESS_PARAM = re.compile(r"<param(?![^>]*\bname=)[^>]*>", re.DOTALL)
_BLOCK = re.compile(r"<function.*?</function>", re.DOTALL)
_CDATA = ("<![CDATA[", "]]>")


def _normalized(text: str) -> str:
    """Byte-level pieces (``Ġ`` space, ``Ċ`` newline) and glued tag names written out."""
    if (
        "\u0120" not in text
        and "\u010a" not in text
        and "<functionname=" not in text
        and "<paramname=" not in text
    ):
        return text
    text = text.replace("\u0120", " ").replace("\u010a", "\n")
    return text.replace("<functionname=", "<function name=").replace("<paramname=", "<param name=")


def _after_thinking(text: str) -> str:
    if "</think>" not in text:
        return text
    visible = text.rsplit("</think>", 1)[-1].lstrip()
    return visible or text


def _value(text: str) -> tuple[Any, bool]:
    """(JSON, else Python literal, value of ``text``; whether it parsed)."""
    try:
        try:
            return json.loads(text), True
        except json.JSONDecodeError:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", SyntaxWarning)
                return ast.literal_eval(text), True
    except Exception:
        return text, False


class _Tools:
    """The request's tools as the parser looks them up."""

    def __init__(self, tools: Sequence[Mapping[str, Any]]) -> None:
        self.by_name: dict[str, Mapping[str, Any]] = {}
        self.allowed: dict[str, set[str]] = {}
        self.required: dict[str, set[str]] = {}
        for tool in tools:
            function = tool.get("function") or {}
            name = function.get("name")
            if not name:
                continue
            self.by_name[name] = function
            params = function.get("parameters") or {}
            props = params.get("properties", {}) if isinstance(params, dict) else {}
            self.allowed[name] = set(props.keys())
            required = params.get("required", []) if isinstance(params, dict) else []
            try:
                self.required[name] = set(required)
            except TypeError:
                self.required[name] = set()

    def kind(self, tool: str, key: str) -> Any:
        function = self.by_name.get(tool)
        if function is None or function.get("parameters") is None:
            return None
        props = function["parameters"].get("properties", {})
        return props[key].get("type") if key in props else None

    def typed(self, tool: str, key: str, value: Any) -> Any:
        if self.kind(tool, key) == "string":
            return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        if isinstance(value, str):
            return _value(value)[0]
        return value

    def add(self, tool: str, key: str, text: str, args: dict[str, Any], seen: set[str]) -> bool:
        """Add one parameter; ``False`` when it breaks the tool's schema."""
        allowed = self.allowed.get(tool, set())
        if key in ("properties", "arguments") and allowed and key not in allowed:
            wrapped, ok = _value(text)
            if not ok or not isinstance(wrapped, dict):
                return False
            added = False
            for inner, value in wrapped.items():
                if inner not in allowed:
                    continue
                if inner in seen:
                    return False
                seen.add(inner)
                args[inner] = self.typed(tool, inner, value)
                added = True
            return added
        if allowed and key not in allowed:
            return True
        if key in seen:
            return False
        seen.add(key)
        args[key] = self.typed(tool, key, text)
        return True


def _first(args: Mapping[str, Any], *keys: str) -> Any:
    for key in keys[:-1]:
        if value := args.get(key):
            return value
    return args.get(keys[-1])


def _alias(name: str, args: dict[str, Any], names: set[str]) -> tuple[str, dict[str, Any]]:
    """MiniCPM5's usual alias calls mapped onto the tools the request has."""
    if name in names:
        return name, args
    phone = _first(args, "phone_number", "phone")
    if name == "get_details_by_phone" and "get_customer_by_phone" in names and phone is not None:
        return "get_customer_by_phone", {"phone_number": phone}
    if name == "get_details_by_name" and "get_customer_by_name" in names:
        full_name = _first(args, "full_name", "name")
        dob = _first(args, "date_of_birth", "dob")
        mapped: dict[str, Any] = {}
        if full_name is not None:
            mapped["full_name"] = full_name
        if dob is not None:
            mapped["date_of_birth"] = mapped["dob"] = dob
        if mapped:
            return "get_customer_by_name", mapped
    line = _first(args, "line_id", "id")
    by_id = ("get_line_details", "get_line_status", "get_roaming_status")
    if name in by_id and "get_details_by_id" in names and line is not None:
        return "get_details_by_id", {"id": line}
    plan = _first(args, "plan_id", "id")
    if name == "get_plan_details" and "get_details_by_id" in names and plan is not None:
        return "get_details_by_id", {"id": plan}
    roaming = {"enable_roaming": True, "disable_roaming": False}
    if name in roaming and "toggle_roaming" in names and line is not None:
        return "toggle_roaming", {"line_id": line, "enabled": roaming[name]}
    if name in ("add_refueled_data", "add_data_to_line") and "refuel_data" in names:
        amount = _first(args, "amount_gb", "gb", "gb_amount", "amount")
        mapped = {}
        if "customer_id" in args:
            mapped["customer_id"] = args["customer_id"]
        if line is not None:
            mapped["line_id"] = line
        if amount is not None:
            mapped["amount_gb"] = amount
        if mapped:
            return "refuel_data", mapped
    return name, args


def _unwrapped(text: str) -> str:
    if text.startswith(_CDATA[0]) and text.endswith(_CDATA[1]):
        return text[len(_CDATA[0]) : -len(_CDATA[1])]
    return text.strip()


def _call(block: str, tools: _Tools) -> tuple[str, dict[str, Any]] | None:
    """A block's valid call, if it is one: read as XML, else (or without a name) by pattern;
    what the XML reading found stays when the pattern reading follows, as in vLLM."""
    name: str | None = None
    args: dict[str, Any] = {}
    ok = invalid = False
    try:
        root = ET.fromstring(block)
        node = root if root.tag == "function" else root.find("function")
        if node is not None:
            name = (node.attrib.get("name") or "").strip()
            params = list(node.findall("param"))
            wrapper = node.find("arguments")
            if wrapper is not None and not params:
                params = list(wrapper.findall("param"))
            seen: set[str] = set()
            broken = False
            for param in params:
                key = param.attrib.get("name")
                if not key or not tools.add(name or "", key, param.text or "", args, seen):
                    broken = True
                    break
            if broken:
                args.clear()
                invalid = True
        ok = bool(name)
    except Exception:
        ok = False
    if not ok:
        try:
            if m := _NAME.search(block):
                name = (m.group(1) or "").strip()
            broken = bool(_NAMELESS_PARAM.search(block))
            seen = set()
            for p in _PARAM.finditer(block):
                text = _unwrapped(p.group(2) or "")
                if not tools.add(name or "", p.group(1).strip(), text, args, seen):
                    broken = True
                    break
            if broken:
                args.clear()
                invalid = True
            ok = bool(name)
        except Exception:
            ok = False
    if not name or invalid:
        return None
    names = set(tools.by_name)
    name, args = _alias(name, args, names)
    if name not in names:
        return None
    required = tools.required.get(name, set())
    if required and not required.issubset(args.keys()):
        return None
    return (name, args) if ok else None


def _open_params(block: str, name: str, tools: _Tools) -> dict[str, Any]:
    """The closed parameters of a block still being written."""
    args: dict[str, Any] = {}
    seen: set[str] = set()
    for p in _PARAM.finditer(block):
        key = p.group(1).strip()
        if not key or key in seen:
            continue
        tools.add(name, key, _unwrapped(p.group(2) or ""), args, seen)
    return args


def _args_diff(sent: str, args: str, complete: bool) -> str | None:
    """What ``args`` adds to the ``sent`` text (its closing brace withheld until complete)."""
    if sent == "{}":
        sent = ""
    target = args if complete or not args.endswith("}") else args[:-1]
    if not sent:
        return target or None
    if target == sent:
        return None
    if target.startswith(sent):
        return target[len(sent) :] or None
    if sent.endswith("}") and target.startswith(sent[:-1]):
        return target[len(sent) - 1 :] or None
    return None


class MiniCPM5ToolParser(ToolParser):
    """``minicpm5``."""

    name = "minicpm5"
    needs_special_tokens = True

    def __init__(self, vocab: Mapping[str, int], tools: Sequence[Mapping[str, Any]] = ()) -> None:
        """See :class:`ToolParser`."""
        super().__init__(vocab, tools)
        self._done = 0
        self._current = -1
        self._name_sent = False

    def extract(self, text: str) -> ExtractedToolCalls:
        """Every valid call block; without one, the rest of the text is content."""
        text = _normalized(text)
        if START not in text:
            return ExtractedToolCalls(False, content=_after_thinking(text))
        tools = _Tools(self.tools)
        try:
            calls: list[tuple[str, str]] = []
            rest: list[str] = []
            last = 0
            for m in _BLOCK.finditer(text):
                if m.start() > last:
                    rest.append(text[last : m.start()])
                if (call := _call(m.group(0), tools)) is not None:
                    calls.append((call[0], json.dumps(call[1], ensure_ascii=False)))
                else:
                    rest.append(m.group(0))
                last = m.end()
            if last < len(text):
                rest.append(text[last:])
            content = _after_thinking("".join(rest).strip())
        except Exception:
            return ExtractedToolCalls(False, content=text)
        ids = [f"call_{uuid.uuid4().hex}" for _ in calls]
        return ExtractedToolCalls(bool(calls), calls, None if calls else content, ids=ids)

    # -- streaming ---------------------------------------------------------------------------

    def _args_piece(self, index: int, args: str, complete: bool) -> OutputDelta | None:
        sent = self.streamed_args[index] if index < len(self.streamed_args) else ""
        diff = _args_diff(sent, args, complete)
        if not diff:
            return None
        while len(self.streamed_args) <= index:
            self.streamed_args.append("")
        self.streamed_args[index] = sent + diff
        return OutputDelta(tool_calls=[ToolCallDelta(index, arguments=diff)])

    def _grow(self) -> int:
        self._current += 1
        while len(self.streamed_args) <= self._current:
            self.streamed_args.append("")
        while len(self.prev_calls) <= self._current:
            self.prev_calls.append({})
        return self._current

    def _closed_block(self, block: str) -> OutputDelta | None:
        call = _call(block, _Tools(self.tools))
        if call is None:
            return OutputDelta(content=block)
        name, args = call
        dumped = json.dumps(args, ensure_ascii=False)
        if not self._name_sent:
            i = self._grow()
            self.streamed_args[i] = dumped
            self.prev_calls[i] = {"name": name, "arguments": args}
            return OutputDelta(
                tool_calls=[ToolCallDelta(i, id=new_tool_call_id(), name=name, arguments=dumped)]
            )
        i = self._current
        self.prev_calls[i]["arguments"] = args
        piece = self._args_piece(i, dumped, complete=True)
        self._name_sent = False
        return piece or OutputDelta(content="")

    def _open_block(self, block: str) -> OutputDelta | None:
        tools = _Tools(self.tools)
        if _NAMELESS_PARAM.search(block) or not (m := _NAME.search(block)):
            return None
        name = (m.group(1) or "").strip()
        if name not in tools.by_name:
            return None
        if not self._name_sent:
            i = self._grow()
            self._name_sent = True
            self.prev_calls[i] = {"name": name}
            return OutputDelta(tool_calls=[ToolCallDelta(i, id=new_tool_call_id(), name=name)])
        args = _open_params(block, name, tools)
        if not args:
            return None
        self.prev_calls[self._current]["arguments"] = args
        return self._args_piece(self._current, json.dumps(args, ensure_ascii=False), False)

    def stream(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> OutputDelta | None:
        """One step over the text not handled yet: at most one piece of content or call."""
        try:
            return self._step(previous_text, _normalized(current_text), delta_text)
        except Exception:
            return None

    def _step(self, previous_text: str, text: str, delta_text: str) -> OutputDelta | None:
        if not previous_text:
            self._done, self._current, self._name_sent = 0, -1, False
            self.prev_calls, self.streamed_args = [], []
        if START not in text:
            if self._done < len(text):
                content, self._done = text[self._done :], len(text)
                return OutputDelta(content=content) if content else None
            return None
        for m in _BLOCK.finditer(text):
            if m.end() <= self._done:
                continue
            if m.start() > self._done:
                gap, self._done = text[self._done : m.start()], m.start()
                return OutputDelta(content=gap) if gap else None
            piece = self._closed_block(m.group(0))
            self._done = m.end()
            if piece is not None:
                return piece
        rest = text[self._done :]
        if not rest:
            if not delta_text and self._current >= 0 and not self._name_sent:
                return OutputDelta(content="")
            return None
        at = rest.find(START)
        if at > 0:
            self._done += at
            return OutputDelta(content=rest[:at])
        if at == -1:
            if _tag_overlap(rest, START):
                return None
            self._done = len(text)
            return OutputDelta(content=rest)
        block = rest[at:]
        if END in block:
            end = block.rfind(END) + len(END)
            piece = self._closed_block(block[:end])
            self._done += at + end
            if piece is not None:
                return piece
            block = block[end:]
            if not block.strip():
                return None
            at = block.find(START)
            if at == -1:
                self._done = len(text)
                return OutputDelta(content=block) if block else None
            block = block[at:]
        return self._open_block(block)
