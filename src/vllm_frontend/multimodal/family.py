"""Which multimodal family a model belongs to, read from its ``config.json``, and what a family
gives the facade: each item's engine fields and placeholder length."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import msgspec

from vllm_frontend.engine.protocol import MultiModalFieldElem

__all__ = ["Family", "ProcessedItem", "is_multimodal_config", "multimodal_model_type"]


class ProcessedItem(msgspec.Struct, gc=False):
    """One item, processed: its modality, how many placeholder tokens it takes and its fields
    (``MultiModalKwargsItem``: keyword -> field element).

    By default the item's placeholder token is repeated ``num_tokens`` times and every position
    takes an embedding; a family whose items stand for other tokens too gives the token ids
    (``replacement``) and which of them take embeddings (``is_embed``, a bool array)."""

    modality: str
    num_tokens: int
    fields: dict[str, MultiModalFieldElem]
    replacement: list[int] | None = None
    is_embed: Any = None


class Family(Protocol):
    """A model family's multimodal processing (``multimodal.qwen2_vl.Qwen2VLFamily``, ...)."""

    @property
    def placeholders(self) -> Mapping[str, str]:
        """The text an item stands for in a "string"-format conversation, by modality."""
        ...

    @property
    def supported_limits(self) -> Mapping[str, int | None]:
        """Items per prompt the family takes by modality (None: any number)."""
        ...

    @property
    def token_ids(self) -> Mapping[str, int]:
        """The placeholder token id the rendered prompt has once per item, by modality."""
        ...

    def process(
        self, modality: str, items: list[Any], kwargs: Mapping[str, Any], dtype: str
    ) -> list[ProcessedItem]:
        """Process the request's items of ``modality`` (in order) with the request's processor
        keyword arguments; floats are cast to the model ``dtype``."""
        ...


# Multimodal model types vLLM serves whose processing is not implemented here (a media part
# for one of them is refused naming its type; text requests are served).
def multimodal_model_type(config: Mapping[str, Any]) -> str | None:
    """The model type when ``config`` is a vision/audio-language model's, else None."""
    if not is_multimodal_config(config):
        return None
    return str(config.get("model_type"))


def is_multimodal_config(config: Mapping[str, Any]) -> bool:
    """Whether the model takes media (it has a vision or audio tower's config)."""
    # Phi-3-vision's and Phi-4-multimodal's remote-code configs (phi3_v, phi4mm) name their
    # towers under "embd_layer" / "img_processor" / "audio_processor".
    keys = ("vision_config", "audio_config", "vision_tower", "mm_vision_tower", "embd_layer",
            "img_processor", "audio_processor")  # fmt: skip
    if any(config.get(k) is not None for k in keys):
        return True
    architectures = config.get("architectures") or []
    return any(
        isinstance(a, str) and ("ConditionalGeneration" in a or "VL" in a or "Vision" in a)
        for a in architectures
    )
