"""vLLM 0.32's declarative parser engine, tool-call side: a grammar of markers read from
streamed text and token ids (``grammar``, ``lexer``, ``machine``), and the tool parsers built
on it (``calls``)."""
