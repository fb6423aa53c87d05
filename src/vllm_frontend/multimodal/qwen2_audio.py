"""The Qwen2-Audio family as vLLM 0.32's ``Qwen2AudioMultiModalProcessor`` serves it: each clip
resampled to the feature extractor's rate (:mod:`.processors.resample`), its Whisper log-mel
``input_features`` (mels x 3000 frames: padded to 30 s, longer clips cut) and
``feature_attention_mask`` (int32, the clip's real frames), both "batched" fields, and one
``<|AUDIO|>`` of the rendered prompt expanded to the encoder's output length for the clip."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from vllm_frontend.engine.protocol import MultiModalFieldElem
from vllm_frontend.engine.tensors import Tensor, to_bfloat16_words
from vllm_frontend.multimodal.family import ProcessedItem
from vllm_frontend.multimodal.media import MediaError
from vllm_frontend.multimodal.processors.resample import resample
from vllm_frontend.multimodal.processors.whisper import (
    QWEN_AUDIO_DEFAULTS,
    WhisperFeatureExtractor,
    qwen2_audio_output_length,
)
from vllm_frontend.multimodal.tensor_embeds import TensorEmbedsSpec, inputs_embeds_size

__all__ = ["AudioItem", "Qwen2AudioFamily"]

AudioItem = tuple[np.ndarray, float]
"""A decoded clip: mono float32 samples and their rate (``MediaLoader.load_audio``)."""

_BATCHED = ("batched", {"keep_on_cpu": False})


def _features_tensor(values: np.ndarray, dtype: str) -> Tensor:
    if dtype == "bfloat16":
        return Tensor.from_numpy(to_bfloat16_words(values), dtype="bfloat16")
    if dtype == "float16":
        return Tensor.from_numpy(values.astype(np.float16))
    return Tensor.from_numpy(np.ascontiguousarray(values, dtype=np.float32))


class Qwen2AudioFamily:
    """Qwen2-Audio (``model_type`` ``qwen2_audio``): audio clips."""

    __slots__ = ("embeds", "extractor", "model_type", "sampling_rate", "token_ids")

    placeholders: Mapping[str, str] = {"audio": "Audio {i}: <|audio_bos|><|AUDIO|><|audio_eos|>"}
    """vLLM's ``get_placeholder_str`` (``{i}``: the clip's number in the prompt)."""
    supported_limits: Mapping[str, int | None] = {"audio": None}
    """Items per prompt the family takes by modality (None: any number)."""

    def __init__(
        self,
        config: Mapping[str, Any],
        preprocessor_config: Mapping[str, Any],
        token_to_id: Callable[[str], int | None],
    ) -> None:
        """``preprocessor_config``: the model's Whisper feature extractor settings."""
        self.model_type = str(config.get("model_type"))
        self.extractor = WhisperFeatureExtractor(preprocessor_config, QWEN_AUDIO_DEFAULTS)
        self.sampling_rate = float(self.extractor.options["sampling_rate"])
        token_id = token_to_id("<|AUDIO|>")
        if token_id is None:
            raise ValueError("the tokenizer has no <|AUDIO|> token")
        self.token_ids: dict[str, int] = {"audio": token_id}
        self.embeds = {
            "audio": TensorEmbedsSpec(inputs_embeds_size(config), count_key="audio_num_tokens")
        }
        """How ``audio_embeds`` parts are taken: one tensor of rows per clip, or vLLM's
        ``{"audio_embeds": ..., "audio_num_tokens": [n]}`` dictionary; a row per ``<|AUDIO|>``."""

    def resampled(self, item: AudioItem) -> np.ndarray:
        """The clip at the feature extractor's rate (vLLM's data parser resamples it, and the
        item hash is taken of these samples)."""
        samples, rate = item
        try:
            return resample(samples, rate, self.sampling_rate)
        except ValueError as e:
            raise MediaError.bad_request(str(e)) from None

    def item_tokens(self, modality: str, item: Any, kwargs: Mapping[str, Any]) -> int | None:
        """Placeholder tokens of a clip from its length alone (for a clip the engine's cache
        holds); None when unknown (then it is processed)."""
        if modality != "audio":
            return None
        samples = item
        hop = int(self.extractor.options["hop_length"])
        frames = min(len(samples), self.extractor.n_samples) // hop
        tokens = qwen2_audio_output_length(frames)
        return tokens if tokens > 0 else None

    def process(
        self, modality: str, items: list[Any], kwargs: Mapping[str, Any], dtype: str
    ) -> list[ProcessedItem]:
        """Process the request's clips (already at the model's rate, see :meth:`resampled`) in
        order; the features are cast to the model ``dtype``. The processor keyword arguments
        are not read (the extractor's call takes Qwen2-Audio's fixed settings)."""
        if modality != "audio":
            raise MediaError.bad_request(f"{modality} inputs are not supported for this model")
        if not items:
            return []
        try:
            out = self.extractor.extract(items, sampling_rate=int(self.sampling_rate))
        except (TypeError, ValueError) as e:
            raise MediaError.bad_request(str(e)) from None
        features, masks = out["input_features"], out["attention_mask"]
        processed = []
        for index, samples in enumerate(items):
            mask = np.ascontiguousarray(masks[index], dtype=np.int32)
            tokens = qwen2_audio_output_length(int(mask.sum()))
            if tokens <= 0:
                raise MediaError.bad_request(
                    f"The audio (len={len(samples)}) is too short to be represented inside the "
                    "model"
                )
            fields = {
                "input_features": MultiModalFieldElem(
                    _features_tensor(features[index], dtype), _BATCHED
                ),
                "feature_attention_mask": MultiModalFieldElem(Tensor.from_numpy(mask), _BATCHED),
            }
            processed.append(ProcessedItem("audio", tokens, fields))
        return processed
