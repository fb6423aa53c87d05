"""The processors are found by the type names models' preprocessor configs give."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from vllm_frontend.multimodal.processors import PROCESSORS, processor_class
from vllm_frontend.multimodal.processors.basic import CLIPImageProcessor
from vllm_frontend.multimodal.processors.idefics3 import Idefics3ImageProcessor


def test_type_names_with_backend_suffixes_find_the_processor() -> None:
    assert processor_class("Idefics3ImageProcessor") is Idefics3ImageProcessor
    assert processor_class("CLIPImageProcessorFast") is CLIPImageProcessor
    assert processor_class("CLIPImageProcessorPil") is CLIPImageProcessor
    assert processor_class("Qwen2VLImageProcessorFast") is None
    assert processor_class("NoSuchImageProcessor") is None


def test_every_registered_processor_builds_from_an_empty_config() -> None:
    image = Image.fromarray(np.full((30, 50, 3), 128, dtype=np.uint8))
    for name in PROCESSORS:
        cls = processor_class(name)
        assert cls is not None, name
        processor = cls({})
        if name == "WhisperFeatureExtractor":
            out = processor.extract([np.zeros(1600, dtype=np.float32)])
            assert out["input_features"].shape == (1, 80, 3000)
        else:
            out = processor.preprocess([image])
            key = "image_pixel_values" if name.startswith("Phi4") else "pixel_values"
            assert out[key].dtype == np.float32, name


def test_unknown_call_arguments_are_refused_and_the_known_ones_listed() -> None:
    processor = Idefics3ImageProcessor({})
    assert {"do_image_splitting", "max_image_size", "size"} <= processor.options.names
    image = Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8))
    with pytest.raises(ValueError, match="not_an_option"):
        processor.preprocess([image], not_an_option=1)
