"""Token-in / token-out generation over the engine client."""
