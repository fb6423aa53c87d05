"""Pythonic tool calls: ``[get_weather(city='Paris'), get_time()]`` (Llama 3.2/4, OLMo 3).

``pythonic``, ``llama4_pythonic`` and ``olmo3`` follow vLLM 0.32's ``PythonicToolParser``,
``Llama4PythonicToolParser`` and ``Olmo3PythonicToolParser``: a whole output is a call list only
when all of it parses as a Python list of calls with literal keyword arguments; streaming closes
the open brackets and quotes of the text so far, parses that, and sends each call's name with its
first argument text, then argument text as it grows (the closing characters it added are
withheld).
"""

from __future__ import annotations

import ast
import json
import re
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from vllm_frontend.chat.parsed import OutputDelta, ToolCallDelta, new_tool_call_id
from vllm_frontend.chat.tools.base import ExtractedToolCalls, ToolParser

__all__ = [
    "Llama4PythonicToolParser",
    "Olmo3ToolParser",
    "PythonicToolParser",
    "call_list",
    "close_partial_python",
]


class _NotACall(ValueError):
    """The Python text is not a list of calls with literal arguments."""


_IDENT = re.compile(r"[a-zA-Z]\w*")
_WS = re.compile(r"\s*")
_CLOSE = re.compile(r"\)\s*\]")


def looks_like_call_list(text: str) -> bool:
    """Whether ``text`` starts like vLLM's pythonic call-list pattern (its ``TOOL_CALL_REGEX``
    matched at the start, DOTALL), decided in linear time.

    Once a call has a keyword argument, its ``.*`` may run to any later ``)`` + ``]``; calls
    without arguments are followed by ``]``, by another call (with or without whitespace), or,
    only before the first such space-separated call, by a comma."""
    if not text.startswith("["):
        return False
    pos, commas_allowed = 1, True
    while True:
        m = _IDENT.match(text, pos)
        if m is None or not text.startswith("(", m.end()):
            return False
        pos = m.end() + 1
        m = _IDENT.match(text, pos)
        if m is not None and text.startswith("=", m.end()):
            return _CLOSE.search(text, m.end() + 1) is not None
        if not text.startswith(")", pos):
            return False
        pos += 1
        if commas_allowed and text.startswith(",", pos):
            pos = _WS.match(text, pos + 1).end()  # type: ignore[union-attr]
            continue
        pos = _WS.match(text, pos).end()  # type: ignore[union-attr]
        if text.startswith("]", pos):
            return True
        commas_allowed = False


_JSON_NAMES: dict[str, Any] = {"null": None, "true": True, "false": False}


def _literal(node: ast.expr) -> Any:
    """The JSON value of an argument expression (vLLM's ``get_parameter_value``)."""
    if isinstance(node, ast.Constant):
        if node.value is None or isinstance(node.value, str | int | float):
            return node.value
        raise _NotACall("constant without a JSON form")
    if isinstance(node, ast.Dict):
        if not all(isinstance(k, ast.Constant) for k in node.keys):
            raise _NotACall("dict keys must be literals")
        return {k.value: _literal(v) for k, v in zip(node.keys, node.values, strict=False)}  # type: ignore[union-attr]
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return [_literal(v) for v in node.elts]
    if isinstance(node, ast.JoinedStr) and all(isinstance(p, ast.Constant) for p in node.values):
        return "".join(str(p.value) for p in node.values)  # type: ignore[attr-defined]
    if isinstance(node, ast.Name) and node.id in _JSON_NAMES:
        return _JSON_NAMES[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _literal(node.operand)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return -value if isinstance(node.op, ast.USub) else value
        raise _NotACall("unary operator on a non-number")
    raise _NotACall("arguments must be literals")


def _dotted_name(node: ast.expr) -> str:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        raise _NotACall("call target is not a (dotted) name")
    parts.append(node.id)
    return ".".join(reversed(parts))


def _call(node: ast.Call) -> tuple[str, str]:
    if not isinstance(node.func, ast.Name | ast.Attribute):
        raise _NotACall("call target is not a (dotted) name")
    name = _dotted_name(node.func)
    arguments = {kw.arg: _literal(kw.value) for kw in node.keywords}
    return name, json.dumps(arguments, ensure_ascii=False)


def call_list(module: ast.Module) -> list[tuple[str, str]]:
    """The ``(name, arguments JSON)`` calls of a parsed Python list of calls with literal
    keyword arguments (raises :class:`ValueError` when it is anything else)."""
    value = getattr(module.body[0], "value", None)
    if not isinstance(value, ast.List) or not all(isinstance(e, ast.Call) for e in value.elts):
        raise _NotACall("not a list of calls")
    return [_call(e) for e in value.elts]  # type: ignore[arg-type]


def _calls(source: str) -> list[tuple[str, str]]:
    """The calls of a Python list expression ``source`` (raises when it is anything else)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        module = ast.parse(source)
    return call_list(module)


def _escaped(text: str, index: int) -> bool:
    n = 0
    while index - n - 1 >= 0 and text[index - n - 1] == "\\":
        n += 1
    return n % 2 == 1


_CLOSER = {"[": "]", "(": ")", "{": "}", "'": "'", '"': '"'}


def close_partial_python(text: str) -> tuple[str, str] | None:
    """``text`` with its open brackets and quotes closed, and what was added (vLLM's
    ``make_valid_python``); ``None`` while the text is too cut off to read (mid-name, after
    ``=`` or ``:``, ...). Raises :class:`ValueError` on mismatched brackets."""
    stack: list[str] = []
    for i, ch in enumerate(text):
        if stack and stack[-1] in "'\"":
            if ch == stack[-1] and not _escaped(text, i):
                stack.pop()
            continue
        if ch in "[({":
            stack.append(ch)
        elif ch in "])}":
            if not stack or _CLOSER[stack.pop()] != ch:
                raise _NotACall(f"mismatched {ch!r}")
        elif ch in "'\"":
            stack.append(ch)
    text = text.rstrip()
    if text.endswith(("=", ":")):
        return None
    top = stack[-1] if stack else None
    if top == "{":
        before = text[: text.rfind("{")]
        if before.count(":") <= before.count(","):
            return None
    if top == "(":
        before = text[: text.rfind("(")]
        if before.count("=") <= before.count(","):
            return None
    if text.endswith(","):
        text = text[:-1]
    if top == "[" and not text.endswith(("[", ")")):
        return None
    added = "".join(_CLOSER[ch] for ch in reversed(stack))
    candidate = text + added
    try:
        module = ast.parse(candidate)
    except SyntaxError:
        return None
    if not module.body:
        return None
    if "}" in added and any(isinstance(n, ast.Set) for n in ast.walk(module)):
        return None  # a cut-off dict key closed into a set
    return candidate, added


class PythonicToolParser(ToolParser):
    """``pythonic``: the whole output is a Python list of calls, else plain content."""

    name = "pythonic"
    CALL_CLOSER = ")]"
    """What closes the last call of a complete list (while streaming)."""

    def __init__(self, vocab: Mapping[str, int], tools: Sequence[Mapping[str, Any]] = ()) -> None:
        """See :class:`ToolParser`."""
        super().__init__(vocab, tools)
        self._current = -1

    def _whole_source(self, text: str) -> tuple[str, str]:
        """The call list to read in a whole output, and the content if it is none."""
        return text, text

    def _listed(self, source: str) -> str:
        """The streamed ``source`` (brackets closed) as a Python list expression."""
        return source

    def extract(self, text: str) -> ExtractedToolCalls:
        """All calls, or none (with the text as content) unless all of it parses."""
        source, content = self._whole_source(text)
        if not looks_like_call_list(source):
            return ExtractedToolCalls(False, content=content)
        try:
            return ExtractedToolCalls(True, _calls(source), None)
        except Exception:
            return ExtractedToolCalls(False, content=content)

    def _stream_text(self, current_text: str) -> str | None:
        """The text to read as calls so far, or ``None`` for plain content."""
        return current_text if current_text.startswith("[") else None

    def stream(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_ids: Sequence[int],
        current_ids: Sequence[int],
        delta_ids: Sequence[int],
    ) -> OutputDelta | None:
        """Parse the closed-off text so far and send what each call gained."""
        text = self._stream_text(current_text)
        if text is None:
            return OutputDelta(content=delta_text)
        try:
            return self._step(text)
        except Exception:
            return None  # vLLM skips the chunk (state changes made so far stay)

    def _step(self, text: str) -> OutputDelta | None:
        closed = close_partial_python(text)
        if closed is None:
            return None
        source, added = closed
        deltas = self._call_deltas(_calls(self._listed(source)), added)
        if deltas:
            return OutputDelta(tool_calls=deltas)
        if not added and self._current > 0:
            return OutputDelta(content="")
        return None

    def _call_deltas(self, calls: list[tuple[str, str]], added: str) -> list[ToolCallDelta]:
        """What the calls parsed so far add to what was sent (``added``: the closers the
        partial text needed, withheld from the last call's arguments)."""
        closer = self.CALL_CLOSER
        deltas: list[ToolCallDelta] = []
        for index, (name, arguments) in enumerate(calls):
            if index < self._current:
                continue
            self._current = index
            if len(self.streamed_args) == index:
                self.streamed_args.append("")
            complete = index < len(calls) - 1 or closer not in added
            if complete:
                self._current += 1
                withheld = ""
            else:
                cut = len(added) - len(closer)
                withheld = added[:cut] + ("}" if added[cut] == ")" else "")
            withheld = withheld.replace("'", '"')
            if withheld:
                if not arguments.endswith(withheld):
                    raise _NotACall("arguments do not end with the withheld closers")
                arguments = arguments[: -len(withheld)]
            sent = self.streamed_args[index]
            if not sent:
                deltas.append(ToolCallDelta(index, new_tool_call_id(), name, arguments))
                self.streamed_args[index] += arguments
            elif new := arguments[len(sent) :]:
                deltas.append(ToolCallDelta(index, arguments=new))
                self.streamed_args[index] += new
        if deltas and not self.prev_calls:
            # vLLM marks "a call was streamed" with this placeholder; the finish then appends
            # whatever of "{}" the last call's sent text is a proper prefix of.
            self.prev_calls = [{"arguments": {}}]
        return deltas


class Llama4PythonicToolParser(PythonicToolParser):
    """``llama4_pythonic``: :class:`PythonicToolParser` that also reads a call list wrapped in
    ``<|python_start|>`` … ``<|python_end|>``."""

    name = "llama4_pythonic"
    START = "<|python_start|>"
    END = "<|python_end|>"

    def _whole_source(self, text: str) -> tuple[str, str]:
        if text.startswith(self.START):
            text = text[len(self.START) :].replace(self.END, "")
        return text, text

    def _stream_text(self, current_text: str) -> str | None:
        if current_text.startswith(self.START):
            current_text = current_text[len(self.START) :]
        elif not current_text.startswith("["):
            return None
        if current_text.endswith(self.END):
            current_text = current_text[: current_text.rfind(self.END)]
        return current_text


class Olmo3ToolParser(PythonicToolParser):
    """``olmo3``: calls one per line, optionally inside ``<function_calls>`` …
    ``</function_calls>``; JSON ``null``/``true``/``false`` are accepted as values."""

    name = "olmo3"
    CALL_CLOSER = ")"
    START = "<function_calls>"
    END = "</function_calls>"
    _BLOCK = re.compile(r"<function_calls>(.*?)</function_calls>", re.DOTALL)

    def _whole_source(self, text: str) -> tuple[str, str]:
        source = text
        if m := self._BLOCK.search(text):
            source = m.group(1).strip()
        return self._listed(source), text

    def _listed(self, source: str) -> str:
        return "[" + ", ".join(line.strip() for line in source.splitlines() if line.strip()) + "]"

    def _stream_text(self, current_text: str) -> str | None:
        if not current_text.startswith("<"):
            return None
        if current_text.startswith(self.START):
            current_text = current_text[len(self.START) :]
        if current_text.endswith(self.END):
            current_text = current_text[: -len(self.END)]
        return current_text
