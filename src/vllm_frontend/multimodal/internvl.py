"""InternVL in Hugging Face format (``model_type`` ``internvl``,
``InternVLForConditionalGeneration``) as vLLM 0.32's ``InternS1MultiModalProcessor`` serves it:
each image processed on its own by GOT-OCR 2's image processor under ``InternVLProcessor``'s
defaults (:mod:`.processors.internvl`: tiles of the grid closest to its aspect ratio, and a
thumbnail when there is more than one), its tiles as ``pixel_values`` (a "flat" field sliced by
the tiles of every image of the request), their count as ``image_num_patches`` (a "batched" field
kept on the CPU) and the ``<IMG_CONTEXT>`` token id as ``image_token_id`` (a "shared" field kept
on the CPU); each ``<IMG_CONTEXT>`` of the rendered prompt replaced by ``<img>``,
``image_seq_length`` ``<IMG_CONTEXT>`` per tile and ``</img>``, tokenized, whose
``<IMG_CONTEXT>`` positions take embeddings.

Videos as vLLM's processor takes them: every frame the loader kept resized to the image
processor's tile size by transformers' ``InternVLVideoProcessor`` (:mod:`.processors.
torch_video`, bit-exact with its torch path; its config from ``processor_config.json``'s
``video_processor``, else ``video_preprocessor_config.json``, else ``preprocessor_config.json``,
as transformers loads it), the frames as ``pixel_values_videos`` (a "flat" field sliced by the
frames of every video of the request), their count as ``video_num_patches`` and the ``<video>``
token id as ``video_token_id``; each ``<video>`` replaced by ``Frame{i}: <img>``,
``image_seq_length`` ``<video>`` and ``</img>`` per frame, joined by newlines, tokenized, whose
``<video>`` positions take embeddings."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from vllm_frontend.engine.protocol import MultiModalFieldElem
from vllm_frontend.engine.tensors import Tensor, to_bfloat16_words
from vllm_frontend.multimodal.family import ProcessedItem
from vllm_frontend.multimodal.family_parts import Replacement
from vllm_frontend.multimodal.media import ImageItem, MediaError, VideoItem
from vllm_frontend.multimodal.processors import image_ops
from vllm_frontend.multimodal.processors.internvl import (
    INTERNVL_DEFAULTS,
    GotOcr2ImageProcessor,
    image_replacement,
)
from vllm_frontend.multimodal.processors.torch_video import (
    INTERNVL_DEFAULTS as VIDEO_DEFAULTS,
)
from vllm_frontend.multimodal.processors.torch_video import (
    TorchVideoProcessor,
)
from vllm_frontend.multimodal.tensor_embeds import TensorEmbedsSpec, inputs_embeds_size

__all__ = ["InternVLFamily"]

CONTEXT_TOKEN = "<IMG_CONTEXT>"
VIDEO_TOKEN = "<video>"
START_TOKEN = "<img>"
END_TOKEN = "</img>"
_FIELDS = {
    "image": ("pixel_values", "image_num_patches", "image_token_id"),
    "video": ("pixel_values_videos", "video_num_patches", "video_token_id"),
}
DEFAULT_IMAGE_SEQ_LENGTH = 256
"""transformers' ``InternVLProcessor`` default when ``processor_config.json`` names none."""


def _pixels(values: np.ndarray, dtype: str) -> Tensor:
    """Float32 pixels in the model ``dtype``, as vLLM casts floating fields."""
    if dtype == "bfloat16":
        return Tensor.from_numpy(to_bfloat16_words(values), dtype="bfloat16")
    if dtype == "float16":
        return Tensor.from_numpy(values.astype(np.float16))
    if dtype == "float32":
        return Tensor.from_numpy(np.ascontiguousarray(values, dtype=np.float32))
    raise ValueError(f"unsupported pixel dtype {dtype!r}")


class InternVLFamily:
    """InternVL, Hugging Face format (``model_type`` ``internvl``): images."""

    __slots__ = (
        "_encode",
        "_replacements",
        "_server_kwargs",
        "_server_raw",
        "_video_replacements",
        "embeds",
        "image_seq_length",
        "model_type",
        "processor",
        "token_ids",
        "video_processor",
    )

    placeholders: Mapping[str, str] = {"image": CONTEXT_TOKEN, "video": VIDEO_TOKEN}
    """vLLM's ``get_placeholder_str`` by modality."""
    unusable_embeds: Mapping[str, str] = {
        "video": "`video_embeds` inputs are not supported for InternVL models: vLLM 0.32's "
        "InternVL processor cannot place them (it answers them with a server error)"
    }
    """Embeddings vLLM's processor fails on (its 500): refused with a 400."""
    supported_limits: Mapping[str, int | None] = {"image": None, "video": None}
    """Items per prompt vLLM's processor takes by modality (None: any number)."""
    video_processor_name = "InternVLVideoProcessor"
    """transformers' video processor class (vLLM's default video loader serves it)."""

    def __init__(
        self,
        config: Mapping[str, Any],
        preprocessor_config: Mapping[str, Any],
        processor_config: Mapping[str, Any],
        token_to_id: Callable[[str], int | None],
        encode: Callable[[str], list[int]],
        processor_kwargs: Mapping[str, Any],
        video_preprocessor_config: Mapping[str, Any] | None = None,
    ) -> None:
        """``processor_config``: the model's ``processor_config.json`` (``image_seq_length``);
        ``encode``: the tokenizer without special tokens added; ``processor_kwargs``: the
        server's ``--mm-processor-kwargs`` (the image processor's options among them);
        ``video_preprocessor_config``: the model's ``video_preprocessor_config.json``."""
        self.model_type = str(config.get("model_type"))
        self.processor = GotOcr2ImageProcessor(preprocessor_config, INTERNVL_DEFAULTS)
        self._server_kwargs = self._known(processor_kwargs)
        self._server_raw = dict(processor_kwargs)
        seq_length = processor_config.get("image_seq_length")
        self.image_seq_length = (
            int(seq_length) if seq_length is not None else DEFAULT_IMAGE_SEQ_LENGTH
        )
        for token in (START_TOKEN, END_TOKEN):
            if token_to_id(token) is None:
                raise ValueError(f"the tokenizer has no {token} token")
        context_id = token_to_id(CONTEXT_TOKEN)
        if context_id is None:
            raise ValueError(f"the tokenizer has no {CONTEXT_TOKEN} token")
        self.token_ids: dict[str, int] = {"image": context_id}
        video_id = token_to_id(VIDEO_TOKEN)
        if video_id is not None:
            self.token_ids["video"] = video_id
        self._encode = encode
        self._replacements: dict[int, Replacement] = {}
        self._video_replacements: dict[int, Replacement] = {}
        nested = processor_config.get("video_processor")
        if isinstance(nested, Mapping):
            video_config = nested
        elif video_preprocessor_config is not None:
            video_config = video_preprocessor_config
        else:
            video_config = preprocessor_config
        self.video_processor = TorchVideoProcessor(video_config, VIDEO_DEFAULTS)
        self.embeds = {
            "image": TensorEmbedsSpec(inputs_embeds_size(config), self._embeds_replacement)
        }
        """How ``image_embeds`` parts are taken: one tensor of rows per image, its rows the
        ``<IMG_CONTEXT>`` positions between ``<img>`` and ``</img>``."""

    def _embeds_replacement(self, rows: int) -> tuple[list[int], np.ndarray]:
        text = START_TOKEN + CONTEXT_TOKEN * rows + END_TOKEN
        repl = Replacement(self._encode(text), self.token_ids["image"])
        return repl.ids, repl.is_embed

    def _known(self, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The image processor's options among processor keyword arguments (the image-scoped
        ``images_kwargs`` over the flat ones; others dropped)."""
        flat = {k: v for k, v in kwargs.items() if not k.endswith("_kwargs")}
        scoped = kwargs.get("images_kwargs")
        if isinstance(scoped, Mapping):
            flat.update(scoped)
        names = self.processor.options.names
        return {k: v for k, v in flat.items() if k in names}

    def _replacement(self, num_patches: int) -> Replacement:
        found = self._replacements.get(num_patches)
        if found is None:
            text = image_replacement(
                num_patches, self.image_seq_length, START_TOKEN, CONTEXT_TOKEN, END_TOKEN
            )
            found = Replacement(self._encode(text), self.token_ids["image"])
            self._replacements[num_patches] = found
        return found

    def _placeholder(self, num_patches: int) -> ProcessedItem:
        repl = self._replacement(num_patches)
        return ProcessedItem("image", len(repl.ids), {}, repl.ids, repl.is_embed)

    def _video_replacement(self, num_frames: int) -> Replacement:
        found = self._video_replacements.get(num_frames)
        if found is None:
            frame = START_TOKEN + VIDEO_TOKEN * self.image_seq_length + END_TOKEN
            text = "\n".join(f"Frame{i + 1}: {frame}" for i in range(num_frames))
            found = Replacement(self._encode(text), self.token_ids["video"])
            self._video_replacements[num_frames] = found
        return found

    def _video_placeholder(self, num_frames: int) -> ProcessedItem:
        repl = self._video_replacement(num_frames)
        return ProcessedItem("video", len(repl.ids), {}, repl.ids, repl.is_embed)

    def held_item(self, modality: str, item: Any, kwargs: Mapping[str, Any]) -> ProcessedItem:
        """The placeholder of an item the engine's cache holds, from its size (an image's) or
        frame count (a video's) alone (not processed: it goes without data)."""
        self._check(modality)
        if modality == "video":
            video: VideoItem = item
            return self._video_placeholder(int(video.frames.shape[0]))
        image: ImageItem = item
        merged = {**self._server_kwargs, **self._known(kwargs)}
        try:
            count = self.processor.number_of_image_patches(
                image.image.height, image.image.width, **merged
            )
        except ValueError as e:
            raise MediaError.bad_request(str(e)) from None
        return self._placeholder(count)

    def _check(self, modality: str) -> None:
        if modality not in self.token_ids:
            raise MediaError.bad_request(
                f"{modality} inputs are not supported by this frontend for model type "
                f"{self.model_type!r} yet"
            )

    def _video_kwargs(self, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The video processor's options: vLLM builds it with the processor keyword arguments
        it knows (the server's and the request's flat ones and ``videos_kwargs``) and the image
        processor's ``size`` (after the image options), over its own config."""
        given = {**self._server_raw, **kwargs}
        flat = {k: v for k, v in given.items() if not k.endswith("_kwargs")}
        scoped = given.get("videos_kwargs")
        if isinstance(scoped, Mapping):
            flat.update(scoped)
        names = self.video_processor.options.names
        options = {k: v for k, v in flat.items() if k in names and k != "size"}
        merged = self.processor.options.merged({**self._server_kwargs, **self._known(kwargs)})
        options["size"] = image_ops.size_dict(merged["size"])
        return options

    def process(
        self, modality: str, items: list[Any], kwargs: Mapping[str, Any], dtype: str
    ) -> list[ProcessedItem]:
        """Process the request's images (or videos), each on its own as vLLM's processor calls
        transformers' for each; the pixels are cast to the model ``dtype``."""
        self._check(modality)
        outputs = []
        try:
            if modality == "video":
                videos: list[VideoItem] = items
                options = self._video_kwargs(kwargs)
                for video in videos:
                    values = self.video_processor.preprocess_video(video.frames, **options)
                    outputs.append((_pixels(values, dtype), int(values.shape[0])))
            else:
                images: list[ImageItem] = items
                merged = {**self._server_kwargs, **self._known(kwargs)}
                for image in images:
                    out = self.processor.preprocess([image.image], **merged)
                    outputs.append(
                        (_pixels(out["pixel_values"], dtype), int(out["num_patches"][0]))
                    )
        except ValueError as e:
            raise MediaError.bad_request(str(e)) from None
        slices: list[Any] = []
        start = 0
        for _, count in outputs:
            slices.append([[start, start + count, None]])
            start += count
        flat = ("flat", {"keep_on_cpu": False, "slices": slices, "dim": 0})
        batched = ("batched", {"keep_on_cpu": True})
        shared = ("shared", {"keep_on_cpu": True, "batch_size": len(outputs)})
        token_id = Tensor.from_numpy(np.array(self.token_ids[modality], dtype=np.int64))
        values_key, count_key, id_key = _FIELDS[modality]
        processed = []
        for pixels, count in outputs:
            if modality == "image":
                item = self._placeholder(count)
            else:
                item = self._video_placeholder(count)
            item.fields.update(
                {
                    values_key: MultiModalFieldElem(pixels, flat),
                    count_key: MultiModalFieldElem(
                        Tensor.from_numpy(np.array(count, dtype=np.int64)), batched
                    ),
                    id_key: MultiModalFieldElem(token_id, shared),
                }
            )
            processed.append(item)
        return processed
