"""fastokens encodes each prompt on the calling thread alone (``FASTOKENS_BPE_THREADS=1``, set
when a tokenizer that uses it is built, unless the environment sets it): no worker thread
spinning beside the event loop, and the same ids as ``tokenizers`` for long prompts.

The subprocess cases need a fresh interpreter: fastokens reads the variable once, on the first
long input it encodes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_frontend.text.tokenizer_fastokens import BPE_THREADS_ENV_VAR, single_bpe_thread

pytest.importorskip("fastokens")

_PROBE = """
import os, random, sys
import tokenizers
from vllm_frontend.text.tokenizer import Tokenizer

model = sys.argv[1]
backend = tokenizers.Tokenizer.from_file(model + "/tokenizer.json")
rng = random.Random(7)
size = backend.get_vocab_size(with_added_tokens=False)
text = backend.decode([rng.randrange(size) for _ in range(20000)])
tokenizer = Tokenizer.from_dir(model, use_fastokens=True)
assert tokenizer.wait_for_fast_encoder(300) and tokenizer.uses_fastokens

def workers():  # fastokens names its BPE worker threads fastokens-N
    names = []
    for task in os.listdir("/proc/self/task"):
        try:
            names.append(open(f"/proc/self/task/{task}/comm").read().strip())
        except OSError:
            pass
    return sum(name.startswith("fastokens-") for name in names)

ids = tokenizer.encode_batch([text, text[:5000]])
expected = [backend.encode(t).ids for t in (text, text[:5000])]
print(os.environ.get("FASTOKENS_BPE_THREADS"), ids == expected, workers())
"""


def _probe(model: Path, **env: str) -> list[str]:
    environ = {k: v for k, v in os.environ.items() if k != BPE_THREADS_ENV_VAR}
    environ.update(env)
    src = Path(__file__).resolve().parents[2] / "src"
    environ["PYTHONPATH"] = os.pathsep.join([str(src), environ.get("PYTHONPATH", "")])
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, str(model)],
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


@pytest.fixture(scope="module")
def tiny_model(tokenizer_dirs: dict[str, Path]) -> Path:
    if "tiny_model" not in tokenizer_dirs:
        pytest.skip("needs the Llama 3 test model")
    return tokenizer_dirs["tiny_model"]


def test_one_thread_by_default(tiny_model: Path) -> None:
    # The same ids as tokenizers; no worker thread started for the long prompt.
    assert _probe(tiny_model) == ["1", "True", "0"]


def test_the_environment_wins(tiny_model: Path) -> None:
    # fastokens' own default (one thread per core) starts a worker for a long prompt.
    assert _probe(tiny_model, FASTOKENS_BPE_THREADS="2") == ["2", "True", "1"]


def test_single_bpe_thread_sets_only_what_is_unset() -> None:
    environ: dict[str, str] = {}
    single_bpe_thread(environ)
    assert environ == {BPE_THREADS_ENV_VAR: "1"}
    environ = {BPE_THREADS_ENV_VAR: "4"}
    single_bpe_thread(environ)
    assert environ == {BPE_THREADS_ENV_VAR: "4"}
