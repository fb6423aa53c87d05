"""LLaVA-1.5 and LLaVA-NeXT as vLLM 0.32's ``LlavaMultiModalProcessor`` and
``LlavaNextMultiModalProcessor`` serve them, for models whose vision tower is CLIP or SigLIP.

Each ``<image>`` token of the prompt (the config's ``image_token_index``) becomes as many of
itself as the model's vision tower gives the image features (vLLM's count from the config, not
the processor's): LLaVA-1.5, the tower's patch grid (its CLS token with it, then one fewer with
the "default" feature selection); LLaVA-NeXT, that for the whole image plus the best-fit anyres
grid's features with the padding cut off and a newline per row (from the image's size alone).
Every position takes an embedding.

Fields, all "batched": LLaVA-1.5's ``pixel_values`` (3, H, W) from the model's CLIP or SigLIP
image processor; LLaVA-NeXT's ``pixel_values`` (patches, 3, H, W), the whole image then its
grid's patches, padded with zero patches to the most patches of the images processed in the same
call, as transformers pads them, and ``image_sizes`` (2,) int64 (the original height and width,
kept on the CPU). Floats are cast to the model dtype.

A ``llava`` model with another vision tower (Pixtral's, for one) or an image processor this
frontend lacks is not served here: its media parts are refused naming the model type.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from vllm_frontend.engine.protocol import MultiModalFieldElem
from vllm_frontend.engine.tensors import Tensor
from vllm_frontend.multimodal.family import ProcessedItem
from vllm_frontend.multimodal.family_parts import image_kwargs, pixels_in_dtype
from vllm_frontend.multimodal.media import ImageItem, MediaError
from vllm_frontend.multimodal.processors import processor_class
from vllm_frontend.multimodal.processors.basic import BasicImageProcessor
from vllm_frontend.multimodal.processors.llava_next import (
    LlavaNextImageProcessor,
    num_image_tokens,
)
from vllm_frontend.multimodal.tensor_embeds import TensorEmbedsSpec, inputs_embeds_size

__all__ = ["LlavaFamily", "llava_family"]

IMAGE_TOKEN = "<image>"
"""vLLM's ``get_placeholder_str`` for an image."""
DEFAULT_IMAGE_TOKEN_INDEX = 32000
"""transformers' ``LlavaConfig`` default."""
DEFAULT_PINPOINTS = [[336, 672], [672, 336], [672, 672], [1008, 336], [336, 1008]]
"""transformers' ``LlavaNextConfig`` default ``image_grid_pinpoints``."""

# Vision towers vLLM's get_vision_encoder_info takes for these families: model type -> (the
# config class's image_size and patch_size defaults, whether its features start with a CLS token).
_TOWERS: dict[str, tuple[int, int, bool]] = {
    "clip_vision_model": (224, 32, True),
    "siglip_vision_model": (224, 16, False),
}
# transformers' LlavaConfig / LlavaNextConfig tower when config.json names none.
_DEFAULT_TOWER = {"model_type": "clip_vision_model", "image_size": 336, "patch_size": 14}
_ARCHITECTURES = {
    "llava": "LlavaForConditionalGeneration",
    "llava_next": "LlavaNextForConditionalGeneration",
    "llava_onevision": "LlavaOnevisionForConditionalGeneration",
}
_PROCESSORS = {
    "llava": ("CLIPImageProcessor", "SiglipImageProcessor"),
    "llava_next": ("LlavaNextImageProcessor",),
    "llava_onevision": ("LlavaOnevisionImageProcessor",),
}
_HF_PROCESSORS = {
    "llava": "LlavaProcessor",
    "llava_next": "LlavaNextProcessor",
    "llava_onevision": "LlavaOnevisionProcessor",
}
# transformers' config defaults that differ for LLaVA-OneVision (its "full" feature selection
# and 6 x 6 grid of 384-pixel patches; a config without a vision tower is not served).
_ONEVISION_PINPOINTS = [[h * 384, w * 384] for h in range(1, 7) for w in range(1, 7)]


def llava_family(
    config: Mapping[str, Any],
    preprocessor_config: Mapping[str, Any],
    processor_kwargs: Mapping[str, Any],
    family: Callable[..., LlavaFamily] | None = None,
) -> LlavaFamily | None:
    """The family of a ``llava`` / ``llava_next`` / ``llava_onevision`` model, or None when this
    frontend cannot serve its media (a tower other than CLIP or SigLIP, another architecture
    reading the same config type, or an image processor it lacks); ``family``: the class to make
    it with (:class:`LlavaFamily`'s arguments)."""
    model_type = str(config.get("model_type"))
    onevision = model_type == "llava_onevision"
    architecture = _ARCHITECTURES.get(model_type)
    if architecture is None:
        return None
    architectures = config.get("architectures") or [architecture]
    if architecture not in architectures:
        return None
    vision = config.get("vision_config")
    if vision is None and onevision:
        return None
    vision = dict(_DEFAULT_TOWER) if vision is None else dict(vision)
    tower = _TOWERS.get(str(vision.get("model_type", "clip_vision_model")))
    if tower is None:
        return None
    image_size = vision.get("image_size", tower[0])
    patch_size = vision.get("patch_size", tower[1])
    strategy = config.get("vision_feature_select_strategy", "full" if onevision else "default")
    if (
        not isinstance(image_size, int)
        or not isinstance(patch_size, int)
        or patch_size <= 0
        or image_size % patch_size
        or strategy not in ("default", "full", "class")
    ):
        return None
    type_name = str(preprocessor_config.get("image_processor_type") or "")
    for suffix in ("Fast", "Pil"):
        type_name = type_name.removesuffix(suffix)
    if type_name not in _PROCESSORS[model_type]:
        return None
    cls = processor_class(type_name)
    if cls is None:
        return None
    return (family or LlavaFamily)(
        model_type,
        config,
        cls(preprocessor_config),
        (image_size, patch_size, tower[2], str(strategy)),
        processor_kwargs,
    )


def _selected(tokens: int, strategy: str) -> int:
    """vLLM's ``get_num_selected_vision_tokens``."""
    if strategy == "class":
        return 1
    return tokens - 1 if strategy == "default" else tokens


class LlavaFamily:
    """LLaVA-1.5 (``model_type`` ``llava``) and LLaVA-NeXT (``llava_next``): images."""

    __slots__ = ("_base_tokens", "_server_raw", "_tower", "embeds", "model_type", "pinpoints",
                 "processor", "server_kwargs", "token_ids")  # fmt: skip

    placeholders: Mapping[str, str] = {"image": IMAGE_TOKEN}
    """vLLM's ``get_placeholder_str`` for an image."""
    supported_limits: Mapping[str, int | None] = {"image": None}
    """Items per prompt the family takes by modality (None: any number)."""

    def __init__(
        self,
        model_type: str,
        config: Mapping[str, Any],
        processor: BasicImageProcessor | LlavaNextImageProcessor,
        tower: tuple[int, int, bool, str],
        processor_kwargs: Mapping[str, Any],
    ) -> None:
        """``processor``: the model's image processor; ``tower``: the vision tower's image size,
        patch size, whether it has a CLS token, and the feature selection strategy;
        ``processor_kwargs``: the server's ``--mm-processor-kwargs``."""
        self.model_type = model_type
        self.processor = processor
        self._tower = tower
        index = config.get("image_token_index", config.get("image_token_id"))
        self.token_ids: dict[str, int] = {
            "image": int(index) if index is not None else DEFAULT_IMAGE_TOKEN_INDEX
        }
        default_pinpoints = (
            _ONEVISION_PINPOINTS if model_type == "llava_onevision" else DEFAULT_PINPOINTS
        )
        self.pinpoints = config.get("image_grid_pinpoints") or default_pinpoints
        image_size, patch_size, class_token, strategy = tower
        grid = image_size // patch_size
        self._base_tokens = _selected(grid * grid + (1 if class_token else 0), strategy)
        self.server_kwargs = self._known(processor_kwargs)
        self._server_raw = dict(processor_kwargs)
        self.embeds = {"image": TensorEmbedsSpec(inputs_embeds_size(config))}
        """How ``image_embeds`` parts are taken: one tensor of rows per image, each row one
        ``<image>`` placeholder (vLLM's ``ImageEmbeddingItems``)."""

    def _known(self, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        names = self.processor.options.names
        return {k: v for k, v in image_kwargs(kwargs).items() if k in names}

    def _failure(self, images: list[ImageItem], kwargs: Mapping[str, Any]) -> str:
        """vLLM's message when transformers' processor refuses the images (LLaVA-1.5's of
        different sizes once center cropping is off): the processor, the images, the keyword
        arguments it was called with."""
        name = _HF_PROCESSORS[self.model_type]
        shown = ", ".join(
            f"<PIL.Image.Image image mode={i.image.mode} size={i.image.width}x{i.image.height}>"
            for i in images
        )
        called = {**self._server_raw, **kwargs, "return_tensors": "pt"}
        return f"Failed to apply {name} on data={{'images': [{shown}]}} with kwargs={called}"

    def item_tokens(self, modality: str, item: Any, kwargs: Mapping[str, Any]) -> int:
        """How many placeholder tokens an image takes, from its size alone (vLLM's count)."""
        if modality != "image":
            raise MediaError.bad_request(f"{modality} inputs are not supported for this model")
        if self.model_type == "llava":
            return self._base_tokens
        image = item.image
        image_size, patch_size, class_token, strategy = self._tower
        return num_image_tokens(
            image.height, image.width, self.pinpoints, image_size, patch_size, strategy,
            class_token, onevision=self.model_type == "llava_onevision",
        )  # fmt: skip

    def process(
        self, modality: str, items: list[Any], kwargs: Mapping[str, Any], dtype: str
    ) -> list[ProcessedItem]:
        """Process the request's images together, in order (one processor call, as vLLM makes
        one: LLaVA-NeXT's patches are padded to the most of them); the pixels are cast to the
        model ``dtype``."""
        if modality != "image":
            raise MediaError.bad_request(f"{modality} inputs are not supported for this model")
        if not items:
            return []
        images: list[ImageItem] = items
        merged = {**self.server_kwargs, **self._known(kwargs)}
        try:
            out = self.processor.preprocess([item.image for item in images], **merged)
            pixels, pixel_dtype = pixels_in_dtype(out["pixel_values"], dtype)
        except ValueError:
            raise MediaError.bad_request(self._failure(images, kwargs)) from None
        batched = ("batched", {"keep_on_cpu": False})
        sizes = out.get("image_sizes")
        processed = []
        for index, item in enumerate(images):
            fields = {
                "pixel_values": MultiModalFieldElem(
                    Tensor.from_numpy(pixels[index], dtype=pixel_dtype), batched
                )
            }
            if sizes is not None:
                fields["image_sizes"] = MultiModalFieldElem(
                    Tensor.from_numpy(sizes[index]), ("batched", {"keep_on_cpu": True})
                )
            tokens = self.item_tokens("image", item, kwargs)
            processed.append(ProcessedItem("image", tokens, fields))
        return processed
