"""Compiled chat templates kept on disk, so that a restarted server does not compile them again.

Compiling a model's chat template (Jinja parses it, generates Python source, compiles that, and
we walk the parse tree twice more for vLLM's content-format detection and the template's
variables) costs 60-200 ms for Llama 3's. The first chat request of every process paid it.
An entry holds the compiled code object with what was derived from the tree, written with
``marshal`` the way Python writes ``.pyc`` files. It is keyed by the template's source and by
everything that shapes the code: the Jinja environment's description (given by the caller),
the Jinja and Python versions, and this module's format. Only entries the current user owns are
read, and anything unreadable is ignored (the template is compiled as before and the entry
rewritten). ``VLLM_FRONTEND_TEMPLATE_CACHE=0`` turns it off; it lives next to the tokenizer
cache (``VLLM_FRONTEND_CACHE_ROOT``, default ``~/.cache/vllm-frontend``).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import marshal
import os
import sys
import tempfile
from pathlib import Path
from types import CodeType

from vllm_frontend.text.tokenizer_cache import cache_root

__all__ = ["CachedTemplate", "TemplateCodeCache"]

_log = logging.getLogger(__name__)

_FORMAT = 1  # bump when an entry's layout changes

CachedTemplate = tuple[CodeType, frozenset[str], str]
"""An entry: the template's code object, its variables, its content format."""


class TemplateCodeCache:
    """Compiled templates under ``root``, for the Jinja environment described by
    ``environment`` (a string that changes whenever the environment would compile
    differently)."""

    def __init__(self, root: str | Path, environment: str) -> None:
        self._root = Path(root)
        self._environment = environment
        self._salt: str | None = None  # made on first use: it imports jinja2 for its version

    @classmethod
    def from_env(cls, environment: str) -> TemplateCodeCache | None:
        """The cache the environment asks for, or None when it is turned off."""
        if os.environ.get("VLLM_FRONTEND_TEMPLATE_CACHE", "1").lower() in ("0", "false", "no"):
            return None
        return cls(cache_root() / "chat-templates", environment)

    def _path(self, source: str) -> Path:
        if self._salt is None:
            import jinja2

            self._salt = f"{_FORMAT}\0{self._environment}\0{sys.version}\0{jinja2.__version__}\0"
        digest = hashlib.sha256((self._salt + source).encode("utf-8", "surrogatepass"))
        return self._root / f"{digest.hexdigest()}.marshal"

    def load(self, source: str) -> CachedTemplate | None:
        """The entry for ``source``, if one was stored and is usable."""
        path = self._path(source)
        try:
            with path.open("rb") as f:
                if os.fstat(f.fileno()).st_uid != os.getuid():
                    return None
                code, variables, content_format = marshal.load(f)
        except FileNotFoundError:
            return None
        except (OSError, EOFError, ValueError, TypeError) as e:
            _log.debug("ignoring the cached template %s: %s", path, e)
            return None
        if (
            not isinstance(code, CodeType)
            or not isinstance(variables, tuple)
            or not all(isinstance(v, str) for v in variables)
            or content_format not in ("string", "openai")
        ):
            return None
        return code, frozenset(variables), content_format

    def store(
        self, source: str, code: CodeType, variables: frozenset[str], content_format: str
    ) -> None:
        """Keep ``source``'s compiled form (best effort: a failure to write is only logged)."""
        path = self._path(source)
        data = marshal.dumps((code, tuple(sorted(variables)), content_format))
        try:
            self._root.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self._root, prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except OSError as e:
            _log.debug("could not cache the compiled template in %s: %s", self._root, e)
