"""The media items of one chat request, collected while its messages are normalised, in the
order they appear (vLLM's ``MultiModalItemTracker``): each part's modality, source and ``uuid``,
checked against the per-prompt limits as it is added."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from vllm_frontend.text.errors import InvalidInput

__all__ = ["CONTENT_PART_MODALITIES", "MediaPart", "MediaParts", "UnsupportedMedia"]

CONTENT_PART_MODALITIES = {"image_url": "image", "audio_url": "audio", "video_url": "video"}
"""The media types of a token-in request's ``content_parts`` and their modalities."""


class UnsupportedMedia(InvalidInput):
    """A media part for a model that cannot take it here (HTTP 400)."""


class MediaPart(msgspec.Struct, frozen=True, gc=False):
    """One media content part: ``modality`` ("image", "video", ...), its ``url`` (http(s),
    data: or file:) and the request's ``uuid`` for it; an ``*_embeds`` part has ``embeds``
    set, its payload (a base64 string or a dictionary, see ``multimodal.embeds``)."""

    modality: str
    url: str | None
    uuid: str | None = None
    embeds: str | dict[str, Any] | None = None
    is_embeds: bool = False


class MediaParts:
    """The collector one request's message normalisation fills (see ``chat.messages``)."""

    __slots__ = (
        "_counts",
        "_limits",
        "_placeholders",
        "_refusal",
        "_supported",
        "by_modality",
        "complete",
        "embeds_enabled",
        "interleave",
        "items",
    )

    def __init__(
        self,
        limits: Mapping[str, int],
        supported: Mapping[str, int | None],
        placeholders: Mapping[str, str],
        refusal: str | None = None,
        embeds_enabled: bool = False,
        interleave: bool = False,
    ) -> None:
        """``limits``: items allowed per prompt by modality (``--limit-mm-per-prompt`` within
        what the model supports; absent: none); ``supported``: the model's own limits (None:
        any number); ``placeholders``: the text a part stands for in "string"-format
        conversations; ``refusal``: the message every part is refused with (a model whose
        family is not implemented); ``embeds_enabled``: ``--enable-mm-embeds``;
        ``interleave``: ``--interleave-mm-strings``."""
        self._refusal = refusal
        self.embeds_enabled = embeds_enabled
        """``*_embeds`` parts are taken (``--enable-mm-embeds``)."""
        self.interleave = interleave
        """In "string"-format content, each part's placeholder goes where the part is
        (``--interleave-mm-strings``), not in front of the message's text."""
        self._counts: dict[str, int] = {}
        self._limits = limits
        self._supported = supported
        self._placeholders = placeholders
        self.items: list[MediaPart] = []
        """Every part, in message order."""
        self.by_modality: dict[str, int] = {}
        self.complete = False
        """Every message was normalised (vLLM's chat parsing done): the point at which vLLM
        loads the media, before it applies the chat template."""

    def add(self, part: MediaPart) -> str | None:
        """Track ``part``; its placeholder text. Raises vLLM's 400 past the modality's limit."""
        if self._refusal is not None:
            raise UnsupportedMedia(self._refusal, parameter="messages")
        modality = part.modality
        # vLLM counts a modality's embeddings apart from its raw items (mixing them is
        # refused later), and does not limit embeddings of a modality limited to 0.
        kind = f"{modality}_embeds" if part.is_embeds else modality
        count = self._counts.get(kind, 0) + 1
        limit = self._limits.get(modality, 0)
        if count > limit and not (part.is_embeds and limit == 0 and modality in self._supported):
            supported = self._supported.get(modality, 0)
            raise InvalidInput(
                f"At most {limit} {modality}(s) may be provided in one prompt."
                + (
                    " Set `--limit-mm-per-prompt` to increase this limit."
                    if supported is not None and count <= supported
                    else ""
                ),
                parameter=modality,
            )
        self._counts[kind] = count
        self.by_modality[modality] = self.by_modality.get(modality, 0) + 1
        self.items.append(part)
        text = self._placeholders.get(modality)
        if text is not None and "{i}" in text:
            # Numbered placeholders (Qwen2-Audio's "Audio {i}: ..."): the modality's count.
            text = text.replace("{i}", str(count))
        return text
