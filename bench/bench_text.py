"""Per-token cost of the text layer (detokenization, stop strings, logprobs) and encode speed.

    .venv/bin/python bench/bench_text.py [MODEL_DIR]

MODEL_DIR defaults to the tiny Llama 3 test checkpoint (its real 128k-entry tokenizer). Each
scenario streams the same generated text token by token (one engine output per token, DELTA
mode, as when streaming) and reports CPU nanoseconds per token (process time, best of 5);
vLLM 0.32's own OutputProcessor runs the same scenario for comparison when it is importable.
The encode part compares the `tokenizers` library with `fastokens` (if installed) for speed
and for identical ids.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from vllm_frontend.text.logprobs import TokenStrings
from vllm_frontend.text.output import SequenceProcessor
from vllm_frontend.text.tokenizer import Tokenizer

TEXT = (
    "The quick brown fox jumps over the lazy dog. Streaming text, token by token: "
    "naïve café résumé — 日本語のテキスト 😀🎉 and some code: def f(x): return x * 2\n"
)


def options(stop: list[str], logprobs: int | None, kind: int = 1) -> Any:
    return SimpleNamespace(
        stop=stop,
        include_stop_str_in_output=False,
        min_tokens=0,
        skip_special_tokens=True,
        spaces_between_special_tokens=True,
        logprobs=logprobs,
        prompt_logprobs=None,
        output_kind=kind,
    )


def logprob_rows(ids: list[int], width: int, vocab: int) -> list[tuple[Any, Any, Any]]:
    rng = np.random.default_rng(0)
    rows = []
    for t in ids:
        row = rng.integers(0, vocab, size=(1, width)).astype(np.int32)
        row[0, 0] = t
        lps = -np.sort(rng.exponential(2.0, size=(1, width)), axis=1).astype(np.float32)
        rows.append((row, lps, np.array([1], dtype=np.int64)))
    return rows


def run_ours(tok: Tokenizer, prompt: list[int], ids: list[int], opts: Any, rows: Any) -> float:
    strings = TokenStrings(tok)
    best = float("inf")
    for _ in range(5):
        proc = SequenceProcessor(tok, prompt, opts, token_strings=strings)
        start = time.process_time()
        for i, t in enumerate(ids):
            proc.process([t], None, None, new_logprobs=rows[i] if rows else None)
        best = min(best, time.process_time() - start)
    return best / len(ids) * 1e9


def run_vllm(model_dir: Path, prompt: list[int], ids: list[int], opts: Any, rows: Any) -> float:
    from vllm.sampling_params import RequestOutputKind, SamplingParams
    from vllm.tokenizers.hf import CachedHfTokenizer
    from vllm.v1.engine import EngineCoreOutput, EngineCoreRequest
    from vllm.v1.engine.output_processor import OutputProcessor
    from vllm.v1.outputs import LogprobsLists

    hf = CachedHfTokenizer.from_pretrained(str(model_dir))
    best = float("inf")
    for n in range(5):
        op = OutputProcessor(hf, log_stats=False)
        params = SamplingParams(
            stop=opts.stop,
            logprobs=opts.logprobs,
            max_tokens=100_000,
            output_kind=RequestOutputKind.DELTA,
        )
        rid = f"r{n}"
        req = EngineCoreRequest(
            request_id=rid,
            prompt_token_ids=prompt,
            mm_features=None,
            sampling_params=params,
            pooling_params=None,
            arrival_time=0.0,
            lora_request=None,
            cache_salt=None,
            data_parallel_rank=None,
            external_req_id=rid,
        )
        op.add_request(req, prompt=None)
        outs = [
            EngineCoreOutput(
                request_id=rid,
                new_token_ids=[t],
                new_logprobs=LogprobsLists(*rows[i]) if rows else None,
            )
            for i, t in enumerate(ids)
        ]
        start = time.process_time()
        for o in outs:
            op.process_outputs([o])
        best = min(best, time.process_time() - start)
    return best / len(ids) * 1e9


def bench_encode(model_dir: Path, tok: Tokenizer) -> None:
    rng = random.Random(0)
    words = TEXT.split(" ")
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(5, 400))) for _ in range(300)]
    n_chars = sum(len(t) for t in texts)
    start = time.process_time()
    ours = [tok.encode(t) for t in texts]
    elapsed = time.process_time() - start
    print(f"encode, tokenizers: {elapsed / n_chars * 1e9:8.1f} ns/char")
    try:
        import fastokens
    except ImportError:
        print("encode, fastokens: not installed")
        return
    start = time.perf_counter()
    tokenizers_backend = Tokenizer.from_dir(model_dir, use_fastokens=False)
    slow_load = time.perf_counter() - start
    start = time.perf_counter()
    fast = fastokens.Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    fast_load = time.perf_counter() - start
    print(
        f"load (wall s): Tokenizer.from_dir {slow_load:.2f}, "
        f"+ fastokens.Tokenizer.from_file {fast_load:.2f}"
    )
    del tokenizers_backend
    fast.encode(texts[0])
    start = time.process_time()
    theirs = [list(fast.encode(t, add_special_tokens=True).ids) for t in texts]
    elapsed = time.process_time() - start
    same = sum(a == b for a, b in zip(ours, theirs, strict=True))
    print(
        f"encode, fastokens:  {elapsed / n_chars * 1e9:8.1f} ns/char "
        f"(identical ids for {same}/{len(texts)} texts)"
    )


def main() -> None:
    if len(sys.argv) > 1:
        model_dir = Path(sys.argv[1])
    else:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        from tests.support.tiny_model import tiny_model_dir

        model_dir = Path(tiny_model_dir())
    tok = Tokenizer.from_dir(model_dir, use_fastokens=False)  # the detokenizer's costs only
    prompt = tok.encode("Tell me a story.")
    ids = tok.encode(TEXT * 20, add_special_tokens=False)
    print(f"{model_dir.name}: {tok.vocab_size} tokens; {len(ids)} generated tokens per run")
    rows5 = logprob_rows(ids, 6, tok.vocab_size)
    scenarios = [
        ("plain", options([], None), None),
        ("2 stop strings", options(["###", "\n\nUser:"], None), None),
        ("logprobs=5", options([], 5), rows5),
    ]
    print(f"{'scenario':<16} {'ours ns/token':>14} {'vLLM ns/token':>14}")
    for name, opts, rows in scenarios:
        ours = run_ours(tok, prompt, ids, opts, rows)
        try:
            ref = f"{run_vllm(model_dir, prompt, ids, opts, rows):14.0f}"
        except ImportError:
            ref = f"{'n/a':>14}"
        print(f"{name:<16} {ours:14.0f} {ref}")
    bench_encode(model_dir, tok)


if __name__ == "__main__":
    main()
