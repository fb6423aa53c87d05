"""Engine-request differentials: vLLM's server and ours, each in front of a mock engine that
records every ADD request (no real engine), and the comparison of what the two sent."""

from __future__ import annotations

import pathlib
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

import numpy as np

from tests.support.engines import (
    VllmProcess,
    external_engine_args,
    free_port,
    http_status,
    start_vllm,
    start_vllm_server,
    stop_all,
)
from vllm_frontend.mock.recording import read_requests


class Side:
    """One frontend with its recording mock engine."""

    def __init__(self, url: str, record: pathlib.Path, processes: list[Any]) -> None:
        self.url = url
        self.record = record
        self.processes = processes
        self.seen = 0

    def new_requests(self) -> list[Any]:
        """The engine requests recorded since the last call."""
        requests = read_requests(self.record)
        out = requests[self.seen :]
        self.seen = len(requests)
        return out


def _mock_engine(name: str, rpc: int, record: pathlib.Path) -> VllmProcess:
    # The tests compare what the engine receives, not what it makes: 64 tokens a step finish a
    # request asking for the whole context (~1900 tokens) in 30 steps, not 1900 (10 s each).
    args = ["-m", "vllm_frontend", "mock-engine", "--handshake-address",
            f"tcp://127.0.0.1:{rpc}", "--max-model-len", "2048", "--vocab-size", "1000",
            "--tokens-per-step", "64", "--record-requests", str(record)]  # fmt: skip
    return start_vllm(name, args, program=sys.executable)


def _wait(port: int, processes: list[Any], timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while http_status(port, timeout=2) != 200:
        for p in processes:
            p.check_running() if hasattr(p, "check_running") else p.process.check_running()
        assert time.monotonic() < deadline, "frontend not ready"
        time.sleep(0.5)


def recorded_sides(
    model: pathlib.Path,
    tmp: pathlib.Path,
    args: Sequence[str],
    vllm_env: dict[str, str] | None = None,
) -> Iterator[dict[str, Side]]:
    """vLLM's server ("vllm") and ours ("ours") serving ``model`` with the frontend ``args``,
    each in front of its own recording mock engine, with ``VLLM_SERVER_DEV_MODE`` (for
    ``/reset_mm_cache``); stopped when the generator is closed."""
    out: dict[str, Side] = {}
    started: list[Any] = []
    try:
        rpc, port = free_port(), free_port()
        started.append(_mock_engine("mock-vllm", rpc, tmp / "vllm.bin"))
        server = start_vllm_server(
            model=model,
            port=port,
            extra_args=[*external_engine_args(rpc), *args],
            env={**(vllm_env or {}), "VLLM_SERVER_DEV_MODE": "1"},
        )
        started.append(server)
        out["vllm"] = Side(server.base_url, tmp / "vllm.bin", [server])
        rpc2, port2 = free_port(), free_port()
        started.append(_mock_engine("mock-ours", rpc2, tmp / "ours.bin"))
        ours = start_vllm(
            "ours-mm",
            ["-m", "vllm_frontend", "serve", str(model), "--port", str(port2),
             "--data-parallel-size-local", "0", "--data-parallel-rpc-port", str(rpc2), *args],
            {"VLLM_SERVER_DEV_MODE": "1"},
            program=sys.executable,
        )  # fmt: skip
        started.append(ours)
        out["ours"] = Side(f"http://127.0.0.1:{port2}", tmp / "ours.bin", [ours])
        _wait(port2, [ours])
        server.wait_ready(600)
        yield out
    finally:
        stop_all(started)


def started_together(
    starts: Mapping[str, Iterator[dict[str, Side]]],
) -> Iterator[dict[str, Future[dict[str, Side]]]]:
    """Start the stacks of several :func:`recorded_sides` generators at the same time, in the
    background (a start waits mostly on vLLM's server importing vLLM and building its processor,
    on one core); yield each one's sides as a future, by name, so that a module waits only for
    its own stack and the others start beside its tests; stop them all when closed. The
    generators run in threads: make their directories and models before (pytest's
    ``tmp_path_factory`` is not thread-safe)."""
    pool = ThreadPoolExecutor(len(starts))
    started = {name: pool.submit(next, start) for name, start in starts.items()}
    pool.shutdown(wait=False)
    try:
        yield started
    finally:
        wait(started.values())
        for start in starts.values():
            start.close()


def _tensor(data: Any) -> tuple[str, tuple[int, ...], np.ndarray]:
    return data.dtype, tuple(data.shape), np.asarray(data.numpy())


def compare_requests(vllm: Any, ours: Any, cached: dict[str, Any]) -> None:
    """Assert the two engine requests equal: prompt ids, each feature's hashes, placeholder
    range (``is_embed`` too) and fields (factories, tensor dtypes, shapes and values);
    ``cached`` collects the data vLLM sent by item hash."""
    assert ours.prompt_token_ids == vllm.prompt_token_ids
    if vllm.mm_features is None:
        assert ours.mm_features is None
        return
    # A "flat" field's slices span the items processed in one call: vLLM's span only the items
    # its processor cache missed, ours every item of the request. Equal when vLLM missed all.
    all_sent = all(f.data is not None for f in vllm.mm_features)
    assert len(ours.mm_features) == len(vllm.mm_features)
    for theirs, mine in zip(vllm.mm_features, ours.mm_features, strict=True):
        assert (mine.modality, mine.identifier, mine.mm_hash) == (
            theirs.modality,
            theirs.identifier,
            theirs.mm_hash,
        )
        assert mine.mm_position.offset == theirs.mm_position.offset
        assert mine.mm_position.length == theirs.mm_position.length
        want_embed, got_embed = theirs.mm_position.is_embed, mine.mm_position.is_embed
        assert (got_embed is None) == (want_embed is None)
        if want_embed is not None:
            got, want = _tensor(got_embed), _tensor(want_embed)
            assert got[:2] == want[:2]
            assert np.array_equal(got[2], want[2])
        # Items the engine holds go without data from both (the sender caches agree).
        assert (mine.data is None) == (theirs.data is None), theirs.mm_hash
        if theirs.data is None:
            continue
        data = theirs.data
        cached[theirs.mm_hash] = data
        assert set(mine.data) == set(data)
        for key, elem in data.items():
            got = mine.data[key]
            if all_sent:
                assert got.field == elem.field, key
            else:
                assert got.field[0] == elem.field[0], key
                assert {k: v for k, v in got.field[1].items() if k != "slices"} == {
                    k: v for k, v in elem.field[1].items() if k != "slices"
                }
            if isinstance(elem.data, list):  # Python scalars (Qwen3-VL's timestamps)
                assert got.data == elem.data, key
                continue
            want_dtype, want_shape, want = _tensor(elem.data)
            got_dtype, got_shape, values = _tensor(got.data)
            assert (got_dtype, got_shape) == (want_dtype, want_shape), key
            assert np.array_equal(values, want), key
