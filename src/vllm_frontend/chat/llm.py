"""The chat layer's facade: messages in, text updates out, over the text layer.

:meth:`ChatLlm.generate` does, in vLLM 0.32's order (``OpenAIServingChat
._create_chat_completion``), what a chat request needs before the engine is asked: admission,
the tool-choice check, rendering through the chat template, the tool parser's request
adjustments (a forced tool call's JSON schema, special tokens kept for the parsers), then the
text layer's tokenization, checks and sampling lowering. The :class:`ChatGeneration` it returns
carries the text generation, the response role, the echoed text and the output parsers (vLLM's
``Parser`` use in ``chat_completion/serving.py``) that split each choice's text into
``reasoning``, ``content`` and ``tool_calls``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

import msgspec

from vllm_frontend.chat.cohere_output import CohereOutputParser, cohere_structural_tag
from vllm_frontend.chat.errors import ChatError
from vllm_frontend.chat.harmony_output import HarmonyOutputParser
from vllm_frontend.chat.harmony_renderer import HarmonyRenderer
from vllm_frontend.chat.messages import normalize_tools
from vllm_frontend.chat.mistral_grammar import grammar_applies, mistral_grammar_constraint
from vllm_frontend.chat.mistral_renderer import MistralChatRenderer
from vllm_frontend.chat.output_parser import (
    OutputParser,
    OutputParsers,
    RequestToolOptions,
    count_history_tool_calls,
)
from vllm_frontend.chat.reasoning_request import (
    effective_chat_template_kwargs,
    engine_reasoning_fields,
)
from vllm_frontend.chat.renderer import ChatRenderer
from vllm_frontend.chat.response_template import ResponseTemplateOutputParser
from vllm_frontend.chat.tags.harmony import harmony_answer_tag
from vllm_frontend.chat.tool_choice import forced_tool_choice, forced_tool_schema
from vllm_frontend.chat.tool_tags import CONSTRAINT_FIELDS, tool_structural_tag
from vllm_frontend.engine.protocol import StructuredOutputsParams
from vllm_frontend.multimodal.parts import MediaParts
from vllm_frontend.text.llm import TextGeneration, TextLlm, TextRequest
from vllm_frontend.text.structured_outputs import (
    merge_response_format,
    structured_outputs_params,
    xgrammar_supports,
)

if TYPE_CHECKING:
    from vllm_frontend.multimodal.llm import MultimodalLlm

__all__ = [
    "AnyOutputParser",
    "ChatGeneration",
    "ChatLlm",
    "ChatRequest",
    "chat_tokenizer",
    "generation_prompt",
    "plain",
]

AnyOutputParser = (
    OutputParser | HarmonyOutputParser | CohereOutputParser | ResponseTemplateOutputParser
)
"""One choice's output parser, whichever family reads it."""


class ChatRequest(msgspec.Struct, gc=False):
    """One chat request, as a route maps it (field names are vLLM's; values as decoded)."""

    messages: Any
    text: TextRequest
    """The text-level part (``prompt`` is set here, from the rendered template)."""
    tools: Any = None
    tool_choice: Any = None
    documents: Any = None
    add_generation_prompt: bool | None = None
    continue_final_message: bool = False
    chat_template: str | None = None
    chat_template_kwargs: Any = None
    reasoning_effort: str | None = None
    include_reasoning: bool = True
    parallel_tool_calls: bool | None = None
    echo: bool = False
    """Echo the last message's content before the generated text."""
    mm_processor_kwargs: Any = None
    media_io_kwargs: Any = None
    logprobs: bool = False
    """The request asks for logprobs (one tool parser's streaming reads it)."""
    harmony_messages: Any = None
    """gpt-oss only: the prompt as Harmony messages built by the caller (the Responses API's
    :mod:`vllm_frontend.chat.harmony_responses`), rendered instead of ``messages``."""
    resolve_reasoning_ended: bool = True
    """Send the engine ``reasoning_ended`` (vLLM's chat route does; its Responses route leaves
    it to the engine)."""
    check_tool_choice: bool = True
    """Refuse a tool choice other than none without a tool parser (vLLM's chat rendering
    does; its Responses rendering does not)."""


class ChatLlm:
    """Chat generation for one model over ``text`` (built once at startup)."""

    __slots__ = ("_parsers", "harmony", "media", "mistral", "renderer", "response_role", "text")

    def __init__(
        self,
        text: TextLlm,
        renderer: ChatRenderer | None,
        parsers: OutputParsers | None = None,
        *,
        response_role: str = "assistant",
        harmony: HarmonyRenderer | None = None,
        mistral: MistralChatRenderer | None = None,
        media: MultimodalLlm | None = None,
    ) -> None:
        """``parsers`` are the configured reasoning / tool-call parsers; ``harmony`` renders a
        gpt-oss model's chat prompts instead of ``renderer`` (which still serves
        ``/tokenize``, as in vLLM); ``mistral`` renders them with mistral_common
        (``--tokenizer-mode mistral``); ``media`` is the multimodal facade over ``text`` (None
        for a text-only model)."""
        self.text = text
        self.media = media
        self.renderer = renderer
        self.harmony = harmony
        self.mistral = mistral
        self.response_role = response_role
        self._parsers = parsers if parsers is not None and parsers.active else None

    @property
    def parsers(self) -> OutputParsers | None:
        """The configured output parsers (None when there are none)."""
        return self._parsers

    async def generate(self, request: ChatRequest) -> ChatGeneration:
        """Check, render and tokenize the request; its generation, not started yet."""
        self.text.admit(request.text.sampling.n or 1)  # vLLM's _preflight: before rendering
        return await self.prepare(request)

    async def prepare(self, request: ChatRequest) -> ChatGeneration:
        """:meth:`generate` without admission (the render routes prepare requests that this
        server does not run)."""
        text_request = request.text
        if self._parsers is not None:
            # vLLM builds the request's parser before rendering: what it refuses comes first.
            self._parsers.check_request(self._options(request))
        if (
            request.tool_choice is not None
            and self.harmony is None
            and self.mistral is None
            and request.check_tool_choice
        ):
            # (vLLM: any tool choice goes with Harmony or a mistral tokenizer)
            self._check_tool_choice(request)
        self.text.prompts.check_max_tokens_param(
            text_request.max_tokens, text_request.max_tokens_param
        )
        media = self.media
        parts = media.new_parts() if media is not None else None
        try:
            rendered = self._render_any(request, parts)
        except Exception as exc:
            if media is not None and parts is not None and parts.complete and parts.items:
                await _media_errors_first(media, parts, plain(request.media_io_kwargs), exc)
            raise
        parsers = self._parsers
        if parsers is not None:
            parsers.check_adjusted(self._options(request))  # the parsers' adjust_request
        if parsers is not None:  # (without parsers, nothing below adjusts the request)
            if parsers.unified == "cohere":
                self._apply_cohere_tag(request)
            if not self._apply_mistral_grammar(request):
                self._force_tool_calls(request)
                options = self._options(request)
                if parsers.needs_special_tokens(options):
                    text_request.sampling.skip_special_tokens = False  # parsers' adjust_request
                if parsers.joins_special_tokens(options):
                    text_request.sampling.spaces_between_special_tokens = False
        if media is not None and parts is not None and parts.items:
            generation = await media.generate(
                text_request,
                rendered.prompt,
                parts,
                mm_processor_kwargs=plain(request.mm_processor_kwargs),
                media_io_kwargs=plain(request.media_io_kwargs),
            )
        else:
            generation = await self.text.generate_prompts(text_request, [rendered.prompt])
        self._set_engine_reasoning(request, generation)
        role = self.response_role if request.add_generation_prompt is not False else None
        if role is None:
            last = (plain(request.messages) if self.harmony else rendered.conversation)[-1]
            role = last["role"]
        echo_text = _echo_text(request, rendered.conversation, role)
        return ChatGeneration(self, request, generation, role, echo_text)

    def _chat_template_kwargs(self, request: ChatRequest) -> dict[str, Any]:
        renderer = self.renderer
        return effective_chat_template_kwargs(
            request_kwargs=plain(request.chat_template_kwargs),
            server_defaults=renderer.options.default_chat_template_kwargs if renderer else None,
            add_generation_prompt=request.add_generation_prompt is not False,
            continue_final_message=bool(request.continue_final_message),
            documents=plain(request.documents),
            reasoning_effort=request.reasoning_effort,
        )

    def _set_engine_reasoning(self, request: ChatRequest, generation: TextGeneration) -> None:
        # vLLM's _engine_reasoning_kwargs, on the tokenized (and media-expanded) prompt.
        if generation.beam_search or not generation.prompts:
            return  # vLLM's beam search sends neither
        parsers = self._parsers
        reasoning_cls = parsers.reasoning_cls if parsers is not None else None
        # Only a reasoning parser reads the kwargs (the common request has none: not built).
        kwargs = self._chat_template_kwargs(request) if reasoning_cls is not None else {}
        ended, parser_kwargs = engine_reasoning_fields(
            include_reasoning=bool(request.include_reasoning),
            has_parser=parsers is not None,
            reasoning_cls=reasoning_cls,
            vocab=parsers.vocab if parsers is not None else {},
            chat_template_kwargs=kwargs,
            prompt_token_ids=generation.prompts[0].token_ids,
            encode=parsers.codec[0] if parsers is not None else None,
            decode=parsers.codec[1] if parsers is not None else None,
        )
        text_request = request.text
        text_request.reasoning_ended = ended if request.resolve_reasoning_ended else None
        text_request.reasoning_parser_kwargs = parser_kwargs

    def _check_tool_choice(self, request: ChatRequest) -> None:
        # vLLM's OnlineRenderer.render_chat: a tool choice other than none needs a tool parser.
        choice = request.tool_choice
        if (self._parsers is not None and self._parsers.has_tools) or choice in (None, "none"):
            return
        if choice == "auto":
            raise ChatError(
                '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser '
                "to be set"
            )
        if isinstance(choice, dict):
            desc = f'function "{(choice.get("function") or {}).get("name")}"'
        else:
            desc = f'"{choice}"'
        raise ChatError(f"tool_choice={desc} requires --tool-call-parser to be set")

    def _wrap_harmony_constraint(self, request: ChatRequest) -> None:
        # vLLM's HarmonyParser.adjust_request (whenever a parser is configured): the request's
        # constraint, response_format merged in, goes into the final channel of a Harmony
        # structural tag; its whitespace options stay.
        if self._parsers is None:
            return
        so = _merged_constraint(request)
        if so is None:
            return
        tag = harmony_answer_tag({k: getattr(so, k) for k in CONSTRAINT_FIELDS})
        if tag is None:
            return
        request.text.structured_outputs = {
            "disable_any_whitespace": so.disable_any_whitespace,
            "disable_additional_properties": so.disable_additional_properties,
            "whitespace_pattern": so.whitespace_pattern,
            "structural_tag": tag,
        }
        request.text.response_format = None

    def _render_any(self, request: ChatRequest, parts: MediaParts | None) -> Any:
        # The request's prompt by its renderer (Harmony, mistral_common or a chat template);
        # media parts go to ``parts``.
        if self.harmony is not None:
            self._wrap_harmony_constraint(request)
            if request.harmony_messages is not None:
                return self.harmony.render_messages(request.harmony_messages)
            return self.harmony.render(
                plain(request.messages),
                tools=plain(request.tools),
                tool_choice=plain(request.tool_choice),
                reasoning_effort=request.reasoning_effort,
            )
        if self.mistral is not None:
            return self.mistral.render(
                plain(request.messages),
                tools=plain(request.tools),
                tool_choice=plain(request.tool_choice),
                add_generation_prompt=request.add_generation_prompt,
                continue_final_message=bool(request.continue_final_message),
                chat_template=request.chat_template,
                chat_template_kwargs=plain(request.chat_template_kwargs),
                reasoning_effort=request.reasoning_effort,
                media=parts,
            )
        return self._render(request, parts)

    def _render(self, request: ChatRequest, media: MediaParts | None = None) -> Any:
        renderer = self.renderer
        if renderer is None:
            raise RuntimeError("no chat renderer configured")
        return renderer.render(
            plain(request.messages),
            tools=plain(request.tools),
            tool_choice=plain(request.tool_choice),
            documents=plain(request.documents),
            add_generation_prompt=request.add_generation_prompt,
            continue_final_message=bool(request.continue_final_message),
            chat_template=request.chat_template,
            chat_template_kwargs=plain(request.chat_template_kwargs),
            reasoning_effort=request.reasoning_effort,
            media=media,
        )

    def _apply_mistral_grammar(self, request: ChatRequest) -> bool:
        # vLLM's MistralParser.adjust_request with a grammar-capable mistral_common tokenizer:
        # the request is constrained by mistral_common's Lark grammar (chat/mistral_grammar.py),
        # and nothing else of the parsers' adjustments applies.
        mistral, parsers = self.mistral, self._parsers
        if mistral is None or parsers is None:
            return False
        names = {c.name for c in (parsers.tool_cls, parsers.reasoning_cls) if c is not None}
        text_request = request.text
        if "mistral" not in names or not grammar_applies(
            mistral.tokenizer, text_request.structured_outputs, text_request.response_format
        ):
            return False
        grammar, drop_format = mistral_grammar_constraint(
            mistral.tokenizer,
            tools=normalize_tools(plain(request.tools)),
            tool_choice=plain(request.tool_choice),
            parallel_tool_calls=request.parallel_tool_calls,
            structured_outputs=text_request.structured_outputs,
            response_format=text_request.response_format,
        )
        text_request.structured_outputs = {"grammar": grammar}
        if drop_format:
            text_request.response_format = None
        return True

    def _force_tool_calls(self, request: ChatRequest) -> None:
        # vLLM's Parser.adjust_request (after rendering): the parser's structural tag
        # (chat/tool_tags.py), else for "required" or a named function the tools' JSON schema,
        # replaces any response_format / structured_outputs (the schema leaves a
        # structured_outputs structural tag, a gpt-oss model's wrapped constraint included).
        parsers = self._parsers
        if parsers is None or not parsers.has_tools or not request.tools:
            return
        if parsers.structural_tag_model is not None and self._apply_tool_tag(request, parsers):
            return
        self._check_named_without_tag(request, parsers)
        if not parsers.forces_with_json:
            # The parser reads forced choices in the model's own format; a few constrain them.
            self._force_parser_schema(request, parsers)
            return
        forced = forced_tool_choice(plain(request.tool_choice))
        if forced is None:
            return
        text_request = request.text
        so = text_request.structured_outputs
        if so is not None and so.get("structural_tag") is not None:
            return  # vLLM's ToolParser.adjust_request keeps a structured_outputs tag
        schema = forced_tool_schema(plain(request.tools), forced, request.parallel_tool_calls)
        text_request.structured_outputs = {"json": schema}
        text_request.response_format = None

    def _apply_cohere_tag(self, request: ChatRequest) -> None:
        # vLLM's CohereCommandParser.adjust_request (run with a reasoning parser or a tool
        # choice other than none): the JSON schema and the tools go into a structural tag.
        parsers = self._parsers
        assert parsers is not None
        if parsers.reasoning_cls is None and plain(request.tool_choice) == "none":
            return
        text_request = request.text
        tag = cohere_structural_tag(
            parsers.architecture,
            plain(request.tools),
            plain(text_request.response_format),
            plain(text_request.structured_outputs),
        )
        if tag is None:
            return
        text_request.structured_outputs = {"structural_tag": tag}
        rf = text_request.response_format
        if rf is not None and rf.get("type") in ("json_schema", "json_object"):
            text_request.response_format = None

    def _check_named_without_tag(self, request: ChatRequest, parsers: OutputParsers) -> None:
        # (vLLM's KimiK3ToolParser.adjust_request): a named choice no structural tag forces.
        tool_cls = parsers.tool_cls
        message = tool_cls.named_choice_needs_tag if tool_cls is not None else None
        choice = plain(request.tool_choice)
        if message is None or not isinstance(choice, dict):
            return
        so = request.text.structured_outputs
        if so is not None and so.get("structural_tag") is not None:
            return
        name = (choice.get("function") or {}).get("name")
        raise ChatError(
            message,
            param="tool_choice",
            value=f"function=ChatCompletionNamedFunction(name={name!r}) type='function'",
        )

    def _force_parser_schema(self, request: ChatRequest, parsers: OutputParsers) -> None:
        # (vLLM's MistralParser.adjust_request without a mistral tokenizer): only while the
        # request has no constraint of its own.
        tool_cls = parsers.tool_cls
        text_request = request.text
        response_format = text_request.response_format
        kind = response_format.get("type") if response_format is not None else None
        if (
            tool_cls is None
            or text_request.structured_outputs is not None
            or kind not in (None, "text", "json_object", "json_schema")
        ):
            return
        schema = tool_cls.forced_schema(plain(request.tools), plain(request.tool_choice))
        if schema is not None:
            text_request.structured_outputs = {"json": schema}
            text_request.response_format = None

    def _apply_tool_tag(self, request: ChatRequest, parsers: OutputParsers) -> bool:
        model = parsers.structural_tag_model
        assert model is not None
        text_request = request.text
        so = _merged_constraint(request)
        constraint = None
        if so is not None:
            constraint = {k: getattr(so, k) for k in CONSTRAINT_FIELDS}
        tag = tool_structural_tag(
            model,
            plain(request.tools),
            plain(request.tool_choice),
            parallel_tool_calls=request.parallel_tool_calls,
            structured_outputs=constraint,
            strict_level=parsers.tool_strict_level,
            xgrammar_accepts=lambda: so is not None and xgrammar_supports(so),
            token_suffix=parsers.tag_token_suffix,
        )
        if tag is None:
            return False
        text_request.structured_outputs = {"structural_tag": tag}
        text_request.response_format = None
        return True

    def parser_for(self, request: ChatRequest) -> AnyOutputParser | None:
        """A fresh output parser for one choice of ``request`` (None without parsers), as
        :meth:`ChatGeneration.new_parser` gives it, for output that was generated elsewhere."""
        parsers = self._parsers
        return None if parsers is None else parsers.for_request(self._options(request))

    def _options(self, request: ChatRequest) -> RequestToolOptions:
        renderer = self.renderer
        kwargs = dict(renderer.options.default_chat_template_kwargs) if renderer else {}
        user = request.chat_template_kwargs or {}
        if request.reasoning_effort is not None and "enable_thinking" not in user:
            kwargs["enable_thinking"] = request.reasoning_effort != "none"
        kwargs.update(user)
        if request.reasoning_effort is not None:
            kwargs["reasoning_effort"] = request.reasoning_effort  # vLLM passes it on too
        so = request.text.structured_outputs
        return RequestToolOptions(
            guided=so is not None and so.get("structural_tag") is not None,
            tools=bool(request.tools),
            tool_choice=plain(request.tool_choice),
            include_reasoning=bool(request.include_reasoning),
            chat_template_kwargs=kwargs,
            tool_definitions=request.tools or (),
            request_chat_template_kwargs=user,
            logprobs=request.logprobs,
            parallel_tool_calls=request.parallel_tool_calls,
            history_tool_calls=(
                count_history_tool_calls(plain(request.messages))
                if self._parsers is not None and self._parsers.indexed_tool_call_ids
                else 0
            ),
        )


def _merged_constraint(request: ChatRequest) -> StructuredOutputsParams | None:
    # vLLM's extract_structured_outputs: structured_outputs with response_format applied.
    text_request = request.text
    if text_request.structured_outputs is None and not text_request.response_format:
        return None
    return merge_response_format(
        structured_outputs_params(text_request.structured_outputs)
        if text_request.structured_outputs is not None
        else None,
        text_request.response_format,
    )


class ChatGeneration:
    """A chat request, rendered and tokenized: its text generation, the response role, the
    echoed text, and a fresh output parser per choice (:meth:`new_parser`)."""

    __slots__ = ("_chat", "_request", "echo_text", "role", "text")

    def __init__(
        self,
        chat: ChatLlm,
        request: ChatRequest,
        text: TextGeneration,
        role: str,
        echo_text: str | None,
    ) -> None:
        self._chat = chat
        self._request = request
        self.text = text
        """The text-level generation (one prompt)."""
        self.role = role
        """The response message's role."""
        self.echo_text = echo_text
        """With ``echo``: the last message's content, sent before the generated text."""

    @property
    def has_reasoning(self) -> bool:
        """A reasoning parser is configured (usage then counts reasoning tokens)."""
        parsers = self._chat._parsers
        return parsers is not None and parsers.has_reasoning

    def new_parser(self) -> AnyOutputParser | None:
        """A parser for one choice's output (None without configured parsers)."""
        chat = self._chat
        parsers = chat._parsers
        if parsers is None:
            return None
        parser = parsers.for_request(chat._options(self._request))
        if isinstance(parser, ResponseTemplateOutputParser) and self.text.prompts:
            parser.set_prompt_token_ids(self.text.prompts[0].token_ids)  # read before the output
        return parser


class PromptTokenizer(Protocol):
    """What :func:`chat_tokenizer` needs of a tokenizer (``text.Tokenizer`` has it)."""

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text``."""
        ...


def generation_prompt(add_generation_prompt: Any, continue_final_message: Any) -> Any:
    """The request's ``add_generation_prompt`` for :meth:`ChatRenderer.render`: ``None``
    (absent) when both are truthy. The request's validation refuses both given truthy, so both
    here means the field took its default, and the render then gives transformers' refusal, as
    vLLM's does."""
    return None if add_generation_prompt and continue_final_message else add_generation_prompt


def chat_tokenizer(
    renderer: ChatRenderer | MistralChatRenderer,
    tokenizer: PromptTokenizer,
    media: MultimodalLlm | None = None,
) -> Callable[[Any], list[int] | Awaitable[list[int]]]:
    """The ``/tokenize`` messages form: render with the request's template options, then
    tokenize with its ``add_special_tokens`` (vLLM's ``preprocess_chat``), each media item's
    placeholder expanded as for generation (``media``, a multimodal model's); a mistral_common
    renderer gives the ids itself."""
    if isinstance(renderer, MistralChatRenderer):
        mistral = renderer

        def tokenize_mistral(req: Any) -> list[int]:
            return mistral.render_for_tokenize(
                req.messages,
                tools=req.tools,
                add_generation_prompt=req.add_generation_prompt,
                continue_final_message=req.continue_final_message,
                chat_template=req.chat_template,
                chat_template_kwargs=req.chat_template_kwargs,
            ).prompt

        return tokenize_mistral

    def tokenize(req: Any) -> list[int] | Awaitable[list[int]]:
        parts = media.new_parts() if media is not None else None
        try:
            rendered = renderer.render(
                req.messages,
                tools=req.tools,
                add_generation_prompt=generation_prompt(
                    req.add_generation_prompt, req.continue_final_message
                ),
                continue_final_message=req.continue_final_message,
                chat_template=req.chat_template,
                chat_template_kwargs=req.chat_template_kwargs,
                media=parts,
            )
        except Exception as exc:
            if media is None or parts is None or not parts.complete or not parts.items:
                raise
            return _media_errors_first(media, parts, None, exc)
        ids = tokenizer.encode(rendered.prompt, add_special_tokens=req.add_special_tokens)
        if media is None or parts is None or not parts.items:
            return ids
        return media.tokenize_prompt(ids, parts, req.mm_processor_kwargs or {})

    return tokenize


async def _media_errors_first(
    media: MultimodalLlm, parts: MediaParts, media_io_kwargs: Any, error: Exception
) -> NoReturn:
    """Raise what vLLM answers a chat request whose render failed (``error``) once its media
    parts were all collected: vLLM loads the media before it applies the chat template, so a
    part that cannot be loaded is its answer; ``error`` when every part loads."""
    try:
        await media.check_loads(parts, media_io_kwargs)
        raise error
    finally:
        del error  # (the error's traceback keeps this frame: no cycle through it)


def _echo_text(request: ChatRequest, conversation: Sequence[Any], role: str) -> str | None:
    if not request.echo:
        return None
    content: Any = ""
    if conversation and "content" in conversation[-1] and conversation[-1].get("role") == role:
        content = conversation[-1]["content"] or ""
    if isinstance(content, list):
        content = "\n".join(part["text"] for part in content)
    return str(content)


def plain(value: Any) -> Any:
    """A request sub-object as plain JSON values (msgspec structs become dicts)."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return msgspec.to_builtins(value)
