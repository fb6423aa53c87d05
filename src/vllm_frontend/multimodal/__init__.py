"""Multimodal inputs: fetching and decoding media, the models' processors, placeholder expansion,
item hashes and the processed tensors' way to the engine (the layer between text and chat)."""
