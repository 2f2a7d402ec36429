"""The tiny real models the book ships: the byte-level GPT and its MoE twin (``model``, ``moe_model``), their
training (``train``), generation (``generate``), drafters (``drafters``, ``trees``), end-to-end timing
(``end_to_end``) and export (``hf``, ``gguf_export``). Imports ``sampling``, ``measure`` and below."""
