"""The Idefics3 family against vLLM 0.32's own ``Idefics3MultiModalProcessor`` (in process, no
server): for the server's ``--mm-processor-kwargs`` that change the tile grid
(``do_image_splitting``, ``size``, ``max_image_size``) and images of many sizes, the expanded
prompt ids, the placeholder ranges with their ``is_embed`` masks, and every field (values, dtype,
shape) equal vLLM's. With the default kwargs the whole engine request is compared through both
servers in test_idefics3_requests."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from PIL import Image

from tests.support.render_reference import rust_tokenizers_shared
from tests.support.tiny_idefics3 import IMAGE, TILE, tiny_idefics3_dir
from vllm_frontend.multimodal.llm import MultimodalOptions, _expand, load_family
from vllm_frontend.multimodal.media import ImageItem
from vllm_frontend.multimodal.parts import MediaPart
from vllm_frontend.text.tokenizer import Tokenizer

pytestmark = pytest.mark.oracle

KWARGS = [
    {},
    {"do_image_splitting": False},
    {"size": {"longest_edge": 2 * TILE}},
    {"size": {"longest_edge": 5 * TILE}, "max_image_size": {"longest_edge": 2 * TILE}},
]
SIZES = [(64, 48), (300, 200), (97, 431), (20, 20), (1000, 90), (192, 192), (640, 480)]


def _image(width: int, height: int, seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8))


def _vllm(kwargs: dict[str, Any], prompt: list[int], images: list[Image.Image]) -> Any:
    from vllm.config import ModelConfig
    from vllm.multimodal import MULTIMODAL_REGISTRY
    from vllm.multimodal.processing.context import TimingContext
    from vllm.multimodal.processing.inputs import ProcessorInputs

    model = str(tiny_idefics3_dir())
    config = ModelConfig(
        model=model, tokenizer=model, max_model_len=4096, mm_processor_kwargs=kwargs or None
    )
    with rust_tokenizers_shared():  # its loads' deep copies are most of this reference's CPU
        processor = MULTIMODAL_REGISTRY.create_processor(config)
        items = processor.info.parse_mm_data({"image": images})
        return processor.apply(ProcessorInputs(prompt, items), TimingContext(enabled=False))


@pytest.mark.parametrize("kwargs", KWARGS, ids=lambda k: str(k) or "defaults")
def test_family_equals_vllms_processor(kwargs: dict[str, Any]) -> None:
    model = tiny_idefics3_dir()
    tokenizer = Tokenizer.from_dir(model)
    config = {"model_type": "idefics3"}
    options = MultimodalOptions(mm_processor_kwargs=kwargs)

    def encode(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False)

    family = load_family(model, config, tokenizer.token_to_id, options, encode)
    assert family is not None
    images = [_image(w, h, seed) for seed, (w, h) in enumerate(SIZES)]
    prompt = tokenizer.encode("User:" + "<image>x" * len(images) + "<end_of_utterance>\n", False)
    assert prompt.count(IMAGE) == len(images)
    want = _vllm(kwargs, prompt, images)

    items = [ImageItem(image, b"", None) for image in images]
    processed = family.process("image", items, {}, "bfloat16")
    parts = [MediaPart("image", str(i)) for i in range(len(images))]
    hashes = [str(i) for i in range(len(images))]
    ids, features = _expand(prompt, family, parts, processed, hashes)

    assert ids == want["prompt_token_ids"]
    ranges = want["mm_placeholders"]["image"]
    assert len(features) == len(ranges)
    for feature, theirs, item in zip(features, ranges, want["mm_kwargs"]["image"], strict=True):
        mine = feature.mm_position
        assert (mine.offset, mine.length) == (theirs.offset, theirs.length)
        assert np.array_equal(mine.is_embed.numpy(), theirs.is_embed.numpy())
        assert feature.data is not None
        assert set(feature.data) == set(item)
        for key, elem in item.items():
            tensor = feature.data[key].data
            assert tensor.dtype == str(elem.data.dtype).removeprefix("torch."), key
            assert tensor.shape == tuple(elem.data.shape), key
            assert np.array_equal(tensor.numpy(), elem.data.float().numpy()), key
        # The cached path (the engine holds the item) gives the same placeholder.
        held = family.held_item("image", items[int(feature.mm_hash or 0)], {})  # type: ignore[attr-defined]
        assert held.replacement == processed[int(feature.mm_hash or 0)].replacement
