"""The ``POST /v1/responses`` body as a msgspec Struct, with vLLM 0.32's fields, defaults and
validators (vllm/entrypoints/openai/responses/protocol.py, ``ResponsesRequest``).

Scalar fields are checked as pydantic checks them (the shared schema in ``validation.py``);
``input`` items, ``tools``, ``text`` and ``reasoning`` (OpenAI SDK types in vLLM) are kept as
JSON and checked where they are used (:mod:`.responses_input`). Use
:func:`parse_responses_request`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from .errors import BadRequest, InvalidParameter
from .protocol import Int64, StopList, XArgValue, _check_cache_salt, _schema
from .responses_input import flat_tool_name
from .validation import (
    AnyValue,
    Bool,
    DictOf,
    Int,
    LazyModel,
    ListOf,
    Model,
    Optional,
    Spec,
    Str,
    TaggedUnion,
    TypedDict,
    convert_body,
    decode_json_object,
    pydantic_report,
)
from .validation import Literal as LiteralSpec

__all__ = ["ResponsesRequest", "check_echoed_nulls", "parse_responses_request"]

ServiceTier = Literal["auto", "default", "flex", "scale", "priority"]
Include = Literal[
    "code_interpreter_call.outputs",
    "computer_call_output.output.image_url",
    "file_search_call.results",
    "message.input_image.image_url",
    "message.output_text.logprobs",
    "reasoning.encrypted_content",
]
Penalty = Annotated[float, msgspec.Meta(ge=-2.0, le=2.0)]


class ResponsesRequest(msgspec.Struct, kw_only=True):
    """vLLM's ``ResponsesRequest`` (field order and defaults as there)."""

    background: bool | None = False
    include: list[Include] | None = None
    input: str | list[Any]
    instructions: str | None = None
    max_output_tokens: int | None = None
    max_tool_calls: int | None = None
    metadata: dict[str, str] | None = None
    model: str | None = None
    logit_bias: dict[str, float] | None = None
    parallel_tool_calls: bool | None = True
    previous_response_id: str | None = None
    prompt: Any = None
    reasoning: dict[str, Any] | None = None
    include_reasoning: bool = True
    service_tier: ServiceTier = "auto"
    store: bool | None = True
    stream: bool | None = False
    temperature: float | None = None
    text: dict[str, Any] | None = None
    tool_choice: Any = "auto"
    tools: list[dict[str, Any]] = msgspec.field(default_factory=list)
    top_logprobs: int | None = 0
    """(unbounded, null read as 0: vLLM's ``TopLogprobsParam``; the sampling checks judge it)"""
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    truncation: Literal["auto", "disabled"] | None = "disabled"
    user: str | None = None
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    prompt_cache_key: str | None = None
    watermarking: bool | None = None
    request_id: str | None = None
    session_id: str | None = None
    media_io_kwargs: dict[str, dict[str, Any]] | None = None
    mm_processor_kwargs: dict[str, Any] | None = None
    priority: Int64 = 0
    mm_payload: Literal["tensors", "none"] = "tensors"
    return_mm_kwargs: bool | None = None
    cache_salt: Annotated[str, msgspec.Meta(min_length=1, max_length=1024)] | None = None
    enable_response_messages: bool = False
    previous_input_messages: list[Any] | None = None
    structured_outputs: dict[str, Any] | None = None
    repetition_penalty: float | None = None
    seed: Int64 | None = None
    stop: str | StopList | None = msgspec.field(default_factory=list)
    stop_token_ids: list[int] | None = msgspec.field(default_factory=list)
    ignore_eos: bool = False
    vllm_xargs: dict[str, XArgValue] | None = None
    kv_transfer_params: dict[str, Any] | None = None
    ec_transfer_params: dict[str, Any] | None = None
    chat_template_kwargs: dict[str, Any] | None = None

    def include_logprobs(self) -> bool:
        """vLLM's ``is_include_output_logprobs``."""
        return bool(self.include) and "message.output_text.logprobs" in (self.include or ())


# The SDK models vLLM types ``text`` and ``reasoning`` with (openai/types/responses/
# response_text_config.py, openai/types/shared/reasoning.py), fields in their order; pydantic
# reports every branch of the text format's union (the SDK's discriminator is not pydantic's).
_TEXT_FORMAT = TaggedUnion(
    Model("ResponseFormatText", {"type": LiteralSpec("text")}, ["type"]),
    Model(
        "ResponseFormatTextJSONSchemaConfig",
        {
            "name": Str(),
            "schema": DictOf(AnyValue()),
            "type": LiteralSpec("json_schema"),
            "description": Optional(Str()),
            "strict": Optional(Bool()),
        },
        ["name", "schema", "type"],
    ),
    Model("ResponseFormatJSONObject", {"type": LiteralSpec("json_object")}, ["type"]),
)
_TEXT_CONFIG = Model(
    "ResponseTextConfig",
    {"format": Optional(_TEXT_FORMAT), "verbosity": Optional(LiteralSpec("low", "medium", "high"))},
)
_REASONING = Model(
    "Reasoning",
    {
        "context": Optional(LiteralSpec("auto", "current_turn", "all_turns")),
        "effort": Optional(LiteralSpec("none", "minimal", "low", "medium", "high", "xhigh", "max")),
        "generate_summary": Optional(LiteralSpec("auto", "concise", "detailed")),
        "summary": Optional(LiteralSpec("auto", "concise", "detailed")),
    },
)
_TOOL_CHOICE_MODES = ("none", "auto", "required")
# the object members of the SDK's ToolChoice union (openai/types/responses/response.py)
_TOOL_CHOICE_OBJECTS = (
    "ToolChoiceAllowed", "ToolChoiceTypes", "ToolChoiceFunction", "ToolChoiceMcp",
    "ToolChoiceCustom", "ToolChoiceSpecificProgrammaticToolCallingParam",
    "ToolChoiceApplyPatch", "ToolChoiceShell",
)  # fmt: skip


class _ToolChoice(Spec):
    """The SDK's ``ToolChoice``: a mode, or an object (its members are not modelled here: an
    object passes); anything else fails every member."""

    def errors(self, value: Any, loc: tuple[Any, ...]) -> list[dict[str, Any]]:
        if isinstance(value, dict):
            return []
        out = LiteralSpec(*_TOOL_CHOICE_MODES).errors(value, loc)
        if out:
            for name in _TOOL_CHOICE_OBJECTS:
                out += Model(name, {}).errors(value, (*loc, name))
        return out


# The SDK's ``Tool`` union (openai/types/responses/tool.py), which vLLM types ``tools`` with:
# its members in order, each with its fields in their order (generated from the SDK's models;
# fields of nested models are not modelled and take any value). pydantic reports every member's
# errors for a tool no member takes.
_TOOL = TaggedUnion(
    Model("FunctionTool", {"name": Str(), "parameters": Optional(DictOf(AnyValue())),
                           "strict": Optional(Bool()), "type": LiteralSpec("function"),
                           "async": Optional(Bool()), "defer_loading": Optional(Bool()),
                           "description": Optional(Str()),
                           "output_schema": Optional(DictOf(AnyValue()))}, ["name", "type"]),
    Model("FileSearchTool", {"type": LiteralSpec("file_search"), "vector_store_ids": ListOf(Str()),
                             "max_num_results": Optional(Int())}, ["type", "vector_store_ids"]),
    Model("ComputerTool", {"type": LiteralSpec("computer")}, ["type"]),
    Model("ComputerUsePreviewTool",
          {"display_height": Int(), "display_width": Int(),
           "environment": LiteralSpec("windows", "mac", "linux", "ubuntu", "browser"),
           "type": LiteralSpec("computer_use_preview")},
          ["display_height", "display_width", "environment", "type"]),
    Model("WebSearchTool", {"type": LiteralSpec("web_search", "web_search_2025_08_26"),
                            "external_web_access": Optional(Bool()),
                            "search_context_size": Optional(LiteralSpec("low", "medium", "high"))},
          ["type"]),
    Model("Mcp", {"server_label": Str(), "type": LiteralSpec("mcp"),
                  "authorization": Optional(Str()),
                  "connector_id": Optional(LiteralSpec(
                      "connector_dropbox", "connector_gmail", "connector_googlecalendar",
                      "connector_googledrive", "connector_microsoftteams",
                      "connector_outlookcalendar", "connector_outlookemail",
                      "connector_sharepoint")),
                  "defer_loading": Optional(Bool()), "server_description": Optional(Str()),
                  "server_url": Optional(Str()), "tunnel_id": Optional(Str())},
          ["server_label", "type"]),
    Model("CodeInterpreter", {"container": AnyValue(), "type": LiteralSpec("code_interpreter")},
          ["container", "type"]),
    Model("ProgrammaticToolCalling", {"type": LiteralSpec("programmatic_tool_calling")}, ["type"]),
    Model("ImageGeneration",
          {"type": LiteralSpec("image_generation"),
           "action": Optional(LiteralSpec("generate", "edit", "auto")),
           "background": Optional(LiteralSpec("transparent", "opaque", "auto")),
           "complexity": Optional(LiteralSpec("low", "medium", "high")),
           "frame_count": Optional(Int()), "frame_duration_ms": Optional(Int()),
           "input_fidelity": Optional(LiteralSpec("high", "low")),
           "moderation": Optional(LiteralSpec("auto", "low")),
           "output_compression": Optional(Int()),
           "output_format": Optional(LiteralSpec("png", "webp", "jpeg", "gif", "svg")),
           "partial_images": Optional(Int()),
           "quality": Optional(LiteralSpec("low", "medium", "high", "xhigh", "max", "auto"))},
          ["type"]),
    Model("LocalShell", {"type": LiteralSpec("local_shell")}, ["type"]),
    Model("FunctionShellTool", {"type": LiteralSpec("shell")}, ["type"]),
    Model("CustomTool", {"name": Str(), "type": LiteralSpec("custom"), "async": Optional(Bool()),
                         "defer_loading": Optional(Bool()), "description": Optional(Str())},
          ["name", "type"]),
    Model("NamespaceTool", {"description": Str(), "name": Str(), "tools": AnyValue(),
                            "type": LiteralSpec("namespace")},
          ["description", "name", "tools", "type"]),
    Model("ToolSearchTool", {"type": LiteralSpec("tool_search"), "description": Optional(Str()),
                             "execution": Optional(LiteralSpec("server", "client"))}, ["type"]),
    Model("WebSearchPreviewTool",
          {"type": LiteralSpec("web_search_preview", "web_search_preview_2025_03_11"),
           "search_context_size": Optional(LiteralSpec("low", "medium", "high"))}, ["type"]),
    Model("ApplyPatchTool", {"type": LiteralSpec("apply_patch")}, ["type"]),
)  # fmt: skip
_OPTIONAL_FUNCTION_TOOL_FIELDS = {
    "description": str, "parameters": dict, "output_schema": dict, "strict": bool, "async": bool,
    "defer_loading": bool,
}  # fmt: skip


def _plain_function_tool(tool: Any) -> bool:
    # a function tool the union's first member takes as it is (checked without the schema)
    if (
        type(tool) is not dict
        or tool.get("type") != "function"
        or type(tool.get("name")) is not str
    ):
        return False
    for key, value in tool.items():
        if key in ("type", "name") or value is None:
            continue
        kind = _OPTIONAL_FUNCTION_TOOL_FIELDS.get(key)
        if kind is None or type(value) is not kind:
            return False
    return True


# vLLM's ``list[OpenAIHarmonyMessage | dict]``: any object passes (as a dict, when not a
# Harmony message); pydantic names the dict branch "dict[str,any]", which vLLM's error location
# drops.
_PREVIOUS_INPUT_MESSAGES = Optional(
    ListOf(TaggedUnion(Model("Message", {}), TypedDict("dict[str,any]", {})))
)
_SCHEMA = LazyModel(
    lambda: _schema(
        ResponsesRequest,
        {
            "text": Optional(_TEXT_CONFIG),
            "reasoning": Optional(_REASONING),
            "tool_choice": _ToolChoice(),
            "request_id": Str(),
            "previous_input_messages": _PREVIOUS_INPUT_MESSAGES,
            "tools": ListOf(_TOOL),
        },
    )
)
# typed as any object in the Struct: a value is checked against the SDK's type unless it is
# absent (or an object or a mode, for the tool choice)
_UNCONVERTED = (
    ("text", lambda v: v is None),
    ("reasoning", lambda v: v is None),
    ("tool_choice", lambda v: isinstance(v, dict) or v in _TOOL_CHOICE_MODES),
    ("request_id", lambda v: type(v) is str),  # (vLLM's default is a fresh id; not null)
    ("tools", lambda v: type(v) is list and all(_plain_function_tool(t) for t in v)),
    (
        "previous_input_messages",
        lambda v: v is None or (type(v) is list and all(type(m) is dict for m in v)),
    ),
)


def _check_tool_usage(data: dict[str, Any]) -> None:
    # vLLM's check_tool_usage: without tools "auto" becomes "none"; "required" or a named
    # function then has nothing to call.
    tools = data.get("tools")
    choice = data.get("tool_choice", "auto")
    named = isinstance(choice, dict) and choice.get("type") in ("function", "custom")
    if not (tools is not None and len(tools) > 0):
        if choice in ("auto", "none"):
            data["tool_choice"] = "none"
        elif choice == "required":
            raise InvalidParameter(
                "Tool choice 'required' must be specified with 'tools' parameter.",
                parameter="tool_choice",
            )
        elif named:
            raise InvalidParameter(
                "Tool choice 'function' not found in 'tools' parameter.", parameter="tool_choice"
            )
    elif named:
        name = choice.get("name")
        if not name:
            raise InvalidParameter(
                "Tool choice 'function' not found in 'tools' parameter.", parameter="tool_choice"
            )
        resolved = _resolve_named_choice(name, tools)
        if resolved != name:
            data["tool_choice"] = {**choice, "name": resolved}


def _resolve_named_choice(name: Any, tools: list[Any]) -> Any:
    # vLLM's _resolve_named_tool_choice: a tool's own name, or a namespace function's flat
    # ``<namespace>__<name>`` name, or its local name when one namespace alone defines it
    if isinstance(name, list | dict):
        return name  # (refused by the tool choice's validation)
    exact: set[Any] = set()
    local: dict[str, list[str]] = {}
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        if tool.get("type") == "namespace":
            namespace, functions = tool.get("name"), tool.get("tools")
            if not isinstance(functions, list) or not isinstance(namespace, str):
                return name  # (refused by the tool's validation)
            for function in functions:
                local_name = function.get("name") if isinstance(function, dict) else None
                if isinstance(local_name, str):
                    flat = flat_tool_name(namespace, local_name)
                    exact.add(flat)
                    local.setdefault(local_name, []).append(flat)
        elif isinstance(tool.get("name"), str):
            exact.add(tool["name"])
    if name in exact:
        return name
    candidates = local.get(name, []) if isinstance(name, str) else []
    if len(candidates) == 1:
        return candidates[0]
    if candidates:
        raise InvalidParameter(
            f"Tool choice '{name}' is ambiguous: it is defined in more than one namespace "
            f"({', '.join(candidates)}). Select it by its full '<namespace>__<name>' name.",
            parameter="tool_choice",
        )
    raise InvalidParameter(
        "Tool choice 'function' not found in 'tools' parameter.", parameter="tool_choice"
    )


def _check_custom_tool_format(data: dict[str, Any]) -> None:
    tools = data.get("tools")
    if not isinstance(tools, list):
        return
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        fmt = tool.get("format")
        if tool.get("type") == "custom" and isinstance(fmt, dict) and fmt.get("type") == "grammar":
            raise InvalidParameter(
                "Custom tools with a grammar format are not supported; "
                "only free-form text custom tools are accepted.",
                parameter="tools",
            )


def _validate_prompt(data: dict[str, Any]) -> None:
    if data.get("prompt") is not None:
        raise InvalidParameter("prompt template is not supported", parameter="prompt")


def _validate_background(data: dict[str, Any]) -> None:
    if data.get("background") and not data.get("store", True):
        raise InvalidParameter(
            "background can only be used when `store` is true", parameter="background"
        )


# pydantic runs vLLM's "before" validators in the reverse of their definition order
_VALIDATORS = (
    _check_tool_usage,
    _check_custom_tool_format,
    _validate_prompt,
    _validate_background,
    _check_cache_salt,
)


def parse_responses_request(body: bytes) -> ResponsesRequest:
    """Decode and validate a ``/v1/responses`` body like vLLM."""
    req = convert_body(
        decode_json_object(body), ResponsesRequest, _SCHEMA, _VALIDATORS, _UNCONVERTED
    )
    if req.top_logprobs is None:
        req.top_logprobs = 0
    return req


def check_echoed_nulls(req: ResponsesRequest) -> None:
    """Refuse a null ``background`` or ``truncation`` as vLLM does, only later: it takes them,
    then fails building its ``ResponsesResponse``, whose copies of them are not optional (a 400
    quoting pydantic once the answer is generated; a stream is cut off). Call once the request is
    prepared (vLLM's earlier refusals first), before generating."""
    errors: list[dict[str, Any]] = []
    if req.background is None:
        errors.append(
            {"type": "bool_type", "loc": ("background",), "input": None,
             "msg": "Input should be a valid boolean"}
        )  # fmt: skip
    if req.truncation is None:
        errors.append(
            {"type": "literal_error", "loc": ("truncation",), "input": None,
             "msg": "Input should be 'auto' or 'disabled'"}
        )  # fmt: skip
    if errors:
        raise BadRequest(pydantic_report("ResponsesResponse", errors))
