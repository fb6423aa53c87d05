"""The models' image and audio processors in numpy and Pillow, each equal to transformers'
processor of its family (PIL backend), and what each decides about an item's prompt tokens.

:func:`processor_class` finds a processor by the type name a model's ``preprocessor_config.json``
gives (``image_processor_type`` or ``feature_extractor_type``); the modules are imported only when
a model asks for them.
"""

from __future__ import annotations

import importlib
from typing import Any

# transformers' processor class name -> "module:class" of ours (the names' "Fast" and "Pil"
# suffixes name transformers' backends of the same processor).
PROCESSORS: dict[str, str] = {
    "Idefics3ImageProcessor": "idefics3:Idefics3ImageProcessor",
    # transformers generates SmolVLM's from Idefics3's: the same steps and defaults.
    "SmolVLMImageProcessor": "idefics3:Idefics3ImageProcessor",
    "CLIPImageProcessor": "basic:CLIPImageProcessor",
    "SiglipImageProcessor": "basic:SiglipImageProcessor",
    "Gemma3ImageProcessor": "gemma3:Gemma3ImageProcessor",
    "PixtralImageProcessor": "pixtral:PixtralImageProcessor",
    "GotOcr2ImageProcessor": "internvl:GotOcr2ImageProcessor",
    "LlavaNextImageProcessor": "llava_next:LlavaNextImageProcessor",
    "LlavaOnevisionImageProcessor": "llava_next:LlavaOnevisionImageProcessor",
    # transformers has only torchvision backends of these two (ours follow torch's resizes).
    "Llama4ImageProcessor": "llama4:Llama4ImageProcessor",
    "Phi4MultimodalImageProcessor": "phi4_multimodal:Phi4MultimodalImageProcessor",
    "WhisperFeatureExtractor": "whisper:WhisperFeatureExtractor",
}


def processor_class(type_name: str) -> type[Any] | None:
    """Our processor class for transformers' ``type_name`` (with or without its "Fast" or
    "Pil" suffix), or None when this frontend has no processor for it."""
    for suffix in ("Fast", "Pil"):
        if type_name.endswith(suffix) and type_name[: -len(suffix)] in PROCESSORS:
            type_name = type_name[: -len(suffix)]
    target = PROCESSORS.get(type_name)
    if target is None:
        return None
    module_name, class_name = target.split(":")
    module = importlib.import_module(f"{__name__}.{module_name}")
    cls: type[Any] = getattr(module, class_name)
    return cls
