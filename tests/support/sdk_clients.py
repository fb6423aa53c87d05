"""The official SDKs' clients of several servers by name, for differential tests that send the
same call to ours and to vLLM's; the SDKs are imported only by the modules that use them."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Protocol, TypeVar

if TYPE_CHECKING:
    import anthropic
    import openai


class _Closable(Protocol):
    def close(self) -> None: ...


_C = TypeVar("_C", bound=_Closable)


@contextmanager
def _closing(clients: dict[str, _C]) -> Iterator[dict[str, _C]]:
    try:
        yield clients
    finally:
        for client in clients.values():
            client.close()


def openai_clients(
    urls: Iterable[tuple[str, str]], timeout: float = 300
) -> AbstractContextManager[dict[str, openai.OpenAI]]:
    """``openai`` SDK clients of ``(name, base URL)`` servers, by name, closed on exit."""
    import openai

    return _closing(
        {
            name: openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0, timeout=timeout)
            for name, url in urls
        }
    )


def anthropic_clients(
    urls: Iterable[tuple[str, str]], timeout: float = 300
) -> AbstractContextManager[dict[str, anthropic.Anthropic]]:
    """``anthropic`` SDK clients of ``(name, base URL)`` servers, by name, closed on exit."""
    import anthropic

    return _closing(
        {
            name: anthropic.Anthropic(base_url=url, api_key="x", max_retries=0, timeout=timeout)
            for name, url in urls
        }
    )
