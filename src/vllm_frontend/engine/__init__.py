"""Engine-core client: vLLM 0.32 ZMQ + MessagePack protocol, handshake, and the asyncio client."""
