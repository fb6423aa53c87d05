"""How vLLM 0.32's request model takes one content part in the custom-role message branch
(``ChatCompletionContentPartParam`` in vllm/renderers/chat_utils.py): how many of its fields
the member pydantic's smart union keeps sets (none: the part is "unread", and a message of
such parts goes to OpenAI's branch), the part as that member hands it on (its fields first,
then the others), and vLLM's ``MM_PARSER_MAP`` checks of the typed URL parts it reads next.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .validation import Literal, Optional, Str, TypedDict, pydantic_report

_IMAGE_DETAILS = ("auto", "low", "high", "original")


def _is_str(value: Any) -> bool:
    return isinstance(value, str)


def _str_or_none(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _is_none(value: Any) -> bool:
    # ``PILImage | None``: a JSON value is never a PIL image.
    return value is None


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool) or value in (0, 1, "true", "false", "0", "1")


def _embeds_payload(value: Any) -> bool:
    # ``str | dict[str, str | list[int | float]] | None``
    if value is None or isinstance(value, str):
        return True
    if not isinstance(value, dict):
        return False
    return all(
        isinstance(v, str) or (isinstance(v, list) and all(isinstance(x, int | float) for x in v))
        for v in value.values()
    )


def _nested(fields: dict[str, Callable[[Any], bool]], required: tuple[str, ...]) -> Any:
    # A nested TypedDict's check: the count of its fields set, or None when it is refused.
    def count(value: Any) -> int | None:
        return _count(value, fields, required)

    return count


def _count(
    value: Any, fields: dict[str, Callable[[Any], Any]], required: tuple[str, ...]
) -> int | None:
    if not isinstance(value, dict) or any(name not in value for name in required):
        return None
    total = 0
    for name, check in fields.items():
        if name not in value:
            continue
        ok = check(value[name])
        if ok is None or ok is False:
            return None
        total += 1 + (ok if type(ok) is int else 0)
    return total


def _literal(*values: str) -> Callable[[Any], bool]:
    return lambda value: isinstance(value, str) and value in values


_URL = _nested({"url": _is_str}, ("url",))
_UUID = {"uuid": _str_or_none}

# Each member of vLLM's part union that a JSON object can match: its fields (each with a
# check answering whether the value is taken, or a nested count) and the required ones.
_MEMBERS: list[tuple[dict[str, Callable[[Any], Any]], tuple[str, ...]]] = [
    ({"text": _is_str, "type": _literal("text")}, ("text", "type")),
    (
        {
            "image_url": _nested({"url": _is_str, "detail": _literal(*_IMAGE_DETAILS)}, ("url",)),
            "type": _literal("image_url"),
        },
        ("image_url", "type"),
    ),
    (
        {
            "input_audio": _nested(
                {"data": _is_str, "format": _literal("wav", "mp3")}, ("data", "format")
            ),
            "type": _literal("input_audio"),
        },
        ("input_audio", "type"),
    ),
    (
        {
            "file": _nested({"file_data": _is_str, "file_id": _is_str, "filename": _is_str}, ()),
            "type": _literal("file"),
        },
        ("file", "type"),
    ),
    ({"audio_url": _URL, "type": _literal("audio_url")}, ("audio_url", "type")),
    ({"video_url": _URL, "type": _literal("video_url")}, ("video_url", "type")),
    ({"refusal": _is_str, "type": _literal("refusal")}, ("refusal", "type")),
    ({"image_pil": _is_none, **_UUID}, ()),
    ({"image_url": _str_or_none, **_UUID}, ()),
    (
        {"image_embeds": _embeds_payload, "type": _literal("image_embeds"), **_UUID},
        ("type",),
    ),
    (
        {"audio_embeds": _embeds_payload, "type": _literal("audio_embeds"), **_UUID},
        ("type",),
    ),
    (
        {"video_embeds": _embeds_payload, "type": _literal("video_embeds"), **_UUID},
        ("type",),
    ),
    ({"data": _is_str, "type": _literal("prompt_embeds")}, ("data", "type")),
    ({"audio_url": _str_or_none}, ()),
    ({"video_url": _str_or_none, **_UUID}, ()),
    ({"name": _is_str, "type": _literal("tool_reference")}, ()),
    (
        {"thinking": _is_str, "closed": _is_bool, "type": _literal("thinking")},
        ("thinking", "type"),
    ),
]


def _kept(part: dict[str, Any]) -> tuple[int, tuple[str, ...]] | None:
    # The fields set by the member the smart union keeps (the most set, the first on a tie)
    # and that member's field names; None when no member takes the part.
    best: tuple[int, tuple[str, ...]] | None = None
    for fields, required in _MEMBERS:
        count = _count(part, fields, required)
        if count is not None and (best is None or count > best[0]):
            best = (count, tuple(fields))
    return best


def fields_set(part: dict[str, Any]) -> int | None:
    """How many fields (nested ones counted) of ``part`` the custom-role branch's part union
    takes; None when no member of it takes the part."""
    kept = _kept(part)
    return None if kept is None else kept[0]


def as_kept(part: dict[str, Any]) -> dict[str, Any]:
    """``part`` as the union member that takes it hands it on: that member's fields first (in
    its order), then the rest (pydantic keeps a TypedDict's extra keys after its fields)."""
    kept = _kept(part)
    if kept is None:
        return part
    names = [name for name in kept[1] if name in part]
    return {**{name: part[name] for name in names}, **part}


_IMAGE_PARAM = TypedDict(
    "ChatCompletionContentPartImageParam",
    {
        "image_url": TypedDict(
            "ImageURL", {"url": Str(), "detail": Literal(*_IMAGE_DETAILS)}, ["url"]
        ),
        "type": Literal("image_url"),
    },
    ["image_url", "type"],
)
_PARSED = {
    "image_url": _IMAGE_PARAM,
    "audio_url": TypedDict(
        "ChatCompletionContentPartAudioParam",
        {"audio_url": TypedDict("AudioURL", {"url": Str()}, ["url"]), "type": Literal("audio_url")},
        ["audio_url", "type"],
    ),
    "video_url": TypedDict(
        "ChatCompletionContentPartVideoParam",
        {"video_url": TypedDict("VideoURL", {"url": Str()}, ["url"]), "type": Literal("video_url")},
        ["video_url", "type"],
    ),
    "input_image": TypedDict(
        "ResponseInputImageParam",
        {
            "detail": Literal("low", "high", "auto", "original"),
            "type": Literal("input_image"),
            "file_id": Optional(Str()),
            "image_url": Optional(Str()),
            "prompt_cache_breakpoint": TypedDict(
                "PromptCacheBreakpoint",
                {"mode": Literal("explicit"), "ttl": Literal("30m", "12h")},
                ["mode"],
            ),
        },
        ["detail", "type"],
    ),
}
"""The typed parts vLLM's ``MM_PARSER_MAP`` validates (with a pydantic ``TypeAdapter``) when
it reads them without a ``uuid``; the other types it only casts."""


def parser_error(part: Any, *, kept: bool = True) -> str | None:
    """pydantic's report of ``part`` as vLLM's chat parser validates it (a typed image, audio
    or video URL part, or a Responses ``input_image``, read without a ``uuid``), or None;
    ``kept``: the part as the chat request's part union hands it on (False: as given)."""
    if not isinstance(part, dict) or part.get("uuid") is not None:
        return None
    kind = part.get("type")
    spec = _PARSED.get(kind) if isinstance(kind, str) else None
    if spec is None:
        return None
    errors = spec.errors(as_kept(part) if kept else part, ())
    return pydantic_report(spec.name, errors) if errors else None
