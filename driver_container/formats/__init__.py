"""Pure decoders: bytes or text in, typed data out; no I/O beyond what a caller hands in (``Root``)."""
