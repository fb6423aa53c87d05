"""The ``fastokens`` prompt encoder: when to use it, loading it, and checking it agrees.

vllm-rs encodes prompts with fastokens whenever it can load the tokenizer, and with
``tokenizers`` otherwise; so do we. ``VLLM_USE_FASTOKENS`` is read as vLLM reads it (an integer,
non-zero for on); unset means on here, as vllm-rs has no switch. fastokens cannot load some
tokenizers (Metaspace, Whitespace, WhitespaceSplit, Punctuation, UnicodeScripts or
CharDelimiterSplit pre-tokenizers; NFD, NFKC, NFKD, StripAccents, Strip or Bert normalizers;
Unigram, WordPiece or WordLevel models; Bert or Roberta post-processors): those stay with
``tokenizers``. It ignores one setting that loads: ``tokenizers``' ``encode_special_tokens``
(special tokens encoded as text), so such a backend stays with ``tokenizers`` too. A loaded
encoder is checked against ``tokenizers`` (sizes, every added token's id, and probe texts) before
any prompt uses it; ``tokenizers`` wins on any difference. One difference passes those checks:
with a byte-fallback BPE (Llama 2, Mistral), fastokens reads literal text such as ``<0x0A>`` as
the byte token of that name where ``tokenizers`` spells it out character by character; prompts
containing ``<0x`` therefore go to ``tokenizers`` for such models (:func:`literal_blind_spot`).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "BPE_THREADS_ENV_VAR",
    "ENV_VAR",
    "fastokens_enabled",
    "literal_blind_spot",
    "load_fastokens",
    "single_bpe_thread",
]

_log = logging.getLogger(__name__)

ENV_VAR = "VLLM_USE_FASTOKENS"
"""The environment variable that turns fastokens off (``0``) or on (any other integer)."""

# Texts whose ids must agree before fastokens encodes prompts (added tokens are appended).
_PROBES = (
    "",
    "Hello, world! It's 2026; don't   stop.\n\n\tTabs\r\nand 12345 numbers",
    "café naïve e\u0301 Z\u0308 ß İ ǅ ﬁ Ⅻ ㎏ \u00a0\u3000\ufeff\u200f",
    "日本語 中文 한국어 שלום مرحبا 😀👨‍👩‍👧🏽 𝔘𝔫𝔦 \U0010fffd",
    "<|  |> <| |> </ > <s <\\s>" + " " * 40 + "\n" * 5 + "x",
)

BPE_THREADS_ENV_VAR = "FASTOKENS_BPE_THREADS"
"""fastokens' own variable: how many threads share the BPE merges of one long input."""

_logged: set[tuple[str, str]] = set()
_logged_lock = threading.Lock()
# Loaded encoders by (file identity, tokens added): a process that loads the same tokenizer
# again (tests, mostly) reuses it. Entries are never changed after they are stored.
_loaded: dict[tuple[Any, ...], Any] = {}


def fastokens_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether prompts should be encoded with fastokens: ``VLLM_USE_FASTOKENS`` parsed as vLLM
    does (``bool(int(value))``; anything else is an error), on when it is unset."""
    value = (os.environ if environ is None else environ).get(ENV_VAR)
    if value is None:
        return True
    try:
        return bool(int(value))
    except ValueError:
        raise ValueError(f"{ENV_VAR} must be an integer (0 or 1), not {value!r}") from None


def single_bpe_thread(environ: MutableMapping[str, str] | None = None) -> None:
    """Have fastokens encode each input on the calling thread alone (``FASTOKENS_BPE_THREADS=1``)
    unless the environment says otherwise.

    By default it splits a long input's merges over one worker thread per core, which spins
    while it waits: on a 2-core machine that was 2-2.5x the CPU time and wall time of one thread
    (16k tokens 1.5-1.6 vs 0.7-0.9 ms; 64k 15-19 vs 6.4-6.6 ms), and the worker kept ~34 MB of
    buffers after 48 such inputs. fastokens reads the variable on the first long input, so it is
    set before any prompt is encoded (the ids are the same either way)."""
    (os.environ if environ is None else environ).setdefault(BPE_THREADS_ENV_VAR, "1")


def literal_blind_spot(backend: Any) -> str | None:
    """A substring whose texts fastokens encodes differently from ``backend`` (encode those with
    ``tokenizers``), or None: ``"<0x"`` for a byte-fallback BPE, whose ``<0xNN>`` byte tokens
    fastokens matches in the text itself."""
    model = getattr(backend, "model", None)
    return "<0x" if getattr(model, "byte_fallback", False) else None


def _log_once(level: int, key: str, message: str, *args: Any) -> None:
    text = message % args
    with _logged_lock:
        if (key, text) in _logged:
            return
        _logged.add((key, text))
    _log.log(level, "%s", text)


def _file_key(source: Path | None) -> tuple[Any, ...] | None:
    if source is None:
        return None
    try:
        stat = source.stat()
    except OSError:
        return None
    return (str(source.resolve()), stat.st_size, stat.st_mtime_ns)


def _token_key(token: Any) -> tuple[Any, ...]:
    return (
        token.content,
        token.single_word,
        token.lstrip,
        token.rstrip,
        token.normalized,
        token.special,
    )


def disagreement(backend: Any, fast: Any) -> str | None:
    """Why ``fast`` (a fastokens.Tokenizer) would encode differently from ``backend`` (a
    ``tokenizers.Tokenizer``), as far as cheap checks can tell; None when it agrees."""
    if fast.vocab_size != backend.get_vocab_size(with_added_tokens=True):
        return f"vocabulary size {fast.vocab_size}, not {backend.get_vocab_size(True)}"
    added = [token.content for token in backend.get_added_tokens_decoder().values()]
    for content in added:
        if fast.token_to_id(content) != backend.token_to_id(content):
            return f"added token {content!r} has id {fast.token_to_id(content)}"
    texts = [*_PROBES, "".join(added), " ".join(added[:64]) + " " + "x".join(added[-64:])]
    for text in texts:
        for add_special in (False, True):
            expected = backend.encode(text, add_special_tokens=add_special).ids
            if list(fast.encode(text, add_special_tokens=add_special).ids) != expected:
                return f"it encodes {text[:40]!r} (add_special_tokens={add_special}) differently"
    return None


def load_fastokens(
    backend: Any,
    source: Path | None,
    added: Sequence[Any] = (),
    *,
    explicit: bool = False,
) -> Any:
    """A fastokens encoder giving ``backend``'s ids, or None (logged once) where there is none.

    ``source``: the ``tokenizer.json`` ``backend`` was loaded from (fastokens then parses it with
    the GIL released); ``added``: the ``AddedToken`` s added to ``backend`` since. Without a
    source, ``backend`` is serialized for fastokens. ``explicit``: fastokens was asked for by
    name, so not getting it is a warning rather than a note.
    """
    where = str(source) if source is not None else "the tokenizer"
    level = logging.WARNING if explicit else logging.INFO
    if getattr(backend, "encode_special_tokens", False):
        _log_once(level, where, "encoding prompts of %s with tokenizers: fastokens does not "
                  "support encode_special_tokens", where)  # fmt: skip
        return None
    file_key = _file_key(source)
    key = (file_key, tuple(_token_key(t) for t in added)) if file_key is not None else None
    fast = _loaded.get(key) if key is not None else None
    if fast is None:
        try:
            import fastokens  # type: ignore[import-not-found,unused-ignore]

            if source is not None:
                fast = fastokens.Tokenizer.from_file(str(source))
            else:
                fast = fastokens.Tokenizer.from_json_str(backend.to_str())
            if added:
                fast.add_tokens(list(added))
        except Exception as e:  # ImportError, or the library's ValueError on what it lacks
            _log_once(level, where, "encoding prompts of %s with tokenizers: fastokens cannot "
                      "load it (%s)", where, e)  # fmt: skip
            return None
        reason = disagreement(backend, fast)
        if reason is not None:
            _log_once(logging.WARNING, where, "encoding prompts of %s with tokenizers: "
                      "fastokens disagrees with it (%s)", where, reason)  # fmt: skip
            return None
        if key is not None:
            _loaded[key] = fast
    return fast
