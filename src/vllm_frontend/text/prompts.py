"""Prompts made ready to generate, with vLLM 0.32's renderer steps (vllm/renderers/params.py,
``TokenizeParams``): the text-length guard, ``truncate_prompt_tokens``, tokenization (long texts
on a worker thread) and the context-length check."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

import msgspec

from vllm_frontend.text.errors import InvalidInput
from vllm_frontend.text.tokenizer import Tokenizer

__all__ = [
    "OFF_LOOP_ENCODE_CHARS",
    "OFF_LOOP_ENCODE_CHARS_FASTOKENS",
    "BatchEncoder",
    "PreparedPrompt",
    "PromptEncoder",
    "PromptPreparer",
    "encode_off_loop",
    "encode_prompt",
    "off_loop_encode_chars",
]


class PreparedPrompt(msgspec.Struct):
    """One prompt ready to generate: its token ids and (for echo) its text."""

    token_ids: list[int]
    text: str | None
    mm_features: list[Any] | None = None
    """The engine's ``MultiModalFeatureSpec`` list (multimodal prompts); handed over to the
    engine request, and cleared here once taken (no second reference to the tensors)."""
    mm_cache: Any = None
    """The mirror of the engine's multimodal cache the features go through when sent
    (``multimodal.sender_cache.SenderCache``), or None."""
    mm_token_counts: dict[str, int] | None = None
    """Placeholder tokens per modality (vLLM's ``multimodal_tokens`` in prompt-token usage
    details), counted before the features are sent; None for a text prompt."""
    untruncated_ids: list[int] | None = None
    """A token-id prompt's ids before truncation, when it was truncated: its text (for echo)
    is theirs, as vLLM's renderer decodes a token prompt before truncating it."""


class PromptPreparer:
    """Prompt preparation for one model: its tokenizer, context length and default truncation
    side (vLLM loads generation models' tokenizers with ``truncation_side="left"``)."""

    __slots__ = ("_max_text_chars", "max_model_len", "tokenizer", "tokenizer_truncation_side")

    def __init__(
        self, tokenizer: Tokenizer, max_model_len: int, tokenizer_truncation_side: str = "left"
    ) -> None:
        self.tokenizer = tokenizer
        self.max_model_len = max_model_len
        self.tokenizer_truncation_side = tokenizer_truncation_side
        self._max_text_chars: tuple[int, int] | None = None

    def _text_limit(self) -> int:
        # The longest text the context can hold, for this max_model_len (the tokenizer's
        # longest piece never changes; reading it walks a property and the vocabulary stats).
        kept = self._max_text_chars
        if kept is None or kept[0] != self.max_model_len:
            kept = (self.max_model_len, self.max_model_len * self.tokenizer.max_chars_per_token)
            self._max_text_chars = kept
        return kept[1]

    def check_prompt_length(self, num_tokens: int, from_text: bool) -> None:
        """vLLM's renderer check (``TokenizeParams._token_len_check``): 400 when the prompt
        alone is longer than the context. vLLM tokenizes text with truncation to one token more
        than the context, so for text prompts it can only say "at least <limit + 1>"."""
        limit = self.max_model_len
        if num_tokens <= limit:
            return
        if from_text:
            num_tokens = limit + 1
        qualifier = "at least " if num_tokens == limit + 1 else ""
        raise InvalidInput(
            f"This model's maximum context length is {limit} tokens. However, your prompt "
            f"contains {qualifier}{num_tokens} input tokens, which exceeds this limit even "
            "without any output tokens. Please reduce the length of the input prompt.",
            parameter="input_tokens",
            value=num_tokens,
        )

    def check_text_length(self, text: str) -> None:
        """vLLM's ``TokenizeParams._text_len_check``: a text that cannot fit even at the
        longest token's length is refused before tokenizing."""
        limit = self._text_limit()
        if len(text) > limit:
            raise InvalidInput(
                f"This model's maximum context length is {self.max_model_len} tokens. However, "
                f"your prompt contains {len(text)} characters (more than {limit} characters, "
                f"which is the upper bound for {self.max_model_len} input tokens). Please reduce "
                "the length of the input prompt.",
                parameter="input_text",
                value=len(text),
            )

    def truncation(self, truncate: int | None, max_output_tokens: int | None) -> int | None:
        """The prompt length ``truncate_prompt_tokens`` asks for (vLLM's ``TokenizeParams``):
        -1 means the context less one token kept for output (the whole context when no output
        is wanted); more than the context is a 400."""
        if truncate is None:
            return None
        limit = self.max_model_len
        if truncate > limit:
            raise InvalidInput(
                f"truncate_prompt_tokens={truncate} cannot be greater than max_model_len = "
                f"{limit}. Please request a smaller truncation size.",
                parameter="truncate_prompt_tokens",
                value=truncate,
            )
        if truncate < 0:
            return limit if max_output_tokens == 0 else max(0, limit - 1)
        return truncate

    def prepare_prompt(
        self,
        prompt: str | list[int],
        *,
        add_special_tokens: bool,
        truncate: int | None = None,
        truncation_side: str | None = None,
    ) -> PreparedPrompt:
        """Tokenize (or take) a prompt and apply vLLM's renderer steps: the text-length guard,
        truncation (``truncate`` from :meth:`truncation`) and the context-length check."""
        if truncate is None and not isinstance(prompt, list):
            # no truncation (the common prompt): the two length checks around the encode
            self.check_text_length(prompt)
            ids = self.tokenizer.encode(prompt, add_special_tokens=add_special_tokens)
            self.check_prompt_length(len(ids), from_text=True)
            return PreparedPrompt(ids, prompt)
        side = truncation_side or self.tokenizer_truncation_side
        if isinstance(prompt, list):
            ids = list(prompt)
            if truncate is not None:
                ids = _truncated(ids, truncate, side)
            self.check_prompt_length(len(ids), from_text=False)
            if len(ids) != len(prompt):
                return PreparedPrompt(ids, None, untruncated_ids=list(prompt))
            return PreparedPrompt(ids, None)
        if truncate is not None and truncation_side is None:
            # vLLM lets the HF tokenizer truncate (max_length counts the special tokens, which
            # stay): encode bare, truncate the content, then add the special tokens.
            if self.tokenizer.is_mistral:
                ids = _mistral_truncated(self.tokenizer, prompt, truncate, side, add_special_tokens)
                self.check_prompt_length(len(ids), from_text=True)
                return PreparedPrompt(ids, prompt)
            backend = self.tokenizer.backend
            encoding = backend.encode(prompt, add_special_tokens=False)
            special = backend.num_special_tokens_to_add(False) if add_special_tokens else 0
            encoding.truncate(max(truncate - special, 0), direction=side)
            ids = backend.post_process(encoding, add_special_tokens=add_special_tokens).ids
            # then vLLM's own token truncation: 0 leaves nothing, special tokens included
            ids = _truncated(ids, truncate, side)
            self.check_prompt_length(len(ids), from_text=True)
            return PreparedPrompt(ids, prompt)
        text = self._text_to_encode(prompt, truncate, truncation_side)
        ids = self.tokenizer.encode(text, add_special_tokens=add_special_tokens)
        return self._encoded_prompt(prompt, ids, truncate, side)

    def prepare_prompts_in_loop(
        self,
        prompts: Sequence[str | list[int]],
        *,
        add_special_tokens: bool,
        truncate: int | None = None,
        truncation_side: str | None = None,
    ) -> list[PreparedPrompt] | None:
        """What :meth:`prepare_prompts` gives when it encodes on the event loop (texts under
        :func:`off_loop_encode_chars`, or truncated by the tokenizer), without a coroutine;
        None when it would encode on a worker thread (then await it)."""
        chars = 0
        for p in prompts:  # (a loop: a generator's set-up is most of the cost for one prompt)
            if isinstance(p, str):
                chars += len(p)
        if chars >= off_loop_encode_chars(self.tokenizer) and (
            truncate is None or truncation_side is not None
        ):
            return None
        return [
            self.prepare_prompt(
                p,
                add_special_tokens=add_special_tokens,
                truncate=truncate,
                truncation_side=truncation_side,
            )
            for p in prompts
        ]

    async def prepare_prompts(
        self,
        prompts: Sequence[str | list[int]],
        *,
        add_special_tokens: bool,
        truncate: int | None = None,
        truncation_side: str | None = None,
    ) -> list[PreparedPrompt]:
        """:meth:`prepare_prompt` for each prompt, in order, with the same results and errors;
        when their texts come to :func:`off_loop_encode_chars` or more, they are encoded on a
        worker thread (the library releases the GIL there), so running streams are not held up
        for the milliseconds a long prompt takes to encode."""
        prepared = self.prepare_prompts_in_loop(
            prompts,
            add_special_tokens=add_special_tokens,
            truncate=truncate,
            truncation_side=truncation_side,
        )
        if prepared is not None:
            return prepared
        return await self.prepare_prompts_off_loop(
            prompts,
            add_special_tokens=add_special_tokens,
            truncate=truncate,
            truncation_side=truncation_side,
        )

    async def prepare_prompts_off_loop(
        self,
        prompts: Sequence[str | list[int]],
        *,
        add_special_tokens: bool,
        truncate: int | None = None,
        truncation_side: str | None = None,
    ) -> list[PreparedPrompt]:
        """:meth:`prepare_prompts` where :meth:`prepare_prompts_in_loop` returned None: the
        texts encoded on a worker thread, the same results and errors."""
        # The texts prepare_prompt would encode, up to the first one it refuses unencoded.
        texts: dict[int, str] = {}
        refused: tuple[int, InvalidInput] | None = None
        for k, prompt in enumerate(prompts):
            if isinstance(prompt, str):
                try:
                    texts[k] = self._text_to_encode(prompt, truncate, truncation_side)
                except InvalidInput as e:
                    refused = (k, e)
                    break
        ids = await encode_off_loop(self.tokenizer, list(texts.values()), add_special_tokens)
        encoded = dict(zip(texts, ids, strict=True))
        side = truncation_side or self.tokenizer_truncation_side
        out = []
        for k, prompt in enumerate(prompts):
            if refused is not None and k == refused[0]:
                raise refused[1]
            if isinstance(prompt, str):
                out.append(self._encoded_prompt(prompt, encoded[k], truncate, side))
            else:
                out.append(
                    self.prepare_prompt(
                        prompt,
                        add_special_tokens=add_special_tokens,
                        truncate=truncate,
                        truncation_side=truncation_side,
                    )
                )
        return out

    def token_offsets(
        self,
        prompt: str,
        *,
        add_special_tokens: bool,
        truncate: int | None = None,
        truncation_side: str | None = None,
    ) -> list[tuple[int, int]] | None:
        """The character span of each token :meth:`prepare_prompt` makes of ``prompt`` (with
        the same arguments), as vLLM's renderer reports it for ``return_token_offsets``: the
        fast tokenizer's ``offset_mapping`` (special tokens ``(0, 0)``), shifted back past a
        text trimmed from the left and truncated with the tokens. None for a mistral_common
        tokenizer (vLLM's renderer has no offsets there)."""
        if self.tokenizer.is_mistral:
            return None
        backend = self.tokenizer.backend
        side = truncation_side or self.tokenizer_truncation_side
        if truncate is not None and truncation_side is None:
            encoding = backend.encode(prompt, add_special_tokens=False)
            special = backend.num_special_tokens_to_add(False) if add_special_tokens else 0
            encoding.truncate(max(truncate - special, 0), direction=side)
            encoding = backend.post_process(encoding, add_special_tokens=add_special_tokens)
            return list(encoding.offsets)
        text = self._text_to_encode(prompt, truncate, truncation_side)
        shift = len(prompt) - len(text) if truncation_side == "left" else 0
        offsets: list[tuple[int, int]] = list(
            backend.encode(text, add_special_tokens=add_special_tokens).offsets
        )
        if shift:
            offsets = [o if o == (0, 0) else (o[0] + shift, o[1] + shift) for o in offsets]
        if truncate is not None:
            offsets = _truncated(offsets, truncate, side)
        return offsets

    def _text_to_encode(self, text: str, truncate: int | None, truncation_side: str | None) -> str:
        if truncate is None:
            self.check_text_length(text)
            return text
        # vLLM trims the text by characters first, then tokenizes it whole and slices.
        limit = self._text_limit()
        if len(text) > limit:
            text = text[-limit:] if truncation_side == "left" else text[:limit]
        return text

    def _encoded_prompt(
        self, prompt: str, ids: list[int], truncate: int | None, side: str
    ) -> PreparedPrompt:
        if truncate is not None:
            ids = _truncated(ids, truncate, side)
        self.check_prompt_length(len(ids), from_text=True)
        return PreparedPrompt(ids, prompt)

    def check_max_tokens_param(self, max_tokens: int | None, name: str) -> None:
        """vLLM's ``TokenizeParams.__post_init__``: an output budget above the context is a 400."""
        if max_tokens is not None and max_tokens > self.max_model_len:
            raise InvalidInput(
                f"{name}={max_tokens} cannot be greater than max_model_len={self.max_model_len}."
                " Please request fewer output tokens.",
                parameter=name,
                value=max_tokens,
            )


_T = TypeVar("_T")


def _truncated(ids: list[_T], length: int, side: str) -> list[_T]:
    if length >= len(ids):
        return ids
    if length == 0:
        return []
    return ids[-length:] if side == "left" else ids[:length]


OFF_LOOP_ENCODE_CHARS = 8192
"""Prompt texts of at least this many characters (a request's in all) are encoded off the event
loop: ~2k tokens, which take `tokenizers` 5-10 ms here, a stall for every running stream."""

OFF_LOOP_ENCODE_CHARS_FASTOKENS = 32768
"""The same threshold once prompts are encoded with fastokens, ~10x faster: ~6k tokens, ~1.5 ms
here. Below it the thread hop costs more than it saves: under load, the worker's result waits
for the GIL (up to the 5 ms switch interval) and then for the loop, which showed as a 2k-token
prompt's TTFT (BENCHMARKS.md, twelfth session)."""


def off_loop_encode_chars(tokenizer: object) -> int:
    """The off-loop threshold for ``tokenizer``: :data:`OFF_LOOP_ENCODE_CHARS_FASTOKENS` once it
    encodes with fastokens, else :data:`OFF_LOOP_ENCODE_CHARS`."""
    if getattr(tokenizer, "uses_fastokens", False):
        return OFF_LOOP_ENCODE_CHARS_FASTOKENS
    return OFF_LOOP_ENCODE_CHARS


_encoder_pool: ThreadPoolExecutor | None = None


class BatchEncoder(Protocol):
    """What :func:`encode_off_loop` needs of a tokenizer (``text.Tokenizer`` has it)."""

    def encode_batch(
        self, texts: Sequence[str], add_special_tokens: bool = True
    ) -> list[list[int]]:
        """Token ids of several texts, computed without holding the GIL."""
        ...


async def encode_off_loop(
    tokenizer: BatchEncoder, texts: list[str], add_special_tokens: bool
) -> list[list[int]]:
    """Token ids of ``texts`` computed on the (one) encoder thread; ``encode_batch`` releases
    the GIL, so the event loop runs meanwhile. The same ids as ``tokenizer.encode``."""
    global _encoder_pool
    if not texts:
        return []
    if _encoder_pool is None:
        _encoder_pool = ThreadPoolExecutor(1, thread_name_prefix="vllm-frontend-encode")
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(
        _encoder_pool, tokenizer.encode_batch, texts, add_special_tokens
    )


class PromptEncoder(BatchEncoder, Protocol):
    """What :func:`encode_prompt` needs of a tokenizer (``text.Tokenizer`` has it)."""

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text``."""
        ...


async def encode_prompt(tokenizer: PromptEncoder, text: str, add_special_tokens: bool) -> list[int]:
    """Token ids of one text: in the event loop when short, else as :func:`encode_off_loop`."""
    if len(text) < off_loop_encode_chars(tokenizer):
        return tokenizer.encode(text, add_special_tokens=add_special_tokens)
    [ids] = await encode_off_loop(tokenizer, [text], add_special_tokens)
    return ids


def _mistral_truncated(
    tokenizer: Tokenizer, text: str, truncate: int, side: str, add_special_tokens: bool
) -> list[int]:
    # transformers' MistralCommonBackend truncation: the text's ids cut to leave room for the
    # BOS, then the BOS.
    ids = tokenizer.encode(text, add_special_tokens=False)
    bos = tokenizer.encode("", add_special_tokens=True) if add_special_tokens else []
    keep = max(truncate - len(bos), 0)
    if len(ids) + len(bos) > truncate:
        ids = (ids[len(ids) - keep :] if keep else []) if side == "left" else ids[:keep]
    return bos + ids
