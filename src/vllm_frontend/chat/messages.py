"""OpenAI chat messages and tools turned into what a chat template sees, as vLLM 0.32 does.

The input is JSON-decoded request data (dicts, lists, strings). The output is vLLM's
"conversation": one dict per message with ``role``, ``content`` (a string, or a list of
``{"type": "text", "text": ...}`` parts in the "openai" content format), and, where present,
``tool_calls`` (arguments parsed into objects), ``reasoning``/``reasoning_content``,
``tool_call_id``, ``name``, ``task`` and a developer message's ``tools``.
References: vLLM ``entrypoints/openai/chat_completion/protocol.py`` (request validators) and
``renderers/chat_utils.py`` (``_parse_chat_message_content``, ``_postprocess_messages``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from vllm_frontend.chat.errors import ChatError, MediaUnsupported
from vllm_frontend.chat.template import ContentFormat
from vllm_frontend.multimodal.parts import MediaPart, MediaParts

Conversation = list[dict[str, Any]]
"""Messages as the chat template receives them."""

# Content part types whose payload is text (vLLM's TEXT_PART_TYPES) and the key holding it.
_TEXT_PART_KEYS = {
    "text": "text",
    "input_text": "text",
    "output_text": "text",
    "refusal": "refusal",
    "thinking": "thinking",
}
# Parts of these types with no payload are skipped rather than rejected.
_SKIP_WHEN_EMPTY = ("text", "refusal")
# Keys vLLM knows on some content part type; the others are passed through to "openai"-format
# parts so templates can read them (e.g. ``cache_control``).
_KNOWN_PART_FIELDS = frozenset(
    {
        "audio_embeds",
        "audio_url",
        "closed",
        "data",
        "file",
        "image_embeds",
        "image_pil",
        "image_url",
        "input_audio",
        "name",
        "prompt_cache_breakpoint",
        "refusal",
        "text",
        "thinking",
        "type",
        "uuid",
        "video_embeds",
        "video_url",
    }
)
_MEDIA_PART_TYPES = frozenset(
    {
        "image_url",
        "input_image",
        "image_pil",
        "image_embeds",
        "audio_url",
        "input_audio",
        "audio_embeds",
        "video_url",
        "video_embeds",
        "prompt_embeds",
        "file",
    }
)
# The keys vLLM's chat parser looks for, in its order, in a part without a ``type`` or with
# a ``uuid``: the first one present is the part's type.
_UNTYPED_PART_KEYS = (
    "image_url",
    "image_pil",
    "image_embeds",
    "audio_embeds",
    "video_embeds",
    "prompt_embeds",
    "audio_url",
    "input_audio",
    "video_url",
    "tool_reference",
)
_CLAUDE_BILLING_HEADER = "x-anthropic-billing-header"
# Media part types that carry a URL, with the key holding it and their modality.
_URL_PARTS = {
    "image_url": ("image_url", "image"),
    "input_image": ("image_url", "image"),
    "video_url": ("video_url", "video"),
    "audio_url": ("audio_url", "audio"),
}


def normalize_messages(
    messages: Any, content_format: ContentFormat, media: MediaParts | None = None
) -> Conversation:
    """The conversation vLLM renders for the request's ``messages``; media parts go to
    ``media`` (in order) and stand in the conversation as ``{"type": modality}`` parts, or as
    the model's placeholder text in "string" format. Without ``media`` (a text-only model) a
    media part is refused.

    Raises :class:`ChatError` (HTTP 400) for malformed messages.
    """
    if not isinstance(messages, list):
        raise ChatError("messages must be a list of message objects.", param="messages")
    conversation = [
        _normalize_message(i, message, content_format, media) for i, message in enumerate(messages)
    ]
    for message in conversation:
        _parse_tool_call_arguments(message)
    if media is not None:
        media.complete = True
    return conversation


def normalize_tools(tools: Any) -> list[dict[str, Any]] | None:
    """Request ``tools`` as vLLM hands them to the template (``ChatCompletionToolsParam.
    model_dump()``): ``{"type", "function": {"name", "description", "parameters"[, "strict"]
    [, "defer_loading"]}[, "defer_loading"]}`` with unknown keys dropped and absent optional
    fields as ``None``.
    """
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise ChatError("tools must be a list of tool objects.", param="tools")
    out: list[dict[str, Any]] = []
    for i, tool in enumerate(tools):
        where = f"tools.{i}"
        if not isinstance(tool, dict):
            raise ChatError(f"{where} must be an object.", param=where)
        kind = tool.get("type", "function")
        if kind != "function":
            raise ChatError(f"{where}.type must be 'function'.", param=f"{where}.type")
        function = tool.get("function")
        if not isinstance(function, dict):
            raise ChatError(f"{where}.function must be an object.", param=f"{where}.function")
        name = function.get("name")
        if not isinstance(name, str):
            raise ChatError(f"{where}.function.name must be a string.", param=f"{where}.function")
        description = function.get("description")
        if description is not None and not isinstance(description, str):
            raise ChatError(
                f"{where}.function.description must be a string.", param=f"{where}.function"
            )
        parameters = function.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            raise ChatError(
                f"{where}.function.parameters must be an object.", param=f"{where}.function"
            )
        tool_defer = _optional_bool(tool, "defer_loading", where)
        fn_defer = _optional_bool(function, "defer_loading", f"{where}.function")
        strict = _optional_bool(function, "strict", f"{where}.function")
        if fn_defer is None:
            fn_defer = tool_defer
        fn: dict[str, Any] = {"name": name, "description": description, "parameters": parameters}
        if strict is not None:
            fn["strict"] = strict
        if fn_defer is not None:
            fn["defer_loading"] = fn_defer
        entry: dict[str, Any] = {"type": "function", "function": fn}
        if tool_defer is not None:
            entry["defer_loading"] = tool_defer
        out.append(entry)
    return out


def _optional_bool(obj: Mapping[str, Any], key: str, where: str) -> bool | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, bool):
        raise ChatError(f"{where}.{key} must be a boolean.", param=f"{where}.{key}")
    return value


def _normalize_message(
    index: int, message: Any, content_format: ContentFormat, media: MediaParts | None
) -> dict[str, Any]:
    where = f"messages.{index}"
    if not isinstance(message, dict):
        raise ChatError(f"{where} must be an object.", param=where)
    role = message.get("role")
    if not isinstance(role, str):
        raise ChatError(f"{where}.role is required and must be a string.", param=f"{where}.role")
    content = message.get("content")
    # vLLM renames the deprecated ``reasoning_content`` before validation; ``reasoning`` wins.
    reasoning = message.get("reasoning")
    if reasoning is None:
        reasoning = message.get("reasoning_content")
    if reasoning is not None and not isinstance(reasoning, str):
        raise ChatError(f"{where}.reasoning must be a string.", param=f"{where}.reasoning")
    name = message.get("name")
    if name is not None and not isinstance(name, str):
        raise ChatError(f"{where}.name must be a string.", param=f"{where}.name")

    result: dict[str, Any] = {"role": role}
    if isinstance(content, str) and role != "system":
        # The common case: the one text part a string stands for, as the general path below
        # would make it (a system prompt may lose a billing header there).
        result["content"] = (
            [{"type": "text", "text": content}] if content_format == "openai" else content
        )
    else:
        result["content"] = _content(where, role, content, content_format, media)

    if role == "assistant":
        tool_calls = message.get("tool_calls")
        if tool_calls is not None:
            result["tool_calls"] = _validate_tool_calls(where, tool_calls)
        if reasoning is not None:
            result["reasoning"] = reasoning
            result["reasoning_content"] = reasoning
    elif role == "tool":
        if "tool_call_id" in message:
            tool_call_id = message["tool_call_id"]
            if tool_call_id is not None and not isinstance(tool_call_id, str):
                raise ChatError(
                    f"{where}.tool_call_id must be a string.", param=f"{where}.tool_call_id"
                )
            result["tool_call_id"] = tool_call_id
        body = result["content"]
        # Most templates expect a tool result as a string: vLLM joins text-only part lists.
        if isinstance(body, list) and all(
            isinstance(p, dict) and p.get("type") == "text" for p in body
        ):
            result["content"] = "\n".join(p.get("text", "") for p in body)
    if isinstance(name, str):
        result["name"] = name
    task = message.get("task")
    if isinstance(task, str):
        result["task"] = task
    if role == "developer":
        result["tools"] = _developer_tools(where, message.get("tools"))
    return result


def _content(
    where: str, role: str, content: Any, content_format: ContentFormat, media: MediaParts | None
) -> Any:
    # A message's content as the template gets it: its parts ("openai") or their text.
    if content is None:
        parts: list[Any] = []
    elif isinstance(content, str):
        parts = [{"type": "text", "text": content}]
    elif isinstance(content, list):
        parts = content
    else:
        raise ChatError(
            f"{where}.content must be a string, a list of content parts or null.",
            param=f"{where}.content",
        )
    if role == "system":
        parts = _strip_billing_header(parts)

    placeholders: list[tuple[str, str | None]] = []
    texts = [
        _parse_part(f"{where}.content.{i}", part, media, placeholders, content_format)
        for i, part in enumerate(parts)
    ]
    kept = [p for p in texts if p is not None]
    if content_format == "openai":
        return kept
    # vLLM's string format drops empty texts before joining (its parts are kept when truthy).
    strings = [p["text"] if p["type"] == "text" else p["name"] for p in kept]
    strings = [t for t in strings if t]
    if media is not None and media.interleave:
        strings = _interleaved(strings, placeholders)
    text = "\n".join(strings)
    stored = [p for _, p in placeholders if p]
    return _with_placeholders(text, stored) if stored else text


# The text a media part stands for in "string"-format content with --interleave-mm-strings,
# replaced by the item's placeholder (vLLM's MODALITY_PLACEHOLDERS_MAP).
_INTERLEAVE_MARKERS = {"image": "<##IMAGE##>", "audio": "<##AUDIO##>", "video": "<##VIDEO##>"}


def _interleaved(texts: list[str], placeholders: list[tuple[str, str | None]]) -> list[str]:
    # vLLM's _get_interleaved_text_prompt: each text that is a modality's marker (a media
    # part's, or the same text typed in a part) takes the modality's next placeholder.
    slots: dict[str, list[str]] = {}
    for modality, placeholder in placeholders:
        if placeholder:
            slots.setdefault(_INTERLEAVE_MARKERS[modality], []).append(placeholder)
    out = []
    for text in texts:
        if text in slots:
            if not slots[text]:
                raise ChatError(
                    f"Found more '{text}' placeholders in input prompt than actual multimodal "
                    "data items."
                )
            text = slots[text].pop(0)
        out.append(text)
    return out


def _with_placeholders(text: str, placeholders: list[str]) -> str:
    # vLLM's string format: placeholders the text does not already hold go in front of it.
    missing: list[str] = []
    for placeholder in dict.fromkeys(placeholders):
        count = placeholders.count(placeholder) - text.count(placeholder)
        if count < 0:
            raise ChatError(
                f"Found more '{placeholder}' placeholders in input prompt than actual "
                "multimodal data items.",
                param="messages",
            )
        missing.extend([placeholder] * count)
    return "\n".join([*missing, text] if text else missing)


_IMAGE_DETAILS = ("auto", "low", "high", "original")


def _check_detail(where: str, detail: Any) -> None:
    # vLLM's request model types ``image_url.detail`` as one of these literals: anything else
    # is a 400 (its message is pydantic's report over every content-part type; ours is short).
    if detail not in _IMAGE_DETAILS:
        raise ChatError(
            f"{where}.image_url.detail must be one of 'auto', 'low', 'high' or 'original'.",
            param=f"{where}.image_url.detail",
        )


def _media_part(
    where: str,
    kind: str,
    part: dict[str, Any],
    media: MediaParts | None,
    placeholders: list[tuple[str, str | None]],
    content_format: ContentFormat,
) -> dict[str, Any] | None:
    """A media part added to ``media``: its stand-in (an "openai"-format part, or None with its
    placeholder text noted in ``placeholders``)."""
    if media is None:
        raise MediaUnsupported(
            f"Content part type {kind!r} is not supported: this frontend serves text-only models.",
            param="type",
        )
    uuid = part.get("uuid")
    uuid = None if uuid is None else str(uuid)
    if kind in ("image_embeds", "audio_embeds", "video_embeds"):
        if not media.embeds_enabled:
            raise ChatError(f"You must set `--enable-mm-embeds` to input `{kind}`", param=kind)
        payload = part.get(kind)
        if payload is not None and not isinstance(payload, str | dict):
            raise ChatError(
                f"{where}.{kind} must be a base64 string or an object.", param=f"{where}.{kind}"
            )
        modality = kind.removesuffix("_embeds")
        placeholder = media.add(MediaPart(modality, None, uuid, embeds=payload, is_embeds=True))
    elif kind == "input_audio":
        value = part.get("input_audio")
        url = None
        if value:
            if not isinstance(value, dict):
                raise ChatError(f"{where}.input_audio must be an object.", param=f"{where}")
            data, audio_format = value.get("data", ""), value.get("format", "")
            if data:  # vLLM's URL of it (without data, the uuid alone names the clip)
                url = f"data:audio/{audio_format};base64,{data}"
        modality = "audio"
        placeholder = media.add(MediaPart(modality, url, uuid))
    elif kind == "image_pil" and part.get("image_pil") is None:
        # (JSON has no PIL image: ``null``, which vLLM reads as an image without data, as an
        # image_url part without a URL; with a uuid, an item the engine's cache holds)
        modality = "image"
        placeholder = media.add(MediaPart(modality, None, uuid))
    elif kind not in _URL_PARTS:
        raise ChatError(f"Content part type {kind!r} is not supported by this frontend yet.")
    else:
        key, modality = _URL_PARTS[kind]
        value = part.get(key)
        url = value.get("url") if isinstance(value, dict) else value
        if url is not None and not isinstance(url, str):
            raise ChatError(f"{where}.{key}.url must be a string.", param=f"{where}.{key}")
        if kind == "image_url" and isinstance(value, dict) and "detail" in value:
            _check_detail(where, value["detail"])
        # An empty URL names no media, as vLLM reads it (chat_utils: ``if image_url else None``).
        placeholder = media.add(MediaPart(modality, url or None, uuid))
    if content_format != "openai":
        placeholders.append((modality, placeholder))
        return {"type": "text", "text": _INTERLEAVE_MARKERS[modality]} if media.interleave else None
    out: dict[str, Any] = {"type": modality}
    out.update((k, v) for k, v in part.items() if k not in _KNOWN_PART_FIELDS)
    return out


def _parse_part(
    where: str,
    part: Any,
    media: MediaParts | None = None,
    placeholders: list[tuple[str, str | None]] | None = None,
    content_format: ContentFormat = "openai",
) -> dict[str, Any] | None:
    """One content part as an "openai"-format part (text, tool_reference or a media item's
    ``{"type": modality}``), or ``None`` when vLLM skips it (or, in "string" format, when it
    is a media item: its placeholder goes to ``placeholders``)."""
    if isinstance(part, str):
        return {"type": "text", "text": part}
    if not isinstance(part, dict):
        raise ChatError(f"{where} must be a string or an object.", param=where)
    kind = part.get("type")
    if kind is None or part.get("uuid") is not None:
        # vLLM's parser reads a part without a type, or with a uuid (whatever its type), by
        # the first of these keys it holds.
        kind = next((key for key in _UNTYPED_PART_KEYS if key in part), None)
        if kind is None:
            raise ChatError("Missing 'type' field in multimodal part.", param="type")
    if not isinstance(kind, str):
        raise ChatError("Invalid 'type' field in multimodal part.", param="type")
    if kind in _TEXT_PART_KEYS:
        text = part.get(_TEXT_PART_KEYS[kind])
        if text is None and kind in _SKIP_WHEN_EMPTY:
            return None
        if not isinstance(text, str):
            raise ChatError(
                f"{where}.{_TEXT_PART_KEYS[kind]} must be a string.", param=f"{where}.{kind}"
            )
        out: dict[str, Any] = {"type": "text", "text": text}
        out.update((k, v) for k, v in part.items() if k not in _KNOWN_PART_FIELDS)
        return out
    if kind == "tool_reference":
        ref = part.get("name")
        if not isinstance(ref, str):
            raise ChatError(f"{where}.name must be a string.", param=f"{where}.name")
        return {"type": "tool_reference", "name": ref}
    if kind in _MEDIA_PART_TYPES:
        return _media_part(
            where, kind, part, media, placeholders if placeholders is not None else [],
            content_format,
        )  # fmt: skip
    supported = sorted((_MEDIA_PART_TYPES - {"file"}) | set(_TEXT_PART_KEYS) | {"tool_reference"})
    raise ChatError(
        f"Unsupported chat content part type: {kind!r}. Supported types: {', '.join(supported)}.",
        param="type",
        value=kind,
    )


def _strip_billing_header(parts: list[Any]) -> list[Any]:
    # Claude Code puts a per-request attribution line in the system prompt; vLLM drops it so
    # prefix caching works from the header on.
    out: list[Any] = []
    for part in parts:
        if isinstance(part, str):
            text: Any = part
        elif isinstance(part, dict) and part.get("type") == "text":
            text = part.get("text")
        else:
            text = None
        if not (isinstance(text, str) and text.startswith(_CLAUDE_BILLING_HEADER)):
            out.append(part)
            continue
        rest = text.partition("\n")[2]
        if rest:
            out.append(rest if isinstance(part, str) else {**part, "text": rest})
    return out


def _validate_tool_calls(where: str, tool_calls: Any) -> list[dict[str, Any]]:
    if not isinstance(tool_calls, list):
        raise ChatError(f"{where}.tool_calls must be a list.", param=f"{where}.tool_calls")
    out: list[dict[str, Any]] = []
    for i, call in enumerate(tool_calls):
        at = f"{where}.tool_calls.{i}"
        if not isinstance(call, dict):
            raise ChatError("assistant tool_calls entries must be objects.", param="tool_calls")
        if call.get("type", "function") != "function" or not isinstance(call.get("function"), dict):
            raise ChatError(
                "chat completions only support assistant tool_calls of type 'function'.",
                param="tool_calls",
            )
        call_id = call.get("id")
        if not isinstance(call_id, str):
            raise ChatError(f"{at}.id is required and must be a string.", param=f"{at}.id")
        function = call["function"]
        fn_name = function.get("name")
        arguments = function.get("arguments")
        if not isinstance(fn_name, str):
            raise ChatError(
                f"{at}.function.name is required and must be a string.", param=f"{at}.function"
            )
        if not isinstance(arguments, str):
            raise ChatError(
                f"{at}.function.arguments is required and must be a string.",
                param=f"{at}.function",
            )
        # Key order as vLLM's validated TypedDicts produce it (id, function, type, extras).
        fn = {"arguments": arguments, "name": fn_name}
        fn.update((k, v) for k, v in function.items() if k not in fn)
        entry: dict[str, Any] = {"id": call_id, "function": fn, "type": "function"}
        entry.update((k, v) for k, v in call.items() if k not in entry)
        out.append(entry)
    return out


def _parse_tool_call_arguments(message: dict[str, Any]) -> None:
    # Templates expect tool-call arguments as a mapping (transformers' convention): vLLM parses
    # the JSON string, and turns anything that is not a JSON object into {}.
    if message["role"] != "assistant" or "tool_calls" not in message:
        return
    calls = message["tool_calls"]
    if not calls:
        del message["tool_calls"]
        return
    for call in calls:
        function = call["function"]
        raw = function.get("arguments")
        parsed: Any = None
        if raw:
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = None
        function["arguments"] = parsed if isinstance(parsed, dict) else {}


def _developer_tools(where: str, tools: Any) -> list[dict[str, Any]] | None:
    if tools is None:
        return None
    if not isinstance(tools, list):
        raise ChatError(f"{where}.tools must be a list.", param=f"{where}.tools")
    out: list[dict[str, Any]] = []
    for i, tool in enumerate(tools):
        at = f"{where}.tools.{i}"
        if not isinstance(tool, dict) or not isinstance(tool.get("function"), dict):
            raise ChatError(f"{at} must be a function tool object.", param=at)
        function = tool["function"]
        if not isinstance(function.get("name"), str):
            raise ChatError(f"{at}.function.name must be a string.", param=at)
        # Order of the validated TypedDict: function (name, description, parameters, strict),
        # then type.
        fn = {
            k: function[k] for k in ("name", "description", "parameters", "strict") if k in function
        }
        fn.update((k, v) for k, v in function.items() if k not in fn)
        entry: dict[str, Any] = {"function": fn, "type": tool.get("type", "function")}
        entry.update((k, v) for k, v in tool.items() if k not in entry)
        out.append(entry)
    return out
