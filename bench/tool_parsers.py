"""Tool-call parsers on the hot path (issue 17): ours, vLLM's Python frontend and vllm-rs.

    .venv/bin/python bench/tool_parsers.py                    # hermes and qwen3_coder, all three
    .venv/bin/python bench/tool_parsers.py --parsers hermes --frontends ours --requests 16

The mock engine replays a scripted output (``mock-engine --script-tokens``): text in a parser
family's tool-call syntax with two calls, after enough content to make 256 tokens of the tiny
Llama 3 test model, the last one EOS. Each run streams chat completions with ``tools`` and
``tool_choice: auto`` through a frontend started with ``--enable-auto-tool-choice
--tool-call-parser NAME`` (vllm-rs: ``--tool-call-parser NAME``; it has no enable flag), and
checks that every response carries the two calls, their arguments intact, finishing with
``tool_calls``. The baseline, ours without a parser, streams the same output for requests with
the same tools and ``tool_choice: none``. CPU per output token is the frontend process tree's
user+system time over the measured requests (after a warm-up request and once the frontend is
idle) / output tokens.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import pathlib
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from frontends import (
    FRONTENDS,
    Proc,
    await_fastokens,
    compile_sources,
    free_port,
    frontend_command,
    mock_engine_command,
    spawn,
    tiny_model,
    tree_cpu_times,
    wait_healthy,
)

OUTPUT_TOKENS = 256
PARSERS = ("hermes", "qwen3_coder")
CALLS = (
    ("get_weather", {"city": "Paris", "unit": "celsius"}),
    ("get_time", {"timezone": "Europe/Berlin", "format": "24h"}),
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} of a place",
            "parameters": {
                "type": "object",
                "properties": {key: {"type": "string"} for key in args},
                "required": list(args),
            },
        },
    }
    for name, args in CALLS
]


def calls_text(parser: str) -> str:
    """The two calls of :data:`CALLS` in ``parser``'s tool-call syntax."""
    if parser == "hermes":
        return "".join(
            f"<tool_call>\n{json.dumps({'name': n, 'arguments': a})}\n</tool_call>\n"
            for n, a in CALLS
        )
    if parser == "qwen3_coder":
        out = []
        for name, args in CALLS:
            params = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in args.items())
            out.append(f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>\n")
        return "".join(out)
    raise ValueError(f"unknown parser {parser!r}")


def script_tokens(model: pathlib.Path, parser: str, length: int = OUTPUT_TOKENS) -> list[int]:
    """Token ids of ``parser``'s two calls after content words, then EOS: ``length`` ids."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(model / "tokenizer.json"))

    def encode(text: str) -> list[int]:
        return list(tok.encode(text, add_special_tokens=False).ids)

    calls = encode(calls_text(parser))
    head = encode("Let me look both up for you.\n\n")
    word = encode(" okay")
    assert len(word) == 1, word
    newline = encode("\n")
    eos = json.loads((model / "generation_config.json").read_text())["eos_token_id"]
    eos = eos[-1] if isinstance(eos, list) else eos
    pad = length - len(head) - len(newline) - len(calls) - 1
    if pad < 0:
        raise ValueError(f"{parser}: the calls take {length - pad} > {length} tokens")
    return [*head, *word * pad, *newline, *calls, eos]


@dataclass
class Result:
    """One frontend x parser run."""

    frontend: str
    parser: str
    requests: int
    output_tokens: int
    seconds: float
    cpu_user: float
    cpu_system: float
    calls_ok: int
    problems: list[str]

    @property
    def cpu_us_per_token(self) -> float:
        """Frontend CPU (user+system) per output token, in microseconds."""
        return (self.cpu_user + self.cpu_system) / max(self.output_tokens, 1) * 1e6

    @property
    def tokens_per_s(self) -> float:
        """Output tokens per second of wall time."""
        return self.output_tokens / self.seconds


def stream_chat(port: int, body: dict[str, Any]) -> tuple[list[dict[str, Any]], int, str | None]:
    """One streaming chat request: (tool calls by index, completion tokens, finish reason)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    try:
        conn.request(
            "POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"}
        )
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:500]!r}")
        calls: dict[int, dict[str, Any]] = {}
        usage = 0
        finish = None
        for raw in resp:
            line = raw.strip()
            if not line.startswith(b"data:") or line == b"data: [DONE]":
                continue
            chunk = json.loads(line[5:])
            if chunk.get("usage"):
                usage = chunk["usage"]["completion_tokens"]
            for choice in chunk.get("choices", ()):
                finish = choice.get("finish_reason") or finish
                for tc in (choice.get("delta") or {}).get("tool_calls") or ():
                    call = calls.setdefault(tc["index"], {"name": "", "arguments": ""})
                    fn = tc.get("function") or {}
                    call["name"] += fn.get("name") or ""
                    call["arguments"] += fn.get("arguments") or ""
        return [calls[i] for i in sorted(calls)], usage, finish
    finally:
        conn.close()


def check_calls(calls: list[dict[str, Any]], finish: str | None) -> str | None:
    """What is wrong with a response's parsed calls (None: both calls, intact)."""
    got = []
    for c in calls:
        try:
            got.append((c["name"], json.loads(c["arguments"])))
        except ValueError:
            return f"arguments not JSON: {c['arguments']!r}"
    if got != [(n, a) for n, a in CALLS]:
        return f"calls {got!r}"
    if finish != "tool_calls":
        return f"finish_reason {finish!r}"
    return None


def run_load(
    port: int, body: dict[str, Any], requests: int, concurrency: int, parsed: bool
) -> tuple[int, int, list[str]]:
    """``requests`` streams, ``concurrency`` at a time: (output tokens, good ones, problems)."""
    lock = threading.Lock()
    todo = list(range(requests))
    totals = [0, 0]
    problems: list[str] = []

    def worker() -> None:
        while True:
            with lock:
                if not todo:
                    return
                todo.pop()
            try:
                calls, tokens, finish = stream_chat(port, body)
                problem = check_calls(calls, finish) if parsed else None
                if not parsed and calls:
                    problem = f"tool calls without a parser: {calls!r}"
            except Exception as exc:  # reported, not fatal: the table says how many failed
                tokens, problem = 0, repr(exc)
            with lock:
                totals[0] += tokens
                if problem is None:
                    totals[1] += 1
                else:
                    problems.append(problem)

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return totals[0], totals[1], problems


def await_idle(pid: int, timeout: float = 30.0) -> None:
    """Until ``pid``'s tree is idle (<2% of a core over 0.5 s): background start-up work (our
    detokenizer's vocabulary tables, for one) must not be measured as serving."""
    deadline = time.monotonic() + timeout
    before = sum(tree_cpu_times(pid))
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = sum(tree_cpu_times(pid))
        if now - before < 0.01:
            return
        before = now


def frontend_flags(frontend: str, parser: str | None) -> list[str]:
    """Flags that make ``frontend`` parse ``parser``'s tool calls (none: no parser)."""
    if parser is None:
        return ["--tool-call-parser", "none"] if frontend == "vllm-rs" else []
    if frontend == "vllm-rs":
        return ["--tool-call-parser", parser]
    return ["--enable-auto-tool-choice", "--tool-call-parser", parser]


def run_one(
    frontend: str,
    parser: str | None,
    family: str,
    model: pathlib.Path,
    args: argparse.Namespace,
    logs: pathlib.Path,
) -> Result:
    """Serve ``frontend`` (with ``parser`` or none) before a mock replaying ``family``'s calls."""
    script = logs / f"script-{family}.json"
    script.write_text(json.dumps(script_tokens(model, family)))
    port, handshake = free_port(), free_port()
    mock_cmd = [*mock_engine_command(handshake, 1, args.step_ms), "--vocab-size", "128256"]
    mock = spawn(f"mock-{frontend}", [*mock_cmd, "--script-tokens", str(script)], logs)
    fe: Proc | None = None
    label = parser or "none"
    try:
        time.sleep(1.0)
        cmd = frontend_command(
            frontend, model, port, handshake, 1, frontend_flags(frontend, parser)
        )
        fe = spawn(f"{frontend}-{label}", cmd, logs, role="frontend")
        wait_healthy(fe, port, timeout=300.0)
        if frontend == "ours":
            await_fastokens(fe.log)
        body = {
            "model": str(model),
            "messages": [{"role": "user", "content": "Weather in Paris and time in Berlin?"}],
            "tools": TOOLS,
            "tool_choice": "auto" if parser else "none",
            "max_tokens": 2 * OUTPUT_TOKENS,  # the script's EOS ends it at OUTPUT_TOKENS
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        run_load(port, body, 1, 1, parser is not None)  # warm-up: first-use costs unmeasured
        await_idle(fe.pid)
        user0, sys0 = tree_cpu_times(fe.pid)
        start = time.monotonic()
        tokens, good, problems = run_load(
            port, body, args.requests, args.concurrency, parser is not None
        )
        seconds = time.monotonic() - start
        user1, sys1 = tree_cpu_times(fe.pid)
        return Result(
            frontend, label, args.requests, tokens, seconds, user1 - user0, sys1 - sys0, good,
            problems,
        )  # fmt: skip
    finally:
        if fe is not None:
            fe.stop()
        mock.stop()


def table(results: Sequence[Result]) -> str:
    """Markdown table of the runs, with ratios to ours without a parser and to vLLM."""
    base = next((r for r in results if r.frontend == "ours" and r.parser == "none"), None)
    vllm = {r.parser: r for r in results if r.frontend == "vllm"}
    lines = [
        "| frontend | parser | calls ok | out tok | tok/s | CPU µs/tok | x ours no-parser "
        "| x vLLM |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        per = r.cpu_us_per_token
        vs_base = f"{per / base.cpu_us_per_token:.2f}" if base else "-"
        v = vllm.get(r.parser)
        vs_vllm = f"{per / v.cpu_us_per_token:.2f}" if v and r.parser != "none" else "-"
        ok = f"{r.calls_ok}/{r.requests}" if r.parser != "none" else f"({r.calls_ok}/{r.requests})"
        lines.append(
            f"| {r.frontend} | {r.parser} | {ok} | {r.output_tokens} | {r.tokens_per_s:.0f} "
            f"| {per:.0f} | {vs_base} | {vs_vllm} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Run every frontend x parser (and ours without one), print the table, save JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frontends", default=",".join(FRONTENDS))
    parser.add_argument("--parsers", default=",".join(PARSERS))
    parser.add_argument("--requests", type=int, default=48, help="measured requests per run")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--step-ms", type=float, default=2.0, help="mock engine step period")
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args(argv)
    compile_sources()
    model = tiny_model()
    logs = pathlib.Path(tempfile.mkdtemp(prefix="tool-parsers-"))
    frontends = args.frontends.split(",")
    families = args.parsers.split(",")
    runs: list[tuple[str, str | None, str]] = []
    if "ours" in frontends:
        runs.append(("ours", None, families[0]))
    runs += [(f, p, p) for p in families for f in frontends]
    load = os.getloadavg()
    results = []
    for frontend, name, family in runs:
        r = run_one(frontend, name, family, model, args, logs)
        print(
            f"{frontend} {r.parser}: {r.cpu_us_per_token:.0f} µs/tok, {r.tokens_per_s:.0f} tok/s,"
            f" calls ok {r.calls_ok}/{r.requests}" + (f"; {r.problems[:2]}" if r.problems else ""),
            file=sys.stderr,
            flush=True,
        )
        results.append(r)
    load_after = os.getloadavg()
    print(table(results))
    print(
        f"\nload average before {load[0]:.2f} / after {load_after[0]:.2f} (1 min), "
        f"{os.cpu_count()} CPUs; logs in {logs}"
    )
    if args.json:
        pathlib.Path(args.json).write_text(
            json.dumps(
                [{**vars(r), "cpu_us_per_token": r.cpu_us_per_token} for r in results], indent=1
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
