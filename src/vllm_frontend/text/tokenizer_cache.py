"""A faster-loading copy of a model's ``tokenizer.json``, made once per file and machine.

The Rust library spends most of a large tokenizer's load time (~0.6 s of a ~1.2 s frontend
start for Llama 3's 128k pieces and 280k merges) inside its JSON deserializer. Two rewrites
that keep the meaning of the file cut that by about a third: the vocabulary's keys in sorted
order (the map is built key by key, and sorted keys are cheap to insert), and merges written as
``"a b"`` strings rather than ``["a", "b"]`` pairs (which go through a costlier generic path).
Both are formats the library itself reads and writes.

A copy is only used when the library, loading it, serializes to exactly what it serializes the
original file to: the builder checks that before it publishes anything. The builder also records
the vocabulary's statistics (largest id, longest piece), which otherwise cost a second pass over
the file at every start. Entries are keyed by the file's identity (path, size, mtime, inode) and
the library's version, so an edited file or an upgraded library never meets a stale copy; only
entries the current user owns are used.

The first start with a new file loads the original and starts the builder in a background
process at low priority; later starts load the copy. ``VLLM_FRONTEND_TOKENIZER_CACHE=0`` turns
the cache off; ``VLLM_FRONTEND_CACHE_ROOT`` moves it (default ``$XDG_CACHE_HOME/vllm-frontend``,
else ``~/.cache/vllm-frontend``).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

import msgspec
import tokenizers

__all__ = ["CachedTokenizer", "TokenizerCache", "VocabSummary", "cache_root", "summarize_vocab"]

_log = logging.getLogger(__name__)

_FORMAT = 1  # bump when what an entry holds, or how the copy is made, changes
_META = "meta.json"
_COPY = "tokenizer.json"
_STALE_LOCK_S = 600.0  # a builder that has not finished in this long has died


def cache_root() -> Path:
    """The directory of the frontend's caches: ``VLLM_FRONTEND_CACHE_ROOT``, else
    ``$XDG_CACHE_HOME/vllm-frontend``, else ``~/.cache/vllm-frontend``."""
    root = os.environ.get("VLLM_FRONTEND_CACHE_ROOT")
    if root:
        return Path(root)
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "vllm-frontend"


class VocabSummary(msgspec.Struct, frozen=True, gc=False):
    """What the frontend needs to know of a model's own vocabulary (added tokens excluded)."""

    entries: int
    """Number of entries in the file's ``model.vocab`` (a list may repeat a piece)."""
    max_id: int
    """The largest id (-1 when empty)."""
    max_id_piece: str
    """A piece with that id."""
    longest_piece: str
    """A longest piece."""


def summarize_vocab(entries: Mapping[str, int] | Sequence[Any]) -> VocabSummary:
    """Summarize ``model.vocab`` as it appears in tokenizer.json.

    A mapping is ``{piece: id}`` (BPE, WordPiece, WordLevel); a list is Unigram's
    ``[[piece, score], ...]``, numbered by position (a repeated piece keeps its last id, as a
    dict built from the list would).
    """
    if isinstance(entries, Mapping):
        vocab = entries
    else:
        vocab = {piece: i for i, (piece, _) in enumerate(entries)}
    if not vocab:
        return VocabSummary(len(entries), -1, "", "")
    max_piece = max(vocab, key=vocab.__getitem__)
    return VocabSummary(len(entries), vocab[max_piece], max_piece, max(vocab, key=len))


class CachedTokenizer(msgspec.Struct, frozen=True):
    """A usable cache entry."""

    path: Path
    """The file to load: the faster copy, or the original when no rewrite helped."""
    vocab: VocabSummary
    """The model vocabulary's summary (see :func:`summarize_vocab`)."""


# A constrained key type keeps msgspec from caching dict keys: its 512-entry key cache would
# keep vocabulary strings alive, pinning ~6 MB of freed small-object arenas (resident memory).
_Piece = Annotated[str, msgspec.Meta(max_length=1 << 30)]


class _ModelVocab(msgspec.Struct):
    vocab: dict[_Piece, int] | list[tuple[str, float]] | None = None


class _TokenizerJson(msgspec.Struct):
    model: _ModelVocab


_VOCAB_DECODER = msgspec.json.Decoder(_TokenizerJson)


def read_vocab(data: bytes) -> dict[str, int] | list[tuple[str, float]] | None:
    """``model.vocab`` of a tokenizer.json's bytes (None when it has none)."""
    return _VOCAB_DECODER.decode(data).model.vocab


class _Meta(msgspec.Struct, forbid_unknown_fields=True):
    format: int
    identity: str
    copy: bool
    vocab: VocabSummary | None


class TokenizerCache:
    """Faster-loading copies of tokenizer.json files under one directory."""

    def __init__(self, root: str | Path) -> None:
        """Keep entries under ``root`` (created when the first entry is built)."""
        self.root = Path(root)

    @classmethod
    def from_env(cls) -> TokenizerCache | None:
        """The cache the environment asks for, or None when it is turned off."""
        if os.environ.get("VLLM_FRONTEND_TOKENIZER_CACHE", "1").lower() in ("0", "false", "no"):
            return None
        return cls(cache_root() / "tokenizers")

    def lookup(self, source: Path) -> CachedTokenizer | None:
        """The entry for ``source`` as it is now, if one has been built and is usable."""
        try:
            identity = _identity(source)
            entry = self._entry(identity)
            if os.stat(entry).st_uid != os.getuid():
                return None  # only entries this user built (a shared root is not trusted)
            meta = msgspec.json.decode((entry / _META).read_bytes(), type=_Meta)
        except (OSError, msgspec.DecodeError, msgspec.ValidationError):
            return None
        if meta.format != _FORMAT or meta.identity != identity or meta.vocab is None:
            return None
        return CachedTokenizer(entry / _COPY if meta.copy else source, meta.vocab)

    def start_build(self, source: Path) -> bool:
        """Build ``source``'s entry in a background process (at most one at a time per entry);
        True when a builder was started."""
        try:
            entry = self._entry(_identity(source))
            self.root.mkdir(parents=True, exist_ok=True)
            lock = entry.with_suffix(".lock")
            with contextlib.suppress(FileNotFoundError):
                if time.time() - lock.stat().st_mtime > _STALE_LOCK_S:
                    lock.unlink()
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except OSError:
            return False  # being built, or the cache cannot be written: load the original
        os.close(fd)
        argv = [sys.executable, "-m", __name__, "--root", str(self.root), str(source)]
        try:
            builder = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # a short job: let it finish if the server stops
                close_fds=True,
            )
        except OSError:
            lock.unlink(missing_ok=True)
            return False
        # Reap it when it exits (no zombie left beside a long-running server).
        threading.Thread(target=builder.wait, name="tokenizer-cache", daemon=True).start()
        return True

    def build(self, source: Path) -> CachedTokenizer | None:
        """Build and publish ``source``'s entry now (what the background process runs)."""
        identity = _identity(source)
        entry = self._entry(identity)
        try:
            raw = source.read_bytes()
            if _identity(source) != identity:
                return None  # changed while being read: the next start will try again
            original = tokenizers.Tokenizer.from_str(raw.decode("utf-8")).to_str()
            data = json.loads(raw)
            copy_text = _faster_form(data)
            if copy_text is not None:
                loaded = tokenizers.Tokenizer.from_str(copy_text).to_str()
                if loaded != original:
                    _log.warning("the rewritten %s differs when loaded; not using it", source)
                    copy_text = None
            vocab_entries = read_vocab(raw)
            vocab = summarize_vocab(vocab_entries) if vocab_entries is not None else None
            meta = _Meta(_FORMAT, identity, copy_text is not None, vocab)
            self.root.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=".build-", dir=self.root))
            try:
                if copy_text is not None:
                    (staging / _COPY).write_text(copy_text, encoding="utf-8")
                (staging / _META).write_bytes(msgspec.json.encode(meta))
                shutil.rmtree(entry, ignore_errors=True)
                os.rename(staging, entry)
            except OSError:
                shutil.rmtree(staging, ignore_errors=True)
                raise
            self._remove_older_entries(source, keep=entry)
        finally:
            entry.with_suffix(".lock").unlink(missing_ok=True)
        return self.lookup(source)

    def _entry(self, identity: str) -> Path:
        return self.root / hashlib.sha256(identity.encode()).hexdigest()[:32]

    def _remove_older_entries(self, source: Path, keep: Path) -> None:
        """Entries of earlier versions of ``source`` (same path) are not needed any more."""
        prefix = _identity_path(source) + "\0"
        for meta_file in self.root.glob(f"*/{_META}"):
            entry = meta_file.parent
            if entry == keep:
                continue
            with contextlib.suppress(OSError, msgspec.DecodeError, msgspec.ValidationError):
                meta = msgspec.json.decode(meta_file.read_bytes(), type=_Meta)
                if meta.identity.split("\0", 1)[1].startswith(prefix):
                    shutil.rmtree(entry, ignore_errors=True)


def _identity_path(source: Path) -> str:
    return os.path.realpath(source)


def _identity(source: Path) -> str:
    """What makes two loads of ``source`` the same: format, library version, file identity."""
    st = os.stat(source)
    return "\0".join(
        (
            f"{_FORMAT}/{tokenizers.__version__}",
            _identity_path(source),
            str(st.st_size),
            str(st.st_mtime_ns),
            str(st.st_ino),
        )
    )


def _faster_form(data: dict[str, Any]) -> str | None:
    """``data`` (a parsed tokenizer.json) rewritten in the faster form, or None when neither
    rewrite applies."""
    model = data.get("model")
    if not isinstance(model, dict):
        return None
    changed = False
    vocab = model.get("vocab")
    if isinstance(vocab, dict) and list(vocab) != sorted(vocab):
        model["vocab"] = dict(sorted(vocab.items()))
        changed = True
    merges = model.get("merges")
    if (
        isinstance(merges, list)
        and merges
        and all(
            isinstance(m, list)
            and len(m) == 2
            and all(isinstance(p, str) and p and " " not in p for p in m)
            for m in merges
        )
    ):
        # The legacy form splits on the one space, so it cannot hold pieces with spaces.
        model["merges"] = [f"{a} {b}" for a, b in merges]
        changed = True
    if not changed:
        return None
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def yield_cpu() -> None:
    """Lower this process's CPU priority as far as it goes: it never competes with the server
    that started it. The builder runs in a session of its own, and with the kernel's autogroup
    scheduling (on by default in most distributions) CPU is shared between sessions first, so
    its niceness alone ranks it only within its own session: the session's group is lowered
    too."""
    with contextlib.suppress(OSError):
        os.nice(19)
    with contextlib.suppress(OSError), open("/proc/self/autogroup", "w") as f:
        f.write("19")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m vllm_frontend.text.tokenizer_cache --root DIR TOKENIZER_JSON``: build."""
    parser = argparse.ArgumentParser(description="Build a tokenizer cache entry.")
    parser.add_argument("--root", required=True)
    parser.add_argument("source")
    args = parser.parse_args(argv)
    yield_cpu()
    try:
        entry = TokenizerCache(args.root).build(Path(args.source))
    except Exception as e:  # a cache is an optimisation: report, never raise
        print(f"tokenizer cache: {e}", file=sys.stderr)
        return 1
    return 0 if entry is not None else 1


if __name__ == "__main__":
    raise SystemExit(main())
