"""The multimodal layer's facade: a rendered prompt and its media parts in, a text generation
out, over the text layer.

:meth:`MultimodalLlm.generate` does what vLLM 0.32's renderer and input processor do with a
multimodal chat prompt: load every item (off the event loop), tokenize the prompt, hash each
item (``multimodal.hashing``), run the family's processor on each modality's items, expand every
placeholder token into the item's run of placeholders, check the expanded length against the
context, and attach the items to the prompt as the engine's ``MultiModalFeatureSpec`` list,
ordered by their place in the prompt.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from vllm_frontend.engine.protocol import MultiModalFeatureSpec, PlaceholderRange
from vllm_frontend.engine.tensors import Tensor
from vllm_frontend.multimodal.embeds import (
    EmbedsSpec,
    check_not_mixed,
    metadata_arrays,
    process_embeds,
)
from vllm_frontend.multimodal.family import Family, ProcessedItem, multimodal_model_type
from vllm_frontend.multimodal.hashing import (
    image_hash_value,
    image_id,
    item_hash,
    video_hash_value,
)
from vllm_frontend.multimodal.media import (
    Embeds,
    ImageItem,
    MediaError,
    MediaLoader,
    VideoItem,
    merge_media_io_kwargs,
)
from vllm_frontend.multimodal.parts import CONTENT_PART_MODALITIES, MediaPart, MediaParts
from vllm_frontend.multimodal.sender_cache import SenderCache
from vllm_frontend.multimodal.tensor_embeds import (
    TensorEmbedsSpec,
    inputs_embeds_size,
    process_counted_embeds,
    process_tensor_embeds,
    refuse_tensor_embeds,
)
from vllm_frontend.text.errors import BadInput, InvalidInput
from vllm_frontend.text.llm import TextGeneration, TextLlm, TextRequest
from vllm_frontend.text.prompts import PreparedPrompt

if TYPE_CHECKING:
    import numpy as np

__all__ = ["MultimodalLlm", "MultimodalOptions", "load_family", "truncate_expanded"]

DEFAULT_LIMIT = 999
"""vLLM's per-prompt item limit for a modality ``--limit-mm-per-prompt`` does not name."""


class MultimodalOptions(msgspec.Struct, kw_only=True):
    """The server's multimodal options (vLLM's names)."""

    limit_mm_per_prompt: dict[str, Any] = msgspec.field(default_factory=dict)
    mm_processor_kwargs: dict[str, Any] = msgspec.field(default_factory=dict)
    media_io_kwargs: dict[str, Any] = msgspec.field(default_factory=dict)
    mm_hasher_algorithm: str = "blake3"
    mm_device_do_normalize: bool | None = None
    """The engine normalizes pixels (None: vLLM's default for the family)."""
    mm_processor_cache_gb: float = 4
    """The engine's multimodal cache size (GiB); 0 disables it (every item carries data)."""
    enable_mm_embeds: bool = False
    """``*_embeds`` content parts are taken (``--enable-mm-embeds``)."""
    interleave_mm_strings: bool = False
    """"string"-format content keeps each media part's placeholder in its place."""


def load_family(
    model_dir: str | pathlib.Path,
    config: Mapping[str, Any],
    token_to_id: Callable[[str], int | None],
    options: MultimodalOptions,
    encode: Callable[[str], list[int]] | None = None,
) -> Family | None:
    """The model's implemented family, or None (text-only, or a family not implemented);
    ``encode``: the tokenizer, without special tokens added (families whose placeholders
    stand for text)."""
    model_type = config.get("model_type")
    path = pathlib.Path(model_dir)

    def read(name: str) -> dict[str, Any] | None:
        return _read_json(path / name)

    def text_encoder(family: str) -> Callable[[str], list[int]]:
        if encode is None:
            raise ValueError(f"the {family} family needs the tokenizer's encode")
        return encode

    if model_type in ("idefics3", "smolvlm"):
        from vllm_frontend.multimodal.idefics3 import Idefics3Family

        return Idefics3Family(
            config,
            read("preprocessor_config.json") or {},
            read("processor_config.json") or {},
            token_to_id,
            text_encoder("Idefics3"),
            options.mm_processor_kwargs,
        )
    if model_type == "internvl":
        from vllm_frontend.multimodal.internvl import InternVLFamily

        return InternVLFamily(
            config,
            read("preprocessor_config.json") or {},
            read("processor_config.json") or {},
            token_to_id,
            text_encoder("InternVL"),
            options.mm_processor_kwargs,
            read("video_preprocessor_config.json"),
        )
    if model_type == "gemma3":
        from vllm_frontend.multimodal.gemma3 import Gemma3Family

        return Gemma3Family(
            config,
            read("preprocessor_config.json") or {},
            read("processor_config.json") or {},
            token_to_id,
            text_encoder("Gemma 3"),
            options.mm_processor_kwargs,
        )
    if model_type == "llama4":
        from vllm_frontend.multimodal.llama4 import Llama4Family

        return Llama4Family(
            config,
            read("preprocessor_config.json") or {},
            read("processor_config.json") or {},
            token_to_id,
            text_encoder("Llama 4"),
            options.mm_processor_kwargs,
        )
    vision = config.get("vision_config")
    if model_type == "mistral3" or (
        model_type == "llava"
        and isinstance(vision, Mapping)
        and vision.get("model_type") == "pixtral"
    ):
        from vllm_frontend.multimodal.pixtral import PixtralFamily

        return PixtralFamily(
            config,
            read("preprocessor_config.json") or {},
            read("processor_config.json") or {},
            token_to_id,
            options.mm_processor_kwargs,
            options.mm_device_do_normalize,
        )
    if model_type in ("qwen3_vl", "qwen3_vl_moe"):
        from vllm_frontend.multimodal.qwen3_vl import Qwen3VLFamily

        return Qwen3VLFamily(
            config,
            read("preprocessor_config.json") or {},
            token_to_id,
            text_encoder("Qwen3-VL"),
            options.mm_processor_kwargs,
            options.mm_device_do_normalize,
            read("video_preprocessor_config.json"),
        )
    if model_type in ("qwen2_vl", "qwen2_5_vl"):
        from vllm_frontend.multimodal.qwen2_vl import Qwen2VLFamily

        return Qwen2VLFamily(
            config,
            read("preprocessor_config.json") or {},
            token_to_id,
            options.mm_processor_kwargs,
            options.mm_device_do_normalize,
            read("video_preprocessor_config.json"),
        )
    if model_type == "llava_onevision":
        from vllm_frontend.multimodal.llava_onevision import llava_onevision_family

        return llava_onevision_family(
            config,
            read("preprocessor_config.json") or {},
            read("video_preprocessor_config.json"),
            options.mm_processor_kwargs,
        )
    if model_type in ("llava", "llava_next"):
        from vllm_frontend.multimodal.llava import llava_family

        return llava_family(
            config, read("preprocessor_config.json") or {}, options.mm_processor_kwargs
        )
    if model_type == "qwen2_audio":
        from vllm_frontend.multimodal.qwen2_audio import Qwen2AudioFamily

        return Qwen2AudioFamily(config, read("preprocessor_config.json") or {}, token_to_id)
    return None


def _read_json(path: pathlib.Path) -> dict[str, Any] | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


_pool: ThreadPoolExecutor | None = None


def _media_pool() -> ThreadPoolExecutor:
    # Pillow decodes and resizes with the GIL released: a few threads process images at once.
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(4, thread_name_prefix="vllm-frontend-media")
    return _pool


def _limit(value: Any) -> int:
    if isinstance(value, Mapping):
        value = value.get("count", DEFAULT_LIMIT)
    return int(value)


class MultimodalLlm:
    """Multimodal prompts for one model over ``text`` (built once at startup)."""

    __slots__ = (
        "_embeds_width",
        "_limits",
        "_placeholders",
        "dtype",
        "family",
        "loader",
        "model_id",
        "model_type",
        "options",
        "sender_cache",
        "text",
    )

    def __init__(
        self,
        text: TextLlm,
        family: Family | None,
        loader: MediaLoader,
        *,
        model_id: str,
        config: Mapping[str, Any],
        dtype: str = "bfloat16",
        options: MultimodalOptions | None = None,
        mirror_engine_cache: bool = False,
    ) -> None:
        """``model_id``: the model as vLLM names it (``--model``: the hashes include it);
        ``config``: its ``config.json``; ``dtype``: the engine's model dtype; ``loader``
        fetches and decodes the media (``multimodal.media``); ``mirror_engine_cache``: the
        engine keeps a multimodal cache this frontend alone feeds (one engine, one frontend
        process, vLLM's LRU cache type), so items it holds are sent without data."""
        self.text = text
        self.family = family
        self.loader = loader
        self.model_id = model_id
        self.model_type = multimodal_model_type(config)
        self._embeds_width = inputs_embeds_size(config)
        self.dtype = dtype
        self.options = options if options is not None else MultimodalOptions()
        gb = self.options.mm_processor_cache_gb
        self.sender_cache = SenderCache(gb) if mirror_engine_cache and gb > 0 else None
        """The mirror of the engine's multimodal cache (None: every item carries its data)."""
        self._limits: dict[str, int] = {}
        self._placeholders: dict[str, ProcessedItem] = {}
        """The placeholders (no fields) of items the mirror holds, by hash: what a part naming
        one by its ``uuid`` alone expands into (vLLM's sender cache keeps each item's prompt
        updates beside its entry)."""
        if family is not None:
            for modality, supported in family.supported_limits.items():
                user = self.options.limit_mm_per_prompt.get(modality)
                allowed = DEFAULT_LIMIT if user is None else _limit(user)
                self._limits[modality] = allowed if supported is None else min(allowed, supported)

    def placeholder_metadata_fields(self, modality: str) -> frozenset[str]:
        """The item fields that size ``modality``'s placeholder range (vLLM's data parser
        ``placeholder_metadata_fields``: what a render's ``mm_metadata`` keeps besides the
        fields kept on the CPU); none for a family that declares none."""
        return _PLACEHOLDER_METADATA.get(self.model_type or "", {}).get(modality, frozenset())

    def clear_mm_cache(self) -> None:
        """Forget the mirror of the engine's multimodal cache (``/reset_mm_cache``, before the
        engine resets its own, as vLLM's ``reset_mm_cache`` clears its renderer's cache)."""
        if self.sender_cache is not None:
            self.sender_cache.clear()

    async def aclose(self) -> None:
        """Close the media loader (its HTTP session and decoding threads) at shutdown."""
        await self.loader.aclose()

    def new_parts(self) -> MediaParts:
        """A collector for one request's media parts (refusing them when the model's family is
        not implemented)."""
        family = self.family
        if family is None:
            return MediaParts({}, {}, {}, refusal=self._unsupported_message())
        return MediaParts(
            self._limits,
            family.supported_limits,
            family.placeholders,
            embeds_enabled=self.options.enable_mm_embeds,
            interleave=self.options.interleave_mm_strings,
        )

    def _unsupported_message(self) -> str:
        if self.model_type is None:
            return "This model does not accept multimodal inputs: it is a text-only model."
        return (
            f"Multimodal inputs are not supported by this frontend for model type "
            f"{self.model_type!r} yet."
        )

    async def generate(
        self,
        request: TextRequest,
        prompt: str,
        parts: MediaParts | None,
        *,
        mm_processor_kwargs: Mapping[str, Any] | None = None,
        media_io_kwargs: Mapping[str, Any] | None = None,
    ) -> TextGeneration:
        """The text generation of ``prompt`` with ``parts``' items (admission, tool choice and
        ``max_tokens`` already checked by the caller)."""
        text = self.text
        if parts is None or not parts.items:
            return await text.generate_prompts(request, [prompt])
        family = self.family
        assert family is not None  # new_parts refused the parts otherwise
        if request.use_beam_search:
            raise BadInput(
                "Beam search with multimodal inputs is not supported by this frontend yet."
            )
        processor_kwargs = dict(mm_processor_kwargs or {})
        items = parts.items
        await text.load_decoder(request)
        io_kwargs = self._io_kwargs(media_io_kwargs)
        loaded = await self._load_all(items, media_io_kwargs, io_kwargs)
        _check_named(items)  # (vLLM: after the loads, with the items' uuids)
        embeds_request = any(part.is_embeds for part in items)
        if embeds_request:
            check_not_mixed([(part.modality, part.is_embeds) for part in items])
            self._check_references(items, loaded, {})  # such a request bypasses the cache
        preparer = text.prompts
        truncate = preparer.truncation(request.truncate_prompt_tokens, request.max_tokens or 0)
        [prepared] = await preparer.prepare_prompts(
            [prompt],
            add_special_tokens=request.add_special_tokens,
            truncate=truncate,
            truncation_side=request.truncation_side,
        )
        if embeds_request:
            processed, hashes = await self._process_with_embeds(
                family, items, loaded, processor_kwargs, io_kwargs
            )
        else:
            processed, hashes = await self._process_or_hold(
                family, items, loaded, processor_kwargs, io_kwargs, hold=not request.render
            )
        ids, features = _expand(prepared.token_ids, family, items, processed, hashes)
        if truncate is not None and truncate < len(ids):
            side = request.truncation_side or preparer.tokenizer_truncation_side
            ids, features = truncate_expanded(
                ids, features, truncate, side, request.truncate_prompt_tokens
            )
        limit = text.max_model_len
        if len(ids) > limit and request.truncate_prompt_tokens is None:
            # vLLM's get_max_tokens, on the expanded prompt, before its input processor's check
            raise BadInput(
                f"Input length ({len(ids)}) exceeds model's maximum context length ({limit})."
            )
        if len(ids) > limit:
            raise BadInput(
                f"The decoder prompt (length {len(ids)}) is longer than the maximum model "
                f"length of {limit}. Make sure that `max_model_len` is no smaller than the "
                "number of text tokens plus multimodal tokens. For image inputs, the number of "
                "image tokens depends on the number of images, and possibly their aspect ratios "
                "as well."
            )
        cache = self._sending_cache(
            family, features, items, loaded, hashes, processor_kwargs, embeds_request
        )
        prepared_prompt = PreparedPrompt(ids, prompt, features, cache, _token_counts(features))
        return text.generate_prepared(request, [prepared_prompt])

    def _io_kwargs(self, media_io_kwargs: Mapping[str, Any] | None) -> dict[str, Any] | None:
        # The request's media_io_kwargs over the server's (--media-io-kwargs), merged once: the
        # loads use them, and vLLM hashes a chat request's items with them (its chat params').
        given = {k: v for k, v in (media_io_kwargs or {}).items() if isinstance(v, Mapping)}
        return merge_media_io_kwargs(self.options.media_io_kwargs, given)

    async def _load_all(
        self,
        items: list[MediaPart],
        media_io_kwargs: Mapping[str, Any] | None,
        io_kwargs: Mapping[str, Any] | None,
    ) -> list[Any]:
        load_kwargs = (io_kwargs or {}) if media_io_kwargs else None
        loads = [self._load(part, load_kwargs) for part in items]
        return await _all_or_none(loads, _resolve_order(items))

    async def check_loads(
        self, parts: MediaParts, media_io_kwargs: Mapping[str, Any] | None = None
    ) -> None:
        """Load ``parts``' items and drop them: MediaError (vLLM's answer) when one cannot be
        loaded. vLLM loads a chat request's media before it applies the chat template, so a
        load's error is its answer to a request whose template also fails."""
        if parts.items and self.family is not None:
            await self._load_all(parts.items, media_io_kwargs, self._io_kwargs(media_io_kwargs))

    def parts_from_content(self, content_parts: Iterable[Mapping[str, Any]]) -> MediaParts:
        """A token-in request's ``content_parts`` (``{"type": "image_url" | "audio_url" |
        "video_url", "url": ..., "uuid": ...}``) as the media parts of its prompt, in order,
        checked against the per-prompt limits; parts of other types are skipped, as vLLM's
        ``ServingTokens`` skips them."""
        parts = self.new_parts()
        for part in content_parts:
            modality = CONTENT_PART_MODALITIES.get(part.get("type", ""))
            if modality is None:
                continue
            url, uuid = part.get("url"), part.get("uuid")
            if url is not None and not isinstance(url, str):
                raise BadInput(f"Invalid url of a {modality} content part: expected a string.")
            if uuid is not None and not isinstance(uuid, str):
                raise BadInput(f"Invalid uuid of a {modality} content part: expected a string.")
            parts.add(MediaPart(modality, url or None, uuid))  # "": no media, as vLLM reads it
        return parts

    async def expand_token_prompt(
        self, token_ids: list[int], parts: MediaParts, *, hold: bool = True
    ) -> PreparedPrompt:
        """A token prompt with ``parts``' items, as vLLM's renderer processes a ``TokensPrompt``
        with multimodal data (a ``/inference/v1/generate`` request's ``content_parts``): every
        item loaded, hashed and processed (``hold``: those the engine's cache holds go without
        data), and each item's placeholder token in ``token_ids`` expanded into its run, in
        order; no truncation, no length check (the caller's token-prompt checks run on the
        expanded prompt)."""
        if not parts.items:
            return PreparedPrompt(token_ids, None)
        family = self.family
        assert family is not None  # new_parts refused the parts otherwise
        items = parts.items
        loaded = await self._load_all(items, None, None)
        _check_named(items)
        processed, hashes = await self._process_or_hold(family, items, loaded, {}, None, hold=hold)
        ids, features = _expand(token_ids, family, items, processed, hashes)
        cache = self._sending_cache(family, features, items, loaded, hashes, {}, False)
        return PreparedPrompt(ids, None, features, cache, _token_counts(features))

    async def tokenize_prompt(
        self, token_ids: list[int], parts: MediaParts, processor_kwargs: Mapping[str, Any]
    ) -> list[int]:
        """``/tokenize``'s ids of a rendered chat prompt's ``token_ids`` with ``parts``' items,
        as vLLM's renderer makes them: every item loaded and processed, its placeholder token
        expanded into its run; the engine's cache is neither read nor recorded (vLLM's
        ``/tokenize`` sends nothing), and no length is checked."""
        if not parts.items:
            return token_ids
        family = self.family
        assert family is not None  # new_parts refused the parts otherwise
        items = parts.items
        loaded = await self._load_all(items, None, None)
        _check_named(items)
        if any(part.is_embeds for part in items):
            check_not_mixed([(part.modality, part.is_embeds) for part in items])
            self._check_references(items, loaded, {})
            processed, hashes = await self._process_with_embeds(
                family, items, loaded, processor_kwargs, None
            )
        else:
            processed, hashes = await self._process_or_hold(
                family, items, loaded, processor_kwargs, None, hold=False
            )
        return _expand(token_ids, family, items, processed, hashes)[0]

    def _sending_cache(
        self,
        family: Family,
        features: list[MultiModalFeatureSpec],
        items: list[MediaPart],
        loaded: list[Any],
        hashes: list[str],
        processor_kwargs: Mapping[str, Any],
        embeds_request: bool,
    ) -> Any:
        """The view of the sender cache the prompt's features go through when sent."""
        cache: Any = self.sender_cache
        held = {f.mm_hash for f in features if f.data is None}
        if held:
            pending = {h: (items[i], loaded[i]) for i, h in enumerate(hashes) if h in held}

            def process_one(part: MediaPart, item: Any) -> list[ProcessedItem]:
                if item is None:  # a reference the engine's cache dropped meanwhile
                    self._check_references([part], [item], {})
                return self._process(family, [part], [item], processor_kwargs)

            cache = _FillingCache(cache, pending, process_one)
        elif embeds_request and cache is not None:
            # vLLM's processor bypasses its cache for such a request (every item goes with
            # its data, none is recorded); the engine still keeps them: the mirror does too.
            cache = _RecordingCache(cache)
        return cache

    async def _process_or_hold(
        self,
        family: Family,
        items: list[MediaPart],
        loaded: list[Any],
        processor_kwargs: Mapping[str, Any],
        media_io_kwargs: Mapping[str, Any] | None,
        *,
        hold: bool = True,
    ) -> tuple[list[ProcessedItem], list[str]]:
        """Each item processed (in part order) with its hash, except (``hold``) those the
        engine's cache holds: those get their placeholders only, and go without data. A render
        holds none (vLLM's render skips its processor cache)."""
        hashes = [
            self._hash(part, self._hash_value(item), processor_kwargs, media_io_kwargs)
            for part, item in zip(items, loaded, strict=True)
        ]
        held = self._held_tokens(family, items, loaded, processor_kwargs, hashes) if hold else {}
        self._check_references(items, loaded, held)
        todo = [i for i in range(len(items)) if i not in held]
        loop = asyncio.get_running_loop()
        done = iter(
            await loop.run_in_executor(
                _media_pool(),
                self._process,
                family,
                [items[i] for i in todo],
                [loaded[i] for i in todo],
                processor_kwargs,
            )
            if todo
            else ()
        )
        processed = [held[i] if i in held else next(done) for i in range(len(items))]
        self._remember_placeholders([(hashes[i], processed[i]) for i in todo])
        return processed, hashes

    def _check_references(
        self, items: list[MediaPart], loaded: list[Any], held: Mapping[int, ProcessedItem]
    ) -> None:
        """A part naming an item by its ``uuid`` alone is served from the engine's cache:
        vLLM's 400 when the cache does not hold it."""
        index: dict[str, int] = {}
        for i, part in enumerate(items):
            position = index.get(part.modality, 0)
            index[part.modality] = position + 1
            if loaded[i] is None and i not in held:
                raise BadInput(
                    f"Cache miss for {part.modality} at index {position} but data is not provided."
                )

    def _remember_placeholders(self, done: Iterable[tuple[str, ProcessedItem]]) -> None:
        cache = self.sender_cache
        if cache is None:
            return
        remembered = self._placeholders
        for mm_hash, item in done:
            remembered[mm_hash] = ProcessedItem(
                item.modality, item.num_tokens, {}, item.replacement, item.is_embed
            )
        if len(remembered) > 2 * len(cache) + 64:  # forget what the mirror dropped
            for mm_hash in [h for h in remembered if h not in cache]:
                del remembered[mm_hash]

    async def _process_with_embeds(
        self,
        family: Family,
        items: list[MediaPart],
        loaded: list[Any],
        processor_kwargs: Mapping[str, Any],
        media_io_kwargs: Mapping[str, Any] | None,
    ) -> tuple[list[ProcessedItem], list[str]]:
        """A request with embeddings: every item processed and sent with its data, as vLLM's
        processor does when it bypasses its cache; an embeddings item is hashed by its
        fields' tensors."""
        specs: Mapping[str, EmbedsSpec | TensorEmbedsSpec] = getattr(family, "embeds", {})
        out: list[Any] = [None] * len(items)
        values: list[Any] = [None] * len(items)
        raw = [i for i, part in enumerate(items) if not part.is_embeds]
        loop = asyncio.get_running_loop()
        pool = _media_pool()
        for modality in dict.fromkeys(p.modality for p in items if p.is_embeds):
            spec = specs.get(modality)
            if spec is None:
                if modality in getattr(family, "refuses_embeds", ()):
                    self._refuse_embeds(modality, items, loaded)
                unusable = getattr(family, "unusable_embeds", {}).get(modality)
                if unusable is not None:
                    raise MediaError.bad_request(unusable)
                raise MediaError.bad_request(
                    f"`{modality}_embeds` inputs are not supported by this frontend for model "
                    f"type {self.model_type!r} yet"
                )
            indices = [i for i, p in enumerate(items) if p.is_embeds and p.modality == modality]
            results: list[tuple[ProcessedItem, Any]]
            if (
                isinstance(spec, TensorEmbedsSpec)
                and spec.count_key is not None
                and any(isinstance(items[i].embeds, dict) for i in indices)
            ):
                counted: list[Mapping[str, Any]] = [
                    metadata_arrays(loaded[i], {spec.count_key}) for i in indices
                ]
                if not all(isinstance(items[i].embeds, dict) for i in indices):
                    raise MediaError.bad_request(
                        f"`{modality}_embeds` parts must all be tensors or all dictionaries"
                    )
                results = await loop.run_in_executor(
                    pool, process_counted_embeds, spec, modality, counted
                )
            elif isinstance(spec, TensorEmbedsSpec):
                tensors = _bare_tensors(modality, items, loaded, indices)
                results = await loop.run_in_executor(
                    pool, process_tensor_embeds, spec, modality, tensors
                )
            else:
                if spec.bare_refusal is not None and any(
                    not isinstance(items[i].embeds, dict) for i in indices
                ):
                    raise MediaError.bad_request(spec.bare_refusal)
                decoded: list[Mapping[str, Any]] = [
                    metadata_arrays(loaded[i], {spec.metadata, *spec.extras}) for i in indices
                ]
                results = await loop.run_in_executor(pool, process_embeds, spec, modality, decoded)
            for i, (item, value) in zip(indices, results, strict=True):
                out[i], values[i] = item, value
        if raw:
            done = await loop.run_in_executor(
                pool,
                self._process,
                family,
                [items[i] for i in raw],
                [loaded[i] for i in raw],
                processor_kwargs,
            )
            for i, item in zip(raw, done, strict=True):
                out[i], values[i] = item, self._hash_value(loaded[i])
        hashes = [
            self._hash(part, value, processor_kwargs, media_io_kwargs)
            for part, value in zip(items, values, strict=True)
        ]
        return out, hashes

    def _refuse_embeds(self, modality: str, items: list[MediaPart], loaded: list[Any]) -> None:
        """Refuse ``modality``'s embeddings as vLLM does for a family whose processor takes
        only media (its parser's checks first)."""
        indices = [i for i, p in enumerate(items) if p.is_embeds and p.modality == modality]
        for i in indices:
            metadata_arrays(loaded[i], set())  # vLLM's chat parser's refusal of JSON arrays
        if all(isinstance(items[i].embeds, str) for i in indices):
            tensors = _bare_tensors(modality, items, loaded, indices)
            refuse_tensor_embeds(modality, tensors, self._embeds_width)
        raise MediaError.bad_request(
            f"`{modality}_embeds` dictionaries are not supported for model type {self.model_type!r}"
        )

    def _held_tokens(
        self,
        family: Family,
        parts: list[MediaPart],
        loaded: list[Any],
        kwargs: Mapping[str, Any],
        hashes: list[str],
    ) -> dict[int, ProcessedItem]:
        """The placeholders (without fields) by part index of the items the engine's cache
        holds now (per the mirror): vLLM's processor skips those, and so do we; they go as
        ``data=None``."""
        cache = self.sender_cache
        # Families that can tell an item's placeholder without processing it.
        placeholder = getattr(family, "held_item", None)
        counter = getattr(family, "item_tokens", None)
        if cache is None:
            return {}
        held: dict[int, ProcessedItem] = {}
        for i, (part, mm_hash) in enumerate(zip(parts, hashes, strict=True)):
            if mm_hash not in cache:
                continue
            if loaded[i] is None:  # named by its uuid alone: the placeholder it was sent with
                known = self._placeholders.get(mm_hash)
                if known is not None and known.modality == part.modality:
                    held[i] = known
                continue
            if placeholder is not None:
                held[i] = placeholder(part.modality, loaded[i], kwargs)
                continue
            tokens = counter(part.modality, loaded[i], kwargs) if counter is not None else None
            if tokens is not None:
                held[i] = ProcessedItem(part.modality, tokens, {})
        return held

    async def _load(
        self, part: MediaPart, io_kwargs: Mapping[str, Any] | None
    ) -> ImageItem | VideoItem | np.ndarray | dict[str, Any] | None:
        # io_kwargs: a request's media_io_kwargs merged over the server's, or None (none given:
        # the loader's own, the server's)
        if part.is_embeds:
            return await self._load_embeds(part)
        if part.url is None:
            # a reference to an item the engine's cache holds (by its uuid), or nothing
            # (refused after the loads, as vLLM refuses it: see _check_named)
            return None
        if part.modality not in ("image", "video", "audio"):
            raise MediaError.bad_request(
                f"{part.modality} inputs are not supported by this frontend yet"
            )
        processed = getattr(self.family, "processed_modalities", None)
        if processed is not None and part.modality not in processed:
            # The model takes them (vLLM serves them); this frontend's family does not yet.
            raise MediaError.bad_request(
                f"{part.modality} inputs are not supported by this frontend for model type "
                f"{self.model_type!r} yet"
            )
        if part.modality == "audio":
            resampled = getattr(self.family, "resampled", None)
            if resampled is None:
                raise MediaError.bad_request("audio inputs are not supported for this model")
            clip = await self.loader.load_audio(part.url, io_kwargs)
            return await asyncio.get_running_loop().run_in_executor(_media_pool(), resampled, clip)
        if part.modality == "video":
            name = getattr(self.family, "video_processor_name", None)
            return await self.loader.load_video_item(part.url, io_kwargs, video_processor=name)
        return await self.loader.load_image_item(part.url, io_kwargs)

    async def _load_embeds(self, part: MediaPart) -> dict[str, Any]:
        """An embeddings part's tensors by key (a bare payload under ``<modality>_embeds``),
        decoded off the loop as vLLM's ``fetch_*_embedding_async``; other values as given."""
        payload, modality = part.embeds, part.modality
        if payload is None:
            raise MediaError.bad_request(
                "A media part without data (a uuid alone) is not supported by this frontend yet"
            )
        if isinstance(payload, str):
            return {f"{modality}_embeds": await self.loader.load_embeds(payload, modality)}
        keys = [key for key, value in payload.items() if isinstance(value, str)]
        tensors = await asyncio.gather(
            *(self.loader.load_embeds(payload[key], modality) for key in keys)
        )
        return {**payload, **dict(zip(keys, tensors, strict=True))}

    @staticmethod
    def _hash_value(item: ImageItem | VideoItem | np.ndarray) -> Any:
        if isinstance(item, VideoItem):
            return video_hash_value(item.original_bytes, item.frames, item.metadata)
        if isinstance(item, ImageItem):
            return image_hash_value(item.original_bytes, item.io_config, image_id(item.image))
        return item  # an audio clip at the model's rate: hashed by its samples, as vLLM does

    def _hash(
        self,
        part: MediaPart,
        value: Any,
        processor_kwargs: Mapping[str, Any],
        media_io_kwargs: Mapping[str, Any] | None,
    ) -> str:
        modality = part.modality
        scoped = {"image": "images_kwargs", "video": "videos_kwargs", "audio": "audio_kwargs"}
        own = scoped.get(modality)
        kwargs = {k: v for k, v in processor_kwargs.items() if k not in scoped.values() or k == own}
        io_kwargs = (media_io_kwargs or {}).get(modality)
        return item_hash(
            self.options.mm_hasher_algorithm,
            model_id=self.model_id,
            modality=modality,
            value=value,
            uuid=part.uuid,
            media_io_kwargs=io_kwargs,
            mm_processor_kwargs=kwargs,
        )

    def _process(
        self,
        family: Family,
        parts: list[MediaPart],
        loaded: list[Any],
        kwargs: Mapping[str, Any],
    ) -> list[ProcessedItem]:
        """Each part's processed item, in part order (a modality's items in one call)."""
        out: list[ProcessedItem | None] = [None] * len(parts)
        for modality in dict.fromkeys(p.modality for p in parts):
            indices = [i for i, p in enumerate(parts) if p.modality == modality]
            results = family.process(modality, [loaded[i] for i in indices], kwargs, self.dtype)
            for i, result in zip(indices, results, strict=True):
                out[i] = result
        return [p for p in out if p is not None]


def _bare_tensors(
    modality: str, items: list[MediaPart], loaded: list[Any], indices: list[int]
) -> list[Embeds]:
    """The decoded tensors of the bare-tensor embeddings parts at ``indices``; a dictionary
    payload (which vLLM hands such a family's processor as if it were media) is refused."""
    out = []
    for i in indices:
        value = loaded[i].get(f"{modality}_embeds") if isinstance(items[i].embeds, str) else None
        if not isinstance(value, Embeds):
            raise MediaError.bad_request(
                f"`{modality}_embeds` must be one base64-encoded tensor for this model"
            )
        out.append(value)
    return out


class _RecordingCache:
    """One embeddings request's view of the sender cache: its items all go with their data
    (as vLLM sends them), and the mirror records them as the engine will."""

    __slots__ = ("_cache",)

    def __init__(self, cache: SenderCache) -> None:
        self._cache = cache

    def apply(self, features: Iterable[Any]) -> None:
        """:meth:`SenderCache.record`."""
        self._cache.record(features)

    def invalidate(self, mm_hashes: Iterable[str]) -> None:
        """:meth:`SenderCache.invalidate`."""
        self._cache.invalidate(mm_hashes)


class _FillingCache:
    """One request's view of the sender cache when some of its items were not processed
    because the engine held them: should one have left the mirror by the time the engine reads
    it (other requests went first, or an earlier item of this request evicted it), it is
    processed then, on the spot (rare), so the engine never gets ``data=None`` for an item it
    lacks."""

    __slots__ = ("_cache", "_pending", "_process")

    def __init__(
        self,
        cache: SenderCache,
        pending: dict[str, tuple[MediaPart, Any]],
        process: Callable[[MediaPart, Any], list[ProcessedItem]],
    ) -> None:
        self._cache = cache
        self._pending: dict[str, tuple[MediaPart, Any]] | None = pending
        self._process = process

    def apply(self, features: Iterable[Any]) -> None:
        """:meth:`SenderCache.apply`, filling what the engine will no longer hold by then."""
        pending, self._pending = self._pending, None  # the decoded images go with it
        if not pending:
            self._cache.apply(features)
            return

        def fill(feature: Any) -> Any:
            [item] = self._process(*pending[feature.mm_hash])
            return item.fields

        self._cache.apply(features, fill)

    def invalidate(self, mm_hashes: Iterable[str]) -> None:
        """:meth:`SenderCache.invalidate`."""
        self._cache.invalidate(mm_hashes)


_QWEN2_VL_METADATA = {
    "image": frozenset({"image_grid_thw"}),
    "video": frozenset({"video_grid_thw"}),
}
_PLACEHOLDER_METADATA: dict[str, dict[str, frozenset[str]]] = {
    # the ``embedding_fields`` "metadata" roles of vLLM's data parsers, by model type
    "qwen2_vl": _QWEN2_VL_METADATA,
    "qwen2_5_vl": _QWEN2_VL_METADATA,
    "qwen3_vl": {**_QWEN2_VL_METADATA, "video": frozenset({"video_grid_thw", "timestamps"})},
    "qwen3_vl_moe": {**_QWEN2_VL_METADATA, "video": frozenset({"video_grid_thw", "timestamps"})},
    "qwen2_audio": {"audio": frozenset({"audio_num_tokens"})},
}


def _expand(
    ids: list[int],
    family: Family,
    parts: list[MediaPart],
    processed: list[ProcessedItem],
    hashes: list[str],
) -> tuple[list[int], list[MultiModalFeatureSpec]]:
    """The prompt with each item's placeholder token repeated for its length, and the items'
    features ordered by their place in the prompt (vLLM's ``PromptReplacement`` of each
    placeholder token, in order, by the modality's items in order)."""
    token_modality = {tid: modality for modality, tid in family.token_ids.items()}
    pending: dict[str, list[int]] = {}
    for index, part in enumerate(parts):
        pending.setdefault(part.modality, []).append(index)
    next_item = dict.fromkeys(pending, 0)
    out: list[int] = []
    features: list[MultiModalFeatureSpec] = []
    for tid in ids:
        modality = token_modality.get(tid)
        queue = pending.get(modality) if modality is not None else None
        if modality is None or queue is None or next_item[modality] >= len(queue):
            out.append(tid)
            continue
        index = queue[next_item[modality]]
        next_item[modality] += 1
        item = processed[index]
        if item.replacement is None:
            position = PlaceholderRange(len(out), item.num_tokens)
            out.extend([tid] * item.num_tokens)
        else:
            embed = None if item.is_embed is None else Tensor.from_numpy(item.is_embed)
            position = PlaceholderRange(len(out), len(item.replacement), embed)
            out.extend(item.replacement)
        features.append(
            MultiModalFeatureSpec(
                data=item.fields or None,  # empty: not processed, the engine holds it
                modality=modality,
                identifier=hashes[index],
                mm_position=position,
                mm_hash=hashes[index],
            )
        )
    for modality, queue in pending.items():
        if next_item[modality] < len(queue):
            index = next_item[modality]
            raise BadInput(
                f"Failed to apply prompt replacement for mm_items[{modality!r}][{index}]"
            )
    finalize = getattr(family, "finalize_prompt", None)
    if finalize is not None:  # a family's pass over the expanded prompt (Gemma 3's newlines)
        out, features = finalize(out, features)
    return out, features


def truncate_expanded(
    ids: list[int],
    features: list[MultiModalFeatureSpec],
    keep: int,
    side: str,
    requested: int | None,
) -> tuple[list[int], list[MultiModalFeatureSpec]]:
    """``truncate_prompt_tokens`` applied again once placeholders are expanded (the text was
    cut before expansion, and items may have grown it past the bound): keep ``keep`` tokens from
    ``side``'s other end, refusing, as vLLM does, when an item would be cut or dropped.
    ``requested`` is the request's own value, for the message."""
    start, stop = (max(len(ids) - keep, 0), len(ids)) if side == "left" else (0, keep)
    if keep == 0:
        start, stop = 0, 0
    order = {f.modality: None for f in features}  # modalities as the items first appear
    for modality in order:
        for feature in features:
            if feature.modality != modality:
                continue
            offset = feature.mm_position.offset
            end = offset + feature.mm_position.length
            if start <= offset and end <= stop:
                continue
            raise InvalidInput(
                f"truncate_prompt_tokens={requested} would split or drop a(n) {modality} item, "
                f"which spans tokens {offset} to {end} of the {len(ids)}-token prompt. "
                "Multimodal placeholders expand after truncation is applied, so the limit must "
                "leave every multimodal item intact. Please raise truncate_prompt_tokens or "
                "shorten the multimodal input.",
                parameter="truncate_prompt_tokens",
                value=requested,
            )
    if start:
        features = [
            msgspec.structs.replace(
                f,
                mm_position=msgspec.structs.replace(
                    f.mm_position, offset=f.mm_position.offset - start
                ),
            )
            for f in features
        ]
    return ids[start:stop], features


_T = TypeVar("_T")


def _resolve_order(items: Sequence[MediaPart]) -> list[int]:
    """The indices of ``items`` in the order vLLM's item tracker resolves them: grouped by
    modality (a modality's embeddings apart from its raw items), groups in the order of their
    first item."""
    groups: dict[str, list[int]] = {}
    for index, part in enumerate(items):
        key = f"{part.modality}_embeds" if part.is_embeds else part.modality
        groups.setdefault(key, []).append(index)
    return [index for group in groups.values() for index in group]


async def _all_or_none(loads: Sequence[Awaitable[_T]], order: Sequence[int]) -> list[_T]:
    """The results of ``loads`` run concurrently. When some fail, the error raised is vLLM's
    answer, whatever the timing: that of the first failed load in ``order`` (its tracker's
    order, :func:`_resolve_order`; vLLM waits for every load, then raises the first error in
    it). So the loads before a failed one are waited for; those after it are cancelled at
    once (a fetch still arriving is dropped, not read on for nobody)."""
    tasks = [asyncio.ensure_future(load) for load in loads]
    try:
        failed = await _first_failed(tasks, order)
    except BaseException:
        _cancel(tasks)
        del tasks  # the error's traceback keeps this frame: no cycle through the failed task
        raise
    if failed is None:
        return [task.result() for task in tasks]
    error = tasks[failed].exception()
    del tasks
    assert error is not None
    try:
        raise error
    finally:
        del error  # (as above: no cycle through this frame)


async def _first_failed(tasks: Sequence[asyncio.Future[Any]], order: Sequence[int]) -> int | None:
    """Wait for ``tasks`` (cancelling those after a failed one in ``order``); the index of the
    first failed one in ``order``, None when none failed."""
    rank = {index: position for position, index in enumerate(order)}
    positions = {task: rank[index] for index, task in enumerate(tasks)}
    pending = set(tasks)
    first: int | None = None  # the position in order of the first failure seen
    while pending:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
        for task in done:
            if task.cancelled() or task.exception() is not None:
                position = positions[task]
                first = position if first is None else min(first, position)
        if first is not None:
            later = {task for task in pending if positions[task] > first}
            _cancel(later)
            pending -= later
    return None if first is None else order[first]


def _cancel(tasks: Iterable[asyncio.Future[Any]]) -> None:
    for task in tasks:
        task.cancel()


def _check_named(items: list[MediaPart]) -> None:
    # vLLM's renderer (renderers/base.py, _validate_mm_uuids): an item with neither data nor
    # uuid names nothing (a chat image_url without its url, a Responses input_image given by
    # file_id).
    seen: dict[str, int] = {}
    for part in items:
        index = seen.get(part.modality, 0)
        seen[part.modality] = index + 1
        if part.uuid is None and part.url is None and part.embeds is None:
            raise MediaError.bad_request(
                f"multi_modal_data[{part.modality!r}][{index}] is empty but "
                f"multi_modal_uuids[{part.modality!r}][{index}] is missing."
            )


def _token_counts(features: list[MultiModalFeatureSpec]) -> dict[str, int]:
    """Placeholder tokens per modality, modalities in order of first appearance (vLLM sums its
    placeholder ranges' lengths)."""
    counts: dict[str, int] = {}
    for feature in features:
        counts[feature.modality] = counts.get(feature.modality, 0) + feature.mm_position.length
    return counts
