"""Tokenizer, incremental detokenization, stop strings, logprobs and sampling-parameter lowering."""
