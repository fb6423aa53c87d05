"""``POST /v1/chat/completions/render`` and ``/v1/completions/render``, as vLLM 0.32 serves them
(vllm/entrypoints/scale_out/render/): the request is prepared exactly as for generation (model
check, chat template, tokenization, length checks, ``max_tokens``, sampling lowering) and
answered with the ``GenerateRequest`` a disaggregated router sends to
``/inference/v1/generate``, instead of being run.

A chat request maps onto one chat-layer call (:meth:`ChatLlm.prepare`), a completion onto one
text-layer call (:meth:`TextLlm.prepare`); neither asks for admission, as vLLM's render does
not. ``sampling_params`` is vLLM's ``SamplingParams`` as its msgspec ``to_builtins`` writes it
(the fields that differ from their defaults, private ones dropped), lowered without what vLLM's
engine-side input processing adds or checks (``TextRequest.render``): no model EOS ids in
``stop_token_ids``, no structured-output backend, no vocabulary or ``max_logprobs`` checks.

Also here: the answer vLLM's server gives on every scale-out route without
``--enable-scale-out`` (403 ``PermissionDeniedError``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from vllm_frontend.chat.llm import ChatGeneration, ChatLlm, ChatRequest
from vllm_frontend.engine.protocol import SamplingParams
from vllm_frontend.text.llm import TextGeneration

from . import errors
from .app import Handler
from .chat import chat_request, refuse_request_mm_kwargs
from .completions import text_request
from .generation import ServingContext, request_id_for
from .messages import MessagesHandler
from .messages_protocol import parse_messages_request
from .protocol import StreamOptions
from .render_features import MultiModalFeaturesJSON, render_features
from .responses import ResponsesHandler
from .transport import Request, Response

__all__ = [
    "CHAT_RENDER_PATH",
    "COMPLETIONS_RENDER_PATH",
    "MESSAGES_RENDER_PATH",
    "RESPONSES_RENDER_PATH",
    "SCALE_OUT_PATHS",
    "RenderHandlers",
    "scale_out_disabled",
    "scale_out_not_served",
]

CHAT_RENDER_PATH = "/v1/chat/completions/render"
COMPLETIONS_RENDER_PATH = "/v1/completions/render"
MESSAGES_RENDER_PATH = "/v1/messages/render"
RESPONSES_RENDER_PATH = "/v1/responses/render"

SCALE_OUT_PATHS: tuple[str, ...] = (
    CHAT_RENDER_PATH,
    MESSAGES_RENDER_PATH,
    COMPLETIONS_RENDER_PATH,
    RESPONSES_RENDER_PATH,
    "/v1/chat/completions/derender",
    "/v1/completions/derender",
    "/inference/v1/generate",
    "/inference/v1/abort_requests",
)
"""Every ``POST`` route of vLLM's scale-out routers (render, derender, token-in/token-out)."""

_DISABLED_MESSAGE = (
    "Scale-out endpoints are disabled. Restart vllm serve with --enable-scale-out to enable them."
)

_encode = msgspec.json.Encoder().encode


class ReasoningParserKwargs(msgspec.Struct):
    """vLLM's ``ReasoningParserKwargs``: the chat template kwargs the prompt was rendered with."""

    chat_template_kwargs: dict[str, Any]


class GenerateRequestJSON(msgspec.Struct, kw_only=True):
    """vLLM's ``GenerateRequest`` as its render routes dump it (every field, in its order)."""

    request_id: str
    token_ids: list[int]
    token_offsets: list[tuple[int, int]] | None = None
    features: MultiModalFeaturesJSON | None = None
    content_parts: None = None
    sampling_params: dict[str, Any]
    model: str | None
    reasoning_ended: bool | None = None
    reasoning_parser_kwargs: ReasoningParserKwargs | None = None
    return_token_ids: None = None
    output_mode: str = "tokens"
    stream: bool
    stream_options: StreamOptions | None
    cache_salt: str | None
    priority: int
    kv_transfer_params: dict[str, Any] | None = None
    ec_transfer_params: dict[str, Any] | None = None


def render_sampling_params(params: SamplingParams) -> dict[str, Any]:
    """``params`` (lowered for render: no engine-side additions) as vLLM's render writes them:
    msgspec's builtins (the non-default fields), without private fields."""
    raw: dict[str, Any] = msgspec.to_builtins(params)
    for key in [k for k in raw if k.startswith("_")]:
        del raw[key]
    return raw


def _plain_prompt(text: TextGeneration, p: int) -> list[int]:
    prompt = text.prompts[p]
    if not prompt.token_ids:
        raise errors.BadRequest("No token_ids rendered")
    return prompt.token_ids


class RenderHandlers:
    """The render routes over the chat and text facades of ``ctx`` (and, when given, the
    Messages and Responses mappings onto the chat facade)."""

    def __init__(
        self,
        ctx: ServingContext,
        chat: ChatLlm,
        parse_chat: Any,
        parse_completion: Any,
        messages: MessagesHandler | None = None,
        responses: ResponsesHandler | None = None,
    ):
        """``chat``: the chat facade the chat route uses; ``parse_*(body)`` decode the bodies
        as the generation routes do; ``messages`` / ``responses``: the routes whose request
        mapping the Messages and Responses renders use."""
        self.ctx = ctx
        self.chat = chat
        self._parse_chat = parse_chat
        self._parse_completion = parse_completion
        self.messages = messages
        self.responses = responses

    def routes(self) -> dict[tuple[str, str], Handler]:
        """``{(method, path): handler}`` for ``build_app``'s generation routes."""
        routes: dict[tuple[str, str], Handler] = {
            ("POST", CHAT_RENDER_PATH): self.render_chat,
            ("POST", COMPLETIONS_RENDER_PATH): self.render_completion,
        }
        if self.messages is not None:
            routes[("POST", MESSAGES_RENDER_PATH)] = self.render_messages
        if self.responses is not None:
            routes[("POST", RESPONSES_RENDER_PATH)] = self.render_responses
        return routes

    async def render_chat(self, request: Request) -> Response:
        """``POST /v1/chat/completions/render``: one ``GenerateRequest``."""
        req = self._parse_chat(request.body)
        refuse_request_mm_kwargs(req)
        self.ctx.check_model(req.model)
        if req.use_beam_search:
            raise errors.BadRequest("Beam search is not supported by the render endpoint")
        request_id = request_id_for("chatcmpl", request, getattr(req, "request_id", None))
        chat = chat_request(req, request, request_id)
        return await self._render_chat(req, chat, bool(req.return_token_offsets))

    async def render_messages(self, request: Request) -> Response:
        """``POST /v1/messages/render``: the Messages request as ``/v1/messages`` maps it onto
        a chat completion request, rendered as ``/v1/chat/completions/render`` renders it."""
        assert self.messages is not None
        body = parse_messages_request(request.body)
        chat, req = self.messages.render_request(request, body)
        req.mm_payload = body.mm_payload  # vLLM's render_messages_request
        self.ctx.check_model(req.model)
        return await self._render_chat(req, chat, False)

    async def _render_chat(self, req: Any, chat: ChatRequest, offsets: bool) -> Response:
        chat.text.render = True
        gen = await self.chat.prepare(chat)
        token_ids = _plain_prompt(gen.text, 0)
        text = self.chat.text
        params = gen.text.params[0]
        assert isinstance(params, SamplingParams)  # beam search was refused
        kwargs, ended = self._reasoning(chat, gen, token_ids)
        prompt = gen.text.prompts[0]
        body = GenerateRequestJSON(
            request_id=chat.text.request_id,
            token_ids=token_ids,
            token_offsets=text.token_offsets(chat.text, prompt) if offsets else None,
            features=self._features(prompt.mm_features, req.mm_payload),
            sampling_params=render_sampling_params(params),
            model=req.model,
            reasoning_ended=ended,
            reasoning_parser_kwargs=kwargs,
            stream=bool(req.stream),
            stream_options=req.stream_options if req.stream else None,
            cache_salt=req.cache_salt,
            priority=req.priority,
        )
        return Response(_encode(body))

    async def render_responses(self, request: Request) -> Response:
        """``POST /v1/responses/render``: the Responses request rendered as ``/v1/responses``
        renders it, without stored history (vLLM's ``render_responses_request``)."""
        responses = self.responses
        assert responses is not None
        req = responses.parse(request.body)
        self.ctx.check_model(req.model)
        chat = responses.render_request(request, req)
        chat.text.render = True
        chat.check_tool_choice = False
        gen = await responses.chat.prepare(chat)
        token_ids = _plain_prompt(gen.text, 0)
        params = gen.text.params[0]
        assert isinstance(params, SamplingParams)
        parsers = responses.chat.parsers
        kwargs = None
        if parsers is not None and parsers.has_reasoning:
            kwargs = ReasoningParserKwargs(self._effective_kwargs(chat))
        body = GenerateRequestJSON(
            request_id=chat.text.request_id,
            token_ids=token_ids,
            features=self._features(gen.text.prompts[0].mm_features, req.mm_payload),
            sampling_params=render_sampling_params(params),
            model=req.model,
            reasoning_parser_kwargs=kwargs,
            stream=bool(req.stream),
            stream_options=None,
            cache_salt=req.cache_salt,
            priority=req.priority,
            kv_transfer_params=req.kv_transfer_params,
            ec_transfer_params=req.ec_transfer_params,
        )
        return Response(_encode(body))

    def _features(self, features: Any, mm_payload: str) -> MultiModalFeaturesJSON | None:
        media = self.ctx.media
        if not features or media is None:
            return None
        return render_features(features, mm_payload, media.placeholder_metadata_fields)

    def _reasoning(
        self, chat: ChatRequest, gen: ChatGeneration, token_ids: list[int]
    ) -> tuple[ReasoningParserKwargs | None, bool | None]:
        # vLLM's ServingRender._reasoning_parser_kwargs and resolve_reasoning_ended.
        parsers = self.chat.parsers
        kwargs = None
        if parsers is not None and parsers.has_reasoning:
            kwargs = ReasoningParserKwargs(self._effective_kwargs(chat))
        if not chat.include_reasoning:
            return kwargs, True
        parser = gen.new_parser() if kwargs is not None else None
        reasoning = getattr(parser, "reasoning", None)
        if reasoning is None:
            return kwargs, None
        return kwargs, bool(reasoning.prompt_ends_reasoning(token_ids))

    def _effective_kwargs(self, chat: ChatRequest) -> dict[str, Any]:
        # vLLM's OnlineRenderer.effective_chat_template_kwargs: the request's kwargs with the
        # template switches over them, then over the server's defaults (None / "auto" unset).
        unset = (None, "auto")
        user = dict(chat.chat_template_kwargs or {})
        extra: dict[str, Any] = {
            "add_generation_prompt": chat.add_generation_prompt,
            "continue_final_message": chat.continue_final_message,
            "documents": chat.documents,
            "reasoning_effort": chat.reasoning_effort,
        }
        if chat.reasoning_effort is not None and "enable_thinking" not in user:
            extra["enable_thinking"] = chat.reasoning_effort != "none"
        merged = user | {k: v for k, v in extra.items() if v not in unset}
        renderer = self.chat.renderer
        defaults = dict(renderer.options.default_chat_template_kwargs) if renderer else {}
        if defaults:
            merged = defaults | {k: v for k, v in merged.items() if v not in unset}
        return merged

    async def render_completion(self, request: Request) -> Response:
        """``POST /v1/completions/render``: one ``GenerateRequest`` per prompt."""
        req = self._parse_completion(request.body)
        ctx = self.ctx
        ctx.check_model(req.model)
        if req.use_beam_search:
            raise errors.BadRequest("Beam search is not supported by the render endpoint")
        request_id = request_id_for("cmpl", request, getattr(req, "request_id", None))
        text = text_request(req, request, request_id)
        text.render = True
        gen = await ctx.text.prepare(text)
        count = len(gen.prompts)
        want_offsets = bool(req.return_token_offsets)
        out: list[GenerateRequestJSON] = []
        for p in range(count):
            token_ids = _plain_prompt(gen, p)
            params = gen.params[p]
            assert isinstance(params, SamplingParams)
            offsets = ctx.text.token_offsets(text, gen.prompts[p]) if want_offsets else None
            out.append(
                GenerateRequestJSON(
                    request_id=request_id if count == 1 else f"{request_id}-{p}",
                    token_ids=token_ids,
                    token_offsets=offsets,
                    features=self._features(gen.prompts[p].mm_features, req.mm_payload),
                    sampling_params=render_sampling_params(params),
                    model=req.model,
                    stream=bool(req.stream),
                    stream_options=req.stream_options if req.stream else None,
                    cache_salt=req.cache_salt,
                    priority=req.priority,
                )
            )
        return Response(_encode(out))


def scale_out_not_served(served: Sequence[str]) -> dict[tuple[str, str], Handler]:
    """``501`` on the scale-out routes not in ``served`` (derender, the Messages and Responses
    renders, token-in/token-out), so that a client sees them missing, not unknown."""

    async def not_served(request: Request) -> Response:
        raise errors.NotImplementedFeature(
            f"{request.path} is not served by this frontend yet (vLLM 0.32 serves it)."
        )

    return {("POST", path): not_served for path in SCALE_OUT_PATHS if path not in served}


def scale_out_disabled(paths: Sequence[str] = SCALE_OUT_PATHS) -> dict[tuple[str, str], Handler]:
    """vLLM's answer on each scale-out route without ``--enable-scale-out``: 403, whatever the
    body (``{(method, path): handler}`` for ``build_app``'s ``api_routes``)."""

    async def disabled(request: Request) -> Response:
        raise errors.PermissionDenied(_DISABLED_MESSAGE)

    return {("POST", path): disabled for path in paths}
