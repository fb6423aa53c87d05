"""A model's tokenizer: the Rust `tokenizers` library configured the way transformers does it.

vLLM loads tokenizers with `transformers.AutoTokenizer`, which (in transformers 5) reads
`tokenizer.json` and then adjusts the Rust tokenizer from `tokenizer_config.json`: named special
tokens that are missing become special added tokens (`add_bos_token`/`add_eos_token` are ignored
when a `tokenizer.json` exists: its post-processor decides), and `clean_up_tokenization_spaces`
post-processes decoded text for non-BPE models. We apply the same adjustments so that
encode/decode agree with vLLM's. Prompts are encoded with ``fastokens`` once it has loaded on a
background thread, where it can (:mod:`vllm_frontend.text.tokenizer_fastokens`); a byte-level
tokenizer then lets its `tokenizers` object go until a rare path needs it
(:attr:`Tokenizer.backend`).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import tokenizers
from tokenizers import AddedToken, decoders, models

from vllm_frontend.text.piece_cache import PieceEncoder
from vllm_frontend.text.tokenizer_bounds import bounds_from_source, bounds_from_summary
from vllm_frontend.text.tokenizer_cache import TokenizerCache, VocabSummary
from vllm_frontend.text.tokenizer_fastokens import (
    ENV_VAR,
    fastokens_enabled,
    literal_blind_spot,
    load_fastokens,
    single_bpe_thread,
)

__all__ = [
    "PieceLookup",
    "Tokenizer",
    "TokenizerError",
    "leave_fast_encoder_loads",
    "release_enabled",
]

_log = logging.getLogger(__name__)

_EXIT_WAIT_S = 10.0
"""Seconds an exiting process waits for its running ``fastokens`` loads to end."""

_fast_loads: list[threading.Thread] = []  # the loads this process started (see start_fast_encoder)
_wait_at_exit = True
_exit_wait_registered = False


def _join_fast_loads() -> None:
    # (atexit) A process that exits while a load runs in native code can abort ("exception not
    # rethrown") as the interpreter stops daemon threads: let the loads end first.
    deadline = time.monotonic() + _EXIT_WAIT_S
    for loader in _fast_loads if _wait_at_exit else ():
        loader.join(max(0.0, deadline - time.monotonic()))


def leave_fast_encoder_loads() -> bool:
    """Stop this process's exit from waiting for its running ``fastokens`` loads; True when one
    is still running, which the interpreter's finalisation must then not meet: the caller ends
    the process with ``os._exit`` (see :func:`vllm_frontend.cmd.process.exit_code`)."""
    global _wait_at_exit
    _wait_at_exit = False
    return any(loader.is_alive() for loader in _fast_loads)


# The named special-token slots of transformers' tokenizers, in its order.
_SPECIAL_SLOTS = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)


class TokenizerError(Exception):
    """The tokenizer files are missing or cannot be loaded."""


def _token_content(value: Any) -> str | None:
    """The text of a special-token entry, which may be a string or an AddedToken-like dict."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def _as_added_token(value: Any) -> AddedToken | None:
    if isinstance(value, str):
        return AddedToken(value, special=True, normalized=False)
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return AddedToken(
            value["content"],
            single_word=bool(value.get("single_word", False)),
            lstrip=bool(value.get("lstrip", False)),
            rstrip=bool(value.get("rstrip", False)),
            normalized=bool(value.get("normalized", False)),
            special=True,
        )
    return None


def _clean_up_tokenization(text: str) -> str:
    # The same replacements as transformers' `clean_up_tokenization` (WordPiece-era cleanup).
    return (
        text.replace(" .", ".")
        .replace(" ?", "?")
        .replace(" !", "!")
        .replace(" ,", ",")
        .replace(" ' ", "'")
        .replace(" n't", "n't")
        .replace(" 'm", "'m")
        .replace(" 's", "'s")
        .replace(" 've", "'ve")
        .replace(" 're", "'re")
    )


def add_missing_special_tokens(
    backend: tokenizers.Tokenizer, config: Mapping[str, Any]
) -> list[AddedToken]:
    """Add to ``backend`` what transformers adds: every named and extra special token of
    ``config`` the vocabulary lacks, as a special added token, and existing named ones marked
    special. Returns the tokens added."""
    entries: list[Any] = [config.get(slot) for slot in _SPECIAL_SLOTS]
    for key in ("additional_special_tokens", "extra_special_tokens"):
        extra = config.get(key)
        if isinstance(extra, list):
            entries.extend(extra)
    existing = {t.content: t for t in backend.get_added_tokens_decoder().values()}
    to_add: list[AddedToken] = []
    for entry in entries:
        token = _as_added_token(entry)
        if token is None:
            continue
        current = existing.get(token.content)
        if current is not None and current.special:
            continue
        if current is not None:
            token = AddedToken(
                current.content,
                single_word=current.single_word,
                lstrip=current.lstrip,
                rstrip=current.rstrip,
                normalized=current.normalized,
                special=True,
            )
        to_add.append(token)
    if to_add:
        backend.add_special_tokens(to_add)
    return to_add


def _all_special_tokens(config: Mapping[str, Any]) -> list[str]:
    """The texts of transformers' ``all_special_tokens`` for a tokenizer config: the named
    slots, model-specific named ones (a dict of ``extra_special_tokens``, other ``*_token``
    keys), then the extra (``additional``/``extra_special_tokens``) list."""
    named: list[Any] = [config.get(slot) for slot in _SPECIAL_SLOTS]
    extra = config.get("extra_special_tokens")
    if extra is None:
        extra = config.get("additional_special_tokens")
    if isinstance(extra, Mapping):
        named.extend(extra.values())
        extra = None
    named.extend(
        value
        for key, value in config.items()
        if key.endswith("_token") and key not in _SPECIAL_SLOTS and key != "extra_special_tokens"
    )
    texts = [t for value in named if (t := _token_content(value)) is not None]
    if isinstance(extra, list):
        texts.extend(t for value in extra if (t := _token_content(value)) is not None)
    return texts


class Tokenizer:
    """Encode text to token ids and decode ids to text, matching vLLM's HF fast tokenizer."""

    is_mistral = False
    """A ``mistral_common`` tokenizer (:mod:`vllm_frontend.text.tokenizer_mistral`)."""

    def __init__(
        self,
        backend: tokenizers.Tokenizer,
        tokenizer_config: Mapping[str, Any] | None = None,
        special_tokens_map: Mapping[str, Any] | None = None,
        *,
        use_fastokens: bool | None = None,
        start_fast_encoder: bool = True,
        source: Path | None = None,
        vocab_summary: VocabSummary | None = None,
        fast_source: Path | None = None,
    ) -> None:
        """Configure ``backend`` as transformers would from the two config files' contents.

        ``source``: the ``tokenizer.json`` ``backend`` was loaded from, which lets
        :attr:`max_token_id` and :attr:`max_chars_per_token` be computed at half the cost;
        ``vocab_summary`` (of that file's model vocabulary) makes them nearly free.
        ``use_fastokens``: encode prompts with fastokens once it has loaded (default: unless
        ``VLLM_USE_FASTOKENS=0``); ``start_fast_encoder``: start loading it now (else with
        :meth:`start_fast_encoder`); ``fast_source``: a copy of ``source`` for it to load
        (the tokenizer cache's loads in half the peak memory and GIL time).
        """
        config: dict[str, Any] = dict(tokenizer_config or {})
        if "added_tokens_decoder" not in config:
            # transformers reads the legacy special_tokens_map.json only in this case, and lets
            # it override tokenizer_config.json.
            config.update(special_tokens_map or {})
        self._backend: tokenizers.Tokenizer | None = backend
        self._special: dict[str, str] = {}
        for slot in _SPECIAL_SLOTS:
            content = _token_content(config.get(slot))
            if content is not None:
                self._special[slot] = content
        added_special = add_missing_special_tokens(backend, config)
        self._all_special = _all_special_tokens(config)
        self._clean_up_spaces = bool(config.get("clean_up_tokenization_spaces", False)) and (
            type(backend.model).__name__ != "BPE"
        )
        self._vocab_size = backend.get_vocab_size(with_added_tokens=True)
        self._added_tokens: dict[int, str] = {
            token_id: token.content
            for token_id, token in backend.get_added_tokens_decoder().items()
        }
        self._special_added_ids = frozenset(
            token_id
            for token_id, token in backend.get_added_tokens_decoder().items()
            if token.special
        )
        # Until fastokens is ready (or where it cannot be used), chat prompts (encoded without
        # post-processor tokens) reuse their repeated pieces' ids.
        self._pieces = PieceEncoder.for_backend(backend)
        self._source = source
        self._pieces_of = PieceLookup(backend)
        # Once fastokens serves prompts, a byte-level tokenizer loaded from a file lets the
        # `tokenizers` object go (~45 MB for Llama 3) and loads it again if a rare path needs it.
        self._reload: tuple[Path, list[AddedToken]] | None = (
            ((fast_source or source), added_special) if source is not None else None
        )
        self._backend_lock = threading.Lock()
        self._special_tokens: dict[str, int] | None = None
        self._vocab_summary = vocab_summary
        self._vocab_stats: tuple[int, int] | None = None  # computed on first use (~50 ms)
        explicit = use_fastokens is not None or ENV_VAR in os.environ
        if use_fastokens is None:
            try:
                use_fastokens = fastokens_enabled()
            except ValueError as e:
                raise TokenizerError(str(e)) from None
        self._fast: Any = None  # a fastokens.Tokenizer, once loaded and checked
        # Texts containing this go to `tokenizers` even with fastokens loaded (see there).
        self._fast_blind_spot = literal_blind_spot(backend)
        self._fast_ready = threading.Event()
        self._fast_loader: threading.Thread | None = None
        if not use_fastokens:
            self._fast_ready.set()
        else:
            single_bpe_thread()  # (before any thread of it runs)
            # fastokens loads on a thread while this process goes on; prompts use `tokenizers`
            # until then, with the same ids.
            self._fast_loader = threading.Thread(
                target=self._load_fastokens,
                args=(fast_source or source, added_special, explicit),
                name="fastokens-load",
                daemon=True,
            )
            if start_fast_encoder:
                self.start_fast_encoder()

    @classmethod
    def from_dir(
        cls,
        model_dir: str | Path,
        *,
        use_fastokens: bool | None = None,
        start_fast_encoder: bool = True,
        cache: TokenizerCache | None = None,
    ) -> Tokenizer:
        """Load `tokenizer.json` (+ `tokenizer_config.json`, `special_tokens_map.json`).

        `use_fastokens` (default: unless `VLLM_USE_FASTOKENS=0`) encodes prompts with the
        `fastokens` package once it has loaded, where it supports the tokenizer and agrees with
        `tokenizers` (see :mod:`vllm_frontend.text.tokenizer_fastokens`). With a `cache`,
        a faster-loading copy of `tokenizer.json` is loaded when one was built, and a builder is
        started in the background when none was (see :mod:`vllm_frontend.text.tokenizer_cache`).
        """
        directory = Path(model_dir)
        path = directory / "tokenizer.json"
        if not path.is_file():
            return cls._from_tiktoken(directory, use_fastokens, start_fast_encoder)
        cached = cache.lookup(path) if cache is not None else None
        if cache is not None and cached is None:
            cache.start_build(path)
        backend = None
        if cached is not None and cached.path != path:
            try:
                backend = tokenizers.Tokenizer.from_file(str(cached.path))
            except Exception as e:  # a damaged copy: the original still serves
                _log.warning("ignoring the cached copy of %s (%s)", path, e)
                cached = None
            else:
                _log.info("loaded %s from its cached copy %s", path, cached.path)
        if backend is None:
            try:
                backend = tokenizers.Tokenizer.from_file(str(path))
            except Exception as e:  # the Rust library raises a bare Exception on bad files
                raise TokenizerError(f"cannot load {path}: {e}") from e
        return cls(
            backend,
            _read_json(directory / "tokenizer_config.json"),
            _read_json(directory / "special_tokens_map.json"),
            use_fastokens=use_fastokens,
            start_fast_encoder=start_fast_encoder,
            source=path,
            vocab_summary=cached.vocab if cached is not None else None,
            fast_source=cached.path if cached is not None else None,
        )

    @classmethod
    def _from_tiktoken(
        cls, directory: Path, use_fastokens: bool | None, start_fast_encoder: bool
    ) -> Tokenizer:
        # A tiktoken file in place of tokenizer.json, converted as transformers converts it.
        from vllm_frontend.text.tokenizer_tiktoken import tiktoken_backend, tiktoken_file

        config = _read_json(directory / "tokenizer_config.json") if directory.is_dir() else {}
        source = tiktoken_file(directory, config)
        if source is None:
            raise TokenizerError(missing_tokenizer_json(directory))
        try:
            backend = tiktoken_backend(source, config)
        except (OSError, ValueError) as e:
            raise TokenizerError(f"cannot read the tiktoken file {source}: {e}") from e
        _log.info("converted the tiktoken file %s as transformers does", source)
        return cls(
            backend,
            config,
            _read_json(directory / "special_tokens_map.json"),
            use_fastokens=use_fastokens,
            start_fast_encoder=start_fast_encoder,
        )

    def _load_fastokens(self, source: Path | None, added: list[AddedToken], explicit: bool) -> None:
        started = time.monotonic()
        try:
            fast = load_fastokens(self.backend, source, added, explicit=explicit)
            if fast is not None:
                self._fast = fast
                self._pieces = None  # fastokens encodes whole prompts faster than it helps
                self._release_backend(fast)
                release_freed_heap()  # its JSON parse leaves ~90 MB freed but mapped
                _log.info("prompts are encoded with fastokens from now on (it loaded %s in %.1f s)",
                          source or "the tokenizer", time.monotonic() - started)  # fmt: skip
        finally:
            self._fast_ready.set()

    def _release_backend(self, fast: Any) -> None:
        # Serving a byte-level tokenizer with fastokens loaded needs `tokenizers` only on rare
        # paths (decode, offsets, truncation by the library, a prompt fastokens refuses): let
        # it go where it can be loaded again from its file. What the hot paths read from it
        # is computed first; pieces and ids come from fastokens, which gives the same.
        if self._reload is None or not self.byte_level_decoder or not release_enabled():
            return
        self._stats()
        self._special_tokens = self._find_special_tokens()
        with self._backend_lock:
            self._pieces_of.use(fast)
            self._backend = None

    def _reload_backend(self) -> tokenizers.Tokenizer:
        with self._backend_lock:
            backend = self._backend
            if backend is not None:
                return backend
            assert self._reload is not None
            path, added = self._reload
            started = time.monotonic()
            sources = [path] if self._source in (None, path) else [path, self._source]
            for k, source in enumerate(sources):
                try:
                    backend = tokenizers.Tokenizer.from_file(str(source))
                    break
                except Exception as e:  # the copy gone: the original serves
                    if k == len(sources) - 1:
                        raise TokenizerError(f"cannot load {source} again: {e}") from e
            assert backend is not None
            if added:
                backend.add_special_tokens(added)
            self._backend = backend
            self._pieces_of.use_backend(backend)
            _log.info("loaded %s again for a request that needs tokenizers (%.2f s); it is kept",
                      path, time.monotonic() - started)  # fmt: skip
            return backend

    @property
    def uses_fastokens(self) -> bool:
        """Whether prompts are now encoded with ``fastokens`` (else with ``tokenizers``)."""
        return self._fast is not None

    def start_fast_encoder(self) -> None:
        """Start loading the ``fastokens`` encoder (if asked for and not started yet).

        The load takes 1.5-2.5 s of CPU for Llama 3's tokenizer and holds the GIL for parts of
        it (0.1-0.4 s at a time), so a server starts it once it is serving (see
        ``start_fast_encoder=False``)."""
        loader, self._fast_loader = self._fast_loader, None
        if loader is not None:
            global _exit_wait_registered
            if not _exit_wait_registered:
                atexit.register(_join_fast_loads)
                _exit_wait_registered = True
            _fast_loads[:] = [t for t in _fast_loads if t.is_alive()]
            _fast_loads.append(loader)
            loader.start()

    def wait_for_fast_encoder(self, timeout: float | None = None) -> bool:
        """Wait until the ``fastokens`` encoder (if asked for) has loaded or failed to; False
        on timeout. Prompts are encoded with ``tokenizers`` meanwhile: the same ids."""
        return self._fast_ready.wait(timeout)

    def _id_or_unk(self, token: str) -> int:
        token_id = self.token_to_id(token)
        if token_id is None:
            unk = self._special.get("unk_token")
            token_id = self.token_to_id(unk) if unk is not None else None
        return -1 if token_id is None else token_id

    @property
    def backend(self) -> tokenizers.Tokenizer:
        """The configured Rust tokenizer (loaded again if it was let go, then kept)."""
        backend = self._backend
        return backend if backend is not None else self._reload_backend()

    async def ensure_backend(self) -> None:
        """Load the ``tokenizers`` object again on a worker thread if it was let go, so that a
        request about to decode (logprobs, echo, beam search) does not hold the event loop for
        the load (0.2-0.5 s); other paths that need it load it where they stand."""
        if self._backend is None:
            await asyncio.to_thread(self._reload_backend)

    @property
    def holds_backend(self) -> bool:
        """Whether the ``tokenizers`` object is in memory (it is let go once fastokens serves
        a byte-level tokenizer loaded from a file; :attr:`backend` loads it again)."""
        return self._backend is not None

    @property
    def byte_level_decoder(self) -> bool:
        """Whether the decoder is exactly ``ByteLevel`` (token text is the pieces' bytes)."""
        backend = self._backend
        # (Only such a tokenizer lets its `tokenizers` object go.)
        return backend is None or isinstance(backend.decoder, decoders.ByteLevel)

    @property
    def pieces_of(self) -> PieceLookup:
        """The id -> vocabulary piece lookup, which does not keep this tokenizer alive."""
        return self._pieces_of

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of `text`; `add_special_tokens` applies the post-processor (BOS/EOS)."""
        fast = self._fast
        try:
            if fast is not None and (
                self._fast_blind_spot is None or self._fast_blind_spot not in text
            ):
                ids = fast.encode(text, add_special_tokens=add_special_tokens).ids
                # fastokens builds a new list on each access: no copy needed (5 µs per 1.6k ids)
                return ids if type(ids) is list else list(ids)
            pieces = self._pieces
            if pieces is not None and not add_special_tokens:
                return pieces.encode(text)
            return self.backend.encode(text, add_special_tokens=add_special_tokens).ids
        except (UnicodeEncodeError, TypeError):
            # A lone surrogate: the Rust tokenizer refuses it, with the message of the batch call
            # transformers' fast tokenizer makes for one text (thus vLLM's); the text is refused
            # before the model is used, so an empty tokenizer refuses it alike.
            backend = self._backend if self._backend is not None else _empty_backend()
            backend.encode_batch([text], add_special_tokens=add_special_tokens)
            raise

    def encode_batch(
        self, texts: Sequence[str], add_special_tokens: bool = True
    ) -> list[list[int]]:
        """Token ids of several texts, encoded in parallel by the Rust library (GIL released)."""
        fast = self._fast
        spot = self._fast_blind_spot
        encodings = None
        if fast is not None and (spot is None or not any(spot in text for text in texts)):
            with contextlib.suppress(UnicodeEncodeError, TypeError):  # as in encode
                encodings = fast.encode_batch(list(texts), add_special_tokens=add_special_tokens)
        if encodings is None:
            encodings = self.backend.encode_batch_fast(
                list(texts), add_special_tokens=add_special_tokens
            )
        return [list(e.ids) for e in encodings]

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        """Text of `token_ids` (transformers' `decode`, including its space clean-up)."""
        text = self.backend.decode(list(token_ids), skip_special_tokens=skip_special_tokens)
        return _clean_up_tokenization(text) if self._clean_up_spaces else text

    def decode_verbatim(self, token_ids: Sequence[int]) -> str:
        """Text of ``token_ids`` with special tokens and without the space clean-up (vLLM's
        ``hf`` parser decodes prompts so)."""
        return str(self.backend.decode(list(token_ids), skip_special_tokens=False))

    def id_to_token(self, token_id: int) -> str | None:
        """The vocabulary piece of one id (None when out of range)."""
        if type(token_id) is int:
            return self._pieces_of(token_id)
        return self.backend.id_to_token(token_id)  # (its own TypeError message)

    def convert_ids_to_tokens(self, token_ids: Sequence[int]) -> list[str | None]:
        """Vocabulary pieces of several ids."""
        to_token = self.id_to_token
        return [to_token(i) for i in token_ids]

    def token_to_id(self, token: str) -> int | None:
        """The id of a vocabulary piece or added token, if any."""
        backend = self._backend
        if backend is None and type(token) is str:
            return self._pieces_of.token_to_id(token)
        return self.backend.token_to_id(token)

    @property
    def all_special_tokens(self) -> dict[str, int]:
        """transformers' ``all_special_tokens`` (named special tokens, then the extra ones)
        with their ids; tokens the vocabulary lacks are left out."""
        known = self._special_tokens
        return dict(known) if known is not None else self._find_special_tokens()

    def _find_special_tokens(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for text in self._all_special:
            if text not in out and (token_id := self.token_to_id(text)) is not None:
                out[text] = token_id
        return out

    def special_token(self, slot: str) -> str | None:
        """The configured text of a named special token (`"eos_token"`, `"bos_token"`, ...)."""
        return self._special.get(slot)

    def special_token_id(self, slot: str) -> int | None:
        """The id of a named special token, as transformers' `<slot>_id` (unk id if unknown)."""
        token = self._special.get(slot)
        if token is None:
            return None
        token_id = self._id_or_unk(token)
        return None if token_id < 0 else token_id

    @property
    def eos_token_id(self) -> int | None:
        """The primary end-of-sequence id (tokenizer_config `eos_token`)."""
        return self.special_token_id("eos_token")

    @property
    def bos_token_id(self) -> int | None:
        """The beginning-of-sequence id (tokenizer_config `bos_token`)."""
        return self.special_token_id("bos_token")

    @property
    def added_tokens(self) -> Mapping[int, str]:
        """Added tokens (special or not) by id."""
        return self._added_tokens

    @property
    def special_added_token_ids(self) -> frozenset[int]:
        """Ids of added tokens flagged special (what `skip_special_tokens` removes)."""
        return self._special_added_ids

    @property
    def vocab_size(self) -> int:
        """Number of tokens including added tokens (transformers' `len(tokenizer)`)."""
        return self._vocab_size

    @property
    def max_token_id(self) -> int:
        """The largest token id in the vocabulary."""
        return self._stats()[0]

    @property
    def max_chars_per_token(self) -> int:
        """Length of the longest vocabulary piece (bounds characters per token)."""
        return self._stats()[1]

    def _stats(self) -> tuple[int, int]:
        if self._vocab_stats is None:
            backend = self.backend
            stats = bounds_from_summary(backend, self._vocab_summary) or (
                None if self._source is None else bounds_from_source(backend, self._source)
            )
            if stats is None:
                vocab = backend.get_vocab(with_added_tokens=True)
                stats = max(vocab.values(), default=-1), max(map(len, vocab), default=0)
            # As vLLM's cached tokenizer: the base vocabulary size also bounds the largest id.
            base = backend.get_vocab_size(with_added_tokens=False)
            self._vocab_stats = (max(stats[0], base - 1), stats[1])
        return self._vocab_stats


class PieceLookup:
    """A tokenizer's id -> piece and piece -> id lookups: ``tokenizers``' until the tokenizer
    lets that go, then ``fastokens``' (the same pieces and ids, over the whole vocabulary:
    ``tests/text/test_tokenizer_release.py``).
    Holds no reference to the :class:`Tokenizer`, so tables keyed by it weakly can keep one."""

    __slots__ = ("_to_id", "_to_token")

    def __init__(self, backend: Any) -> None:
        """Lookups from ``backend`` (a ``tokenizers.Tokenizer``)."""
        self.use_backend(backend)

    def use_backend(self, backend: Any) -> None:
        """Look pieces up in ``backend`` (a ``tokenizers.Tokenizer``) from now on."""
        self._to_token = backend.id_to_token
        self._to_id = backend.token_to_id

    def use(self, fast: Any) -> None:
        """Look pieces up in ``fast`` (a ``fastokens.Tokenizer``) from now on."""
        self._to_token = fast.id_to_token
        self._to_id = fast.token_to_id

    def __call__(self, token_id: int) -> str | None:
        """The piece of ``token_id`` (None when it has none; OverflowError when not a u32)."""
        return self._to_token(token_id)

    @property
    def id_to_token(self) -> Callable[[int], str | None]:
        """The library's own lookup serving now (for loops over many ids)."""
        return self._to_token

    def token_to_id(self, token: str) -> int | None:
        """The id of a vocabulary piece or added token, if any."""
        return self._to_id(token)


_KEEP_ENV_VAR = "VLLM_FRONTEND_KEEP_TOKENIZERS"


def release_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the ``tokenizers`` object may be let go once fastokens serves (unless
    ``VLLM_FRONTEND_KEEP_TOKENIZERS`` is set to a non-zero integer)."""
    value = (os.environ if environ is None else environ).get(_KEEP_ENV_VAR, "0")
    try:
        return not int(value)
    except ValueError:
        return True


_EMPTY: list[tokenizers.Tokenizer] = []


def _empty_backend() -> tokenizers.Tokenizer:
    if not _EMPTY:
        _EMPTY.append(tokenizers.Tokenizer(models.BPE()))
    return _EMPTY[0]


def missing_tokenizer_json(directory: Path) -> str:
    """Startup's message for a model directory without ``tokenizer.json``, saying what it has
    instead (vLLM would load those through transformers, or the model's own code)."""
    base = f"no tokenizer.json in {directory}"
    config = _read_json(directory / "tokenizer_config.json") if directory.is_dir() else {}
    auto_map = config.get("auto_map")
    if isinstance(auto_map, Mapping) and auto_map.get("AutoTokenizer"):
        return (
            f"{base}: the model's tokenizer is its own Python code (tokenizer_config.json "
            f"auto_map {auto_map['AutoTokenizer']!r}, which vLLM runs with --trust-remote-code); "
            "vllm-frontend does not run model code: give --tokenizer a directory with a "
            "tokenizer.json"
        )
    names = sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []
    if "tekken.json" in names or any(n.startswith("tokenizer.model.v") for n in names):
        return f"{base}: it has a Mistral tokenizer file: use --tokenizer-mode mistral"
    others = [n for n in names if n.endswith((".tiktoken", ".model")) or n == "tiktoken.model"]
    if others:
        return (
            f"{base}: it has only {', '.join(others)} (tiktoken or SentencePiece files, which "
            "vLLM converts with transformers); vllm-frontend converts only a tiktoken "
            "tokenizer.model with tokenizer_class PreTrainedTokenizerFast or TokenizersBackend: "
            "give --tokenizer a directory with a tokenizer.json"
        )
    return base


def release_freed_heap() -> None:
    """Hand freed heap back to the OS (glibc keeps it mapped unless asked).

    Parsing a tokenizer.json leaves much of it behind: a Llama 3 tokenizer, RSS 206 MB after
    loading and 101 MB after ``malloc_trim``; fastokens' load another ~90 MB.
    """
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise TokenizerError(f"cannot read {path}: {e}") from e
    return data if isinstance(data, dict) else {}
