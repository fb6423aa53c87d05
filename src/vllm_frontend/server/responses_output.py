"""The JSON of a Responses ``response`` object, its output items and stream events, as vLLM
0.32 dumps them (``ResponsesResponse.model_dump(mode="json", by_alias=True)`` over the OpenAI
SDK's types: every field, ``None`` included, in the SDK models' order).
"""

from __future__ import annotations

import uuid
from typing import Any

__all__ = [
    "function_call_item",
    "message_item",
    "new_id",
    "output_text",
    "reasoning_item",
    "response_json",
    "tool_json",
    "usage_json",
]


def new_id(prefix: str) -> str:
    """``<prefix>_`` and 16 random hex digits (vLLM's ``random_uuid`` ids)."""
    return f"{prefix}_{uuid.uuid4().hex[:16]}"


def output_text(text: str, logprobs: Any) -> dict[str, Any]:
    """An ``output_text`` content part."""
    return {"annotations": [], "text": text, "type": "output_text", "logprobs": logprobs}


def message_item(item_id: str, content: list[Any], status: str) -> dict[str, Any]:
    """An assistant ``message`` output item."""
    return {
        "id": item_id,
        "content": content,
        "role": "assistant",
        "status": status,
        "type": "message",
        "phase": None,
    }


def reasoning_item(item_id: str, text: str | None, status: str | None) -> dict[str, Any]:
    """A ``reasoning`` output item (``text`` None: no content yet)."""
    content = None if text is None else [{"text": text, "type": "reasoning_text"}]
    return {
        "id": item_id,
        "summary": [],
        "type": "reasoning",
        "content": content,
        "encrypted_content": None,
        "status": status,
    }


def function_call_item(
    item_id: str,
    call_id: str,
    name: str,
    arguments: str,
    status: str,
    namespace: str | None = None,
) -> dict[str, Any]:
    """A ``function_call`` output item."""
    return {
        "arguments": arguments,
        "call_id": call_id,
        "name": name,
        "type": "function_call",
        "id": item_id,
        "async": None,
        "caller": None,
        "namespace": namespace,
        "status": status,
    }


_FUNCTION_TOOL_FIELDS = (
    "name",
    "parameters",
    "strict",
    "type",
    "allowed_callers",
    "async",
    "defer_loading",
    "description",
    "output_schema",
)
_REASONING_FIELDS = ("context", "effort", "generate_summary", "mode", "summary")


_WEB_SEARCH = ("type", "external_web_access", "filters", "search_context_size", "user_location")
_WEB_SEARCH_PREVIEW = ("type", "search_content_types", "search_context_size", "user_location")
_BUILTIN_TOOL_FIELDS = {
    "file_search": ("type", "vector_store_ids", "filters", "max_num_results", "ranking_options"),
    "computer": ("type",),
    "computer_use_preview": ("display_height", "display_width", "environment", "type"),
    "web_search": _WEB_SEARCH,
    "web_search_2025_08_26": _WEB_SEARCH,
    "web_search_preview": _WEB_SEARCH_PREVIEW,
    "web_search_preview_2025_03_11": _WEB_SEARCH_PREVIEW,
    "code_interpreter": ("container", "type", "allowed_callers"),
    "mcp": ("server_label", "type", "allowed_callers", "allowed_tools", "authorization",
            "connector_id", "defer_loading", "headers", "require_approval",
            "server_description", "server_url", "tunnel_id"),
    "programmatic_tool_calling": ("type",),
    "image_generation": ("type", "action", "background", "complexity", "frame_count",
                         "frame_duration_ms", "input_fidelity", "input_image_mask", "model",
                         "moderation", "output_compression", "output_format", "partial_images",
                         "quality", "size", "svg"),
    "local_shell": ("type",),
    "shell": ("type", "allowed_callers", "environment"),
    "custom": ("name", "type", "allowed_callers", "async", "defer_loading", "description",
               "format"),
    "namespace": ("description", "name", "tools", "type"),
    "tool_search": ("type", "description", "execution", "parameters"),
    "apply_patch": ("type", "allowed_callers"),
}  # fmt: skip
"""Each built-in tool's fields, in the order of its SDK model (openai/types/responses/tool.py),
as vLLM's response echoes the validated model (every field, unset ones null)."""
_LOCATION_FIELDS = ("type", "city", "country", "region", "timezone")
_WEB_SEARCH_LOCATION_FIELDS = ("city", "country", "region", "timezone", "type")
_RANKING_FIELDS = ("hybrid_search", "ranker", "score_threshold")
_NAMESPACE_FUNCTION_FIELDS = ("name", "type", "allowed_callers", "async", "defer_loading",
                              "description", "output_schema", "parameters", "strict")  # fmt: skip
_NAMESPACE_MEMBER_FIELDS = {
    "function": _NAMESPACE_FUNCTION_FIELDS,
    "custom": _BUILTIN_TOOL_FIELDS["custom"],
}
_AUTO_CONTAINER_FIELDS = ("type", "file_ids", "memory_limit", "network_policy")


def tool_json(tool: dict[str, Any]) -> dict[str, Any]:
    """A request tool as the response echoes it (every top-level field of its SDK model;
    nested models other than a location or a code interpreter's container as given)."""
    kind = tool.get("type")
    if kind == "function":
        return {k: tool.get(k) for k in _FUNCTION_TOOL_FIELDS}
    fields = _BUILTIN_TOOL_FIELDS.get(kind) if isinstance(kind, str) else None
    if fields is None:
        return tool
    out = {k: tool.get(k) for k in fields}
    location = out.get("user_location")
    web_search = fields is _WEB_SEARCH
    if isinstance(location, dict):
        keys = _WEB_SEARCH_LOCATION_FIELDS if web_search else _LOCATION_FIELDS
        out["user_location"] = {k: location.get(k) for k in keys}
    filters = out.get("filters")
    if web_search and isinstance(filters, dict):
        out["filters"] = {"allowed_domains": filters.get("allowed_domains")}
    ranking = out.get("ranking_options") if kind == "file_search" else None
    if isinstance(ranking, dict):
        out["ranking_options"] = {k: ranking.get(k) for k in _RANKING_FIELDS}
    functions = out.get("tools") if kind == "namespace" else None
    if isinstance(functions, list):
        out["tools"] = [
            {k: f.get(k) for k in _NAMESPACE_MEMBER_FIELDS[f["type"]]}
            if isinstance(f, dict) and f.get("type") in _NAMESPACE_MEMBER_FIELDS
            else f
            for f in functions
        ]
    container = out.get("container") if kind == "code_interpreter" else None
    if isinstance(container, dict):
        out["container"] = {k: container.get(k) for k in _AUTO_CONTAINER_FIELDS}
    return out


# The fields of the SDK's ToolChoice members by type (the others have ``type`` alone), in their
# order: vLLM echoes the validated model (unset optional fields null, other keys after).
_TOOL_CHOICE_FIELDS = {
    "function": ("name", "type"),
    "custom": ("name", "type"),
    "mcp": ("server_label", "type", "name"),
    "allowed_tools": ("mode", "tools", "type"),
}


def _tool_choice_json(choice: Any) -> Any:
    if not isinstance(choice, dict):
        return choice
    kind = choice.get("type")
    fields = _TOOL_CHOICE_FIELDS.get(kind, ("type",)) if isinstance(kind, str) else ("type",)
    out = {k: choice.get(k) for k in fields}
    out.update((k, v) for k, v in choice.items() if k not in out)
    return out


def _format_json(fmt: Any) -> Any:
    if not isinstance(fmt, dict):
        return fmt
    if fmt.get("type") == "json_schema":
        return {
            "name": fmt.get("name"),
            "schema": fmt.get("schema"),
            "type": "json_schema",
            "description": fmt.get("description"),
            "strict": fmt.get("strict"),
        }
    return {"type": fmt.get("type")}


def _text_json(text: dict[str, Any] | None) -> Any:
    if text is None:
        return None
    return {"format": _format_json(text.get("format")), "verbosity": text.get("verbosity")}


def _reasoning_json(reasoning: dict[str, Any] | None) -> Any:
    if reasoning is None:
        return None
    return {k: reasoning.get(k) for k in _REASONING_FIELDS}


def usage_json(
    input_tokens: int, output_tokens: int, cached: int, cache_writes: int, reasoning_tokens: int
) -> dict[str, Any]:
    """``usage`` (one turn: vLLM leaves the per-turn lists empty for plain models);
    ``cache_writes``: the prompt tokens the engine wrote to its prefix cache."""
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {
            "cached_tokens": cached,
            "cache_write_tokens": cache_writes,
            "input_tokens_per_turn": [],
            "cached_tokens_per_turn": [],
        },
        "output_tokens": output_tokens,
        "output_tokens_details": {
            "reasoning_tokens": reasoning_tokens,
            "tool_output_tokens": 0,
            "output_tokens_per_turn": [],
            "tool_output_tokens_per_turn": [],
        },
        "total_tokens": input_tokens + output_tokens,
    }


def response_json(
    req: Any,
    *,
    response_id: str,
    created_at: int,
    model: str,
    params: Any,
    output: list[Any],
    status: str,
    usage: dict[str, Any] | None,
) -> dict[str, Any]:
    """vLLM's ``ResponsesResponse.from_request`` dumped; ``params`` are the engine's sampling
    parameters (temperature, top_p, max_tokens, penalties and logprobs are echoed from them)."""
    incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
    parallel = req.parallel_tool_calls
    return {
        "id": response_id,
        "created_at": created_at,
        "incomplete_details": incomplete,
        "instructions": req.instructions,
        "metadata": req.metadata,
        "model": model,
        "object": "response",
        "output": output,
        "parallel_tool_calls": True if parallel is None else parallel,
        "temperature": params.temperature,
        "tool_choice": _tool_choice_json(req.tool_choice),
        "tools": [tool_json(t) for t in req.tools],
        "top_p": params.top_p,
        "background": req.background,
        "max_output_tokens": params.max_tokens,
        "max_tool_calls": req.max_tool_calls,
        "previous_response_id": req.previous_response_id,
        "prompt": req.prompt,
        "reasoning": _reasoning_json(req.reasoning),
        "service_tier": req.service_tier,
        "status": status,
        "text": _text_json(req.text),
        "top_logprobs": params.logprobs,
        "truncation": req.truncation,
        "usage": usage,
        "user": req.user,
        "presence_penalty": params.presence_penalty,
        "frequency_penalty": params.frequency_penalty,
        "kv_transfer_params": None,
        "ec_transfer_params": None,
        "input_messages": None,
        "output_messages": None,
    }
