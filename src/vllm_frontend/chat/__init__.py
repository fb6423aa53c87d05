"""Chat templates and chat message handling."""
