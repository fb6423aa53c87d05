"""Where the repository's own test data lives (tests/fixtures; its README gives origins)."""

from __future__ import annotations

import pathlib

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures"
CHAT_TEMPLATES = FIXTURES / "chat-templates"
PROTOCOL_VECTORS = FIXTURES / "protocol-vectors"
