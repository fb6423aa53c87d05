"""A chat request rendered into a prompt string, following vLLM 0.32's HF renderer step by step.

Order of work (and so of errors), as in vLLM's ``OnlineRenderer.render_chat`` →
``HfRenderer.render_messages`` → ``safe_apply_chat_template`` → transformers'
``apply_chat_template``: request-template trust check; template kwargs merged (server defaults
< tools < request ``chat_template_kwargs`` < request fields); content format resolved; messages
normalised; template resolved; developer messages folded into ``system`` for templates without
that role; kwargs filtered to what the template reads; template rendered.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import msgspec

from vllm_frontend.chat.errors import ChatError, MediaUnsupported
from vllm_frontend.chat.messages import Conversation, normalize_messages, normalize_tools
from vllm_frontend.chat.sources import (
    NO_TEMPLATE_MESSAGE,
    UNTRUSTED_TEMPLATE_MESSAGE,
    ModelChatTemplates,
)
from vllm_frontend.chat.template import (
    CompiledTemplate,
    ContentFormat,
    compile_template,
    render_template,
)
from vllm_frontend.chat.template_cache import TemplateCodeCache
from vllm_frontend.multimodal.parts import MediaParts

ContentFormatOption = Literal["auto", "string", "openai"]
"""``--chat-template-content-format``."""

# Parameters of transformers' ``apply_chat_template``: vLLM lets request kwargs with these
# names through whatever the template reads, and transformers consumes them itself.
_APPLY_PARAMS = frozenset(
    {
        "self",
        "conversation",
        "tools",
        "documents",
        "chat_template",
        "add_generation_prompt",
        "continue_final_message",
        "tokenize",
        "padding",
        "truncation",
        "max_length",
        "return_tensors",
        "return_dict",
        "return_assistant_tokens_mask",
        "tokenizer_kwargs",
    }
)
_UNSET = (None, "auto")

_SPECIAL_TOKEN_ATTRS = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)


def special_tokens_map(
    tokenizer_config: Mapping[str, Any], special_tokens_file: Mapping[str, Any] | None = None
) -> dict[str, str]:
    """The named special tokens a transformers tokenizer puts into the template context
    (``special_tokens_map``): ``bos_token`` … ``mask_token`` and model-specific ``*_token``
    entries, from ``tokenizer_config.json``. Like transformers, the legacy
    ``special_tokens_map.json`` is read only for configs without ``added_tokens_decoder``, and
    then its entries win.
    """
    merged: dict[str, Any] = dict(tokenizer_config)
    if special_tokens_file and "added_tokens_decoder" not in tokenizer_config:
        merged.update(special_tokens_file)
    out: dict[str, str] = {}
    for key in _SPECIAL_TOKEN_ATTRS:
        text = _token_text(merged.get(key))
        if text is not None:
            out[key] = text
    for key, value in merged.items():
        if key.endswith("_token") and key not in _SPECIAL_TOKEN_ATTRS:
            text = _token_text(value)
            if text is not None:
                out[key] = text
    extra = merged.get("extra_special_tokens")
    if isinstance(extra, Mapping):
        for key, value in extra.items():
            text = _token_text(value)
            if text is not None:
                out[str(key)] = text
    return out


def _token_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


class ChatTemplateOptions(msgspec.Struct, frozen=True):
    """Server-wide chat template settings (vLLM's frontend flags of the same names).

    ``chat_template`` is the *text* of ``--chat-template`` (see ``load_chat_template_option``).
    """

    chat_template: str | None = None
    content_format: ContentFormatOption = "auto"
    trust_request_chat_template: bool = False
    default_chat_template_kwargs: Mapping[str, Any] = msgspec.field(default_factory=dict)
    exclude_tools_when_tool_choice_none: bool = False
    model_name: str = ""
    """The first served model name (vLLM names it when refusing media for a text-only model)."""


class RenderedChat(msgspec.Struct, frozen=True):
    """A rendered chat prompt and the normalised conversation it came from (for ``echo``)."""

    prompt: str
    conversation: Conversation
    content_format: ContentFormat


class ChatRenderer:
    """Renders chat requests for one model; build once at startup, share across requests."""

    @classmethod
    def from_model_dir(
        cls, model_dir: str | Path, options: ChatTemplateOptions | None = None
    ) -> ChatRenderer:
        """The renderer for a local model directory (tokenizer files read from it)."""
        root = Path(model_dir)
        config = _read_json(root / "tokenizer_config.json")
        legacy = _read_json(root / "special_tokens_map.json")
        return cls(
            ModelChatTemplates.from_model_dir(root, config),
            special_tokens_map(config, legacy),
            options,
        )

    def __init__(
        self,
        templates: ModelChatTemplates,
        special_tokens: Mapping[str, str],
        options: ChatTemplateOptions | None = None,
        code_cache: TemplateCodeCache | None = None,
    ) -> None:
        """``code_cache`` keeps the compiled forms of the server's own templates (the model's
        and ``--chat-template``'s; not the ones requests bring) for later processes."""
        self.templates = templates
        self.special_tokens = dict(special_tokens)
        self.options = options or ChatTemplateOptions()
        self._code_cache = code_cache
        self._own_sources: frozenset[str] = frozenset(
            source
            for source in (
                *(
                    templates.tokenizer.values()
                    if isinstance(templates.tokenizer, Mapping)
                    else (templates.tokenizer,)
                ),
                templates.processor,
                self.options.chat_template,
            )
            if isinstance(source, str)
        )
        # The server's own template by ``has_tools`` (no request or --chat-template source):
        # what selecting and compiling it gives, kept once it compiled.
        self._own_templates: dict[bool, CompiledTemplate] = {}

    def _compile(self, source: str) -> CompiledTemplate:
        cache = self._code_cache if source in self._own_sources else None
        return compile_template(source, cache)

    def render(
        self,
        messages: Any,
        *,
        tools: Any = None,
        tool_choice: Any = None,
        documents: Any = None,
        add_generation_prompt: bool | None = None,
        continue_final_message: bool = False,
        chat_template: str | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        reasoning_effort: str | None = None,
        media: MediaParts | None = None,
    ) -> RenderedChat:
        """Render a chat completion request's ``messages`` into the prompt string.

        Arguments are the request fields of the same names, as JSON-decoded values;
        ``add_generation_prompt=None`` means the field was absent (vLLM's default is true).
        Raises :class:`ChatError` (HTTP 400) with vLLM's message for every client mistake.
        """
        opts = self.options
        if continue_final_message and add_generation_prompt:
            raise ChatError(
                "Cannot set both `continue_final_message` and `add_generation_prompt` to True."
            )
        if chat_template_kwargs is not None and not isinstance(chat_template_kwargs, Mapping):
            raise ChatError("chat_template_kwargs must be an object.", param="chat_template_kwargs")
        if not opts.trust_request_chat_template and (
            chat_template is not None
            or (chat_template_kwargs and chat_template_kwargs.get("chat_template") is not None)
        ):
            raise ChatError(UNTRUSTED_TEMPLATE_MESSAGE)

        tool_dicts = None
        if tools is not None and not (
            tool_choice == "none" and opts.exclude_tools_when_tool_choice_none
        ):
            tool_dicts = normalize_tools(tools)
        generation_prompt = True if add_generation_prompt is None else add_generation_prompt
        # Nothing to merge (the common request): the kwargs the merge would give, {tokenize,
        # add_generation_prompt, continue_final_message}, all three consumed before the render.
        plain_kwargs = (
            tool_dicts is None
            and not chat_template_kwargs
            and documents is None
            and reasoning_effort is None
            and not opts.default_chat_template_kwargs
            and type(generation_prompt) is bool
            and type(continue_final_message) is bool
        )
        kwargs: dict[str, Any] = {}
        if not plain_kwargs:
            kwargs = self._merged_kwargs(
                tool_dicts,
                request_kwargs=dict(chat_template_kwargs or {}),
                fields={
                    "add_generation_prompt": generation_prompt,
                    "continue_final_message": continue_final_message,
                    "documents": documents,
                    "reasoning_effort": reasoning_effort,
                },
            )
        tools_for_template = kwargs.pop("tools", None)
        has_tools = tools_for_template is not None
        # vLLM detects the content format on the request/server template, but renders with the
        # one the merged kwargs name (they differ only for a trusted kwargs template).
        if chat_template is not None and not isinstance(chat_template, str):
            raise ChatError("chat_template must be a string.", param="chat_template")
        requested = chat_template if chat_template is not None else opts.chat_template
        content_format = self._content_format(requested, has_tools)
        try:
            conversation = normalize_messages(messages, content_format, media)
        except MediaUnsupported:
            if not opts.model_name:
                raise
            # vLLM's multimodal registry refuses the part for a text-only model
            raise MediaUnsupported.naming(opts.model_name) from None

        if plain_kwargs:
            template = self._template(requested, has_tools)
            prompt = render_template(
                template,
                _template_conversation(template, conversation),
                add_generation_prompt=generation_prompt,
                continue_final_message=continue_final_message,
                special_tokens=self.special_tokens,
            )
            return RenderedChat(prompt, conversation, content_format)

        render_source = requested if requested is not None else kwargs.get("chat_template")
        kwargs.pop("chat_template", None)
        kwargs.pop("tokenize", None)
        if render_source is not None and not isinstance(render_source, str):
            raise ChatError("chat_template must be a string.", param="chat_template")
        template = self._template(render_source, has_tools)
        template_conversation = _template_conversation(template, conversation)

        variables = template.variables
        kwargs = {k: v for k, v in kwargs.items() if k in _APPLY_PARAMS or k in variables}
        for name in ("self", "conversation"):
            if name in kwargs:
                raise ChatError(
                    "PreTrainedTokenizerBase.apply_chat_template() got multiple values for "
                    f"argument '{name}'"
                )
        if kwargs.pop("return_assistant_tokens_mask", False):
            raise ChatError(
                "`return_assistant_tokens_mask=True` requires `return_dict=True` and "
                "`tokenize=True`"
            )
        for unused in ("padding", "truncation", "max_length", "return_tensors", "return_dict"):
            kwargs.pop(unused, None)
        kwargs.pop("tokenizer_kwargs", None)
        prompt = render_template(
            template,
            template_conversation,
            tools=tools_for_template,
            documents=kwargs.pop("documents", None),
            add_generation_prompt=bool(kwargs.pop("add_generation_prompt", False)),
            continue_final_message=bool(kwargs.pop("continue_final_message", False)),
            extra_context=kwargs,
            special_tokens=self.special_tokens,
        )
        return RenderedChat(prompt=prompt, conversation=conversation, content_format=content_format)

    def _merged_kwargs(
        self,
        tool_dicts: list[dict[str, Any]] | None,
        *,
        request_kwargs: dict[str, Any],
        fields: dict[str, Any],
    ) -> dict[str, Any]:
        # vLLM: ChatCompletionRequest.build_chat_params(...).with_defaults(...) with
        # merge_kwargs, which skips override values that are None or "auto".
        if fields["reasoning_effort"] is not None and "enable_thinking" not in request_kwargs:
            fields["enable_thinking"] = fields["reasoning_effort"] != "none"
        # defaults < tools and tokenize < the request's kwargs < its fields, each level's unset
        # values skipped (what merging them pairwise gives, in one pass)
        out = dict(self.options.default_chat_template_kwargs)
        if tool_dicts is not None:
            out["tools"] = tool_dicts
        out["tokenize"] = False
        for key, value in request_kwargs.items():
            if not _is_unset(value) and _is_unset(fields.get(key)):
                out[key] = value
        for key, value in fields.items():
            if not _is_unset(value):
                out[key] = value
        return out

    def _template(self, render_source: str | None, has_tools: bool) -> CompiledTemplate:
        if render_source is None:
            own = self._own_templates.get(has_tools)
            if own is not None:
                return own
        source = self.templates.select(render_source, has_tools=has_tools)
        if source is None:
            raise ChatError(NO_TEMPLATE_MESSAGE)
        template = self._compile(source)
        if render_source is None:
            self._own_templates[has_tools] = template
        return template

    def _content_format(self, requested: str | None, has_tools: bool) -> ContentFormat:
        option = self.options.content_format
        if option != "auto":
            return option
        if requested is None:
            own = self._own_templates.get(has_tools)
            if own is not None:  # what the lines below find for it
                return own.content_format
        source = self.templates.select(requested, has_tools=has_tools)
        if source is None:
            return "string"
        try:
            return self._compile(source).content_format
        except ChatError:
            return "string"


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _is_unset(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value == "auto")


def _template_conversation(template: CompiledTemplate, conversation: Conversation) -> Conversation:
    # The conversation as the template gets it: developer messages folded into the system
    # message for a template that does not know that role.
    if not template.supports_developer_role:
        for message in conversation:
            if message["role"] == "developer":
                return _fold_developer_messages(conversation)
    return conversation


def _fold_developer_messages(conversation: Conversation) -> Conversation:
    # vLLM (renderers/hf.py): a template that never names the developer role gets developer
    # messages as system messages, all system messages then merged into one at the front.
    converted: Conversation = []
    for message in conversation:
        if message["role"] == "developer":
            message = {k: v for k, v in message.items() if k != "tools"}
            message["role"] = "system"
        converted.append(message)
    system_texts: list[str] = []
    others: Conversation = []
    needs_merge = False
    for i, message in enumerate(converted):
        if message["role"] != "system":
            others.append(message)
            continue
        if i > 0 or system_texts:
            needs_merge = True
        content = message.get("content", "")
        if isinstance(content, list):
            content = "\n".join(
                p["text"] if isinstance(p, dict) else p
                for p in content
                if (isinstance(p, dict) and "text" in p) or isinstance(p, str)
            )
        if content:
            system_texts.append(content)
    if not needs_merge:
        return converted
    return [{"role": "system", "content": "\n\n".join(system_texts)}, *others]
