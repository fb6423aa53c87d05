"""``POST /v1/chat/completions/derender`` and ``POST /v1/completions/derender``, as vLLM 0.32
serves them (vllm/entrypoints/scale_out/derender/, ``OnlineDerenderer``): the token ids a
``/inference/v1/generate`` answer (or one of its SSE chunks) carries are turned back into the
chat completion or completion a coupled server would have sent, without an engine.

What vLLM's derender does, and so this module:

- validates bounds first (choices per answer and answers per request at most
  ``VLLM_MAX_N_SEQUENCES``, ``token_ids``, ``logprobs.content``, ``prompt_logprobs`` and
  ``prompt_token_ids`` at most ``max_model_len``, ``top_logprobs`` at most ``max_logprobs``;
  a stream chunk: prompt + carried + new ids at most ``max_model_len``; one choice per chunk);
- detokenizes each choice by vLLM's slow incremental algorithm (vocabulary pieces), seeded
  with the prompt's last pieces (``prompt_token_ids``, else the answer's); special tokens are
  skipped as the request's ``skip_special_tokens`` says (kept with a parser). Stop strings are
  not applied again: the engine's ``token_ids`` already end where generation stopped;
- resolves integer-id logprobs into token strings and bytes (U+FFFD completed with the
  preceding sampled ids, carried across stream chunks in ``logprob_context_token_ids``);
  completions get the legacy flat shape with absolute ``text_offset``;
- with a tool or reasoning parser configured, requires ``chat_request`` (and, streaming,
  ``prompt_token_ids``), splits the text into reasoning, content and tool calls (whole: one
  parse, tool-call ids fresh UUIDs, content ``""`` for a required / named tool choice;
  streaming: a fresh parser replays the carried ``output_token_ids`` chunk by chunk, then
  parses the new chunk; tool-call ids pinned by ``last_tool_call_ids``, finish reason
  ``tool_calls`` once calls were streamed, unless a named tool was forced; no logprobs);
- answers ``usage`` from the caller's ``prompt_tokens`` and the counted output ids, and passes
  ``prompt_logprobs``, ``kv_transfer_params`` (completions: only when every answer agrees) and
  ``metrics`` through; a stream chunk's reply is ``{"chunk", "stream_state"}``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any

import msgspec

from vllm_frontend.chat.llm import ChatLlm, plain
from vllm_frontend.chat.response_template import ResponseTemplateOutputParser
from vllm_frontend.chat.tool_choice import forced_tool_choice
from vllm_frontend.engine.validate import RequestLimits
from vllm_frontend.text.logprobs import TokenStrings
from vllm_frontend.text.piece_window import PieceDetokenizer, PieceWindow

from . import errors
from .chat import (
    ChatLogprobs,
    ChatMessage,
    ContentLogprob,
    FunctionJSON,
    ToolCallJSON,
    TopLogprob,
    chat_request,
)
from .completions import CompletionLogProbs
from .derender_protocol import (
    DerenderChatBody,
    DerenderChatStreamBody,
    DerenderCompletionBody,
    DerenderCompletionStreamBody,
    GenerateTokensResponse,
    InLogProbs,
    InUsage,
    StreamState,
    parse_derender_chat,
    parse_derender_completion,
)
from .generation import ServingContext, Usage
from .transport import Request, Response

__all__ = ["CHAT_DERENDER_PATH", "COMPLETIONS_DERENDER_PATH", "DerenderHandlers"]

CHAT_DERENDER_PATH = "/v1/chat/completions/derender"
COMPLETIONS_DERENDER_PATH = "/v1/completions/derender"

_encode = msgspec.json.Encoder().encode
_CONTEXT_WINDOW = 4
_METRIC_FIELDS = (
    "time_to_first_token_ms",
    "generation_time_ms",
    "queue_time_ms",
    "mean_itl_ms",
    "tokens_per_second",
)
_PARSER_NEEDS_REQUEST = (
    "chat_request is required when a tool or reasoning parser is configured because plain "
    "detokenization would leak raw parser markup into content."
)


# -- answers (vLLM's pydantic models as model_dump() writes them) ------------------------------


class PromptLogprobOut(msgspec.Struct):
    """vLLM's ``Logprob`` dataclass."""

    logprob: float
    rank: int | None
    decoded_token: str | None


class ChatChoiceOut(msgspec.Struct):
    """``ChatCompletionResponseChoice``."""

    index: int
    message: ChatMessage
    logprobs: ChatLogprobs | None
    finish_reason: str | None
    stop_reason: int | str | None
    token_ids: list[int] | None
    routed_experts: None = None


class ChatResponseOut(msgspec.Struct):
    """``ChatCompletionResponse``."""

    id: str
    object: str
    created: int
    model: str
    choices: list[ChatChoiceOut]
    service_tier: None
    system_fingerprint: None
    usage: Usage
    prompt_logprobs: list[dict[int, PromptLogprobOut] | None] | None
    prompt_token_ids: None
    prompt_text: None
    kv_transfer_params: dict[str, Any] | None
    ec_transfer_params: None
    metrics: dict[str, Any] | None


class CompletionChoiceOut(msgspec.Struct):
    """``CompletionResponseChoice``."""

    index: int
    text: str
    logprobs: CompletionLogProbs | None
    finish_reason: str | None
    stop_reason: int | str | None
    token_ids: None = None
    prompt_logprobs: None = None
    prompt_token_ids: None = None
    routed_experts: None = None


class CompletionResponseOut(msgspec.Struct):
    """``CompletionResponse``."""

    id: str
    object: str
    created: int
    model: str
    choices: list[CompletionChoiceOut]
    service_tier: None
    system_fingerprint: None
    usage: Usage
    kv_transfer_params: dict[str, Any] | None
    ec_transfer_params: None
    metrics: dict[str, Any] | None


class DeltaFunctionOut(msgspec.Struct):
    """``DeltaFunctionCall``."""

    name: str | None
    arguments: str | None


class DeltaToolCallOut(msgspec.Struct):
    """``DeltaToolCall``."""

    id: str | None
    type: str | None
    index: int
    function: DeltaFunctionOut | None


class DeltaOut(msgspec.Struct):
    """``DeltaMessage`` (empty ``tool_calls`` dropped)."""

    role: str | None = None
    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[DeltaToolCallOut] | msgspec.UnsetType = msgspec.UNSET


class ChatStreamChoiceOut(msgspec.Struct):
    """``ChatCompletionResponseStreamChoice``."""

    index: int
    delta: DeltaOut
    logprobs: ChatLogprobs | None
    finish_reason: str | None
    stop_reason: int | str | None
    token_ids: list[int] | None


class ChatChunkOut(msgspec.Struct):
    """``ChatCompletionStreamResponse``."""

    id: str
    object: str
    created: int
    model: str
    choices: list[ChatStreamChoiceOut]
    usage: Usage | None
    system_fingerprint: None
    prompt_token_ids: None
    prompt_text: None
    metrics: dict[str, Any] | None


class CompletionStreamChoiceOut(msgspec.Struct):
    """``CompletionResponseStreamChoice``."""

    index: int
    text: str
    logprobs: CompletionLogProbs | None
    finish_reason: str | None
    stop_reason: int | str | None
    prompt_token_ids: None = None
    token_ids: None = None


class CompletionChunkOut(msgspec.Struct):
    """``CompletionStreamResponse``."""

    id: str
    object: str
    created: int
    model: str
    choices: list[CompletionStreamChoiceOut]
    usage: Usage | None
    system_fingerprint: None
    metrics: dict[str, Any] | None


class StreamReply(msgspec.Struct):
    """``Derender*StreamResponse``: the chunk and the state for the next call."""

    chunk: ChatChunkOut | CompletionChunkOut
    stream_state: StreamState


# -- helpers ---------------------------------------------------------------------------------


def _metrics(raw: dict[str, Any] | None) -> dict[str, Any] | None:
    # PerRequestMetrics: its fields in order (floats), then any extra keys as sent
    if raw is None:
        return None
    out: dict[str, Any] = {}
    for name in _METRIC_FIELDS:
        value = raw.get(name)
        out[name] = (
            float(value) if isinstance(value, int) and not isinstance(value, bool) else value
        )
    out["speculative_decoding"] = raw.get("speculative_decoding")
    out.update((k, v) for k, v in raw.items() if k not in out)
    return out


def _prompt_logprobs(gen: GenerateTokensResponse) -> Any:
    if gen.prompt_logprobs is None:
        return None
    return [
        None
        if position is None
        else {
            tid: PromptLogprobOut(lp.logprob, lp.rank, lp.decoded_token)
            for tid, lp in position.items()
        }
        for position in gen.prompt_logprobs
    ]


def _usage(prompt: int, completion: int) -> Usage:
    return Usage(
        prompt_tokens=prompt, total_tokens=prompt + completion, completion_tokens=completion
    )


def _chunk_usage(usage: InUsage | None, prompt_tokens: int | None) -> Usage | None:
    if usage is None:
        return None
    prompt = prompt_tokens if prompt_tokens is not None else (usage.prompt_tokens or 0)
    return _usage(prompt, usage.completion_tokens or 0)


class _Strings:
    """vLLM's ``decode_token_ids`` / ``_correct_decoded_token`` over our token strings."""

    def __init__(self, strings: TokenStrings) -> None:
        self.strings = strings
        self.to_piece = strings.tokenizer.id_to_token

    def one(self, token_id: int, context: Sequence[int]) -> tuple[str, list[int] | None]:
        if self.to_piece(token_id) is None:
            return "", None
        text = self.strings.token(token_id)
        if text.endswith("\ufffd"):
            text = self.strings.corrected(token_id, context)
            return text, list(text.encode("utf-8"))
        return text, list(text.encode("utf-8", errors="replace"))

    def resolve(self, logprobs: InLogProbs, context: Sequence[int] = ()) -> ChatLogprobs:
        """vLLM's ``_resolve_logprobs``: integer-id logprobs in the chat shape."""
        if logprobs.content is None:
            return ChatLogprobs(None)
        ctx = list(context)
        content: list[ContentLogprob] = []
        for entry in logprobs.content:
            token, token_bytes = self.one(entry.token_id, ctx)
            tops = []
            for top in entry.top_logprobs:
                text, text_bytes = self.one(top.token_id, ctx)
                tops.append(TopLogprob(text, top.logprob, text_bytes))
            content.append(ContentLogprob(token, entry.logprob, token_bytes, tops))
            ctx.append(entry.token_id)
        return ChatLogprobs(content)


def _completion_logprobs(logprobs: ChatLogprobs, offset: int = 0) -> CompletionLogProbs:
    # vLLM's _convert_chat_logprobs_to_completion_logprobs
    out = CompletionLogProbs([], [], [], [])
    if logprobs.content is None:
        return out
    for entry in logprobs.content:
        out.text_offset.append(offset)
        out.tokens.append(entry.token)
        out.token_logprobs.append(entry.logprob)
        out.top_logprobs.append(
            {t.token: t.logprob for t in entry.top_logprobs} if entry.top_logprobs else None
        )
        offset += len(entry.token)
    return out


def _context_tail(context: Sequence[int], delta: Sequence[int]) -> list[int]:
    return [*context, *delta][-_CONTEXT_WINDOW:]


def _window(state: StreamState) -> PieceWindow:
    return PieceWindow(state.prev_tokens, state.prefix_offset, state.read_offset)


def _with_window(state: StreamState, window: PieceWindow) -> StreamState:
    return msgspec.structs.replace(
        state,
        prev_tokens=window.prev_tokens,
        prefix_offset=window.prefix_offset,
        read_offset=window.read_offset,
    )


# -- the routes ------------------------------------------------------------------------------


class DerenderHandlers:
    """The two derender routes over the tokenizer and output parsers of ``ctx`` / ``chat``."""

    def __init__(self, ctx: ServingContext, chat: ChatLlm) -> None:
        """``chat``: the chat facade whose parsers the chat route uses."""
        self.ctx = ctx
        self.chat = chat
        text = ctx.text
        self._detok: PieceDetokenizer | None = None  # made on first use (see _load_detok)
        self._strings: _Strings | None = None
        limits = text.sampling.limits or RequestLimits()
        self.max_n = limits.max_n
        self.max_model_len = text.max_model_len
        self.max_logprobs = 20 if limits.max_logprobs is None else limits.max_logprobs
        parsers = chat.parsers
        self.has_parser = parsers is not None and parsers.active

    @property
    def detok(self) -> PieceDetokenizer:
        """The piece detokenizer (a handler has run :meth:`_load_detok` first)."""
        detok = self._detok
        assert detok is not None
        return detok

    @property
    def strings(self) -> _Strings:
        """The logprobs' token strings (a handler has run :meth:`_load_detok` first)."""
        strings = self._strings
        assert strings is not None
        return strings

    async def _load_detok(self) -> None:
        # Made on the first derender request, not at startup: both read the `tokenizers` object,
        # which a tokenizer served by fastokens lets go; that comes back on a worker thread.
        if self._detok is None:
            text = self.ctx.text
            await text.tokenizer.ensure_backend()
            self._strings = _Strings(text.strings())
            self._detok = PieceDetokenizer(text.tokenizer)

    def routes(self) -> dict[tuple[str, str], Any]:
        """``{(method, path): handler}``."""
        return {
            ("POST", CHAT_DERENDER_PATH): self.derender_chat,
            ("POST", COMPLETIONS_DERENDER_PATH): self.derender_completion,
        }

    # -- checks --------------------------------------------------------------------------------

    def _check_bounds(self, responses: Sequence[GenerateTokensResponse]) -> None:
        max_n, max_len, max_lp = self.max_n, self.max_model_len, self.max_logprobs
        if len(responses) > max_n:
            raise errors.BadRequest(
                f"generate_responses count ({len(responses)}) exceeds server maximum "
                f"({max_n}). Set VLLM_MAX_N_SEQUENCES to increase this limit."
            )
        for gen in responses:
            if len(gen.choices) > max_n:
                raise errors.BadRequest(
                    f"choices count ({len(gen.choices)}) in response '{gen.request_id}' "
                    f"exceeds server maximum ({max_n})."
                )
            for choice in gen.choices:
                if choice.token_ids and len(choice.token_ids) > max_len:
                    raise errors.BadRequest(
                        f"token_ids length ({len(choice.token_ids)}) in choice {choice.index} "
                        f"exceeds max_model_len ({max_len})."
                    )
                content = choice.logprobs.content if choice.logprobs else None
                if not content:
                    continue
                if len(content) > max_len:
                    raise errors.BadRequest(
                        f"logprobs.content length ({len(content)}) in choice {choice.index} "
                        f"exceeds max_model_len ({max_len})."
                    )
                for entry in content:
                    if max_lp >= 0 and entry.top_logprobs and len(entry.top_logprobs) > max_lp:
                        raise errors.BadRequest(
                            f"top_logprobs count ({len(entry.top_logprobs)}) in choice "
                            f"{choice.index} exceeds max_logprobs ({max_lp})."
                        )
            if gen.prompt_logprobs and len(gen.prompt_logprobs) > max_len:
                raise errors.BadRequest(
                    f"prompt_logprobs length ({len(gen.prompt_logprobs)}) in response "
                    f"'{gen.request_id}' exceeds max_model_len ({max_len})."
                )

    def _check_prompt_ids(self, ids_lists: Sequence[Sequence[int] | None]) -> None:
        for ids in ids_lists:
            if ids is not None and len(ids) > self.max_model_len:
                raise errors.BadRequest(
                    f"prompt_token_ids length ({len(ids)}) exceeds max_model_len "
                    f"({self.max_model_len})."
                )

    def _skip_special(self, request: Any, preserve: bool = False) -> bool:
        if preserve:
            return False
        return bool(request.skip_special_tokens) if request is not None else True

    def _parser(self, request: Request, chat_body: Any) -> Any:
        chat = chat_request(chat_body, request, "derender")
        return self.chat.parser_for(chat)

    # -- chat ----------------------------------------------------------------------------------

    async def derender_chat(self, request: Request) -> Response:
        """``POST /v1/chat/completions/derender`` (either body shape)."""
        body = parse_derender_chat(request.body)
        self.ctx.check_model(body.model)
        await self._load_detok()
        if isinstance(body, DerenderChatStreamBody):
            return Response(_encode(self._chat_chunk(request, body)))
        return Response(_encode(self._chat_full(request, body)))

    def _chat_full(self, request: Request, body: DerenderChatBody) -> ChatResponseOut:
        gen = body.generate_response
        self._check_bounds([gen])
        self._check_prompt_ids([body.prompt_token_ids])
        chat_body = body.chat_request
        if self.has_parser and chat_body is None:
            raise errors.BadRequest(_PARSER_NEEDS_REQUEST)
        parsing = self.has_parser and chat_body is not None
        skip = self._skip_special(chat_body, preserve=parsing)
        seed_ids = (
            body.prompt_token_ids if body.prompt_token_ids is not None else (gen.prompt_token_ids)
        )
        seed = self.detok.seed(seed_ids, skip)
        return_ids = bool(
            chat_body is not None
            and chat_body.return_token_ids
            and (not parsing or chat_body.include_reasoning)
        )
        choices: list[ChatChoiceOut] = []
        for choice in gen.choices:
            if not choice.token_ids:
                raise errors.BadRequest(f"choice {choice.index} has empty or null token_ids")
            logprobs = (
                self.strings.resolve(choice.logprobs) if choice.logprobs is not None else None
            )
            text, _ = self.detok.decode(seed, choice.token_ids, skip)
            if parsing:
                message = self._parse_message(
                    request, chat_body, text, choice.token_ids, gen.prompt_token_ids
                )
            else:
                message = ChatMessage(role="assistant", content=text)
            choices.append(
                ChatChoiceOut(
                    index=choice.index,
                    message=message,
                    logprobs=logprobs,
                    finish_reason=choice.finish_reason,
                    stop_reason=choice.stop_reason,
                    token_ids=choice.token_ids if return_ids else None,
                )
            )
        prompt = body.prompt_tokens if body.prompt_tokens is not None else 0
        completion = sum(len(c.token_ids) for c in gen.choices if c.token_ids)
        return ChatResponseOut(
            id=gen.request_id or "",
            object="chat.completion",
            created=int(time.time()),
            model=body.model or self.ctx.model_name,
            choices=choices,
            service_tier=None,
            system_fingerprint=None,
            usage=_usage(prompt, completion),
            prompt_logprobs=_prompt_logprobs(gen),
            prompt_token_ids=None,
            prompt_text=None,
            kv_transfer_params=gen.kv_transfer_params,
            ec_transfer_params=None,
            metrics=_metrics(gen.metrics),
        )

    def _parse_message(
        self,
        request: Request,
        chat_body: Any,
        text: str,
        token_ids: Sequence[int],
        prompt_ids: Sequence[int] | None,
    ) -> ChatMessage:
        parser = self._parser(request, chat_body)
        if prompt_ids is not None and isinstance(parser, ResponseTemplateOutputParser):
            parser.set_prompt_token_ids(prompt_ids)  # (vLLM: the generate response's prompt)
        parsed = parser.parse(text, token_ids)
        reasoning = parsed.reasoning if chat_body.include_reasoning else None
        content = parsed.content
        if forced_tool_choice(plain(chat_body.tool_choice)) is not None:
            content = content or ""
        calls = [
            ToolCallJSON(uuid.uuid4().hex, "function", FunctionJSON(c.name, c.arguments))
            for c in parsed.tool_calls
        ]
        message = ChatMessage(role="assistant", content=content, reasoning=reasoning)
        if calls:
            message.tool_calls = calls
        return message

    def _chat_chunk(self, request: Request, body: DerenderChatStreamBody) -> StreamReply:
        chat_body = body.chat_request
        if self.has_parser and chat_body is None:
            raise errors.BadRequest(_PARSER_NEEDS_REQUEST)
        if self.has_parser and body.prompt_token_ids is None:
            raise errors.BadRequest(
                "prompt_token_ids is required when a tool or reasoning parser is configured. "
                "Without it parse_delta cannot tell whether the prompt left reasoning open "
                "(e.g. a chat template that pre-opens <think>) and would misclassify "
                "reasoning content as plain content."
            )
        chunk = body.generate_chunk
        if len(chunk.choices) > 1:
            raise errors.BadRequest(
                "derender_chat_stream expects at most one choice per chunk "
                f"(got {len(chunk.choices)})."
            )
        prompt_len = len(body.prompt_token_ids) if body.prompt_token_ids is not None else 0
        prior = len(body.stream_state.output_token_ids) if body.stream_state is not None else 0
        delta_len = sum(len(c.token_ids) for c in chunk.choices if c.token_ids)
        if prompt_len + prior + delta_len > self.max_model_len:
            raise errors.BadRequest(
                f"prompt_token_ids length ({prompt_len}) plus output_token_ids length "
                f"({prior}) plus delta ({delta_len}) exceeds max_model_len "
                f"({self.max_model_len})."
            )
        model = body.model or self.ctx.model_name
        try:
            if self.has_parser:
                choices, state = self._parsed_chunk_choices(request, body)
            else:
                choices, state = self._plain_chunk_choices(body)
        except errors.HttpError:
            raise
        except Exception:
            raise errors.BadRequest("invalid stream_state: derender failed") from None
        out = ChatChunkOut(
            id=chunk.request_id or "",
            object="chat.completion.chunk",
            created=int(time.time()),
            model=model,
            choices=choices,
            usage=_chunk_usage(chunk.usage, body.prompt_tokens),
            system_fingerprint=None,
            prompt_token_ids=None,
            prompt_text=None,
            metrics=_metrics(chunk.metrics),
        )
        return StreamReply(out, state)

    def _plain_chunk_choices(
        self, body: DerenderChatStreamBody
    ) -> tuple[list[ChatStreamChoiceOut], StreamState]:
        chat_body = body.chat_request
        skip = self._skip_special(chat_body)
        chunk = body.generate_chunk
        state = body.stream_state
        if state is None:
            seed_ids = body.prompt_token_ids
            if seed_ids is None:
                seed_ids = chunk.prompt_token_ids
            window = self.detok.seed(seed_ids, skip)
            state = StreamState(
                prev_tokens=window.prev_tokens,
                prefix_offset=window.prefix_offset,
                read_offset=window.read_offset,
            )
        return_ids = bool(chat_body is not None and chat_body.return_token_ids)
        choices = []
        updated = state
        for choice in chunk.choices:
            delta = choice.token_ids or []
            text, window = self.detok.decode(_window(updated), delta, skip)
            updated = _with_window(updated, window)
            logprobs = None
            if choice.logprobs is not None:
                logprobs = self.strings.resolve(choice.logprobs, state.logprob_context_token_ids)
            include_role = not updated.role_sent
            updated = msgspec.structs.replace(
                updated,
                role_sent=True,
                logprob_context_token_ids=_context_tail(state.logprob_context_token_ids, delta),
            )
            choices.append(
                ChatStreamChoiceOut(
                    index=choice.index,
                    delta=DeltaOut(
                        role="assistant" if include_role else None, content=text or None
                    ),
                    logprobs=logprobs,
                    finish_reason=choice.finish_reason,
                    stop_reason=choice.stop_reason,
                    token_ids=choice.token_ids if return_ids else None,
                )
            )
        return choices, updated

    def _parsed_chunk_choices(
        self, request: Request, body: DerenderChatStreamBody
    ) -> tuple[list[ChatStreamChoiceOut], StreamState]:
        chat_body = body.chat_request
        state = body.stream_state if body.stream_state is not None else StreamState()
        parser = self._parser(request, chat_body)
        prompt_ids = body.prompt_token_ids
        window = self.detok.seed(prompt_ids, False)
        start = 0
        for length in state.output_chunk_lens:
            ids = state.output_token_ids[start : start + length]
            start += length
            text, window = self.detok.decode(window, ids, False)
            parser.feed(text, ids, prompt_ids, finished=False)
        output_ids = list(state.output_token_ids)
        chunk_lens = list(state.output_chunk_lens)
        role_sent = state.role_sent
        tools_streamed = state.tools_streamed
        call_ids = list(state.last_tool_call_ids)
        return_ids = bool(chat_body.return_token_ids and chat_body.include_reasoning)
        choices: list[ChatStreamChoiceOut] = []
        chunk = body.generate_chunk
        if chunk.choices:
            choice = chunk.choices[0]
            delta = choice.token_ids or []
            finished = choice.finish_reason is not None
            msg = None
            if delta:
                text, window = self.detok.decode(window, delta, False)
                msg = parser.feed(text, delta, prompt_ids, finished=finished)
                output_ids.extend(delta)
                chunk_lens.append(len(delta))
            elif finished:
                msg = parser.feed("", [], prompt_ids, finished=True)
            out = DeltaOut()
            calls: list[DeltaToolCallOut] = []
            if msg is not None:
                out.content = msg.content
                out.reasoning = msg.reasoning
                for call in msg.tool_calls:
                    call_id = call.id
                    if call_id is not None:
                        if call.index < len(call_ids):
                            call_id = call_ids[call.index]
                        else:
                            call_ids.append(call_id)
                    function = (
                        DeltaFunctionOut(call.name, call.arguments)
                        if call.name is not None or call.arguments is not None
                        else None
                    )
                    calls.append(
                        DeltaToolCallOut(
                            call_id, "function" if call_id is not None else None, call.index,
                            function,
                        )
                    )  # fmt: skip
            if calls:
                tools_streamed = True
                if chat_body.parallel_tool_calls is False:
                    calls = [c for c in calls if c.index == 0]
                out.tool_calls = calls
            if not role_sent:
                out.role = "assistant"
                role_sent = True
            finish_reason = choice.finish_reason
            named = forced_tool_choice(plain(chat_body.tool_choice))
            if finish_reason is not None and tools_streamed and (named is None or named.required):
                finish_reason = "tool_calls"
            choices.append(
                ChatStreamChoiceOut(
                    index=choice.index,
                    delta=out,
                    logprobs=None,
                    finish_reason=finish_reason,
                    stop_reason=choice.stop_reason,
                    token_ids=choice.token_ids if return_ids else None,
                )
            )
        updated = msgspec.structs.replace(
            state,
            output_token_ids=output_ids,
            output_chunk_lens=chunk_lens,
            role_sent=role_sent,
            tools_streamed=tools_streamed,
            last_tool_call_ids=call_ids,
        )
        return choices, updated

    # -- completions ---------------------------------------------------------------------------

    async def derender_completion(self, request: Request) -> Response:
        """``POST /v1/completions/derender`` (either body shape)."""
        body = parse_derender_completion(request.body)
        self.ctx.check_model(body.model)
        await self._load_detok()
        if isinstance(body, DerenderCompletionStreamBody):
            return Response(_encode(self._completion_chunk(body)))
        return Response(_encode(self._completion_full(body)))

    def _completion_full(self, body: DerenderCompletionBody) -> CompletionResponseOut:
        responses = body.generate_responses
        if not responses:
            raise errors.BadRequest("generate_responses must not be empty")
        self._check_bounds(responses)
        if body.prompt_token_ids is not None:
            self._check_prompt_ids(body.prompt_token_ids)
        count = len(responses)
        prompt_counts = body.prompt_tokens if body.prompt_tokens is not None else [0] * count
        overrides = body.prompt_token_ids if body.prompt_token_ids is not None else [None] * count
        skip = self._skip_special(body.completion_request)
        choices: list[CompletionChoiceOut] = []
        total_prompt = total_completion = 0
        for gen, prompt, override in zip(responses, prompt_counts, overrides, strict=False):
            seed = self.detok.seed(override if override is not None else gen.prompt_token_ids, skip)
            for choice in gen.choices:
                if not choice.token_ids:
                    raise errors.BadRequest(
                        f"choice {choice.index} in response {gen.request_id} has empty or "
                        "null token_ids"
                    )
                text, _ = self.detok.decode(seed, choice.token_ids, skip)
                logprobs = None
                if choice.logprobs is not None:
                    logprobs = _completion_logprobs(self.strings.resolve(choice.logprobs))
                choices.append(
                    CompletionChoiceOut(
                        len(choices), text, logprobs, choice.finish_reason, choice.stop_reason
                    )
                )
                total_completion += len(choice.token_ids)
            total_prompt += prompt
        first = responses[0]
        kv_params = first.kv_transfer_params
        if any(r.kv_transfer_params != kv_params for r in responses[1:]):
            kv_params = None
        return CompletionResponseOut(
            id=first.request_id or "",
            object="text_completion",
            created=int(time.time()),
            model=body.model or self.ctx.model_name,
            choices=choices,
            service_tier=None,
            system_fingerprint=None,
            usage=_usage(total_prompt, total_completion),
            kv_transfer_params=kv_params,
            ec_transfer_params=None,
            metrics=_metrics(first.metrics) if count == 1 else None,
        )

    def _completion_chunk(self, body: DerenderCompletionStreamBody) -> StreamReply:
        self._check_prompt_ids([body.prompt_token_ids])
        chunk = body.generate_chunk
        if len(chunk.choices) > 1:
            raise errors.BadRequest(
                "derender_completion_stream expects at most one choice per chunk"
            )
        skip = self._skip_special(body.completion_request)
        state = body.stream_state
        if state is None:
            seed_ids = body.prompt_token_ids
            if seed_ids is None:
                seed_ids = chunk.prompt_token_ids
            window = self.detok.seed(seed_ids, skip)
            state = StreamState(
                prev_tokens=window.prev_tokens,
                prefix_offset=window.prefix_offset,
                read_offset=window.read_offset,
            )
        choices = []
        updated = state
        for choice in chunk.choices:
            delta = choice.token_ids or []
            text, window = self.detok.decode(_window(updated), delta, skip)
            updated = _with_window(updated, window)
            logprobs = None
            if choice.logprobs is not None:
                resolved = self.strings.resolve(choice.logprobs, state.logprob_context_token_ids)
                logprobs = _completion_logprobs(resolved, state.logprob_text_offset)
            updated = msgspec.structs.replace(
                updated,
                logprob_context_token_ids=_context_tail(state.logprob_context_token_ids, delta),
                logprob_text_offset=state.logprob_text_offset + len(text),
            )
            choices.append(
                CompletionStreamChoiceOut(
                    choice.index, text, logprobs, choice.finish_reason, choice.stop_reason
                )
            )
        out = CompletionChunkOut(
            id=chunk.request_id or "",
            object="text_completion",
            created=int(time.time()),
            model=body.model or self.ctx.model_name,
            choices=choices,
            usage=_chunk_usage(chunk.usage, body.prompt_tokens),
            system_fingerprint=None,
            metrics=_metrics(chunk.metrics),
        )
        return StreamReply(out, updated)
