"""Image chat side by side: ours, vLLM 0.32's Python frontend and vllm-rs 0.32, each in front of
the project's mock engine serving the tiny Qwen2-VL (max_pixels 128*28*28).

    .venv/bin/python bench/multimodal.py                    # 4 workloads x 3 frontends
    .venv/bin/python bench/multimodal.py --frontends ours --workloads distinct-c8
    .venv/bin/python bench/multimodal.py --quick            # a smoke run (ours, 8 requests)

Every request is a streaming chat completion with one 1024x768 JPEG (~110 KB) as a base64
``data:`` URL and a short text, ``max_tokens`` 8. ``distinct-*``: every request has its own image
(no cache can help); ``repeated-*``: one image for all (after the first, the engines' multimodal
cache holds it and a frontend that mirrors it sends no pixels). The load client runs in this
process: pre-encoded requests over raw asyncio streams (bench/raw_sse.py; ``--client aiohttp``
for the earlier sessions' aiohttp client). Per frontend and workload: the frontend's CPU time
per request (utime+stime of its process tree from /proc over the run), images/s, TTFT and
latency p50, peak RSS (sampled every 0.1 s), and the budget (the client's, the mock engine's and
the frontend's threads' CPU per request). The frontends run one after the other; on a shared
machine compare the CPU per request first. A markdown table goes to stdout, JSON to bench/results/.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import dataclasses
import fnmatch
import io
import json
import os
import pathlib
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from frontends import (
    REPO,
    await_fastokens,
    compile_sources,
    free_port,
    frontend_command,
    mock_engine_command,
    spawn,
    tree_cpu_times,
    tree_rss_bytes,
    wait_healthy,
)
from raw_sse import drive_raw

RESULTS = REPO / "bench" / "results"
FRONTENDS = ("ours", "vllm", "vllm-rs")
MAX_TOKENS = 8
STEP_MS = 5.0


@dataclasses.dataclass(frozen=True)
class Workload:
    """One load shape: ``requests`` chat requests at ``concurrency``, distinct or one image."""

    images: str  # "distinct" | "repeated"
    concurrency: int
    requests: int

    @property
    def name(self) -> str:
        """Stable id used by --workloads, e.g. ``distinct-c8``."""
        return f"{self.images}-c{self.concurrency}"


def workloads(quick: bool) -> list[Workload]:
    """The suite (or the smoke run's single workload)."""
    if quick:
        return [Workload("distinct", 4, 8)]
    return [
        Workload("distinct", 8, 64),
        Workload("distinct", 32, 128),
        Workload("repeated", 8, 64),
        Workload("repeated", 32, 128),
    ]


def photo_like_jpeg(seed: int, width: int = 1024, height: int = 768) -> bytes:
    """A JPEG of a smooth random scene with grain (~110 KB at 1024x768, quality 85): what a
    photo costs to decode, unlike pure noise (which compresses to ~700 KB)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    coarse = rng.integers(0, 256, (height // 32, width // 32, 3), dtype=np.uint8)
    base = Image.fromarray(coarse).resize((width, height), Image.Resampling.BICUBIC)
    grain = rng.integers(-3, 4, (height, width, 1), dtype=np.int16)
    pixels = np.clip(np.asarray(base, dtype=np.int16) + grain, 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "JPEG", quality=85)
    return buf.getvalue()


def data_url(jpeg: bytes) -> str:
    """``jpeg`` as a base64 data URL."""
    return "data:image/jpeg;base64," + base64.b64encode(jpeg).decode()


def chat_body(model: str, url: str, index: int) -> bytes:
    """One streaming chat request with the image and a short question."""
    content = [
        {"type": "image_url", "image_url": {"url": url}},
        {"type": "text", "text": f"Describe image {index} in one word."},
    ]
    body = {
        "model": model,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": MAX_TOKENS,
        "ignore_eos": True,
        "stream": True,
    }
    return json.dumps(body).encode()


@dataclasses.dataclass
class Timing:
    """One request's TTFT and latency (s), and whether it ended well."""

    ttft: float
    latency: float
    ok: bool


async def _one(session: Any, url: str, body: bytes) -> Timing:
    t0 = time.perf_counter()
    ttft = 0.0
    ok = False
    async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
        if r.status != 200:
            await r.read()
            return Timing(0.0, time.perf_counter() - t0, False)
        async for line in r.content:
            if not ttft and b'"content"' in line:
                ttft = time.perf_counter() - t0
            if line.startswith(b"data: [DONE]"):
                ok = True
    return Timing(ttft, time.perf_counter() - t0, ok)


async def _drive(port: int, bodies: list[bytes], concurrency: int) -> list[Timing]:
    import aiohttp

    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    queue = list(reversed(bodies))
    out: list[Timing] = []
    timeout = aiohttp.ClientTimeout(total=600)
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:

        async def worker() -> None:
            while queue:
                out.append(await _one(session, url, queue.pop()))

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return out


CLIENT = "raw"  # --client: "raw" (bench/raw_sse.py) or "aiohttp"


def drive(port: int, bodies: list[bytes], concurrency: int) -> list[Timing]:
    """Send ``bodies`` with ``concurrency`` requests in flight; each one's timing."""
    if CLIENT == "raw":
        return drive_raw(port, bodies, concurrency)  # type: ignore[return-value]
    return asyncio.run(_drive(port, bodies, concurrency))


class PeakRss:
    """Peak resident memory of a process tree, sampled every 0.1 s in a thread."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak = pid, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, tree_rss_bytes(self.pid))
            self._stop.wait(0.1)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds (user+sys) of each thread of ``pid``, by thread id, from /proc."""
    out: dict[int, float] = {}
    for task in pathlib.Path(f"/proc/{pid}/task").glob("*"):
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[int(task.name)] = (int(fields[11]) + int(fields[12])) / _TICK
    return out


def thread_names(pid: int) -> dict[int, str]:
    """Python thread names by OS thread id (``py-spy dump``; empty when it fails)."""
    spy = shutil.which("py-spy", path=str(pathlib.Path(sys.executable).parent)) or "py-spy"
    try:
        text = subprocess.run(
            [spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    names: dict[int, str] = {}
    for m in re.finditer(r'^Thread (0x[0-9A-Fa-f]+|\d+) \(\w+\)(?:: "([^"]*)")?', text, re.M):
        tid = m.group(1)
        names[int(tid, 16) if tid.startswith("0x") else int(tid)] = m.group(2) or "?"
    return names


def budget(
    pid: int, before: dict[int, float], after: dict[int, float], requests: int
) -> dict[str, float]:
    """Frontend CPU ms per request by thread group: the main thread (the event loop) and each
    other thread group (by Python thread name, digits dropped; tids py-spy cannot name are
    ``other``)."""
    names = thread_names(pid)
    groups: dict[str, float] = {}
    for tid, cpu in after.items():
        name = "event loop (main)" if tid == pid else names.get(tid, "other")
        group = re.sub(r"_?\d+$", "", name)
        groups[group] = groups.get(group, 0.0) + cpu - before.get(tid, 0.0)
    return {k: 1000 * v / max(1, requests) for k, v in sorted(groups.items())}


def frontend_argv(name: str, model: pathlib.Path, port: int, handshake: int) -> list[str]:
    """The frontend's command line; vLLM's Qwen2-VL code imports torchvision, so vLLM's
    frontend gets the test suite's shim on its path (ours and vllm-rs need nothing)."""
    argv = frontend_command(name, model, port, handshake)
    if name == "vllm":
        sys.path.insert(0, str(REPO))
        from tests.support.tiny_vlm import TORCHVISION_SHIM

        path = os.pathsep.join([str(TORCHVISION_SHIM), str(REPO / "src"), str(REPO)])
        argv = ["env", f"PYTHONPATH={path}", *argv]
    return argv


def start_py_spy(pid: int, out: pathlib.Path) -> subprocess.Popen[bytes]:
    """py-spy sampling ``pid``'s threads (time in C code shows in its Python caller),
    Python frames, raw collapsed stacks to ``out`` (summarise with bench/pyspy_summary.py)."""
    spy = shutil.which("py-spy", path=str(pathlib.Path(sys.executable).parent)) or "py-spy"
    argv = [spy, "record", "--pid", str(pid), "--format", "raw", "--nolineno",
            "--rate", "250", "--nonblocking", "-o", str(out)]  # fmt: skip
    with (out.parent / (out.name + ".log")).open("wb") as log:
        return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)


def run_frontend(
    name: str,
    model: pathlib.Path,
    loads: list[Workload],
    urls: dict[str, list[str]],
    profile: bool = False,
) -> list[dict[str, Any]]:
    """Serve ``model`` with ``name`` in front of a fresh mock engine and run ``loads``."""
    logs = RESULTS / "logs"
    port, handshake = free_port(), free_port()
    mock_cmd = [*mock_engine_command(handshake, 1, STEP_MS), "--max-model-len", "4096"]
    mock = spawn(f"mm-mock-{name}", mock_cmd, logs)
    fe = None
    rows: list[dict[str, Any]] = []
    try:
        time.sleep(1.0)
        fe = spawn(f"mm-{name}", frontend_argv(name, model, port, handshake), logs, "frontend")
        startup = wait_healthy(fe, port, timeout=300.0)
        if name == "ours":
            await_fastokens(fe.log)  # its one-off background load is not a request's cost
        warm = [chat_body(str(model), u, i) for i, u in enumerate(urls["warm"])]
        drive(port, warm, 2)  # first-use costs (template, processor, pools) are not measured
        for load in loads:
            images = urls[load.name]
            bodies = [
                chat_body(str(model), images[i % len(images)], i) for i in range(load.requests)
            ]
            cpu0 = tree_cpu_times(fe.pid)
            threads0, mock0 = thread_cpu(fe.pid), tree_cpu_times(mock.pid)
            client0 = time.process_time()
            t0 = time.perf_counter()
            spy = (
                start_py_spy(fe.pid, logs / f"mm-{name}-{load.name}.pyspy.txt") if profile else None
            )
            with PeakRss(fe.pid) as rss:
                timings = drive(port, bodies, load.concurrency)
            wall = time.perf_counter() - t0
            client = time.process_time() - client0
            threads1, mock1 = thread_cpu(fe.pid), tree_cpu_times(mock.pid)
            if spy is not None:
                spy.send_signal(signal.SIGINT)  # py-spy writes its output when interrupted
                spy.wait(60)
            cpu1 = tree_cpu_times(fe.pid)
            good = [t for t in timings if t.ok]
            user, system = cpu1[0] - cpu0[0], cpu1[1] - cpu0[1]
            row = {
                "frontend": name,
                "workload": load.name,
                "requests": load.requests,
                "ok": len(good),
                "wall_s": wall,
                "images_per_s": len(good) / wall,
                "cpu_ms_per_request": 1000 * (user + system) / max(1, len(good)),
                "cpu_user_s": user,
                "cpu_sys_s": system,
                "ttft_p50_ms": 1000 * statistics.median(t.ttft for t in good) if good else None,
                "latency_p50_ms": 1000 * statistics.median(t.latency for t in good)
                if good
                else None,
                "peak_rss_mb": rss.peak / 2**20,
                # The budget: who else used the 2 cores, per request (ms), and the frontend's
                # own CPU by thread group (threads only; its children are in cpu_ms_per_request).
                "client_cpu_ms_per_request": 1000 * client / max(1, len(good)),
                "mock_cpu_ms_per_request": 1000 * (sum(mock1) - sum(mock0)) / max(1, len(good)),
                "frontend_threads_ms_per_request": budget(fe.pid, threads0, threads1, len(good)),
                "startup_s": startup,
                "loadavg": os.getloadavg()[0],
            }
            rows.append(row)
            print(_row(row), flush=True)
            print(_budget_line(row), flush=True)
    finally:
        if fe is not None:
            fe.stop()
        mock.stop()
    return rows


HEADER = (
    "| workload | frontend | ok | CPU ms/request (user+sys) | images/s | TTFT p50 ms "
    "| latency p50 ms | peak RSS MB | load avg |\n|---|---|---|---|---|---|---|---|---|"
)


def _row(r: dict[str, Any]) -> str:
    def ms(v: float | None) -> str:
        return "—" if v is None else f"{v:.0f}"

    return (
        f"| {r['workload']} | {r['frontend']} | {r['ok']}/{r['requests']} "
        f"| {r['cpu_ms_per_request']:.1f} | {r['images_per_s']:.1f} | {ms(r['ttft_p50_ms'])} "
        f"| {ms(r['latency_p50_ms'])} | {r['peak_rss_mb']:.0f} | {r['loadavg']:.1f} |"
    )


def _budget_line(r: dict[str, Any]) -> str:
    threads = ", ".join(f"{k} {v:.1f}" for k, v in r["frontend_threads_ms_per_request"].items())
    busy = r["cpu_ms_per_request"] + r["client_cpu_ms_per_request"] + r["mock_cpu_ms_per_request"]
    cores = busy * r["images_per_s"] / 1000
    return (
        f"  budget ms/request: client {r['client_cpu_ms_per_request']:.1f}, mock "
        f"{r['mock_cpu_ms_per_request']:.1f}, frontend threads: {threads}; all three busy "
        f"{cores:.2f} cores"
    )


def image_sets(loads: list[Workload]) -> dict[str, list[str]]:
    """Data URLs per workload: distinct workloads never share an image (nor with the warm-up),
    a repeated workload has one image of its own."""
    seed = 1000
    out: dict[str, list[str]] = {"warm": [data_url(photo_like_jpeg(s)) for s in (1, 2)]}
    for load in loads:
        count = load.requests if load.images == "distinct" else 1
        out[load.name] = [data_url(photo_like_jpeg(seed + i)) for i in range(count)]
        seed += count
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the comparison; print the table, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frontends", default=",".join(FRONTENDS))
    parser.add_argument("--workloads", default="*", help="glob over workload names")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output", type=pathlib.Path)
    parser.add_argument(
        "--py-spy", action="store_true", help="profile each workload (native frames; slows it)"
    )
    parser.add_argument(
        "--client",
        choices=("raw", "aiohttp"),
        default="raw",
        help="the load client: pre-encoded requests over raw asyncio streams (bench/raw_sse.py, "
        "the cheaper) or aiohttp (the earlier sessions' tables)",
    )
    args = parser.parse_args(argv)
    global CLIENT
    CLIENT = args.client
    sys.path.insert(0, str(REPO))
    from tests.support.tiny_vlm import tiny_vlm_dir

    model = tiny_vlm_dir()
    compile_sources()
    names = ["ours"] if args.quick else args.frontends.split(",")
    loads = [w for w in workloads(args.quick) if fnmatch.fnmatch(w.name, args.workloads)]
    urls = image_sets(loads)
    sizes = [len(u) * 3 // 4 for k, v in urls.items() if k != "warm" for u in v]
    print(f"JPEG size mean {statistics.mean(sizes) / 1000:.0f} KB", flush=True)
    print(HEADER, flush=True)
    rows: list[dict[str, Any]] = []
    for name in names:
        rows += run_frontend(name, model, loads, urls, args.py_spy)
    print("\n" + HEADER)
    for load in loads:
        for r in rows:
            if r["workload"] == load.name:
                print(_row(r))
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = args.output or RESULTS / f"multimodal-{time.strftime('%Y%m%d-%H%M%S')}.json"
    meta = {"machine": platform.platform(), "cpus": os.cpu_count(), "max_tokens": MAX_TOKENS,
            "step_ms": STEP_MS, "client": CLIENT}  # fmt: skip
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"\nJSON: {out}")
    return 0 if all(r["ok"] == r["requests"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
