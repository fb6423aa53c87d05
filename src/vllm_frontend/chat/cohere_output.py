"""Cohere Command output (``cohere_command3`` / ``cohere_command4``): vLLM 0.32's
``CohereCommandParser`` (vllm/parser/cohere_command.py), which hands the whole output, reasoning,
answer, tool calls and citations, to Cohere's ``cohere_melody`` filter (the library vLLM uses,
imported only when these parsers are configured), and folds the request's tools and JSON schema
into a ``structural_tag`` for Command A models.

Streaming feeds each delta's text to one filter (flushed at the end); a whole output goes to
another. Tool calls count unless the tool choice is ``none`` or no tool parser is configured;
streamed citations ride on the delta (``citations``, sources unresolved, as on vLLM's OpenAI
routes). A request with tools gets vLLM's tool-call tag too: a grammar of the tools' JSON schemas
(chat/cohere_grammar.py, converted by xgrammar's native library: 501 without it).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from vllm_frontend.chat.cohere_grammar import cohere_tool_grammar, cohere_tools
from vllm_frontend.chat.errors import ChatError
from vllm_frontend.chat.parsed import (
    OutputDelta,
    ParsedOutput,
    ToolCall,
    ToolCallDelta,
    new_tool_call_id,
)
from vllm_frontend.chat.tool_choice import ForcedToolChoice, forced_tool_choice

__all__ = ["CohereOutputParser", "cohere_structural_tag", "melody"]

START_THINKING = "<|START_THINKING|>"
END_THINKING = "<|END_THINKING|>"
CHATBOT = "<|CHATBOT_TOKEN|>"

_TOOLS_TAG = ("<|START_ACTION|>", "<|END_ACTION|>")
_RESPONSE_TAG = ("<|START_RESPONSE|>", "<|END_RESPONSE|>")
_TEXT_TAG = ("<|START_TEXT|>", "<|END_TEXT|>")
_JSON_TAGS: dict[str, tuple[tuple[str, str], ...]] = {
    "Cohere2ForCausalLM": (_RESPONSE_TAG,),
    "Cohere2VisionForConditionalGeneration": (_RESPONSE_TAG, _TEXT_TAG),
    "Cohere2MoeForCausalLM": (_RESPONSE_TAG, _TEXT_TAG),
}


@functools.cache
def melody() -> Any:
    """The ``cohere_melody`` module, with vLLM's message when it is missing."""
    try:
        import cohere_melody
    except ImportError as e:
        raise ImportError(
            "The Cohere Command parser requires the `cohere_melody` package. "
            "Install it with:\n    pip install 'cohere-melody>=0.14.0'"
        ) from e
    return cohere_melody


class CohereOutputParser:
    """Parses one choice of a Cohere Command output; the interface of
    ``chat.output_parser.OutputParser``."""

    null_later_names = False

    def __init__(
        self,
        preset: str,
        *,
        tools_allowed: bool,
        tool_choice: Any,
        request_tools: bool,
        include_reasoning: bool,
        thinking_ids: tuple[int | None, int | None],
    ) -> None:
        """``preset``: melody's filter preset (``cmd3``/``cmd4``); ``tools_allowed``: a tool
        parser is configured and the choice is not ``none``; ``thinking_ids``: the ids of
        ``<|START_THINKING|>`` and ``<|END_THINKING|>`` (reasoning tokens are counted
        between them)."""
        self._preset = preset
        self._tools_allowed = tools_allowed
        self._tool_choice = tool_choice
        self._request_tools = request_tools
        self._include_reasoning = include_reasoning
        self._start_id, self._end_id = thinking_ids
        self._stream_filter: Any = None
        self._pending_ids: dict[int, str] = {}
        self._output_ids: list[int] = []
        self.tool_calls_streamed = False
        """Whether any tool-call piece has been streamed (finish reason ``tool_calls``)."""
        self.forced_choice: ForcedToolChoice | None = (
            forced_tool_choice(tool_choice) if tools_allowed else None
        )
        """The request's ``"required"`` / named tool choice."""
        self.forced = None

    def _filter(self) -> Any:
        m = melody()
        return m.PyFilter(getattr(m.PyFilterOptions(), self._preset)())

    # -- streaming ---------------------------------------------------------------------------

    def feed(
        self,
        delta_text: str,
        delta_token_ids: Sequence[int],
        prompt_token_ids: Sequence[int] | None,
        *,
        finished: bool,
    ) -> OutputDelta | None:
        """What one engine update adds (melody's filter fed the delta's text)."""
        if self._stream_filter is None:
            self._stream_filter = self._filter()
        self._output_ids += delta_token_ids
        results = [self._stream_filter.write_decoded(delta_text)]
        if finished:
            results.append(self._stream_filter.flush_partials())
        content = _join(r.content for r in results)
        reasoning = _join(r.reasoning for r in results) if self._include_reasoning else None
        calls: list[ToolCallDelta] = []
        citations: list[dict[str, Any]] = []
        for result in results:
            if result.tool_calls and self._tools_allowed:
                calls += self._call_deltas(result.tool_calls)
            citations += [_citation(c) for c in result.citations]
        if not (content or reasoning or calls or citations):
            return None
        if calls:
            self.tool_calls_streamed = True
        return OutputDelta(
            content=content, reasoning=reasoning, tool_calls=calls, citations=citations or None
        )

    def _call_deltas(self, calls: Sequence[Any]) -> list[ToolCallDelta]:
        out: list[ToolCallDelta] = []
        for tc in calls:
            name, arguments = tc.name or None, tc.arguments or None
            if tc.id:
                self._pending_ids[tc.index] = tc.id
            if name is None and arguments is None:
                continue
            delta = ToolCallDelta(tc.index, name=name, arguments=arguments)
            if name is not None:
                delta.id = tc.id or self._pending_ids.pop(tc.index, None)
                delta.typed = True
            out.append(delta)
        return out

    def streamed_reasoning_tokens(self) -> int:
        """Reasoning tokens of the streamed output."""
        return self.count_reasoning_tokens(self._output_ids)

    # -- whole output ------------------------------------------------------------------------

    def parse(self, text: str, token_ids: Sequence[int] = ()) -> ParsedOutput:
        """A finished output through melody's filter at once."""
        result = self._filter().process_full_text(text)
        out = ParsedOutput(reasoning=result.reasoning, content=result.content)
        calls = result.tool_calls if self._tools_allowed else []
        choice = self._tool_choice
        auto = choice == "auto" and self._request_tools
        if calls and (self.forced_choice is not None or auto):
            out.tool_calls = [
                ToolCall(tc.id or new_tool_call_id(), tc.name, tc.arguments) for tc in calls
            ]
            out.tools_called = auto
        return out

    def count_reasoning_tokens(self, token_ids: Sequence[int]) -> int:
        """Tokens between ``<|START_THINKING|>`` and ``<|END_THINKING|>`` (nested counted
        once)."""
        count = depth = 0
        for tid in token_ids:
            if tid == self._start_id:
                depth += 1
            elif tid == self._end_id:
                depth = max(0, depth - 1)
            elif depth > 0:
                count += 1
        return count


def _join(parts: Any) -> str | None:
    present = [p for p in parts if p is not None]
    return "".join(present) if present else None


def _citation(c: Any) -> dict[str, Any]:
    # vLLM's Citation as its chat stream dumps it (sources unresolved on the OpenAI routes)
    return {
        "start": c.start_index,
        "end": c.end_index,
        "text": c.text,
        "sources": [],
        "type": "THINKING_CONTENT" if c.is_thinking else "TEXT_CONTENT",
    }


# -- the request's structural tag --------------------------------------------------------------


def _as_dict(value: Any) -> dict[str, Any] | None:
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except (TypeError, json.JSONDecodeError):
            return None
        return parsed if isinstance(parsed, dict) else None
    return None


def _unwrap(candidate: Any) -> dict[str, Any] | None:
    value = _as_dict(candidate)
    if value is None:
        return None
    nested = value.get("schema")
    return nested if isinstance(nested, dict) else value


def _from_wrapper(wrapper: Mapping[str, Any]) -> dict[str, Any] | None:
    for key in ("schema", "json_schema"):
        out = _unwrap(wrapper.get(key))
        if out is not None:
            return out
    return dict(wrapper)


def _schema_of_response_format(rf: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if rf is None:
        return None
    kind = rf.get("type")
    if kind == "json_object":
        return {"type": "object"}
    if kind != "json_schema":
        return None
    # (vLLM's JsonSchemaResponseFormat, dumped by alias: its schema is under "schema")
    wrapper = rf.get("json_schema")
    if not isinstance(wrapper, Mapping):
        return None
    return _unwrap(wrapper.get("schema"))


def _schema_of_structured_outputs(so: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if so is None:
        return None
    if so.get("json_object"):
        return {"type": "object"}
    raw = so.get("json")
    if raw is None:
        return None
    if isinstance(raw, str):
        if not raw.strip():
            raise ChatError("structured_outputs.json cannot be empty.")
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as e:
            raise ChatError("structured_outputs.json must be valid JSON.") from e
        if not isinstance(raw, dict):
            raise ChatError("structured_outputs.json must decode to a JSON object.")
    if isinstance(raw, Mapping):
        return _from_wrapper(raw) or dict(raw)
    raise ChatError(f"structured_outputs.json has unsupported type {type(raw).__name__}.")


def cohere_structural_tag(
    architecture: str | None,
    tools: Sequence[Mapping[str, Any]] | None,
    response_format: Mapping[str, Any] | None,
    structured_outputs: Mapping[str, Any] | None,
) -> str | None:
    """The ``structural_tag`` vLLM's Cohere parser folds the request's JSON schema and tools
    into (``None``: the request stays as it is). Raises :class:`ChatError` where vLLM's
    ``ValueError`` answers 400, :class:`NotImplementedError` without xgrammar's library."""
    if structured_outputs is not None and structured_outputs.get("structural_tag"):
        return None
    if response_format is not None and response_format.get("type") == "structural_tag":
        return None
    schema = _schema_of_response_format(response_format)
    if schema is None:
        schema = _schema_of_structured_outputs(structured_outputs)
    if schema is None and not tools:
        return None
    if architecture is None:
        return None
    json_tags = _JSON_TAGS.get(architecture)
    if json_tags is None:
        raise ChatError(
            "Failed to build structural_tag guided decoding constraints from this request's "
            "JSON schema and/or tools. The configured model architecture "
            f"({architecture!r}) does not support Cohere command structural tags, or the "
            "schema cannot be expressed in that format."
        )
    tags: list[dict[str, Any]] = []
    if schema is not None:
        # One tag per JSON wrapper of the architecture (the tool tag follows them).
        content = {"type": "json_schema", "json_schema": schema}
        tags = [{"begin": begin, "content": content, "end": end} for begin, end in json_tags]
    if tools:
        parsed = cohere_tools(tools)
        if not parsed:
            raise ChatError(
                "No valid tool definitions could be parsed from the request for structural "
                "tag conversion."
            )
        grammar = {"type": "grammar", "grammar": cohere_tool_grammar(parsed)}
        tags.append({"begin": _TOOLS_TAG[0], "content": grammar, "end": _TOOLS_TAG[1]})
    triggers = [t["begin"] for t in tags]
    return json.dumps(
        {
            "type": "structural_tag",
            "format": {"type": "triggered_tags", "triggers": triggers, "tags": tags},
        }
    )
