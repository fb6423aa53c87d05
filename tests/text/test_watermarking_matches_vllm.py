"""The engine request's ``watermarking`` as vLLM 0.32's input processor resolves it (its own
``VllmConfig._check_supports_watermarking`` and ``InputProcessor.apply_watermarking``): False
without a watermark config whatever the request asks; with one, True unless the request opts
out or is greedy (then marked skipped). The render routes (``engine_side=False``) keep the
request's value, as vLLM's do."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from vllm_frontend.text.sampling import ModelSamplingInfo, SamplingRequest, lower_sampling_params

pytestmark = pytest.mark.oracle


def _vllm(asked: bool | None, configured: bool, temperature: float) -> tuple[bool | None, bool]:
    from vllm.config import VllmConfig
    from vllm.sampling_params import SamplingParams
    from vllm.v1.engine.input_processor import InputProcessor

    watermark = SimpleNamespace() if configured else None
    config = SimpleNamespace(watermark_config=watermark, speculative_config=None)
    sp = SamplingParams(watermarking=asked, temperature=temperature)
    resolved = VllmConfig._check_supports_watermarking(config, sp)  # type: ignore[arg-type]
    InputProcessor.apply_watermarking(SimpleNamespace(vllm_config=config), sp, resolved)  # type: ignore[arg-type]
    return sp.watermarking, sp._watermarking_skipped


@pytest.mark.parametrize("temperature", [0.0, 0.7])
@pytest.mark.parametrize("configured", [False, True])
@pytest.mark.parametrize("asked", [None, True, False])
def test_watermarking_resolved_as_vllm(
    asked: bool | None, configured: bool, temperature: float
) -> None:
    model = ModelSamplingInfo(max_model_len=100, eos_token_id=None, watermarking=configured)
    req = SamplingRequest(watermarking=asked, temperature=temperature)
    ours = lower_sampling_params(req, max_tokens=5, model=model)
    want = _vllm(asked, configured, temperature)
    assert (ours.watermarking, ours.watermarking_skipped) == want
    rendered = lower_sampling_params(req, max_tokens=5, model=model, engine_side=False)
    assert rendered.watermarking is asked
