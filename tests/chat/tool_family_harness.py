"""Differential harness for tool-call parsers: ours against vLLM 0.32's, per delta.

A family's outputs are tokenized by the tiny Llama 3 tokenizer with the family's marker strings
added as single tokens, cut into engine updates, and fed to vLLM's composed parser
(``ParserManager.get_parser``, as its chat serving builds it) and to ours. Every delta a client
would receive is compared field for field (tool-call ids by format: they are random), and so is
the whole-output message. Only test modules marked ``oracle`` import this.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.support.hf_tokenizer import fresh_tokenizer
from vllm_frontend.chat.output_parser import OutputParsers, RequestToolOptions

ID = re.compile(r"chatcmpl-tool-[0-9a-f]{16}|call_(?:[0-9]+_)?[0-9a-f]{16}|call_[0-9a-f]{32}")
MISTRAL_ID = re.compile(r"[A-Za-z0-9]{9}")
"""Mistral's ids: 9 random letters and digits."""
MODEL_ID = re.compile(r"functions\.[^:]*:[0-9]+|[0-9]+")
"""Ids the model writes itself (Kimi K2's, Cohere's ``tool_call_id``), compared as they are."""
"""Tool-call id formats (random ids are compared by format; xlam, hunyuan and minicpm5 make
their own)."""

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
            "required": ["city"],
        },
    },
}
TIME_TOOL = {
    "type": "function",
    "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}},
}
TOOLS = [WEATHER_TOOL, TIME_TOOL]


@functools.cache
def tokenizer(markers: tuple[str, ...], special: tuple[str, ...] = ()) -> Any:
    """The tiny model's tokenizer with ``markers`` as single (non-special) tokens and
    ``special`` as special tokens (as the family's real tokenizer has them)."""
    tok = fresh_tokenizer()
    if markers:
        tok.add_tokens(list(markers))
    if special:
        tok.add_special_tokens({"additional_special_tokens": list(special)})
    vocab = tok.get_vocab()
    # One read-only dict for every caller (neither vLLM's parsers nor ours change it): each
    # vLLM parser keeps the vocabulary it asked for, and a 128k-entry copy per parser made
    # tests/chat/test_engine_mistral.py alone grow its process by 5 GB.
    tok.get_vocab = lambda: vocab  # type: ignore[method-assign]
    return tok


def vllm_request(tools: list[dict[str, Any]] | None = TOOLS, **fields: Any) -> Any:
    """vLLM's validated chat request."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    if tools is not None:
        body["tools"] = tools
    body.update(fields)
    return ChatCompletionRequest.model_validate(body)


def options_of(req: Any) -> RequestToolOptions:
    """Our per-request options from vLLM's request object."""
    return RequestToolOptions(
        tools=bool(req.tools),
        tool_choice=(
            req.tool_choice
            if isinstance(req.tool_choice, str | type(None))
            else req.tool_choice.model_dump()
        ),
        include_reasoning=req.include_reasoning,
        chat_template_kwargs=req.chat_template_kwargs,
        tool_definitions=[t.model_dump() for t in req.tools or ()],
        request_chat_template_kwargs=req.chat_template_kwargs,
        logprobs=bool(req.logprobs),
        guided=req.structured_outputs is not None
        and req.structured_outputs.structural_tag is not None,
    )


@dataclass
class Message:
    """A whole-output message as the client sees it (ids checked, then dropped)."""

    content: str | None
    calls: list[tuple[str, str, str]] = field(default_factory=list)
    """(name, arguments, id shape) per call."""
    tools_called: bool = False
    reasoning: str | None = None


Event = tuple[str | None, str | None, tuple[tuple[int, str, str | None, str | None], ...]]
"""One streamed delta: content, reasoning, and per tool-call piece (index, id shape, name, args)."""


def written_keys(delta: Any) -> tuple[bool, bool] | None:
    """Whether our chunk for parser delta ``delta`` (None: no chunk) writes the ``content`` and
    ``reasoning`` keys: a key with a value, or one flagged as set to null."""
    if delta is None:
        return None
    return (
        delta.content is not None or delta.content_set,
        delta.reasoning is not None or delta.reasoning_hidden,
    )


def _id_shape(call_id: str | None) -> str:
    """A tool-call id with its random hex digits masked (``""`` for none)."""
    if call_id is None:
        return ""
    if MODEL_ID.fullmatch(call_id):
        return call_id
    if MISTRAL_ID.fullmatch(call_id):
        return "mistral#"
    assert ID.fullmatch(call_id), call_id
    if call_id.startswith("call_") and len(call_id) == len("call_") + 32:
        return "call_#"  # a whole random uuid (minicpm5)
    return call_id[:-16] + "#"


@dataclass
class Family:
    """A parser name and the marker strings its outputs use."""

    parser: str
    markers: tuple[str, ...] = ()
    reasoning: str | None = None
    """A ``--reasoning-parser`` to run in front of the tool parser."""
    special: tuple[str, ...] = ()
    """Marker strings that are special tokens of the family's tokenizer."""
    prompt_end: tuple[str, ...] = ()
    """Tokens the prompt ends with (its ids are ``[1]`` and these)."""

    @property
    def label(self) -> str:
        """The parser name, with ``+`` and the reasoning parser when one runs (a test id)."""
        return f"{self.parser}+{self.reasoning}" if self.reasoning else self.parser

    @property
    def prompt_ids(self) -> list[int]:
        """The prompt's token ids."""
        return [1, *self.tok.convert_tokens_to_ids(list(self.prompt_end))]

    @property
    def tok(self) -> Any:
        """The family's tokenizer."""
        return tokenizer(self.markers, self.special)

    @functools.cached_property
    def vllm_cls(self) -> Any:
        """vLLM's composed parser class for ``--tool-call-parser``."""
        from vllm.parser import ParserManager

        return ParserManager.get_parser(
            tool_parser_name=self.parser,
            reasoning_parser_name=self.reasoning,
            enable_auto_tools=True,
            tokenizer=self.tok,
        )

    @functools.cached_property
    def ours(self) -> OutputParsers:
        """Our parsers configured like ``--enable-auto-tool-choice --tool-call-parser``."""
        tok = self.tok
        return OutputParsers(
            tok.get_vocab(),
            tool_call_parser=self.parser,
            reasoning_parser=self.reasoning,
            enable_auto_tool_choice=True,
            special_tokens=dict(zip(tok.all_special_tokens, tok.all_special_ids, strict=True)),
            decode=functools.partial(tok.decode, skip_special_tokens=False),
            encode=functools.partial(tok.encode, add_special_tokens=False),
        )

    def vllm_parser(self, req: Any) -> Any:
        """A fresh vLLM parser for one choice.

        vLLM turns ``supports_required_and_named`` off for parsers with a structural-tag model
        while ``VLLM_ENFORCE_STRICT_TOOL_CALLING`` is on (its default), and so does this
        frontend (``OutputParsers.forces_with_json``); the reference instance gets our value,
        so that a run with the variable off compares the JSON path."""
        parser = self.vllm_cls(
            self.tok, req.tools, chat_template_kwargs=req.chat_template_kwargs or {}
        )
        tool = parser.tool_parser
        ours = self.ours.tool_cls
        if tool is not None and ours is not None and type(tool).structural_tag_model:
            tool.supports_required_and_named = self.ours.forces_with_json
        return parser

    # -- whole output ------------------------------------------------------------------------

    def vllm_full(self, text: str, req: Any) -> Message:
        """vLLM's message for a finished ``text``, as its chat serving builds it: calls for
        ``auto`` (which then finish with ``tool_calls``), and for ``required`` or a named
        function (content at least ``""``)."""
        ids = self.tok.encode(text, add_special_tokens=False)
        reasoning, content, calls = self.vllm_parser(req).parse(
            text, req, enable_auto_tools=True, model_output_token_ids=ids
        )
        if not req.include_reasoning:
            reasoning = None
        forced = req.tool_choice == "required" or not isinstance(req.tool_choice, str | None)
        if forced or (req.tools and req.tool_choice == "auto" and calls):
            ids = [_id_shape(c.id or "chatcmpl-tool-0123456789abcdef") for c in calls or ()]
            out = [(c.name, c.arguments, i) for c, i in zip(calls or (), ids, strict=True)]
            return Message((content or "") if forced else content, out, not forced, reasoning)
        return Message(content, reasoning=reasoning)

    def ours_full(self, text: str, req: Any) -> Message:
        """Our message for a finished ``text`` (as our chat route builds it)."""
        parser = self.ours.for_request(options_of(req))
        parsed = parser.parse(text)
        calls = [(c.name, c.arguments, _id_shape(c.id)) for c in parsed.tool_calls]
        reasoning = parsed.reasoning if req.include_reasoning else None
        content = parsed.content
        if parser.forced_choice is not None:
            content = content or ""
        return Message(content, calls, parsed.tools_called, reasoning)

    # -- streaming ---------------------------------------------------------------------------

    def deltas(self, text: str, cuts: list[int]) -> list[tuple[str, list[int]]]:
        """``text`` as engine updates cut at token positions ``cuts``, with their text."""
        tok = self.tok
        ids = tok.encode(text, add_special_tokens=False)
        bounds = [*sorted({c for c in cuts if 0 < c < len(ids)}), len(ids)]
        out: list[tuple[str, list[int]]] = []
        start, sent = 0, ""
        for end in bounds:
            decoded = tok.decode(ids[:end], skip_special_tokens=False)
            if not decoded.startswith(sent) or "\ufffd" in decoded[len(sent) :]:
                continue  # mid-character: the detokenizer holds these bytes back
            out.append((decoded[len(sent) :], ids[start:end]))
            sent, start = decoded, end
        assert sent == text, "test texts must round-trip through the tokenizer"
        return out

    def vllm_stream(self, deltas: list[tuple[str, list[int]]], req: Any) -> list[Event]:
        """The deltas vLLM's streaming path sends."""
        parser = self.vllm_parser(req)
        events: list[Event] = []
        for k, (text, ids) in enumerate(deltas):
            msg = parser.parse_delta(
                text,
                list(ids),
                req,
                prompt_token_ids=self.prompt_ids,
                finished=k == len(deltas) - 1,
            )
            if msg is None:
                continue
            calls = []
            for tc in msg.tool_calls:
                fn = tc.function
                calls.append(
                    (
                        tc.index,
                        _id_shape(tc.id),
                        fn.name if fn else None,
                        fn.arguments if fn else None,
                    )
                )
            events.append((msg.content, msg.reasoning, tuple(calls)))
        return events

    def ours_stream(self, deltas: list[tuple[str, list[int]]], req: Any) -> list[Event]:
        """The deltas our streaming path sends."""
        parser = self.ours.for_request(options_of(req))
        events: list[Event] = []
        for k, (text, ids) in enumerate(deltas):
            msg = parser.feed(text, ids, self.prompt_ids, finished=k == len(deltas) - 1)
            if msg is None:
                continue
            calls = []
            for tc in msg.tool_calls:
                calls.append((tc.index, _id_shape(tc.id), tc.name, tc.arguments))
            events.append((msg.content, msg.reasoning, tuple(calls)))
        return events

    def written_keys(
        self, text: str, req: Any, cuts: list[int]
    ) -> tuple[list[tuple[bool, bool] | None], list[tuple[bool, bool] | None]]:
        """(vLLM's, ours) per engine update: whether the chunk's delta writes the ``content``
        and ``reasoning`` keys. vLLM's stream dumps ``DeltaMessage`` with ``exclude_unset``, so
        a field its parser set to None is written as null (an empty ``tool_calls`` is dropped
        by its serializer); ours writes a key that has a value or is flagged as set. Stops
        where vLLM's parser fails."""
        deltas = self.deltas(text, cuts)
        theirs_parser = self.vllm_parser(req)
        ours_parser = self.ours.for_request(options_of(req))
        theirs: list[tuple[bool, bool] | None] = []
        ours: list[tuple[bool, bool] | None] = []
        for k, (delta, ids) in enumerate(deltas):
            last = k == len(deltas) - 1
            try:
                msg = theirs_parser.parse_delta(
                    delta, list(ids), req, prompt_token_ids=self.prompt_ids, finished=last
                )
            except Exception:  # vLLM fails the stream here (pinned by the family's own tests)
                break
            fields = None if msg is None else msg.model_fields_set
            theirs.append(None if fields is None else ("content" in fields, "reasoning" in fields))
            ours.append(written_keys(ours_parser.feed(delta, ids, self.prompt_ids, finished=last)))
        return theirs, ours

    def check_written_keys(self, text: str) -> None:
        """:meth:`written_keys` agree for ``text`` whole and token by token, with and without
        ``include_reasoning``."""
        n = len(self.tok.encode(text, add_special_tokens=False))
        for include_reasoning in (True, False):
            req = vllm_request(include_reasoning=include_reasoning)
            for cuts in ([], list(range(n))):
                theirs, ours = self.written_keys(text, req, cuts)
                assert ours == theirs, (text, include_reasoning, cuts)

    # -- checks ------------------------------------------------------------------------------

    def check(self, text: str, req: Any | None = None, cuts: list[int] | None = None) -> None:
        """Whole output, then streaming by whole output, token by token, and at ``cuts``."""
        req = req if req is not None else vllm_request()
        try:
            expected = self.vllm_full(text, req)
        except Exception as e:  # vLLM fails the request: so must we, with the same error
            with pytest.raises(type(e)) as ours:
                self.ours_full(text, req)
            assert str(ours.value) == str(e)
        else:
            assert self.ours_full(text, req) == expected, text
        n = len(self.tok.encode(text, add_special_tokens=False))
        for split in ([], list(range(n)), cuts or []):
            self.check_stream(text, split, req)

    def check_stream(self, text: str, cuts: list[int], req: Any | None = None) -> None:
        """Streaming of ``text`` cut at ``cuts``."""
        req = req if req is not None else vllm_request()
        deltas = self.deltas(text, cuts)
        assert self.ours_stream(deltas, req) == self.vllm_stream(deltas, req), (text, cuts)
