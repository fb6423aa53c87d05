"""``serve --ssl-certfile … --root-path …`` end to end (in front of the mock engine): the options
reach the HTTP server, and TLS files that cannot be used stop startup naming the problem."""

from __future__ import annotations

import pathlib
import ssl
import subprocess
import sys

import httpx
from tests.support.certificates import CertificateAuthority
from tests.support.mock_serve import mock_serve


def _healthy(context: ssl.SSLContext) -> object:
    def check(port: int) -> bool:
        try:
            return httpx.get(f"https://127.0.0.1:{port}/health", verify=context).status_code == 200
        except httpx.HTTPError:
            return False

    return check


def test_serve_speaks_mutual_tls_under_a_root_path(
    tiny_model: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    ca = CertificateAuthority(tmp_path)
    cert, key = ca.issue("server", "server", server=True)
    client = ssl.create_default_context(cafile=str(ca.cert_path))
    client.load_cert_chain(*(str(p) for p in ca.issue("client", "client", server=False)))
    flags = ["--ssl-certfile", str(cert), "--ssl-keyfile", str(key), "--ssl-ca-certs",
             str(ca.cert_path), "--ssl-cert-reqs", "2", "--root-path", "/api"]  # fmt: skip
    log = tmp_path / "serve.log"
    with mock_serve(tiny_model, log, serve_args=flags, healthy=_healthy(client)) as serve:  # type: ignore[arg-type]
        base = f"https://127.0.0.1:{serve.port}"
        with httpx.Client(verify=client, timeout=30) as http:
            for path in ("/api/v1/models", "/v1/models"):
                response = http.get(base + path)
                assert response.status_code == 200, path
                assert response.json()["data"][0]["id"] == str(tiny_model)
            assert http.get(base + "/api").status_code == 404
            done = http.post(base + "/api/v1/completions",
                             json={"prompt": "hi", "max_tokens": 3})  # fmt: skip
            assert done.status_code == 200 and done.json()["usage"]["completion_tokens"] == 3
        anonymous = ssl.create_default_context(cafile=str(ca.cert_path))
        try:
            status: object = httpx.get(base + "/health", verify=anonymous).status_code
        except httpx.HTTPError as e:
            status = e
        assert status != 200  # no client certificate: refused
    assert "https://127.0.0.1" in log.read_text()


def _serve_fails(tiny_model: pathlib.Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vllm_frontend", "serve", str(tiny_model),
         "--data-parallel-size-local", "0", "--port", "0", *flags],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_unusable_tls_files_stop_startup(tiny_model: pathlib.Path, tmp_path: pathlib.Path) -> None:
    ca = CertificateAuthority(tmp_path)
    cert, key = ca.issue("server", "server", server=True)
    done = _serve_fails(tiny_model, "--ssl-keyfile", str(key))
    assert done.returncode == 2 and "--ssl-keyfile needs --ssl-certfile" in done.stderr
    done = _serve_fails(tiny_model, "--ssl-certfile", str(tmp_path / "missing.pem"))
    assert done.returncode == 1 and "TLS" in done.stderr
    done = _serve_fails(tiny_model, "--ssl-certfile", str(cert), "--ssl-keyfile", str(key),
                        "--ssl-cert-reqs", "5")  # fmt: skip
    assert done.returncode == 2 and "ssl_cert_reqs" in done.stderr
