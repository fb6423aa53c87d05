"""Engine-free render servers side by side: ``vllm-frontend render``, ``vllm-rs render`` and
vLLM's ``vllm launch render``, on long chat prompts.

    .venv/bin/python bench/render.py                       # ~1640-token chats, concurrency 8
    .venv/bin/python bench/render.py --quick               # a few-second smoke run
    .venv/bin/python bench/render.py --servers ours --profile   # py-spy of ours under load

Each server in turn is started on the tiny Llama 3 test model; its ready time is from spawn to
the first ``/health`` 200. Then `wrk` posts ``/v1/chat/completions/render`` requests (one user
message of ~1600 tokens of text, with a counter in front so that no two requests are the same),
first as a warm-up, then for the measured run. The figures: requests/s, latency, the server's
CPU time per request (utime+stime of its process tree over the measured run, from /proc) and
its peak RSS. Every server's token ids are checked to be vLLM's on one body first. A markdown
table goes to stdout, JSON to bench/results/.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from frontends import (
    BIN,
    REPO,
    Proc,
    await_fastokens,
    compile_sources,
    free_port,
    spawn,
    tiny_model,
    tree_cpu_times,
    tree_rss_bytes,
    vllm_rs_binary,
    wait_healthy,
)

SERVERS = ("ours", "vllm-rs", "vllm")
NAME = "tiny-llama"
PATH = "/v1/chat/completions/render"
CONTENT_TOKENS = 1600  # + the template's ~40: ~1640-token prompts

_WRK_LUA = """
local texts = {%s}
local i = 0
local headers = {["Content-Type"] = "application/json"}
request = function()
  i = i + 1
  local body = '{"model": "%s", "messages": [{"role": "user", "content": "' .. i .. ' '
    .. texts[i %% #texts + 1] .. '"}]}'
  return wrk.format("POST", "%s", headers, body)
end
done = function(s, lat, req)
  io.write(string.format('\\nBENCH_JSON {"requests": %%d, "duration_us": %%d, '
    .. '"errors": %%d, "lat_mean_us": %%f, "lat_p50_us": %%d, "lat_p99_us": %%d}\\n',
    s.requests, s.duration, s.errors.connect + s.errors.read + s.errors.write
    + s.errors.status + s.errors.timeout, lat.mean, lat:percentile(50), lat:percentile(99)))
end
"""


def server_command(name: str, model: pathlib.Path, port: int) -> list[str]:
    """The command line serving ``model``'s render routes on ``port``."""
    common = [str(model), "--port", str(port), "--served-model-name", NAME]
    if name == "ours":
        return [str(BIN / "vllm-frontend"), "render", *common]
    if name == "vllm-rs":
        # Without --max-model-len vllm-rs skips the prompt-length check the others make.
        config = json.loads((model / "config.json").read_text())
        return [str(vllm_rs_binary()), "render", *common, "--max-model-len",
                str(config["max_position_embeddings"])]  # fmt: skip
    if name == "vllm":
        return [str(BIN / "vllm"), "launch", "render", *common, "--host", "127.0.0.1"]
    raise ValueError(f"unknown server {name!r}; one of {SERVERS}")


def texts(model: pathlib.Path, n: int, length: int, seed: int = 0) -> list[str]:
    """``n`` texts of about ``length`` tokens: random words from the vocabulary (JSON-safe)."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model / "tokenizer.json"))
    words = [
        w[1:] for w in tok.get_vocab() if w.startswith("Ġ") and w[1:].isascii() and w[1:].isalpha()
    ]
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        picked = [rng.choice(words) for _ in range(length)]
        while len(tok.encode(" ".join(picked), add_special_tokens=False).ids) > length:
            del picked[-max(1, len(picked) // 100) :]
        out.append(" ".join(picked))
    return out


def post(port: int, body: dict[str, Any]) -> Any:
    """POST ``body`` to the render route; the decoded JSON answer."""
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{PATH}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def run_wrk(port: int, lua: pathlib.Path, concurrency: int, seconds: float) -> dict[str, Any]:
    """One wrk run; its BENCH_JSON figures."""
    wrk = shutil.which("wrk")
    if wrk is None:
        raise SystemExit("wrk is not installed (apt-get install wrk)")
    argv = [wrk, "-t1", f"-c{concurrency}", f"-d{seconds:g}s", "--timeout", "60s", "-s",
            str(lua), f"http://127.0.0.1:{port}"]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    line = next(x for x in out.splitlines() if x.startswith("BENCH_JSON "))
    result: dict[str, Any] = json.loads(line.removeprefix("BENCH_JSON "))
    return result


def bench_server(
    name: str,
    model: pathlib.Path,
    lua: pathlib.Path,
    reference: dict[str, Any],
    args: argparse.Namespace,
    work: pathlib.Path,
) -> dict[str, Any]:
    """Start ``name``, check it, load it; its figures."""
    port = free_port()
    proc: Proc = spawn(f"render-{name}", server_command(name, model, port), work, role="frontend")
    try:
        ready = wait_healthy(proc, port, timeout=600)
        if name == "ours":
            await_fastokens(proc.log)  # its background load is not the requests' CPU
        got = post(port, reference["body"])
        same_ids = got["token_ids"] == reference["token_ids"]
        run_wrk(port, lua, args.concurrency, args.warmup)
        spy = None
        if args.profile:
            out = work / f"render-{name}.pyspy.txt"
            spy = subprocess.Popen(
                [str(BIN / "py-spy"), "record", "--pid", str(proc.pid), "--format", "raw",
                 "--nolineno", "--rate", "200", "--nonblocking", "-o", str(out)],
                stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
            )  # fmt: skip
        user0, sys0 = tree_cpu_times(proc.pid)
        result = run_wrk(port, lua, args.concurrency, args.seconds)
        user1, sys1 = tree_cpu_times(proc.pid)
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(60)
        rss = tree_rss_bytes(proc.pid)
    finally:
        proc.stop()
    completed = result["requests"] - result["errors"]
    seconds = result["duration_us"] / 1e6
    cpu = (user1 - user0) + (sys1 - sys0)
    return {
        "server": name,
        "ready_s": round(ready, 3),
        "same_token_ids_as_vllm": same_ids,
        "prompt_tokens": len(got["token_ids"]),
        "requests": completed,
        "errors": result["errors"],
        "requests_per_s": round(completed / seconds, 1),
        "cpu_ms_per_request": round(1000 * cpu / max(completed, 1), 3),
        "cpu_sys_share": round((sys1 - sys0) / cpu, 3) if cpu else None,
        "latency_p50_ms": round(result["lat_p50_us"] / 1000, 2),
        "latency_p99_ms": round(result["lat_p99_us"] / 1000, 2),
        "rss_mb": round(rss / 2**20, 1),
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }


def reference_ids(model: pathlib.Path, text: str) -> dict[str, Any]:
    """The body of the id check and vLLM's token ids for it (its render classes, in-process)."""
    body = {"model": NAME, "messages": [{"role": "user", "content": f"0 {text}"}]}
    code = f"""
import asyncio, json, sys
from vllm.config import ModelConfig, VllmConfig
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
from vllm.renderers import renderer_from_config
from vllm.renderers.online_renderer import OnlineRenderer
config = ModelConfig(model={str(model)!r})
online = OnlineRenderer(config, renderer_from_config(VllmConfig(model_config=config)),
                        request_logger=None, chat_template=None,
                        chat_template_content_format="auto")
request = ChatCompletionRequest.model_validate(json.loads(sys.stdin.read()))
_, inputs = asyncio.run(online.render_chat(request))
print("IDS", json.dumps(list(inputs[0]["prompt_token_ids"])))
"""
    out = subprocess.run(
        [sys.executable, "-c", code], input=json.dumps(body), capture_output=True, text=True,
        check=True, cwd=REPO,
    ).stdout  # fmt: skip
    ids = json.loads(next(x for x in out.splitlines() if x.startswith("IDS ")).removeprefix("IDS "))
    return {"body": body, "token_ids": ids}


def main(argv: list[str] | None = None) -> int:
    """Run the comparison; print the table, write the JSON."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--servers", default=",".join(SERVERS))
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--texts", type=int, default=64)
    p.add_argument("--quick", action="store_true", help="2 s runs, 1 s warm-up")
    p.add_argument("--profile", action="store_true", help="py-spy each server during its run")
    args = p.parse_args(argv)
    if args.quick:
        args.seconds, args.warmup = 2.0, 1.0
    compile_sources()
    model = tiny_model()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    work = REPO / "bench" / "results" / f"render-{stamp}"
    work.mkdir(parents=True, exist_ok=True)
    bodies = texts(model, args.texts, CONTENT_TOKENS)
    lua = work / "render.lua"
    lua.write_text(_WRK_LUA % (",".join(f"[==[{t}]==]" for t in bodies), NAME, PATH))
    reference = reference_ids(model, bodies[0])
    rows = []
    for name in args.servers.split(","):
        rows.append(bench_server(name, model, lua, reference, args, work))
        print(json.dumps(rows[-1]), flush=True)
    print()
    print("| server | ready (s) | requests/s | CPU ms / request | p50 / p99 latency (ms) | "
          "RSS (MB) | prompt tokens | ids = vLLM's |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['server']} | {r['ready_s']:.2f} | {r['requests_per_s']:.0f} | "
              f"{r['cpu_ms_per_request']:.2f} | {r['latency_p50_ms']:.1f} / "
              f"{r['latency_p99_ms']:.1f} | {r['rss_mb']:.0f} | {r['prompt_tokens']} | "
              f"{'yes' if r['same_token_ids_as_vllm'] else 'NO'} |")  # fmt: skip
    out = {"argv": sys.argv, "concurrency": args.concurrency, "seconds": args.seconds, "rows": rows}
    (work / "results.json").write_text(json.dumps(out, indent=2))
    print(f"\nresults: {work / 'results.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
