"""vLLM's Rust frontend binary (`vllm-rs` 0.32.0), the peer our frontend is measured against.

The binary ships inside the CUDA `vllm` wheel on PyPI. `vllm_rs_path()` downloads that wheel once
with pip, extracts only `vllm/vllm-rs` into the test cache, drops the wheel (300+ MB) and returns
the binary's path. `$VLLM_RS` names an existing binary instead.

    python -m tests.support.vllm_rs      # fetch (if needed) and print the path

    with vllm_rs_server() as server:      # Rust frontend + managed engine on the tiny model
        ...
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import stat
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator, Mapping, Sequence

from tests.support.engines import BASE_ENGINE_ARGS, VllmServer, free_port, start_vllm
from tests.support.tiny_model import cache_root, tiny_model_dir

VLLM_VERSION = "0.32.0"
_MEMBER = "vllm/vllm-rs"


class VllmRsUnavailable(RuntimeError):
    """The vllm-rs binary could not be found, downloaded or run."""


def vllm_rs_path() -> pathlib.Path:
    """Path of a working vllm-rs binary (from `$VLLM_RS`, the cache, or a fresh download)."""
    configured = os.environ.get("VLLM_RS")
    binary = pathlib.Path(configured) if configured else _cached_binary()
    if not configured and not binary.is_file():
        _download_into(binary)
    _check_runs(binary)
    return binary


def _cached_binary() -> pathlib.Path:
    return cache_root() / f"vllm-rs-{VLLM_VERSION}" / "vllm-rs"


def _download_into(binary: pathlib.Path) -> None:
    binary.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".wheel-", dir=binary.parent) as tmp:
        pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "download"]
        pip += ["--no-deps", "--only-binary", ":all:", f"vllm=={VLLM_VERSION}", "-d", tmp]
        done = subprocess.run(pip, capture_output=True, text=True, check=False, timeout=1800)
        wheels = sorted(pathlib.Path(tmp).glob(f"vllm-{VLLM_VERSION}-*.whl"))
        if done.returncode != 0 or not wheels:
            raise VllmRsUnavailable(f"pip download of vllm=={VLLM_VERSION} failed:\n{done.stderr}")
        staged = pathlib.Path(tmp) / "vllm-rs"
        try:
            with (
                zipfile.ZipFile(wheels[0]) as wheel,
                wheel.open(_MEMBER) as src,
                staged.open("wb") as dst,
            ):
                shutil.copyfileobj(src, dst, 1 << 20)
        except KeyError as e:
            raise VllmRsUnavailable(f"{wheels[0].name} has no {_MEMBER}") from e
        staged.chmod(staged.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        os.replace(staged, binary)  # atomic: a concurrent fetch just wins or loses the race


def _check_runs(binary: pathlib.Path) -> None:
    try:
        done = subprocess.run(
            [str(binary), "--help"], capture_output=True, text=True, check=False, timeout=60
        )
    except OSError as e:
        raise VllmRsUnavailable(f"cannot run {binary}: {e}") from e
    if done.returncode != 0 or "serve" not in done.stdout:
        raise VllmRsUnavailable(f"{binary} --help failed ({done.returncode}): {done.stderr}")


def start_vllm_rs_server(
    *,
    model: pathlib.Path | str | None = None,
    port: int | None = None,
    extra_args: Sequence[str] = (),
    engine_args: Sequence[str] = BASE_ENGINE_ARGS,
    env: Mapping[str, str] | None = None,
) -> VllmServer:
    """Start `vllm-rs serve MODEL` (Rust frontend + managed engine), not waiting for it.

    `extra_args` are vllm-rs options; `engine_args` go after `--` to the managed Python engine.
    """
    port = port or free_port()
    args = ["serve", str(model or tiny_model_dir()), "--host", "127.0.0.1", "--port", str(port)]
    args += [*extra_args, "--", *engine_args]
    return VllmServer(port, start_vllm(f"vllm-rs-{port}", args, env, program=vllm_rs_path()))


@contextlib.contextmanager
def vllm_rs_server(
    *,
    model: pathlib.Path | str | None = None,
    port: int | None = None,
    extra_args: Sequence[str] = (),
    engine_args: Sequence[str] = BASE_ENGINE_ARGS,
    env: Mapping[str, str] | None = None,
    ready_timeout: float = 300.0,
) -> Iterator[VllmServer]:
    """A ready vllm-rs server (with its managed engine) for the duration of a `with` block."""
    server = start_vllm_rs_server(
        model=model, port=port, extra_args=extra_args, engine_args=engine_args, env=env
    )
    try:
        server.wait_ready(ready_timeout)
        yield server
    finally:
        server.stop()


if __name__ == "__main__":
    print(vllm_rs_path())
