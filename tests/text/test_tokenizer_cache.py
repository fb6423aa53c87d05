"""The tokenizer cache: a copy is used only when the library loads it to the very tokenizer the
original gives, it is never served for a file that changed since, and anything wrong with the
cache falls back to the original file."""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from pathlib import Path

import pytest
import tokenizers

from vllm_frontend.text import tokenizer_cache
from vllm_frontend.text.tokenizer import Tokenizer
from vllm_frontend.text.tokenizer_cache import TokenizerCache

TEXTS = ["Hello, world!", "  naïve café\n\n12345 résumé", "<|begin_of_text|>x", "😀 ok"]


def _serialized(path: Path) -> str:
    return tokenizers.Tokenizer.from_file(str(path)).to_str()


def _vocab_stats(tok: Tokenizer) -> tuple[int, int]:
    vocab = tok.backend.get_vocab(with_added_tokens=True)
    base = tok.backend.get_vocab_size(with_added_tokens=False)
    return max(max(vocab.values()), base - 1), max(len(piece) for piece in vocab)


@pytest.fixture
def cache(tmp_path: Path) -> TokenizerCache:
    return TokenizerCache(tmp_path / "cache")


@pytest.fixture
def own_copy(tokenizer_dirs: dict[str, Path], tmp_path: Path) -> Path:
    """A byte-level BPE model directory this test may edit."""
    return Path(shutil.copytree(tokenizer_dirs["byte_level"], tmp_path / "model"))


def test_the_copy_loads_to_the_same_tokenizer(
    model_dir: Path, kind: str, cache: TokenizerCache
) -> None:
    source = model_dir / "tokenizer.json"
    entry = cache.build(source)
    assert entry is not None
    assert cache.lookup(source) == entry
    if kind in ("tiny_model", "byte_level"):
        assert entry.path != source  # byte-level BPE files get the faster form
    assert _serialized(entry.path) == _serialized(source)
    cached = Tokenizer.from_dir(model_dir, cache=cache)
    plain = Tokenizer.from_dir(model_dir)
    for text in TEXTS:
        assert cached.encode(text) == plain.encode(text)
    assert (cached.max_token_id, cached.max_chars_per_token) == _vocab_stats(plain)
    assert cached._vocab_summary is not None  # the summary was used, not the file


def test_the_copy_has_sorted_keys_and_string_merges(
    tokenizer_dirs: dict[str, Path], cache: TokenizerCache
) -> None:
    """What makes it load faster, checked without a clock."""
    entry = cache.build(tokenizer_dirs["byte_level"] / "tokenizer.json")
    assert entry is not None
    model = json.loads(entry.path.read_text(encoding="utf-8"))["model"]
    assert list(model["vocab"]) == sorted(model["vocab"])
    assert all(isinstance(m, str) and m.count(" ") == 1 for m in model["merges"])


def test_merges_with_spaces_keep_the_pair_form(tmp_path: Path, cache: TokenizerCache) -> None:
    bpe = tokenizers.models.BPE(
        {"a": 0, " ": 1, "b": 2, "a ": 3, "a b": 4}, [("a", " "), ("a ", "b")]
    )
    tok = tokenizers.Tokenizer(bpe)
    tok.add_special_tokens(["<s>"])
    (tmp_path / "m").mkdir()
    source = tmp_path / "m" / "tokenizer.json"
    tok.save(str(source))
    entry = cache.build(source)
    assert entry is not None
    merges = json.loads(entry.path.read_text(encoding="utf-8"))["model"]["merges"]
    assert merges == [["a", " "], ["a ", "b"]]
    assert _serialized(entry.path) == _serialized(source)
    assert tokenizers.Tokenizer.from_file(str(entry.path)).encode("a b<s>").ids == [4, 5]


def test_an_edited_file_is_never_served_a_stale_copy(own_copy: Path, cache: TokenizerCache) -> None:
    source = own_copy / "tokenizer.json"
    assert cache.build(source) is not None
    data = json.loads(source.read_text(encoding="utf-8"))
    data["model"]["vocab"]["zzzz-new-piece"] = len(data["model"]["vocab"]) + 100
    source.write_text(json.dumps(data), encoding="utf-8")
    assert cache.lookup(source) is None
    entry = cache.build(source)
    assert entry is not None
    assert _serialized(entry.path) == _serialized(source)
    # The entry of the earlier version is gone: one entry per file.
    assert len(list(cache.root.glob("*/meta.json"))) == 1


def test_a_damaged_copy_falls_back_to_the_original(
    own_copy: Path, cache: TokenizerCache, caplog: pytest.LogCaptureFixture
) -> None:
    entry = cache.build(own_copy / "tokenizer.json")
    assert entry is not None
    entry.path.write_text(entry.path.read_text(encoding="utf-8")[:1000], encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        tok = Tokenizer.from_dir(own_copy, cache=cache)
    assert "ignoring the cached copy" in caplog.text
    assert tok.backend.to_str() == Tokenizer.from_dir(own_copy).backend.to_str()
    assert tok.max_token_id == _vocab_stats(tok)[0]


@pytest.mark.skipif(os.getuid() != 0, reason="giving an entry to another user needs root")
def test_an_entry_another_user_owns_is_not_used(own_copy: Path, cache: TokenizerCache) -> None:
    source = own_copy / "tokenizer.json"
    entry = cache.build(source)
    assert entry is not None
    os.chown(entry.path.parent, 12345, 12345)
    assert cache.lookup(source) is None
    os.chown(entry.path.parent, 0, 0)
    assert cache.lookup(source) == entry


def test_one_builder_runs_per_entry_at_a_time(
    own_copy: Path, cache: TokenizerCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A builder that never finishes (a real one can finish and drop its lock before a second
    # start when this process is slow to return from the first, e.g. busy with other threads)
    started: list[list[str]] = []

    class _Running:
        def __init__(self, argv: list[str], **kwargs: object) -> None:
            started.append(argv)

        def wait(self) -> int:
            return 0

    monkeypatch.setattr(tokenizer_cache.subprocess, "Popen", _Running)
    source = own_copy / "tokenizer.json"
    assert cache.start_build(source)
    assert not cache.start_build(source)  # its lock is held
    assert len(started) == 1


def test_a_miss_builds_once_in_the_background(own_copy: Path, cache: TokenizerCache) -> None:
    source = own_copy / "tokenizer.json"
    tok = Tokenizer.from_dir(own_copy, cache=cache)  # a miss: loads the original, starts one
    assert tok._vocab_summary is None
    deadline = time.monotonic() + 120
    while cache.lookup(source) is None:
        assert time.monotonic() < deadline, "the background builder did not finish"
        time.sleep(0.1)
    while list(cache.root.glob("*.lock")):  # it removes its lock as it exits
        assert time.monotonic() < deadline
        time.sleep(0.05)
    again = Tokenizer.from_dir(own_copy, cache=cache)
    assert again._vocab_summary is not None
    assert again.backend.to_str() == tok.backend.to_str()


def test_an_unwritable_cache_is_harmless(own_copy: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    cache = TokenizerCache(blocker / "cache")
    assert not cache.start_build(own_copy / "tokenizer.json")
    tok = Tokenizer.from_dir(own_copy, cache=cache)
    assert tok.encode("hello world") == Tokenizer.from_dir(own_copy).encode("hello world")


def test_the_environment_places_or_disables_the_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("VLLM_FRONTEND_TOKENIZER_CACHE", "VLLM_FRONTEND_CACHE_ROOT", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    default = TokenizerCache.from_env()
    assert default is not None
    assert default.root == tmp_path / "home" / ".cache" / "vllm-frontend" / "tokenizers"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    xdg = TokenizerCache.from_env()
    assert xdg is not None and xdg.root == tmp_path / "xdg" / "vllm-frontend" / "tokenizers"
    monkeypatch.setenv("VLLM_FRONTEND_CACHE_ROOT", str(tmp_path / "root"))
    placed = TokenizerCache.from_env()
    assert placed is not None and placed.root == tmp_path / "root" / "tokenizers"
    monkeypatch.setenv("VLLM_FRONTEND_TOKENIZER_CACHE", "0")
    assert TokenizerCache.from_env() is None


def test_the_builder_is_a_module_entry_point(own_copy: Path, cache: TokenizerCache) -> None:
    import subprocess
    import sys

    source = own_copy / "tokenizer.json"
    argv = [sys.executable, "-m", "vllm_frontend.text.tokenizer_cache"]
    done = subprocess.run([*argv, "--root", str(cache.root), str(source)], env=os.environ)
    assert done.returncode == 0
    assert cache.lookup(source) is not None
    missing = subprocess.run(
        [*argv, "--root", str(cache.root), str(own_copy / "absent.json")],
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 1
    assert "tokenizer cache:" in missing.stderr


def test_the_builder_yields_the_cpu_to_every_other_session() -> None:
    # The builder runs in a session of its own: with autogroup scheduling its niceness would
    # rank it only within that session, so the session's group must be lowered too.
    import subprocess
    import sys

    script = (
        "import os, pathlib\n"
        "from vllm_frontend.text.tokenizer_cache import yield_cpu\n"
        "yield_cpu()\n"
        "group = pathlib.Path('/proc/self/autogroup')\n"
        "print(os.nice(0), group.read_text().split()[-1] if group.exists() else '-')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True,
        start_new_session=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    ).stdout.split()  # fmt: skip
    assert out[0] == "19"
    if Path("/proc/self/autogroup").exists():
        assert out[1] == "19"
