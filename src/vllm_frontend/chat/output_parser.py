"""Assistant output parsing: reasoning first, then tool calls (vLLM's ``DelegatingParser``).

:class:`OutputParsers` is built once at startup from ``--reasoning-parser``,
``--tool-call-parser`` and ``--enable-auto-tool-choice`` (unknown names and vocabularies that
lack a parser's marker tokens fail there). Per choice, :meth:`OutputParsers.for_request` gives an
:class:`OutputParser` that turns streamed text deltas + token ids into :class:`OutputDelta`
events (:meth:`OutputParser.feed`), or a whole output into a :class:`ParsedOutput`
(:meth:`OutputParser.parse`). Orchestration follows ``vllm/parser/abstract_parser.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec

from vllm_frontend.chat.cohere_output import (
    END_THINKING,
    START_THINKING,
    CohereOutputParser,
    melody,
)
from vllm_frontend.chat.engine.calls import EngineToolParser
from vllm_frontend.chat.errors import ChatError
from vllm_frontend.chat.harmony_output import HarmonyOutputParser
from vllm_frontend.chat.newlines import DeltaNewlines, recover_newlines
from vllm_frontend.chat.parsed import OutputDelta, ParsedOutput, ToolCall, new_tool_call_id
from vllm_frontend.chat.parser_registry import PARSER_TOKENS, REASONING_PARSERS, TOOL_PARSERS
from vllm_frontend.chat.reasoning.base import ModelFacts, ReasoningParser
from vllm_frontend.chat.reasoning.hf import ResponseTemplateReasoningParser
from vllm_frontend.chat.reasoning.refused import REFUSED_REASONING_PARSERS
from vllm_frontend.chat.response_template import (
    ResponseTemplate,
    ResponseTemplateOutputParser,
    check_serving_template,
    request_refusal,
    serving_template,
    template_of,
)
from vllm_frontend.chat.tool_choice import (
    ForcedToolCallStream,
    forced_tool_choice,
    parse_required_tool_calls,
)
from vllm_frontend.chat.tool_tags import (
    DEFAULT_STRICT_LEVELS,
    STRUCTURAL_TAG_MODELS,
    enforce_strict_tool_calling,
    strict_level_value,
)
from vllm_frontend.chat.tools.base import ToolParser
from vllm_frontend.chat.tools.refused import REFUSED_TOOL_PARSERS
from vllm_frontend.text.xgrammar_native import unavailable_reason

__all__ = [
    "KIMI_MODEL_TYPES",
    "OutputParser",
    "OutputParsers",
    "ParserConfigError",
    "RequestToolOptions",
    "count_history_tool_calls",
]

KIMI_MODEL_TYPES = frozenset({"kimi_k2", "kimi_k25", "kimi_k3"})
"""Model types whose tool-call ids vLLM writes as ``functions.NAME:N`` (``chat_utils``)."""

_log = logging.getLogger(__name__)

MARKER_TOKENS = ("<think>", "</think>", "<tool_call>", "</tool_call>", "<|im_start|>", "<|im_end|>")
"""Every token string a parser may look up by id (besides their ``required_tokens``)."""


class ParserConfigError(ValueError):
    """A parser name is unknown, or the tokenizer lacks the tokens a parser needs."""


class RequestToolOptions(msgspec.Struct, frozen=True):
    """What of a chat request steers output parsing."""

    tools: bool
    """The request has a non-empty ``tools`` list."""
    tool_choice: Any
    """``"none" | "auto" | "required" | {"type": "function", ...} | None``."""
    include_reasoning: bool = True
    chat_template_kwargs: Mapping[str, Any] | None = None
    """The effective chat template kwargs (server defaults, ``reasoning_effort`` merged in)."""
    tool_definitions: Sequence[Mapping[str, Any]] = ()
    """The request's ``tools`` (parsers that type arguments by their schemas read them)."""
    request_chat_template_kwargs: Mapping[str, Any] | None = None
    """The request's own ``chat_template_kwargs``, which a few vLLM parsers read instead."""
    logprobs: bool = False
    """The request asks for logprobs (``poolside_v1`` reads it)."""
    guided: bool = False
    """The request's ``structured_outputs`` (as the parsers adjusted it) hold a structural tag
    (``hy_v4`` then finds its markers in the text: they may come in pieces)."""
    parallel_tool_calls: bool | None = None
    """The request's ``parallel_tool_calls`` (the ``hf`` parser refuses ``false``)."""
    history_tool_calls: int = 0
    """Tool calls of the conversation's assistant messages (Kimi-style ids count from it)."""


class OutputParsers:
    """The configured parser pair (vLLM's ``ParserManager.get_parser`` result)."""

    def __init__(
        self,
        vocab: Mapping[str, int],
        *,
        tool_call_parser: str | None = None,
        reasoning_parser: str | None = None,
        enable_auto_tool_choice: bool = False,
        tool_strict_level: str = "auto",
        model: ModelFacts | None = None,
        harmony: bool = False,
        decode: Callable[[Sequence[int]], str] | None = None,
        special_tokens: Mapping[str, int] | None = None,
        encode: Callable[[str], list[int]] | None = None,
        prompt_decode: Callable[[Sequence[int]], str] | None = None,
    ) -> None:
        """Resolve and validate the names against the registries and the vocabulary (and
        ``model``, which a few reasoning parsers read). ``harmony``: the model is a gpt-oss
        one, whose output vLLM reads through Harmony whatever the names (only the gpt-oss
        parsers are accepted); ``decode`` then gives the text of ids Harmony cannot read.
        ``special_tokens``: the tokenizer's special tokens (transformers'
        ``all_special_tokens``, with their ids), which the engine-based tool parsers drop from
        the output. ``encode`` (no special tokens added) and ``decode`` are given to the
        reasoning parsers that tokenize text themselves (``uses_codec``). ``prompt_decode``
        decodes prompts as vLLM's ``hf`` parser does (special tokens kept, no clean-up; else
        ``decode``)."""
        self.vocab = vocab
        self.architecture = model.architecture if model is not None else None
        """The model's architecture (the Cohere Command parser's tags depend on it)."""
        self._encode = encode
        self.special_tokens = dict(special_tokens or {})
        self.enable_auto_tools = enable_auto_tool_choice
        self.harmony = harmony
        self._decode = decode
        self.reasoning_cls: type[ReasoningParser] | None = None
        self.tool_cls: type[ToolParser] | None = None
        if reasoning_parser:
            self.reasoning_cls = resolve_reasoning_parser(reasoning_parser).for_model(
                model or ModelFacts()
            )
        self.structural_tag_model: str | None = None
        """The tool parser's structural-tag model while vLLM would use it (chat/tool_tags.py:
        forced and strict tool calls are then constrained in the model's own syntax)."""
        self.tool_strict_level = strict_level_value(tool_strict_level)
        """``--tool-strict-level``, or the parser's default while it is ``auto``."""
        self.unified: str | None = self.reasoning_cls.unified if self.reasoning_cls else None
        """The vLLM unified parser the names compose (``vllm/parser/``), if any."""
        if tool_call_parser:
            cls = resolve_tool_parser(tool_call_parser)
            self.unified = self.unified or cls.unified
            # vLLM only builds the tool parser with --enable-auto-tool-choice.
            if enable_auto_tool_choice:
                self.tool_cls = cls.for_model(model or ModelFacts())
                if enforce_strict_tool_calling():
                    self.structural_tag_model = STRUCTURAL_TAG_MODELS.get(tool_call_parser)
                if self.tool_strict_level == 0:
                    self.tool_strict_level = DEFAULT_STRICT_LEVELS.get(tool_call_parser, 0)
        # vLLM's ParserManager refuses hf next to another name before any other check.
        names = {reasoning_parser, tool_call_parser}
        configured = (self.reasoning_cls or self.tool_cls) is not None
        if "hf" in names and not harmony and configured and names - {"hf", None, ""}:
            raise ParserConfigError(
                "The hf parser cannot be combined with other reasoning or tool call parsers"
            )
        flags = []
        missing: list[str] = []
        for cls_, flag, name in (
            (self.tool_cls, "--tool-call-parser", tool_call_parser),
            (self.reasoning_cls, "--reasoning-parser", reasoning_parser),
        ):
            if cls_ is None:
                continue
            flags.append(f"{flag} {name}")
            missing += [t for t in cls_.required_tokens if t not in vocab]
        if missing:
            raise ParserConfigError(
                f"{' and '.join(flags)} cannot be used with this tokenizer: it lacks the "
                + ", ".join(repr(t) for t in missing)
                + " token(s)"
            )
        self._check_harmony(flags)
        self._check_cohere(flags)
        self.response_template: ResponseTemplate | None = None
        """The model's response template (streaming form) for the ``hf`` parsers."""
        self.indexed_tool_call_ids = model is not None and bool(
            set(model.model_types) & KIMI_MODEL_TYPES
        )
        """vLLM's ``get_tool_call_id_type`` is ``kimi_k2`` for the model: the ``hf`` parser's
        ids are ``functions.NAME:N``, N counting the conversation's calls."""
        self._prompt_decode = prompt_decode or decode
        self._check_hf(flags, (reasoning_parser, tool_call_parser), model)

    def _check_hf(
        self, flags: list[str], names: tuple[str | None, str | None], model: ModelFacts | None
    ) -> None:
        # vLLM's ParserManager: the hf parser alone, with a template that serves the flags.
        if "hf" not in names or self.harmony or (self.reasoning_cls or self.tool_cls) is None:
            return
        self.unified = "hf"
        spec = None
        if model is not None and model.mistral_version is None:
            spec = template_of(model.tokenizer_config)
        try:
            why = check_serving_template(
                spec, reasoning=self.reasoning_cls is not None, tools=self.tool_cls is not None
            )
        except ImportError as e:
            raise ParserConfigError(str(e)) from e
        if why:
            raise ParserConfigError(
                f"{' and '.join(flags)} cannot be used with this tokenizer: {why}"
            )
        assert spec is not None
        decode = self._prompt_decode
        if decode is None:
            raise ParserConfigError("the hf parser needs the tokenizer's decode")
        self.response_template = serving_template(spec)
        if self.reasoning_cls is not None:
            self.reasoning_cls = ResponseTemplateReasoningParser.bound(
                self.response_template, decode
            )

    def _check_cohere(self, flags: list[str]) -> None:
        # vLLM's Cohere Command parser takes its melody preset from the reasoning parser when
        # there is one (a non-Cohere one fails vLLM's startup), else from the tool parser.
        if self.unified != "cohere":
            return
        shim = self.reasoning_cls or self.tool_cls
        if shim is None:
            return
        if shim.unified != "cohere" or (
            self.tool_cls is not None and self.tool_cls.unified != "cohere"
        ):
            raise ParserConfigError(
                f"{' and '.join(flags)}: vllm-frontend serves the Cohere Command parsers "
                "(cohere_command3, cohere_command4) only with each other"
            )
        try:
            melody()
        except ImportError as e:
            raise ParserConfigError(str(e)) from e
        if (reason := unavailable_reason()) is not None:
            # vLLM converts the tools' schemas with xgrammar for Command A models.
            _log.warning("Cohere Command requests with tools will answer 501: %s", reason)

    def _check_harmony(self, flags: list[str]) -> None:
        # vLLM's HarmonyParser refuses other parsers at startup (validate_parser_tokenizer);
        # the gpt-oss parsers on another model would fail every request there.
        for cls_, kind in ((self.reasoning_cls, "Reasoning"), (self.tool_cls, "Tool")):
            if cls_ is None:
                continue
            if self.harmony and not cls_.harmony_only:
                raise ParserConfigError(
                    f"{' and '.join(flags)} cannot be used with this gpt-oss model: Harmony "
                    f"requires the gpt-oss {kind.lower()} parser (openai"
                    f"{'_gptoss' if kind == 'Reasoning' else ''}), got {cls_.name!r}"
                )
            if not self.harmony and cls_.harmony_only:
                raise ParserConfigError(
                    f"{' and '.join(flags)} parses gpt-oss (Harmony) output only, and this "
                    "model is not a gpt-oss one (config.json model_type gpt_oss)"
                )

    @classmethod
    def for_tokenizer(
        cls,
        token_to_id: Callable[[str], int | None],
        *,
        tool_call_parser: str | None = None,
        reasoning_parser: str | None = None,
        enable_auto_tool_choice: bool = False,
        tool_strict_level: str = "auto",
        model: ModelFacts | None = None,
        harmony: bool = False,
        decode: Callable[[Sequence[int]], str] | None = None,
        special_tokens: Mapping[str, int] | None = None,
        encode: Callable[[str], list[int]] | None = None,
        prompt_decode: Callable[[Sequence[int]], str] | None = None,
    ) -> OutputParsers:
        """Like the constructor, looking up only the marker tokens parsers use (a full
        vocabulary dict would cost megabytes for nothing)."""
        names = set(MARKER_TOKENS) | PARSER_TOKENS  # (the classes' tokens, not imported)
        if reasoning_parser and model is not None and reasoning_parser in REASONING_PARSERS:
            served = REASONING_PARSERS[reasoning_parser].for_model(model)
            names.update(served.required_tokens + served.optional_tokens)
        if tool_call_parser and model is not None and tool_call_parser in TOOL_PARSERS:
            served_tool = TOOL_PARSERS[tool_call_parser].for_model(model)
            names.update(served_tool.required_tokens + served_tool.optional_tokens)
        vocab = {t: i for t in names if (i := token_to_id(t)) is not None}
        return cls(
            vocab,
            tool_call_parser=tool_call_parser,
            reasoning_parser=reasoning_parser,
            enable_auto_tool_choice=enable_auto_tool_choice,
            tool_strict_level=tool_strict_level,
            model=model,
            harmony=harmony,
            decode=decode,
            special_tokens=special_tokens,
            encode=encode,
            prompt_decode=prompt_decode,
        )

    @property
    def codec(
        self,
    ) -> tuple[Callable[[str], list[int]] | None, Callable[[Sequence[int]], str] | None]:
        """The tokenizer's ``(encode, decode)`` given at startup (for ``uses_codec``
        reasoning parsers)."""
        return self._encode, self._decode

    @property
    def active(self) -> bool:
        """Whether any parser is configured (else output is plain content)."""
        return self.reasoning_cls is not None or self.tool_cls is not None

    @property
    def has_reasoning(self) -> bool:
        """Whether a reasoning parser is configured (``usage`` then reports reasoning tokens)."""
        return self.reasoning_cls is not None

    @property
    def forces_with_json(self) -> bool:
        """Whether ``"required"`` / named tool choices are forced with the tools' JSON schema
        (chat/tool_choice.py) and read back as JSON; else the tool parser reads them in the
        model's own format (a structural tag, or nothing, constrains them)."""
        tool = self.tool_cls
        return (
            tool is not None
            and tool.supports_required_and_named
            and self.structural_tag_model is None
        )

    @property
    def tag_token_suffix(self) -> str:
        """The marker suffix of the checkpoint the tool parser reads (``hy_v4``), which its
        structural tag carries too."""
        suffix = getattr(self.tool_cls, "suffix", "")
        return suffix if isinstance(suffix, str) else ""

    @property
    def has_tools(self) -> bool:
        """Whether tool calls are parsed (``--enable-auto-tool-choice`` with a parser)."""
        return self.tool_cls is not None

    def needs_special_tokens(self, options: RequestToolOptions) -> bool:
        """Whether the request must keep special tokens in its text (the parsers'
        ``adjust_request``): reasoning parsers that need them always, tool parsers when the
        request has tools and ``tool_choice`` is not ``none``; the ``hf`` parser always."""
        if self.unified == "hf":
            return True
        if self.reasoning_cls is not None and self.reasoning_cls.needs_special_tokens:
            return True
        tool = self.tool_cls
        if tool is not None and tool.special_tokens_without_tools:
            # vLLM runs the tool parser's adjust_request with a reasoning parser or a tool
            # choice other than none.
            return self.reasoning_cls is not None or options.tool_choice != "none"
        return bool(
            self.tool_cls is not None
            and self.tool_cls.needs_special_tokens
            and options.tools
            and options.tool_choice != "none"
        )

    def joins_special_tokens(self, options: RequestToolOptions) -> bool:
        """Whether the parsers' ``adjust_request`` also turns ``spaces_between_special_tokens``
        off for the request (the tool parser's runs with a reasoning parser or a tool choice
        other than none; the ``hf`` parser always)."""
        if self.unified == "hf":
            return True
        if self.reasoning_cls is not None and self.reasoning_cls.joins_special_tokens:
            return True
        tool = self.tool_cls
        return (
            tool is not None
            and tool.joins_special_tokens
            and (self.reasoning_cls is not None or options.tool_choice != "none")
        )

    def check_request(self, options: RequestToolOptions) -> None:
        """Refuse request settings a configured parser refuses (:class:`ValueError`), before
        the request is rendered, as vLLM does when it builds the request's parser."""
        if self.harmony:
            return
        if self.reasoning_cls is not None:
            self.reasoning_cls.check_request(options.chat_template_kwargs or {})
        if self.tool_cls is not None and (
            self.reasoning_cls is not None or options.tool_choice != "none"
        ):
            self.tool_cls.check_request(options.request_chat_template_kwargs or {})

    def check_adjusted(self, options: RequestToolOptions) -> None:
        """Refuse (:class:`ChatError`, a 400) what the parsers' ``adjust_request`` refuses
        after rendering: the ``hf`` tool parser cannot guarantee strict tools, forced tool
        choices or ``parallel_tool_calls: false``."""
        if self.unified != "hf" or self.tool_cls is None:
            return
        if not options.tools or options.tool_choice == "none":
            return
        refusal = request_refusal(
            [_plain(t) for t in options.tool_definitions],
            options.tool_choice,
            options.parallel_tool_calls,
        )
        if refusal is not None:
            message, param = refusal
            raise ChatError(message, param=param)

    def for_request(
        self, options: RequestToolOptions
    ) -> OutputParser | HarmonyOutputParser | CohereOutputParser | ResponseTemplateOutputParser:
        """A fresh parser for one choice of a request."""
        if self.harmony:
            decode = self._decode
            if decode is None:
                raise RuntimeError("a gpt-oss model's parsers need the tokenizer's decode")
            return HarmonyOutputParser(
                reasoning=self.reasoning_cls is not None,
                tools=self.tool_cls is not None,
                tool_choice=options.tool_choice,
                include_reasoning=options.include_reasoning,
                request_has_tools=options.tools,
                enable_auto_tools=self.enable_auto_tools,
                decode=decode,
            )
        if self.unified == "cohere" and (self.reasoning_cls or self.tool_cls) is not None:
            return self._cohere(options)
        if self.response_template is not None:
            return self._response_template(options)
        reasoning = None
        if self.reasoning_cls is not None:
            if getattr(self.reasoning_cls, "reads_special_tokens", False):
                reasoning = self.reasoning_cls(
                    self.vocab,
                    options.chat_template_kwargs,
                    special_tokens=self.special_tokens,  # type: ignore[call-arg]
                )
            else:
                reasoning = self.reasoning_cls(self.vocab, options.chat_template_kwargs)
            reasoning.request_kwargs = options.request_chat_template_kwargs or {}
            reasoning.keeps_tool_markup = options.tools and options.tool_choice != "none"
            if reasoning.uses_codec:
                reasoning.encode, reasoning.decode = self._encode, self._decode
        tool: ToolParser | None = None
        if self.tool_cls is not None and issubclass(self.tool_cls, EngineToolParser):
            tool = self.tool_cls(
                self.vocab,
                options.tool_definitions,
                chat_template_kwargs=options.chat_template_kwargs,
                special_tokens=self.special_tokens,
                skip_reasoning=self.reasoning_cls is None,
                tool_choice=options.tool_choice,
            )
        elif self.tool_cls is not None:
            tool = self.tool_cls(self.vocab, options.tool_definitions)
        if tool is not None:
            if tool.uses_codec:
                tool.encode = self._encode
            tool.guided = options.guided
            if options.logprobs:
                tool.wants_logprobs = True
            if tool.reads_request:
                tool.tool_choice = options.tool_choice
                tool.request_kwargs = options.request_chat_template_kwargs or {}
        if tool is not None and self.structural_tag_model is not None:
            # vLLM's ToolParser.__init_subclass__ under VLLM_ENFORCE_STRICT_TOOL_CALLING
            setattr(tool, "supports_required_and_named", False)  # noqa: B010
        return OutputParser(reasoning, tool, options, self.enable_auto_tools, self.unified)

    def _response_template(self, options: RequestToolOptions) -> ResponseTemplateOutputParser:
        # vLLM's ResponseTemplateParser: tool parsing for "none" off, forced choices on, else
        # with --enable-auto-tool-choice (which the tool parser exists only with).
        assert self.response_template is not None and self._prompt_decode is not None
        choice = options.tool_choice
        parse_tools = self.tool_cls is not None and choice != "none"
        return ResponseTemplateOutputParser(
            self.response_template,
            tools=[_plain(t) for t in options.tool_definitions],
            parse_reasoning=self.reasoning_cls is not None,
            include_reasoning=options.include_reasoning,
            parse_tools=parse_tools,
            tool_calls_in_message=parse_tools and options.tools and choice == "auto",
            decode=self._prompt_decode,
            first_indexed_id=(options.history_tool_calls if self.indexed_tool_call_ids else None),
        )

    def _cohere(self, options: RequestToolOptions) -> CohereOutputParser:
        shim = self.reasoning_cls or self.tool_cls
        return CohereOutputParser(
            getattr(shim, "preset"),  # noqa: B009
            tools_allowed=self.tool_cls is not None and options.tool_choice != "none",
            tool_choice=options.tool_choice,
            request_tools=options.tools,
            include_reasoning=options.include_reasoning,
            thinking_ids=(self.vocab.get(START_THINKING), self.vocab.get(END_THINKING)),
        )


def resolve_tool_parser(name: str) -> type[ToolParser]:
    """The tool parser class registered as ``name``."""
    if (reason := REFUSED_TOOL_PARSERS.get(name)) is not None:
        raise ParserConfigError(
            f"tool call parser {name!r} is not supported by vllm-frontend: {reason}"
        )
    if name not in TOOL_PARSERS:
        raise ParserConfigError(
            f"tool call parser {name!r} is not supported by vllm-frontend; choose one of: "
            + ", ".join(sorted(TOOL_PARSERS))
        )
    return TOOL_PARSERS[name]


def resolve_reasoning_parser(name: str) -> type[ReasoningParser]:
    """The reasoning parser class registered as ``name``."""
    if (reason := REFUSED_REASONING_PARSERS.get(name)) is not None:
        raise ParserConfigError(
            f"reasoning parser {name!r} is not supported by vllm-frontend: {reason}"
        )
    if name not in REASONING_PARSERS:
        raise ParserConfigError(
            f"reasoning parser {name!r} is not supported by vllm-frontend; choose one of: "
            + ", ".join(sorted(REASONING_PARSERS))
        )
    return REASONING_PARSERS[name]


class OutputParser:
    """Parses one choice's output: streamed with :meth:`feed`, or whole with :meth:`parse`."""

    def __init__(
        self,
        reasoning: ReasoningParser | None,
        tool: ToolParser | None,
        options: RequestToolOptions,
        enable_auto_tools: bool,
        unified: str | None = None,
    ) -> None:
        """Use :meth:`OutputParsers.for_request`."""
        self.reasoning = reasoning
        self.tool = tool
        self.options = options
        self.enable_auto_tools = enable_auto_tools
        self._kimi_k3 = unified == "kimi_k3"
        self._newlines = DeltaNewlines() if unified == "minicpmv" else None
        """vLLM's MiniCPM-V parser: escaped newlines recovered in reasoning and content."""
        # vLLM's KimiK3Parser: without a tool parser, its reasoning parser unwraps the content.
        self._strip_content = (
            self._kimi_k3
            and tool is None
            and reasoning is not None
            and reasoning.unified == "kimi_k3"
        )
        # vLLM's "engine based" mode: no legacy parser in the pair, texts are not accumulated.
        self._engine_based = (tool is None or tool.engine_based) and (
            reasoning is None or reasoning.engine_based
        )
        self._reasoning_ended = False
        self._prompt_checked = False
        self._tool_text_started = False
        self._prev_text = ""
        self._prev_ids: list[int] = []
        self._output_ids: list[int] = []
        """Every generated id, kept only with a reasoning parser (vLLM counts reasoning tokens
        over the whole output)."""
        self.tool_calls_streamed = False
        """Whether any tool-call piece has been streamed (finish reason ``tool_calls``)."""
        # "required" or a named function: the output is JSON the engine was constrained to
        # (chat/tool_choice.py), read without the tool parser, as vLLM's Parser does.
        self.forced_choice = forced_tool_choice(options.tool_choice) if tool is not None else None
        """The request's "required" / named tool choice (the response follows it either way)."""
        self.forced = (
            self.forced_choice if tool is not None and tool.supports_required_and_named else None
        )
        """The same when it is forced with JSON (else the parser reads the model's own format)."""
        self._forced_stream = ForcedToolCallStream(self.forced) if self.forced else None

    # -- streaming ---------------------------------------------------------------------------

    def feed(
        self,
        delta_text: str,
        delta_token_ids: Sequence[int],
        prompt_token_ids: Sequence[int] | None,
        *,
        finished: bool,
    ) -> OutputDelta | None:
        """What one engine update adds; ``None`` when there is nothing to send yet."""
        delta_ids = list(delta_token_ids)
        previous_content = self._prev_text if self._reasoning_ended else ""
        if not self._prompt_checked and prompt_token_ids is not None:
            self._prompt_checked = True
            if self.reasoning is None or self.reasoning.prompt_ends_reasoning(prompt_token_ids):
                self._reasoning_ended = True
        if self._engine_based:
            current_text, current_ids = delta_text, delta_ids
        else:
            current_text, current_ids = self._prev_text + delta_text, self._prev_ids + delta_ids
        msg: OutputDelta | None = None
        transitioned = False
        if self.reasoning is not None and not self._reasoning_ended:
            reasoning = self.reasoning
            if reasoning.reads_text:
                prev_text, prev_ids = self._prev_text, self._prev_ids
                msg = reasoning.stream_text(
                    prev_text, current_text, delta_text, prev_ids, current_ids, delta_ids
                )
                ended = reasoning.ended_after(current_ids, delta_ids)
            else:
                msg = reasoning.stream(self._prev_ids, delta_text, delta_ids)
                ended = reasoning.ended_in(delta_ids)
            if ended:
                self._reasoning_ended = transitioned = True
                current_ids = self.reasoning.content_token_ids(delta_ids)
                flushed = self.reasoning.finish() if self.reasoning.engine_based else None
                current_text = ((msg.content if msg else None) or "") + (
                    (flushed.content if flushed else None) or ""
                )
                if self._engine_based:
                    if self.tool is not None:
                        if msg is not None:
                            msg.content = None  # the tool phase below reads current_text
                    elif current_text:
                        msg = msg or OutputDelta()
                        msg.content = current_text
                else:
                    delta_text = current_text
        if self.reasoning is not None:
            self._output_ids += delta_token_ids
        if self.tool is not None and self._reasoning_ended:
            if not self._tool_text_started:
                self._tool_text_started = True
                self._prev_text, self._prev_ids = "", []
                delta_text, delta_ids = current_text, current_ids
            reasoning_text = msg.reasoning if msg else None
            msg = self._stream_tools(current_text, delta_text, current_ids, delta_ids)
            if reasoning_text:
                if msg is None:
                    msg = OutputDelta(reasoning=reasoning_text)
                elif not msg.reasoning:
                    msg.reasoning = reasoning_text
            if msg is not None and msg.tool_calls:
                self.tool_calls_streamed = True
        in_reasoning = self.reasoning is not None and not self._reasoning_ended
        in_tools = self.tool is not None and self._reasoning_ended
        if msg is None and not transitioned and not in_reasoning and not in_tools:
            msg = OutputDelta(content=delta_text)
        if self._engine_based:
            self._prev_text, self._prev_ids = "", []
        else:
            self._prev_text, self._prev_ids = current_text, current_ids
        if finished:
            msg = self._finish(msg)
        if msg is not None and not self.options.include_reasoning:
            msg.reasoning = None
            msg.reasoning_hidden = True  # vLLM sets it: the chunk says "reasoning": null
            if not msg.content and not msg.tool_calls:
                msg = None
        if self._newlines is not None:
            return self._newlines.apply(msg, finished=finished)
        if self._strip_content and self._reasoning_ended and msg is not None:
            assert self.reasoning is not None
            msg.content = self.reasoning.strip_content(previous_content, self._prev_text)
            if msg.content is None and msg.reasoning is None and not msg.tool_calls:
                return None
        return msg

    def _stream_tools(
        self, current_text: str, delta_text: str, current_ids: list[int], delta_ids: list[int]
    ) -> OutputDelta | None:
        assert self.tool is not None
        choice = self.options.tool_choice
        if choice == "none":
            if not self._engine_based and not self._kimi_k3:
                return OutputDelta(content=delta_text) if delta_text else None
            msg = self.tool.stream(
                self._prev_text, current_text, delta_text, self._prev_ids, current_ids, delta_ids
            )
            if msg is not None:
                msg.tool_calls = []
            return msg
        if self._forced_stream is not None:
            return self._forced_stream.feed(self._prev_text, current_text, delta_text)
        return self.tool.stream(
            self._prev_text, current_text, delta_text, self._prev_ids, current_ids, delta_ids
        )

    def _finish(self, msg: OutputDelta | None) -> OutputDelta | None:
        if self.reasoning is not None and not self._reasoning_ended:
            promoted = self.reasoning.fallback_content()
            if promoted:
                msg = msg or OutputDelta()
                msg.content = (msg.content or "") + promoted
        if self.tool is not None and self.forced is None and msg is not None and msg.tool_calls:
            last = msg.tool_calls[-1]
            last.arguments = (last.arguments or "") + self.tool.remaining_arguments()
        reasoning = self.reasoning
        if reasoning is not None and reasoning.engine_based and not self._reasoning_ended:
            flushed = reasoning.finish()
            if flushed is not None:
                if msg is None:
                    msg = flushed
                else:
                    if flushed.content:
                        msg.content = (msg.content or "") + flushed.content
                    if flushed.reasoning:
                        msg.reasoning = (msg.reasoning or "") + flushed.reasoning
        if self.tool is not None and self.tool.engine_based:
            flushed = self.tool.finish_stream()
            if flushed is not None:
                if msg is None:
                    msg = flushed
                else:
                    if flushed.content:
                        msg.content = (msg.content or "") + flushed.content
                    if flushed.reasoning:
                        msg.reasoning = (msg.reasoning or "") + flushed.reasoning
                    msg.tool_calls += flushed.tool_calls
                if flushed.tool_calls:
                    self.tool_calls_streamed = True
        return msg

    def streamed_reasoning_tokens(self) -> int:
        """Reasoning tokens of the streamed output (``usage.completion_tokens_details``)."""
        if self.reasoning is None:
            return 0
        return self.reasoning.count_reasoning_tokens(self._output_ids, streamed=True)

    # -- whole output ------------------------------------------------------------------------

    @property
    def null_later_names(self) -> bool:
        """Later pieces of a streamed call say ``"name": null`` (a forced ``"required"``)."""
        return self.forced is not None and self.forced.required

    def parse(self, text: str, token_ids: Sequence[int] = ()) -> ParsedOutput:
        """Split a finished output into reasoning, content and tool calls (from the text;
        ``token_ids`` are for the Harmony parser's interface)."""
        out = self._parse(text)
        if self._newlines is not None:
            out.reasoning = recover_newlines(out.reasoning)
            out.content = recover_newlines(out.content)
        return out

    def _parse(self, text: str) -> ParsedOutput:
        if self.reasoning is not None:
            reasoning, content = self.reasoning.extract(text)
        else:
            reasoning, content = None, text
        out = ParsedOutput(reasoning=reasoning, content=content)
        if self._kimi_k3 and self.tool is not None and self.enable_auto_tools:
            return self._parse_kimi_k3(out, content)
        if self.forced is not None:
            # vLLM's JSON branches of Parser._extract_tool_calls: the content is consumed.
            out.content = None
            if self.forced.name is not None:
                if content is not None and content.strip():
                    out.tool_calls = [ToolCall(new_tool_call_id(), self.forced.name, content)]
            else:
                out.tool_calls = [
                    ToolCall(new_tool_call_id(), name, arguments)
                    for name, arguments in parse_required_tool_calls(content or "")
                ]
            return out
        choice = self.options.tool_choice
        tool = self.tool
        if tool is not None and choice == "none" and self._engine_based:
            out.content = tool.extract(content or "").content
            return out
        # A parser that reads forced choices in its own format parses them as auto.
        forced_as_auto = (
            tool is not None
            and not tool.supports_required_and_named
            and forced_tool_choice(choice) is not None
        )
        auto = self.enable_auto_tools and (choice == "auto" or choice is None or forced_as_auto)
        if tool is None or choice == "none" or not auto:
            return out
        found = tool.extract(content if content is not None else "")
        if not found.tools_called:
            if forced_as_auto and (content is None or not content.strip()):
                out.content = None
            elif self._engine_based and tool.engine_based:
                out.content = found.content or None
            return out
        out.content = _blank_to_none(found.content)
        if choice is None:
            # An explicit null tool_choice: vLLM parses, then builds the message without calls.
            return out
        ids = found.ids or [new_tool_call_id() for _ in found.calls]
        out.tool_calls = [ToolCall(i, n, a) for i, (n, a) in zip(ids, found.calls, strict=True)]
        out.tools_called = bool(out.tool_calls) and not forced_as_auto
        return out

    def _parse_kimi_k3(self, out: ParsedOutput, content: str | None) -> ParsedOutput:
        # vLLM's KimiK3Parser._extract_tool_calls: the tool parser reads every output, its
        # content kept; its calls count unless the choice is none.
        assert self.tool is not None
        choice = self.options.tool_choice
        found = self.tool.extract(content or "")
        out.content = found.content
        if choice == "none" or not found.tools_called:
            return out
        out.content = _blank_to_none(found.content)
        if choice is None:
            return out  # as for the other parsers: parsed, then the message has no calls
        ids = found.ids or [new_tool_call_id() for _ in found.calls]
        out.tool_calls = [ToolCall(i, n, a) for i, (n, a) in zip(ids, found.calls, strict=True)]
        forced_as_auto = (
            not self.tool.supports_required_and_named and forced_tool_choice(choice) is not None
        )
        out.tools_called = bool(out.tool_calls) and not forced_as_auto
        return out

    def count_reasoning_tokens(self, token_ids: Sequence[int]) -> int:
        """Reasoning tokens of a finished output."""
        if self.reasoning is None:
            return 0
        return self.reasoning.count_reasoning_tokens(token_ids, streamed=False)


def count_history_tool_calls(messages: Any) -> int:
    """Tool calls of the assistant messages of a chat conversation (vLLM's
    ``count_chat_history_tool_calls``: a list counts its items, a single call one)."""
    count = 0
    for message in messages or ():
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        calls = message.get("tool_calls")
        if calls is None:
            continue
        count += 1 if isinstance(calls, str | bytes | dict) else len(list(calls))
    return count


def _plain(value: Any) -> Any:
    # A tool definition as plain JSON values (msgspec structs become dicts, nulls dropped as
    # vLLM's model_dump(exclude_none=True) drops them).
    value = value if isinstance(value, dict) else msgspec.to_builtins(value)
    return _drop_nones(value)


def _drop_nones(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_nones(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nones(v) for v in value]
    return value


def _blank_to_none(text: str | None) -> str | None:
    # (vLLM: ``if content and content.strip() == ""``, so an empty string stays empty)
    return None if text and text.strip() == "" else text
