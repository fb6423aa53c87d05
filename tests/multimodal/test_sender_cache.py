"""The mirror of the engine's multimodal cache against vLLM 0.32's own engine-side cache
(``LruKeyReplicatedReceiverCache``): random request sequences with repeats, duplicates within a
request, items larger than the cache and evictions; every request is applied to the mirror
(dropping the data of items it says the engine holds) and then fed to vLLM's receiver, which
must find every data-less item and end with the same items in the same LRU order."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from vllm_frontend.engine.protocol import (
    MultiModalFeatureSpec,
    MultiModalFieldElem,
    PlaceholderRange,
)
from vllm_frontend.engine.tensors import Tensor
from vllm_frontend.multimodal.sender_cache import SenderCache

pytestmark = pytest.mark.oracle

CAPACITY_GB = 64 * 1024 / 2**30  # 64 KiB: a handful of items


def _feature(mm_hash: str, rows: int) -> MultiModalFeatureSpec:
    pixels = np.zeros((rows, 16), dtype=np.uint16)
    fields = {
        "pixel_values": MultiModalFieldElem(
            Tensor.from_numpy(pixels, dtype="bfloat16"), ("flat", {})
        ),
        "image_grid_thw": MultiModalFieldElem(
            Tensor.from_numpy(np.array([1, rows, 1], dtype=np.int64)), ("batched", {})
        ),
    }
    if rows % 3 == 1:  # a list of Python floats (Qwen3-VL's timestamps): counted per float
        fields["timestamps"] = MultiModalFieldElem([0.5 * i for i in range(rows % 7 + 1)],
                                                   ("batched", {}))  # fmt: skip
    return MultiModalFeatureSpec(fields, "image", mm_hash, PlaceholderRange(0, 1), mm_hash)


def _theirs(feature: MultiModalFeatureSpec) -> Any:
    import torch
    from vllm.multimodal.inputs import (
        MultiModalBatchedField,
        MultiModalKwargsItem,
    )
    from vllm.multimodal.inputs import (
        MultiModalFeatureSpec as VllmFeature,
    )
    from vllm.multimodal.inputs import (
        MultiModalFieldElem as VllmElem,
    )
    from vllm.multimodal.inputs import (
        PlaceholderRange as VllmRange,
    )

    data = None
    if feature.data is not None:
        data = MultiModalKwargsItem(
            {
                key: VllmElem(
                    data=list(elem.data)
                    if isinstance(elem.data, list)
                    else torch.from_numpy(np.array(elem.data.data)),
                    field=MultiModalBatchedField(),
                )
                for key, elem in feature.data.items()
            }
        )
    return VllmFeature(
        data=data,
        modality="image",
        identifier=feature.identifier,
        mm_position=VllmRange(offset=0, length=1),
        mm_hash=feature.mm_hash,
    )


@pytest.mark.parametrize("seed", range(6))
def test_mirror_matches_vllms_engine_cache(seed: int) -> None:
    from vllm.multimodal.cache.lru import LruKeyReplicatedReceiverCache

    config = SimpleNamespace(
        get_multimodal_config=lambda: SimpleNamespace(mm_processor_cache_gb=CAPACITY_GB)
    )
    receiver = LruKeyReplicatedReceiverCache(config)  # type: ignore[arg-type]
    mirror = SenderCache(CAPACITY_GB)
    rng = random.Random(seed)
    sizes = {f"h{i}": rng.choice([16, 64, 256, 700, 2100, 2101, 4]) for i in range(24)}  # rows
    sent_without_data = 0
    for _ in range(300):
        hashes = [rng.choice(list(sizes)) for _ in range(rng.randint(1, 4))]
        features = [_feature(h, sizes[h]) for h in hashes]
        if rng.random() < 0.2:
            # A request with embeddings: vLLM's processor sends every item with its data;
            # the engine stores them again, and the mirror records that.
            mirror.record(features)
        else:
            mirror.apply(features)
        sent_without_data += sum(f.data is None for f in features)
        receiver.get_and_update_features([_theirs(f) for f in features])  # raises on a miss
        assert list(receiver._cache.order) == list(mirror._entries)  # LRU order
    assert sent_without_data > 50  # the mirror did drop data, and correctly


@pytest.mark.parametrize("seed", range(4))
def test_held_items_an_earlier_item_evicts_go_with_their_data(seed: int) -> None:
    # Items the mirror holds when a request is lowered are not processed (data=None); an
    # earlier item of the same request may evict one before the engine reads it, and then
    # ``fill`` must give its data, or vLLM's receiver raises on the miss.
    from vllm.multimodal.cache.lru import LruKeyReplicatedReceiverCache

    config = SimpleNamespace(
        get_multimodal_config=lambda: SimpleNamespace(mm_processor_cache_gb=CAPACITY_GB)
    )
    receiver = LruKeyReplicatedReceiverCache(config)  # type: ignore[arg-type]
    mirror = SenderCache(CAPACITY_GB)
    rng = random.Random(seed)
    sizes = {f"h{i}": rng.choice([64, 700, 1400, 2000]) for i in range(12)}  # rows
    filled: list[str] = []

    def fill(feature: MultiModalFeatureSpec) -> Any:
        filled.append(feature.mm_hash)
        return _feature(feature.mm_hash, sizes[feature.mm_hash]).data

    for _ in range(300):
        hashes = [rng.choice(list(sizes)) for _ in range(rng.randint(1, 4))]
        features = [_feature(h, sizes[h]) for h in hashes]
        for feature in features:
            if feature.mm_hash in mirror:  # held when lowered: not processed
                feature.data = None
        mirror.apply(features, fill)
        receiver.get_and_update_features([_theirs(f) for f in features])  # raises on a miss
        assert list(receiver._cache.order) == list(mirror._entries)
    assert filled  # the case happened


def test_a_held_item_evicted_by_the_request_s_new_item_is_filled() -> None:
    # The plain case: [new, held], the new item large enough to push the held one out.
    mirror = SenderCache(CAPACITY_GB)
    held = _feature("held", 1400)
    mirror.apply([held])
    new, again = _feature("new", 1400), _feature("held", 1400)
    again.data = None
    mirror.apply([new, again], lambda f: _feature(f.mm_hash, 1400).data)
    assert again.data is not None
    assert list(mirror._entries) == ["held"]  # the engine stores it again, after "new"
