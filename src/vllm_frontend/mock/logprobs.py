"""Made-up but plausible logprobs for the mock engine's sampled and prompt tokens."""

from __future__ import annotations

import numpy as np

from vllm_frontend.engine.protocol import LogprobsTensors, Tensor

__all__ = ["MockLogprobs"]


class MockLogprobs:
    """Top-k logprob arrays drawn from one engine's generator, a step's rows at a time."""

    def __init__(self, rng: np.random.Generator, vocab_size: int) -> None:
        """Draw from ``rng``; candidate ids are uniform in ``[0, vocab_size)``."""
        self.rng = rng
        self.vocab_size = vocab_size

    def distribution(self, rows: int, width: int) -> tuple[np.ndarray, np.ndarray]:
        """Plausible top-``width`` log-probabilities (descending, total mass < 1) and ranks."""
        rng = self.rng
        mass = rng.exponential(size=(rows, width + 4))
        mass[:, 0] += 2.0  # a clear favourite, like a trained model
        mass = -np.sort(-mass, axis=1)
        probs = mass / (mass.sum(axis=1, keepdims=True) * 1.25)
        ranks = np.minimum(rng.geometric(0.6, size=rows), width + 4).astype(np.int64)
        return np.log(probs).astype(np.float32), ranks

    def batch(self, rows: int, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sample-logprob arrays for ``rows`` positions; column 0 of the ids is left to fill.

        One batch per step keeps the numpy work per step, not per request: each request gets
        row views of these arrays (see :meth:`place_sampled`).
        """
        logp, ranks = self.distribution(rows, width)
        ids = np.empty((rows, width + 1), dtype=np.int32)
        ids[:, 1:] = self.rng.integers(0, self.vocab_size, size=(rows, width))
        lps = np.empty((rows, width + 1), dtype=np.float32)
        lps[:, 1:] = logp[:, :width]
        lps[:, 0] = logp[np.arange(rows), ranks - 1]
        return ids, lps, ranks

    @staticmethod
    def place_sampled(ids: np.ndarray, ranks: np.ndarray, width: int) -> None:
        """Put the sampled token (column 0) also at its rank among the candidates, if in top-k."""
        in_top = np.nonzero(ranks <= width)[0]
        ids[in_top, ranks[in_top]] = ids[in_top, 0]

    def prompt(self, prompt: list[int], width: int) -> LogprobsTensors:
        """Prompt logprobs: row r scores prompt token r+1 (the first prompt token has none)."""
        ids, lps, ranks = self.batch(max(len(prompt) - 1, 0), width)
        ids[:, 0] = prompt[1:]
        self.place_sampled(ids, ranks, width)
        return LogprobsTensors(
            Tensor.from_numpy(ids), Tensor.from_numpy(lps), Tensor.from_numpy(ranks)
        )
