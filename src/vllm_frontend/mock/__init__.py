"""Mock EngineCore for load-testing frontends without a GPU."""
