"""OpenAI request bodies as msgspec Structs, with vLLM 0.32's fields, defaults and validators.

Field names, order and defaults follow vLLM's pydantic models
(vllm/entrypoints/openai/completion/protocol.py, chat_completion/protocol.py,
generate/base/protocol.py, serve/tokenize/protocol.py). Unknown fields are accepted and ignored,
as vLLM does (it only logs them). Fields whose pydantic type msgspec cannot express (several
list types in one union, TypedDict unions) are typed ``Any`` here and checked by the schema in
``validation.py``; the chat layer interprets ``messages``.

Use :func:`parse_completion_request`, :func:`parse_chat_request`, :func:`parse_tokenize_request`
and :func:`parse_detokenize_request` on a request body: they raise ``errors.ApiError``
subclasses carrying vLLM's status, type, message and param.
"""

from __future__ import annotations

import os
import typing
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

import msgspec
import msgspec.inspect as mi

from vllm_frontend.engine.validate import InvalidRequestError
from vllm_frontend.text.structural_tags import (
    InvalidStructuralTag,
    check_structural_tag,
    structural_tag_payload,
)
from vllm_frontend.text.structured_outputs import structured_outputs_params

from .errors import BadRequest, InvalidParameter
from .message_schema import CHAT_MESSAGE
from .validation import (
    AnyValue,
    Bool,
    Bytes,
    Dataclass,
    DictOf,
    Float,
    Int,
    LazyModel,
    ListOf,
    Model,
    Optional,
    Spec,
    Str,
    Union,
    convert_body,
    decode_json_object,
    integer_fields,
    lax_int,
    lax_strings_refused,
    validation_error,
)
from .validation import Literal as LiteralSpec

__all__ = [
    "ChatCompletionRequest",
    "CompletionRequest",
    "DetokenizeRequest",
    "LoadLoraAdapterRequest",
    "StreamOptions",
    "TokenizeChatRequest",
    "TokenizeCompletionRequest",
    "UnloadLoraAdapterRequest",
    "check_cache_salt",
    "nested_request_errors",
    "parse_chat_request",
    "parse_completion_request",
    "parse_detokenize_request",
    "parse_load_lora_adapter_request",
    "parse_tokenize_request",
    "parse_unload_lora_adapter_request",
    "schema_of",
]

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
Int64 = Annotated[int, msgspec.Meta(ge=_INT64_MIN, le=_INT64_MAX)]

MAX_STOP_STRINGS = int(os.environ.get("VLLM_MAX_STOP_STRINGS", "4"))
"""vLLM's ``VLLM_MAX_STOP_STRINGS``: most stop strings one request may carry."""
MAX_COMPLETION_PROMPTS = int(os.environ.get("VLLM_MAX_COMPLETION_PROMPTS", "1024"))
"""vLLM's ``VLLM_MAX_COMPLETION_PROMPTS``: most prompts in one completions request."""

StopList = Annotated[list[str], msgspec.Meta(max_length=MAX_STOP_STRINGS)]
XArgValue = str | int | float | list[str | int | float]


class StreamOptions(msgspec.Struct, kw_only=True):
    """``stream_options``."""

    include_usage: bool | None = False
    continuous_usage_stats: bool | None = False


class CompletionRequest(msgspec.Struct, kw_only=True):
    """``POST /v1/completions`` body (vLLM's ``CompletionRequest``)."""

    model: str | None = None
    prompt: Any = None
    """``list[int] | list[list[int]] | str | list[str] | None`` (validated, not converted)."""
    echo: bool | None = False
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    logprobs: int | None = None
    max_tokens: int | None = 16
    n: int = 1
    presence_penalty: float | None = None
    seed: Int64 | None = None
    stop: str | StopList | None = msgspec.field(default_factory=list)
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    suffix: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    user: str | None = None
    use_beam_search: bool = False
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    watermarking: bool | None = None
    length_penalty: float = 1.0
    stop_token_ids: list[int] | None = msgspec.field(default_factory=list)
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    min_tokens: int = 0
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    truncate_prompt_tokens: Annotated[int, msgspec.Meta(ge=-1, le=_INT64_MAX)] | None = None
    truncation_side: Literal["left", "right"] | None = None
    allowed_token_ids: list[int] | None = None
    prompt_logprobs: int | None = None
    logprob_token_ids: list[int] | None = None
    bad_words: list[str] = msgspec.field(default_factory=list)
    prompt_embeds: Any = None
    """``bytes | list[bytes] | None`` (base64 strings); prompt embeddings are not supported."""
    mm_processor_kwargs: Any = None
    """Not a field of vLLM's: an extra key it keeps (any value) and refuses when set."""
    media_io_kwargs: Any = None
    """Likewise."""
    add_special_tokens: bool = True
    response_format: dict[str, Any] | None = None
    structured_outputs: dict[str, Any] | None = None
    priority: Int64 = 0
    request_id: str | None = None
    """vLLM defaults this to a random uuid; None here (the handler picks the id)."""
    session_id: str | None = None
    return_tokens_as_token_ids: bool | None = None
    return_token_ids: bool | None = None
    routed_experts_prompt_start: Annotated[int, msgspec.Meta(ge=0)] = 0
    return_token_offsets: bool | None = False
    mm_payload: Literal["tensors", "none"] = "tensors"
    return_mm_kwargs: bool | None = None
    cache_salt: Annotated[str, msgspec.Meta(min_length=1, max_length=1024)] | None = None
    kv_transfer_params: dict[str, Any] | None = None
    ec_transfer_params: dict[str, Any] | None = None
    vllm_xargs: dict[str, XArgValue] | None = None
    repetition_detection: dict[str, Any] | None = None
    thinking_token_budget: int | None = None
    stream_interval: Annotated[int, msgspec.Meta(ge=1)] | None = None


class ChatCompletionRequest(msgspec.Struct, kw_only=True):
    """``POST /v1/chat/completions`` body (vLLM's ``ChatCompletionRequest``)."""

    messages: list[dict[str, Any]]
    """OpenAI message dicts, interpreted by the chat layer."""
    model: str | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    logprobs: bool | None = False
    top_logprobs: int = 0
    """``null`` means 0, as in vLLM."""
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    n: int | None = 1
    presence_penalty: float | None = None
    response_format: dict[str, Any] | None = None
    seed: Int64 | None = None
    stop: str | StopList | None = msgspec.field(default_factory=list)
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    temperature: float | None = None
    top_p: float | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = "none"
    """``"none" | "auto" | "required" | {"type": "function", "function": {"name"}} | None``;
    vLLM turns a missing value into ``"auto"`` when tools are given."""
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"] | None = (
        None
    )
    thinking_token_budget: int | None = None
    include_reasoning: bool = True
    parallel_tool_calls: bool | None = True
    user: str | None = None
    use_beam_search: bool = False
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    watermarking: bool | None = None
    length_penalty: float = 1.0
    stop_token_ids: list[int] | None = msgspec.field(default_factory=list)
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    min_tokens: int = 0
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    truncate_prompt_tokens: Annotated[int, msgspec.Meta(ge=-1, le=_INT64_MAX)] | None = None
    truncation_side: Literal["left", "right"] | None = None
    prompt_logprobs: int | None = None
    logprob_token_ids: list[int] | None = None
    allowed_token_ids: list[int] | None = None
    bad_words: list[str] = msgspec.field(default_factory=list)
    echo: bool = False
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    add_special_tokens: bool = False
    documents: list[dict[str, str]] | None = None
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    media_io_kwargs: dict[str, dict[str, Any]] | None = None
    mm_processor_kwargs: dict[str, Any] | None = None
    structured_outputs: dict[str, Any] | None = None
    priority: Int64 = 0
    request_id: str | None = None
    """vLLM defaults this to a random uuid; None here (the handler picks the id)."""
    session_id: str | None = None
    return_tokens_as_token_ids: bool | None = None
    return_token_ids: bool | None = None
    routed_experts_prompt_start: Annotated[int, msgspec.Meta(ge=0)] = 0
    return_token_offsets: bool | None = False
    return_prompt_text: bool | None = False
    mm_payload: Literal["tensors", "none"] = "tensors"
    return_mm_kwargs: bool | None = None
    cache_salt: Annotated[str, msgspec.Meta(min_length=1, max_length=1024)] | None = None
    kv_transfer_params: dict[str, Any] | None = None
    ec_transfer_params: dict[str, Any] | None = None
    vllm_xargs: dict[str, XArgValue] | None = None
    repetition_detection: dict[str, Any] | None = None
    stream_interval: Annotated[int, msgspec.Meta(ge=1)] | None = None


class TokenizeCompletionRequest(msgspec.Struct, kw_only=True):
    """``POST /tokenize`` with a ``prompt``."""

    model: str | None = None  # (fields in vLLM's order: its errors come in this order)
    prompt: str
    add_special_tokens: bool = True
    return_token_strs: bool | None = False


class TokenizeChatRequest(msgspec.Struct, kw_only=True):
    """``POST /tokenize`` with ``messages`` (rendered through the chat template)."""

    model: str | None = None
    messages: list[dict[str, Any]]
    add_generation_prompt: bool = True
    return_token_strs: bool | None = False
    continue_final_message: bool = False
    add_special_tokens: bool = False
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    media_io_kwargs: dict[str, dict[str, Any]] | None = None
    mm_processor_kwargs: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None


class DetokenizeRequest(msgspec.Struct, kw_only=True):
    """``POST /detokenize`` body."""

    tokens: list[Annotated[int, msgspec.Meta(ge=0, le=_INT64_MAX)]]
    model: str | None = None


class LoadLoraAdapterRequest(msgspec.Struct, kw_only=True):
    """``POST /v1/load_lora_adapter`` body (vLLM's ``LoadLoRAAdapterRequest``)."""

    lora_name: str
    lora_path: str
    load_inplace: bool = False
    is_3d_lora_weight: bool = False


class UnloadLoraAdapterRequest(msgspec.Struct, kw_only=True):
    """``POST /v1/unload_lora_adapter`` body (vLLM's ``UnloadLoRAAdapterRequest``)."""

    lora_name: str
    lora_int_id: int | None = None


# ---------------------------------------------------------------------------------------------
# schemas for error reports (derived from the Structs, with pydantic's types where ours are Any)


def _spec_of(t: mi.Type) -> Spec:
    if isinstance(t, mi.IntType):
        return Int(t.ge, t.le)
    if isinstance(t, mi.FloatType):
        return Float(t.ge, t.le)
    if isinstance(t, mi.BoolType):
        return Bool()
    if isinstance(t, mi.StrType):
        return Str(t.min_length, t.max_length)
    if isinstance(t, mi.LiteralType):
        return LiteralSpec(*(str(v) for v in t.values))
    if isinstance(t, mi.ListType):
        return ListOf(_spec_of(t.item_type), t.max_length)
    if isinstance(t, mi.DictType):
        return DictOf(_spec_of(t.value_type))
    if isinstance(t, mi.StructType):
        return _model_of(t)
    if isinstance(t, mi.UnionType):
        inner = [x for x in t.types if not isinstance(x, mi.NoneType)]
        spec = _spec_of(inner[0]) if len(inner) == 1 else Union(*(_spec_of(x) for x in inner))
        return Optional(spec) if len(inner) < len(t.types) else spec
    return AnyValue()


def _model_of(t: mi.StructType, overrides: dict[str, Spec] | None = None) -> Model:
    fields: dict[str, Spec] = {}
    required = []
    annotations = {f.name: f.type for f in msgspec.structs.fields(t.cls)}
    for f in t.fields:
        spec = (overrides or {}).get(f.name) or _spec_of(f.type)
        fields[f.name] = _literal_order(spec, annotations[f.name])
        if f.required:
            required.append(f.name)
    return Model(t.cls.__name__, fields, required)


def _literal_order(spec: Spec, annotation: Any) -> Spec:
    # msgspec.inspect sorts Literal values; pydantic's message lists them in declared order
    for arg in (annotation, *typing.get_args(annotation)):
        if typing.get_origin(arg) is Literal:
            values = [str(v) for v in typing.get_args(arg)]
            literal = LiteralSpec(*values)
            return Optional(literal) if isinstance(spec, Optional) else literal
    return spec


def _schema(struct: type, overrides: dict[str, Spec] | None = None) -> Model:
    info = mi.type_info(struct)
    assert isinstance(info, mi.StructType)
    return _model_of(info, overrides)


def schema_of(struct: type, overrides: dict[str, Spec] | None = None) -> Model:
    """The error-report schema of a request Struct (pydantic's types; ``overrides`` by field)."""
    return _schema(struct, overrides)


_TOKEN = Int(ge=0)
_JSON_SCHEMA_FORMAT = Model(
    "JsonSchemaResponseFormat",
    {
        "name": Str(),
        "description": Optional(Str()),
        "schema": Optional(DictOf(AnyValue())),
        "strict": Optional(Bool()),
    },
    ["name"],
)
_RESPONSE_FORMAT = Optional(
    Union(
        Model(
            "ResponseFormat",
            {
                "type": LiteralSpec("text", "json_object", "json_schema"),
                "json_schema": Optional(_JSON_SCHEMA_FORMAT),
            },
            ["type"],
        ),
        Model(
            "StructuralTagResponseFormat",
            {"type": LiteralSpec("structural_tag"), "format": AnyValue()},
            ["type", "format"],
        ),
        Model(
            "LegacyStructuralTagResponseFormat",
            {
                "type": LiteralSpec("structural_tag"),
                "structures": ListOf(
                    Model(
                        "LegacyStructuralTag",
                        {"begin": Str(), "schema": AnyValue(), "end": Str()},
                        ["begin", "end"],
                    )
                ),
                "triggers": ListOf(Str()),
            },
            ["type", "structures", "triggers"],
        ),
    )
)
_STRUCTURED_OUTPUTS = Optional(
    Model(
        "StructuredOutputsParams",
        {
            "json": Optional(Union(Str(), DictOf(AnyValue()))),
            "regex": Optional(Str()),
            "choice": Optional(ListOf(Str())),
            "grammar": Optional(Str()),
            "json_object": Optional(Bool()),
            "disable_any_whitespace": Bool(),
            "disable_additional_properties": Bool(),
            "whitespace_pattern": Optional(Str()),
            "structural_tag": Optional(Str()),
        },
    )
)
_REPETITION_DETECTION = Optional(
    Dataclass(
        "RepetitionDetectionParams",
        {"max_pattern_size": Int(), "min_pattern_size": Int(), "min_count": Int()},
    )
)
_TOOL = Model(
    "ChatCompletionToolsParam",
    {
        "type": LiteralSpec("function"),
        "function": Model(
            "FunctionDefinition",
            {
                "name": Str(),
                "description": Optional(Str()),
                "parameters": Optional(DictOf(AnyValue())),
                "strict": Optional(Bool()),
                "defer_loading": Optional(Bool()),
            },
            ["name"],
        ),
        "defer_loading": Optional(Bool()),
    },
    ["function"],
)
_MESSAGE = CHAT_MESSAGE

_COMPLETION_SCHEMA = LazyModel(
    lambda: _schema(
        CompletionRequest,
        {
            "prompt": Optional(
                Union(
                    ListOf(_TOKEN),
                    ListOf(ListOf(_TOKEN)),
                    Str(),
                    ListOf(Str()),
                )
            ),
            "prompt_embeds": Optional(Union(Bytes(), ListOf(Bytes()))),
            "response_format": _RESPONSE_FORMAT,
            "structured_outputs": _STRUCTURED_OUTPUTS,
            "repetition_detection": _REPETITION_DETECTION,
            "request_id": Str(),  # (vLLM's default is a fresh id; null is not a string)
        },
    )
)
_CHAT_SCHEMA = LazyModel(
    lambda: _schema(
        ChatCompletionRequest,
        {
            "messages": ListOf(_MESSAGE),
            "tools": Optional(ListOf(_TOOL)),
            "tool_choice": Optional(
                Union(
                    LiteralSpec("none"),
                    LiteralSpec("auto"),
                    LiteralSpec("required"),
                    Model(
                        "ChatCompletionNamedToolChoiceParam",
                        {
                            "function": Model(
                                "ChatCompletionNamedFunction", {"name": Str()}, ["name"]
                            ),
                            "type": LiteralSpec("function"),
                        },
                        ["function"],
                    ),
                )
            ),
            "response_format": _RESPONSE_FORMAT,
            "structured_outputs": _STRUCTURED_OUTPUTS,
            "repetition_detection": _REPETITION_DETECTION,
            "request_id": Str(),
        },
    )
)
_TOKENIZE_COMPLETION_SCHEMA = LazyModel(lambda: _schema(TokenizeCompletionRequest))
_TOKENIZE_CHAT_SCHEMA = LazyModel(
    lambda: _schema(
        TokenizeChatRequest, {"messages": ListOf(_MESSAGE), "tools": Optional(ListOf(_TOOL))}
    )
)
_DETOKENIZE_SCHEMA = LazyModel(lambda: _schema(DetokenizeRequest))
_LOAD_LORA_SCHEMA = LazyModel(lambda: _schema(LoadLoraAdapterRequest))
_UNLOAD_LORA_SCHEMA = LazyModel(lambda: _schema(UnloadLoraAdapterRequest))


# ---------------------------------------------------------------------------------------------
# vLLM's "before" model validators, on the raw dict. pydantic runs them in reverse definition
# order, so the lists below are in that (execution) order; each cites its vLLM validator.


def _check_cache_salt(data: dict[str, Any]) -> None:
    # generate/base/protocol.py validate_cache_salt
    salt = data.get("cache_salt")
    if salt is None:
        return
    if not isinstance(salt, str) or not salt:
        raise InvalidParameter(
            "Parameter 'cache_salt' must be a non-empty string if provided.",
            parameter="cache_salt",
        )
    if len(salt) > 128 or any(c in "@/\\\x00" for c in salt):
        raise InvalidParameter(
            "Parameter 'cache_salt' must be at most 128 characters and must "
            "not contain '@', '/', '\\\\', or NUL.",
            parameter="cache_salt",
        )


def check_cache_salt(data: dict[str, Any]) -> None:
    """vLLM's ``validate_cache_salt`` "before" validator on a raw body."""
    _check_cache_salt(data)


def _apply_return_mm_kwargs_alias(data: dict[str, Any]) -> None:
    if data.get("return_mm_kwargs") is False and "mm_payload" not in data:
        data["mm_payload"] = "none"


def _normalize_null_max_tokens(data: dict[str, Any]) -> None:
    if data.get("max_tokens") is None:
        data["max_tokens"] = 16


def _validate_response_format(data: dict[str, Any]) -> None:
    rf = data.get("response_format")
    if not isinstance(rf, dict):
        return
    if rf.get("type") == "json_schema" and rf.get("json_schema") is None:
        raise InvalidParameter(
            "When response_format type is 'json_schema', the 'json_schema' field must be provided.",
            parameter="response_format",
        )
    if rf.get("type") == "structural_tag":
        # vLLM's validate_structural_tag_response_format (without xgrammar: structural_tags.py)
        _check_tag(lambda: check_structural_tag(structural_tag_payload(rf), "response_format"))


def _check_tag(check: Callable[[], None]) -> None:
    try:
        check()
    except InvalidStructuralTag as e:
        raise InvalidParameter(str(e), parameter=e.parameter or "") from None
    except InvalidRequestError as e:  # nested too deeply
        raise BadRequest(str(e)) from None


def _check_structured_outputs_tag(data: dict[str, Any]) -> None:
    # vLLM's validate_structured_outputs_structural_tag
    so = data.get("structured_outputs")
    if isinstance(so, dict) and so.get("structural_tag") is not None:
        tag = so["structural_tag"]
        _check_tag(lambda: check_structural_tag(tag, "structured_outputs"))


def _structured_outputs_count(data: dict[str, Any]) -> int:
    so = data["structured_outputs"]
    if not isinstance(so, dict):
        return 0
    return sum(so.get(k) is not None for k in ("json", "regex", "choice"))


def _check_structured_outputs_count_completion(data: dict[str, Any]) -> None:
    if data.get("structured_outputs") is None:
        return
    if _structured_outputs_count(data) > 1:
        raise InvalidParameter(
            "You can only use one kind of constraints for structured "
            "outputs ('json', 'regex' or 'choice').",
            parameter="structured_outputs",
        )
    _check_structured_outputs_tag(data)


def _check_structured_outputs_count_chat(data: dict[str, Any]) -> None:
    if data.get("structured_outputs") is None:
        return
    count = _structured_outputs_count(data)
    # VLLMValidationError without a parameter: message without a suffix, param null
    if count > 1:
        raise BadRequest(
            "You can only use one kind of constraints for structured "
            "outputs ('json', 'regex' or 'choice')."
        )
    if count > 0 and data.get("tool_choice", "none") not in ("none", "auto", "required"):
        raise BadRequest(
            "You can only either use constraints for structured outputs or tools, not both."
        )
    _check_structured_outputs_tag(data)


def _check_structured_outputs_constraint(data: dict[str, Any]) -> None:
    # StructuredOutputsParams.__post_init__ (exactly one constraint) runs while pydantic
    # validates the field, so its message is a plain 400 of the body; type errors win.
    so = data.get("structured_outputs")
    if not isinstance(so, dict) or _STRUCTURED_OUTPUTS.errors(so, ("body", "structured_outputs")):
        return
    try:
        structured_outputs_params(_STRUCTURED_OUTPUTS.coerce(so))  # (its flags as pydantic's)
    except ValueError as e:
        raise BadRequest(str(e)) from None


def _require_number(data: dict[str, Any], names: tuple[str, ...]) -> None:
    for name in names:
        value = data.get(name)
        if value is not None and not isinstance(value, (int, float)):
            raise InvalidParameter(f"`{name}` must be an integer.", parameter=name, value=value)


def _check_prompt_logprobs(data: dict[str, Any]) -> None:
    if (prompt_logprobs := data.get("prompt_logprobs")) is not None:
        if data.get("stream") and (prompt_logprobs > 0 or prompt_logprobs == -1):
            raise InvalidParameter(
                "`prompt_logprobs` are not available when `stream=True`.",
                parameter="prompt_logprobs",
            )
        if prompt_logprobs < 0 and prompt_logprobs != -1:
            raise InvalidParameter(
                "`prompt_logprobs` must be a positive value or -1.",
                parameter="prompt_logprobs",
                value=prompt_logprobs,
            )


def _check_logprobs_completion(data: dict[str, Any]) -> None:
    if data.get("logprob_token_ids") and data.get("use_beam_search"):
        raise InvalidParameter(
            "`logprob_token_ids` is not supported with beam search.",
            parameter="logprob_token_ids",
        )
    if data.get("use_beam_search") and data.get("echo") and data.get("logprobs") is not None:
        raise InvalidParameter(
            "`echo` with `logprobs` is not supported with beam search "
            "because beam search does not compute prompt logprobs.",
            parameter="echo",
        )
    if data.get("logprob_token_ids") and data.get("echo") and data.get("max_tokens") == 0:
        raise InvalidParameter(
            "`logprob_token_ids` is not supported when `echo=True` and "
            "`max_tokens=0` because no output tokens are generated.",
            parameter="logprob_token_ids",
        )
    if data.get("logprob_token_ids") and data.get("logprobs") is None:
        raise InvalidParameter(
            "when using `logprob_token_ids`, `logprobs` must be set.",
            parameter="logprob_token_ids",
        )
    _require_number(data, ("prompt_logprobs", "logprobs"))
    _check_prompt_logprobs(data)
    if (logprobs := data.get("logprobs")) is not None and logprobs < 0 and logprobs != -1:
        raise InvalidParameter(
            "`logprobs` must be a positive value or -1.", parameter="logprobs", value=logprobs
        )


def _check_logprobs_chat(data: dict[str, Any]) -> None:
    if data.get("logprob_token_ids") and data.get("use_beam_search"):
        raise InvalidParameter(
            "`logprob_token_ids` is not supported with beam search.",
            parameter="logprob_token_ids",
        )
    if data.get("logprob_token_ids") and not data.get("logprobs"):
        raise InvalidParameter(
            "when using `logprob_token_ids`, `logprobs` must be set to true.",
            parameter="logprob_token_ids",
        )
    _require_number(data, ("prompt_logprobs", "top_logprobs"))
    _check_prompt_logprobs(data)
    if (top_logprobs := data.get("top_logprobs")) is not None:
        if top_logprobs < 0 and top_logprobs != -1:
            raise InvalidParameter(
                "`top_logprobs` must be a positive value or -1.",
                parameter="top_logprobs",
                value=top_logprobs,
            )
        if (top_logprobs == -1 or top_logprobs > 0) and not data.get("logprobs"):
            raise InvalidParameter(
                "when using `top_logprobs`, `logprobs` must be set to true.",
                parameter="top_logprobs",
            )


def _validate_stream_options(data: dict[str, Any]) -> None:
    if data.get("stream_options") and not data.get("stream"):
        raise InvalidParameter(
            "Stream options can only be defined when `stream=True`.",
            parameter="stream_options",
        )


def _validate_prompt_and_prompt_embeds(data: dict[str, Any]) -> None:
    prompt = data.get("prompt")
    embeds = data.get("prompt_embeds")
    prompt_is_empty = prompt is None or (isinstance(prompt, str) and prompt == "")
    embeds_is_empty = embeds is None or (isinstance(embeds, list) and len(embeds) == 0)
    if prompt_is_empty and embeds_is_empty:
        raise InvalidParameter(
            "Either prompt or prompt_embeds must be provided and non-empty.", parameter="prompt"
        )


def _validate_prompt_list_length(data: dict[str, Any]) -> None:
    prompt = data.get("prompt")
    limit = MAX_COMPLETION_PROMPTS
    if (
        isinstance(prompt, list)
        and prompt
        and not all(isinstance(p, int) for p in prompt)
        and len(prompt) > limit
    ):
        raise InvalidParameter(
            f"prompt list length {len(prompt)} exceeds the maximum "
            f"allowed count of {limit}. To increase this "
            "limit, set the VLLM_MAX_COMPLETION_PROMPTS "
            "environment variable.",
            parameter="prompt",
        )
    embeds = data.get("prompt_embeds")
    if isinstance(embeds, list) and len(embeds) > limit:
        raise InvalidParameter(
            f"prompt_embeds list length {len(embeds)} exceeds "
            f"the maximum allowed count of {limit}. To increase "
            "this limit, set the VLLM_MAX_COMPLETION_PROMPTS "
            "environment variable.",
            parameter="prompt_embeds",
        )


_CORRECT_TOOL_CHOICE = 'Correct usage: `{"type": "function", "function": {"name": "my_function"}}`'


def _check_tool_usage(data: dict[str, Any]) -> None:
    if data.get("tools") == []:
        raise InvalidParameter(
            "`tools` must not be an empty array. "
            "Either provide at least one tool or omit the field entirely.",
            parameter="tools",
        )
    if "tool_choice" not in data and data.get("tools"):
        data["tool_choice"] = "auto"
    if "tool_choice" in data and data["tool_choice"] == "none":
        return
    if "tool_choice" in data and data["tool_choice"] is not None:
        choice = data["tool_choice"]
        if "tools" not in data or data["tools"] is None:
            raise InvalidParameter(
                "When using `tool_choice`, `tools` must be set.", parameter="tool_choice"
            )
        if choice not in ["auto", "required"] and not isinstance(choice, dict):
            raise InvalidParameter(
                f"Invalid value for `tool_choice`: {choice}! "
                'Only named tools, "none", "auto" or "required" are supported.',
                parameter="tool_choice",
            )
        if isinstance(choice, dict):
            function = choice.get("function")
            if not isinstance(function, dict):
                raise InvalidParameter(
                    f"Invalid value for `function`: `{function}` in "
                    f"`tool_choice`! {_CORRECT_TOOL_CHOICE}",
                    parameter="tool_choice.function",
                )
            if "name" not in function:
                raise InvalidParameter(
                    f"Expected field `name` in `function` in `tool_choice`! {_CORRECT_TOOL_CHOICE}",
                    parameter="tool_choice.function.name",
                )
            name = function["name"]
            if not isinstance(name, str) or len(name) == 0:
                raise InvalidParameter(
                    f"Invalid `name` in `function`: `{name}` in `tool_choice`! "
                    f"{_CORRECT_TOOL_CHOICE}",
                    parameter="tool_choice.function.name",
                )
            if not any(_tool_name(tool, data) == name for tool in data["tools"]):
                raise InvalidParameter(
                    "The tool specified in `tool_choice` does not match any of the specified "
                    "`tools`",
                    parameter="tool_choice",
                )


def _tool_name(tool: Any, data: dict[str, Any]) -> Any:
    try:
        return tool["function"]["name"]
    except (TypeError, KeyError, IndexError):
        # vLLM fails here with a 500 (or a 400 quoting a TypeError); report the tools' schema
        # errors instead, which is what the client needs to fix
        errors = _CHAT_SCHEMA.fields["tools"].errors(data["tools"], ("body", "tools"))
        raise validation_error(errors) from None


def _check_messages_iterable(data: dict[str, Any]) -> None:
    # chat_completion/protocol.py check_system_message_content_type iterates the messages
    # before any field is validated: a null or a number fails there, with Python's TypeError
    messages = data.get("messages", [])
    if not isinstance(messages, str | list | dict):
        raise BadRequest(f"'{type(messages).__name__}' object is not iterable")


def _check_generation_prompt(data: dict[str, Any]) -> None:
    if data.get("continue_final_message") and data.get("add_generation_prompt"):
        raise BadRequest(
            "Cannot set both `continue_final_message` and `add_generation_prompt` to True."
        )


def _normalize_messages(data: dict[str, Any]) -> None:
    # chat_completion/protocol.py _normalize_messages_before: reasoning_content -> reasoning;
    # its list(tool_calls) of a non-list fails for a number or a boolean with Python's
    # TypeError, which escapes pydantic and is answered as a 400 with its text
    messages = data.get("messages")
    if not isinstance(messages, list):
        return
    for msg in messages:
        if not isinstance(msg, dict):
            continue
        calls = msg.get("tool_calls")
        if isinstance(calls, int | float):
            raise BadRequest(f"'{type(calls).__name__}' object is not iterable")
        if "reasoning_content" in msg:
            rc = msg.pop("reasoning_content")
            if rc is not None and msg.get("reasoning") is None:
                msg["reasoning"] = rc


def _field_before_validators(data: dict[str, Any]) -> None:
    # Field-level BeforeValidators that raise vLLM errors (not ValueError): pydantic lets those
    # escape immediately, so they win over type errors of other fields.
    if "top_logprobs" in data and data["top_logprobs"] is None:
        data["top_logprobs"] = 0
    budget = data.get("thinking_token_budget")
    if budget is not None:
        if isinstance(budget, (bool, float)) or not isinstance(budget, int) or budget < -1:
            raise InvalidParameter(
                "`thinking_token_budget` must be a non-negative integer or -1 for unlimited.",
                parameter="thinking_token_budget",
                value=budget,
            )
        if budget == -1:
            data["thinking_token_budget"] = None


_COMPLETION_VALIDATORS: list[Callable[[dict[str, Any]], None]] = [
    _validate_prompt_list_length,
    _validate_prompt_and_prompt_embeds,
    _validate_stream_options,
    _check_logprobs_completion,
    _check_structured_outputs_count_completion,
    _validate_response_format,
    _normalize_null_max_tokens,
    _check_cache_salt,
    _apply_return_mm_kwargs_alias,
    _field_before_validators,
    _check_structured_outputs_constraint,
]

_CHAT_VALIDATORS: list[Callable[[dict[str, Any]], None]] = [
    _check_messages_iterable,
    _check_generation_prompt,
    _check_tool_usage,
    _check_structured_outputs_count_chat,
    _check_logprobs_chat,
    _validate_stream_options,
    _validate_response_format,
    _normalize_messages,
    _check_cache_salt,
    _apply_return_mm_kwargs_alias,
    _field_before_validators,
    _check_structured_outputs_constraint,
]


def _plain_prompt(value: Any) -> bool:
    # the common valid prompts: a string, or a list of token ids (checked without the schema)
    if value is None or isinstance(value, str):
        return True
    if isinstance(value, list) and value and type(value[0]) is int:
        try:
            msgspec.convert((value,), _TokenIds)  # one C pass instead of a Python loop
            return True
        except msgspec.ValidationError:
            return False
    return False


_TokenIds = msgspec.defstruct(
    "_TokenIds", [("ids", list[Annotated[int, msgspec.Meta(ge=0)]])], array_like=True, gc=False
)
"""A plain token-id prompt, in a one-field struct: msgspec looks a struct type up by identity,
a typing alias (``list[Annotated[...]]``) by a hash computed in Python on every call."""


def _is_none(value: Any) -> bool:
    return value is None


def _is_str(value: Any) -> bool:
    return type(value) is str


_COMPLETION_UNCONVERTED = (
    ("prompt", _plain_prompt),
    ("prompt_embeds", _is_none),
    ("response_format", _is_none),
    ("structured_outputs", _is_none),
    ("repetition_detection", _is_none),
    ("request_id", _is_str),
)


_LAZY_PARTS_ROLES = frozenset({"user", "system", "developer", "assistant", "tool"})
"""The roles of OpenAI's message branches whose list of content parts pydantic reads only when
vLLM renders the message (a custom role's parts are checked with the message)."""


_PLAIN_FIELDS: dict[str, type] = {"name": str, "tool_call_id": str, "tool_calls": list}
"""Message fields besides role and content whose common values every branch of vLLM's message
union that reads them takes (for OpenAI's roles: the custom-role branch checks tool calls)."""


def _plain_message(m: Any) -> bool:
    # an object with a string role and content some branch of vLLM's message union takes
    # as it is: none (the custom-role branch), text, a list of parts for one of OpenAI's roles
    # (judged later); null only from the assistant; other fields only as _PLAIN_FIELDS says
    if type(m) is not dict or type(role := m.get("role")) is not str:
        return False
    content = m.get("content", "")
    if type(content) is list:
        if role not in _LAZY_PARTS_ROLES:
            return False
    elif type(content) is not str and (content is not None or role != "assistant"):
        return False
    if len(m) > 1 + ("content" in m):
        if role not in _LAZY_PARTS_ROLES:
            return False
        for key, value in m.items():
            if key != "role" and key != "content" and type(value) is not _PLAIN_FIELDS.get(key):
                return False
    return True


def _plain_messages(value: Any) -> bool:
    return isinstance(value, list) and all(_plain_message(m) for m in value)


_CHAT_UNCONVERTED = (
    ("messages", _plain_messages),
    ("tool_choice", lambda v: v in ("none", "auto", "required", None)),
    ("tools", _is_none),
    ("response_format", _is_none),
    ("structured_outputs", _is_none),
    ("repetition_detection", _is_none),
    ("request_id", _is_str),
)


# The fast path of the parse functions: a body whose keys are all "plain" (no "before"
# validator reads them, none is an unconverted field) and whose checked fields hold their
# common valid values leaves every validator and unconverted check a no-op, so converting it
# straight away gives what the general path gives; anything else, and every conversion that
# fails, takes the general path, which decides every error and its precedence.
_COMPLETION_CHECKED = frozenset(
    {
        "prompt_embeds",
        "logprob_token_ids",
        "use_beam_search",
        "echo",
        "logprobs",
        "prompt_logprobs",
        "structured_outputs",
        "response_format",
        "cache_salt",
        "return_mm_kwargs",
        "mm_payload",
        "top_logprobs",
        "thinking_token_budget",
        "repetition_detection",
        "request_id",
    }
)
"""Completion body keys a validator or an unconverted field's check reads (besides
``prompt``, ``max_tokens`` and ``stream_options``, which the fast path checks itself)."""
_COMPLETION_PLAIN = frozenset(CompletionRequest.__struct_fields__) - _COMPLETION_CHECKED

_CHAT_CHECKED = frozenset(
    {
        "continue_final_message",
        "add_generation_prompt",
        "tools",
        "tool_choice",
        "structured_outputs",
        "logprob_token_ids",
        "use_beam_search",
        "logprobs",
        "prompt_logprobs",
        "top_logprobs",
        "response_format",
        "cache_salt",
        "return_mm_kwargs",
        "mm_payload",
        "thinking_token_budget",
        "repetition_detection",
        "request_id",
    }
)
"""Chat body keys a validator or an unconverted field's check reads (besides ``messages`` and
``stream_options``, which the fast path checks itself)."""
_CHAT_PLAIN = frozenset(ChatCompletionRequest.__struct_fields__) - _CHAT_CHECKED


def _plain_completion(data: Any) -> bool:
    # a non-empty text or token-id prompt, and max_tokens given (else a validator sets it)
    if type(data) is not dict or not data.keys() <= _COMPLETION_PLAIN:
        return False
    if "stream_options" in data and data.get("stream") is not True:
        return False
    prompt = data.get("prompt")
    if type(prompt) is str:
        return prompt != "" and data.get("max_tokens") is not None
    # (a plain token-id list is a non-empty one of non-negative ints)
    return type(prompt) is list and _plain_prompt(prompt) and data.get("max_tokens") is not None


def _plain_chat(data: Any) -> bool:
    # messages as dicts with a role, none with vLLM's reasoning_content alias to normalise;
    # stream options only on a stream
    if type(data) is not dict or not data.keys() <= _CHAT_PLAIN:
        return False
    if "stream_options" in data and data.get("stream") is not True:
        return False
    messages = data.get("messages")
    if type(messages) is not list:
        return False
    for m in messages:  # a loop, not all(<generator>): ~0.3 us less per request
        # (a role and text only, inlined; anything else as _plain_message says)
        if type(m) is not dict or "reasoning_content" in m:
            return False
        if (
            len(m) != 2 or type(m.get("content")) is not str or type(m.get("role")) is not str
        ) and not _plain_message(m):
            return False
    return True


_S = TypeVar("_S")


def _convert_plain(data: dict[str, Any], struct: type[_S]) -> _S | None:
    try:
        # Strict first: the common body (JSON numbers for numbers) needs no string check, and
        # what strict mode takes, lax mode takes to the same values.
        return msgspec.convert(data, struct)
    except msgspec.ValidationError:
        pass
    if lax_strings_refused(data, integer_fields(struct)):
        return None  # the general path reports the string pydantic refuses
    try:
        return msgspec.convert(data, struct, strict=False)
    except msgspec.ValidationError:
        return None  # the general path decides the error


def parse_completion_request(body: bytes) -> CompletionRequest:
    """Decode and validate a ``/v1/completions`` body like vLLM."""
    data = decode_json_object(body)
    if _plain_completion(data) and (fast := _convert_plain(data, CompletionRequest)) is not None:
        return fast
    return _completion_request(data)


def _completion_request(data: Any) -> CompletionRequest:
    # the general path: every validator, every check, every error
    req = convert_body(
        data,
        CompletionRequest,
        _COMPLETION_SCHEMA,
        _COMPLETION_VALIDATORS,
        _COMPLETION_UNCONVERTED,
    )
    if not _plain_prompt(req.prompt):
        req.prompt = _lax_token_ids(req.prompt)
    if req.structured_outputs is not None:  # its flags as pydantic reads them (1 -> True)
        req.structured_outputs = _STRUCTURED_OUTPUTS.coerce(req.structured_outputs)
    return req


def _lax_token_ids(prompt: Any) -> Any:
    # The schema took it: token ids pydantic reads in lax mode (True, 1.0, "1") are its ints.
    if not isinstance(prompt, list) or not prompt or isinstance(prompt[0], str):
        return prompt
    if isinstance(prompt[0], list):
        return [_lax_token_ids(p) for p in prompt]
    return [lax_int(t) for t in prompt]


def parse_chat_request(body: bytes) -> ChatCompletionRequest:
    """Decode and validate a ``/v1/chat/completions`` body like vLLM."""
    data = decode_json_object(body)
    if _plain_chat(data) and (fast := _convert_plain(data, ChatCompletionRequest)) is not None:
        return fast
    return _chat_request(data)


def _chat_request(data: Any) -> ChatCompletionRequest:
    # the general path: every validator, every check, every error
    req = convert_body(
        data, ChatCompletionRequest, _CHAT_SCHEMA, _CHAT_VALIDATORS, _CHAT_UNCONVERTED
    )
    if req.structured_outputs is not None:  # its flags as pydantic reads them (1 -> True)
        req.structured_outputs = _STRUCTURED_OUTPUTS.coerce(req.structured_outputs)
    return req


_TOKENIZE_CHAT_ONLY = frozenset(TokenizeChatRequest.__struct_fields__) - {
    "messages",
    *TokenizeCompletionRequest.__struct_fields__,
}


def parse_tokenize_request(body: bytes) -> TokenizeCompletionRequest | TokenizeChatRequest:
    """Decode a ``/tokenize`` body: the prompt form or the messages form (pydantic's union:
    when neither fits, the errors of both are reported)."""
    data = decode_json_object(body)
    if not isinstance(data, dict):
        raise validation_error(
            _TOKENIZE_COMPLETION_SCHEMA.errors(data, ("body",))
            + _TOKENIZE_CHAT_SCHEMA.errors(data, ("body",))
        )
    # the messages form's "before" validator raises an error pydantic does not catch: it
    # escapes the union whichever form the body is
    _check_generation_prompt(data)
    completion_errors = _TOKENIZE_COMPLETION_SCHEMA.errors(data, ("body",))
    # When both forms fit, pydantic's smart union takes the one with more of its own fields
    # set, nested ones counted, the prompt form on a tie: the messages form as soon as it has
    # a message or a field the prompt form lacks (both forms have model and the two flags)
    messages = data.get("messages")
    chat_wins = (isinstance(messages, list) and bool(messages)) or any(
        name in data for name in _TOKENIZE_CHAT_ONLY
    )
    if not completion_errors and not chat_wins:
        return convert_body(data, TokenizeCompletionRequest, _TOKENIZE_COMPLETION_SCHEMA)
    chat_errors = _TOKENIZE_CHAT_SCHEMA.errors(data, ("body",))
    if not completion_errors and chat_errors:
        return convert_body(data, TokenizeCompletionRequest, _TOKENIZE_COMPLETION_SCHEMA)
    if not chat_errors:
        return convert_body(data, TokenizeChatRequest, _TOKENIZE_CHAT_SCHEMA)
    raise validation_error(completion_errors + chat_errors)


def parse_load_lora_adapter_request(body: bytes) -> LoadLoraAdapterRequest:
    """Decode and validate a ``/v1/load_lora_adapter`` body."""
    return convert_body(decode_json_object(body), LoadLoraAdapterRequest, _LOAD_LORA_SCHEMA)


def parse_unload_lora_adapter_request(body: bytes) -> UnloadLoraAdapterRequest:
    """Decode and validate a ``/v1/unload_lora_adapter`` body."""
    return convert_body(decode_json_object(body), UnloadLoraAdapterRequest, _UNLOAD_LORA_SCHEMA)


def parse_detokenize_request(body: bytes) -> DetokenizeRequest:
    """Decode and validate a ``/detokenize`` body."""
    return convert_body(decode_json_object(body), DetokenizeRequest, _DETOKENIZE_SCHEMA)


def nested_request_errors(
    data: Any, chat: bool, loc: tuple[Any, ...]
) -> tuple[ChatCompletionRequest | CompletionRequest | None, list[dict[str, Any]]]:
    """A chat (``chat``) or completion request nested in another body at ``loc``: the
    request, or pydantic's type errors for it (the body validators of the top-level routes
    are not run)."""
    struct: type[ChatCompletionRequest | CompletionRequest]
    spec = _CHAT_SCHEMA if chat else _COMPLETION_SCHEMA
    struct = ChatCompletionRequest if chat else CompletionRequest
    if isinstance(data, dict):
        # the request's "before" validators (defaults such as tool_choice), their refusals as
        # pydantic reports a nested model's value error
        data = dict(data)
        for check in _CHAT_VALIDATORS if chat else _COMPLETION_VALIDATORS:
            try:
                check(data)
            except Exception as exc:
                message = getattr(exc, "message", None) or str(exc)
                error = {"type": "value_error", "loc": loc, "msg": f"Value error, {message}"}
                return None, [{**error, "input": data, "ctx": {"error": ValueError(message)}}]
    errors = spec.errors(data, loc)
    if errors:
        return None, errors
    try:
        return msgspec.convert(data, struct, strict=False), []
    except msgspec.ValidationError:
        try:
            return msgspec.convert(spec.coerce(data), struct, strict=False), []
        except msgspec.ValidationError as exc:
            return None, [
                {"type": "value_error", "loc": loc, "msg": f"Value error, {exc}", "input": data}
            ]
