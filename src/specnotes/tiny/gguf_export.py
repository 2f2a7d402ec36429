"""The shipped models as GGUF files for llama.cpp (``pip install specnotes[engine]``; ``make engine``).

``write_gguf(model, path)`` writes a specnotes ``Transformer`` as a llama-architecture GGUF in float32 with
the ``gguf`` package (llama.cpp's own writer, on PyPI). The model is a Llama in all that matters
(``specnotes.tiny.hf`` proves it against ``transformers``' LlamaForCausalLM): RMSNorm with the same eps before
attention and MLP, multi-head attention without biases, rotary embeddings on every layer with base
``rope_base`` over the whole head, SwiGLU, a final RMSNorm and an untied LM head (its own ``output.weight``).
Two things differ from a Hugging Face checkpoint, and the file fixes both:

- **Rotary layout.** specnotes rotates the two *halves* of each head (HF's ``rotate_half``); llama.cpp's
  ``llama`` architecture rotates *adjacent pairs*. The q and k rows of every head are permuted from one
  layout to the other, as ``convert_hf_to_gguf.py`` does (:func:`rope_permute`).
- **Vocabulary.** Bytes are tokens. The file carries a ``gpt2`` BPE vocabulary of 256 tokens where token i is
  GPT-2's ``bytes_to_unicode()`` character for byte i, so llama.cpp's byte-level pre-tokenizer maps every
  byte to the token of the same id. It has nothing to merge, but gguf-py silently drops an *empty* merges
  list and llama.cpp then refuses the file ("cannot find tokenizer merges"): one merge of two characters
  outside the byte alphabet (``DUMMY_MERGE``) never applies and keeps the key. No BOS is added.

``random_model(big_config(), seed)`` builds a Llama-shaped model with random weights larger than a CPU's
last-level cache, for the engine measurement that isolates the cost of verifying (Chapter 8).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from specnotes import validate
from specnotes.tiny import gguf_header
from specnotes.tiny.model import ModelConfig, Transformer

# Bump whenever write_gguf's output changes: the engine's cached GGUF files carry it in their names, so a new
# writer gets new files instead of the old ones (specnotes.serve.engine.shipped_ggufs, big_gguf).
FORMAT_VERSION = 1
DUMMY_MERGE = "\u2400 \u2401"  # two characters outside bytes_to_unicode()'s alphabet: never merged
SPECIAL_ID = 11  # llama.cpp's default BOS/EOS for a gpt2 vocabulary; byte 11 (vertical tab), never added


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map (the table every byte-level BPE vocabulary uses)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def byte_vocab() -> list[str]:
    """Token i is byte i's character: the 256-token vocabulary of the GGUF files."""
    table = bytes_to_unicode()
    return [table[b] for b in range(256)]


def rope_permute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Rows of a q or k projection [n_heads·d_head, d_model], each head [first half; second half] (rotate-half),
    reordered so each head interleaves them, (x0, x_h, x1, x_h+1, ...): llama.cpp's adjacent-pair rotation
    then rotates the same pairs with the same frequencies. ``convert_hf_to_gguf.py``'s ``permute``."""
    rows = w.shape[0]
    if rows % (2 * n_heads):
        raise validate.BadArgument(f"w has {rows} rows: not n_heads={n_heads} heads of even size")
    return w.reshape(n_heads, 2, rows // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_tensors(model: Transformer) -> dict[str, np.ndarray]:
    """llama.cpp tensor name -> float32 array (numpy's row-major shape; gguf reverses it into ggml's ne)."""
    c = model.config
    a = lambda t: t.detach().to(torch.float32).cpu().numpy().copy()
    out = {"token_embd.weight": a(model.tok_emb.weight), "output_norm.weight": a(model.norm.weight),
           "output.weight": a(model.lm_head.weight)}
    for i, block in enumerate(model.blocks):
        q, k, v = a(block.wqkv.weight).reshape(3, c.d_model, c.d_model)
        gate, up = a(block.w_gate_up.weight).reshape(2, c.d_ff, c.d_model)
        out |= {f"blk.{i}.attn_norm.weight": a(block.attn_norm.weight),
                f"blk.{i}.attn_q.weight": rope_permute(q, c.n_heads),
                f"blk.{i}.attn_k.weight": rope_permute(k, c.n_heads),
                f"blk.{i}.attn_v.weight": v, f"blk.{i}.attn_output.weight": a(block.wo.weight),
                f"blk.{i}.ffn_norm.weight": a(block.mlp_norm.weight),
                f"blk.{i}.ffn_gate.weight": gate, f"blk.{i}.ffn_up.weight": up,
                f"blk.{i}.ffn_down.weight": a(block.w_down.weight)}
    return out


def write_gguf(model: Transformer, path, name: str = "specnotes", context: int | None = None) -> Path:
    """``model`` as a float32 llama GGUF at ``path`` (folders created; written beside, then moved into place).
    ``context``: the context length the file declares (default: the model's ``max_seq_len``, the size of its
    rotary table; the shipped pair was trained on 256-byte blocks)."""
    import gguf

    if not isinstance(model, Transformer):
        raise validate.BadArgumentType(f"model must be a specnotes Transformer, got {type(model).__name__}")
    c = model.config
    if c.vocab_size != 256:
        raise validate.BadArgument(f"the GGUF vocabulary is the 256 bytes; this model has vocab_size={c.vocab_size}")
    context = validate.integer("context", c.max_seq_len if context is None else context, 1, c.max_seq_len)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    writer = gguf.GGUFWriter(str(tmp), "llama")
    try:
        writer.add_name(name)
        writer.add_file_type(gguf.LlamaFileType.ALL_F32)
        writer.add_context_length(context)
        writer.add_embedding_length(c.d_model)
        writer.add_block_count(c.n_layers)
        writer.add_feed_forward_length(c.d_ff)
        writer.add_head_count(c.n_heads)
        writer.add_head_count_kv(c.n_heads)
        writer.add_rope_dimension_count(c.d_head)
        writer.add_rope_freq_base(c.rope_base)
        writer.add_layer_norm_rms_eps(c.norm_eps)
        writer.add_vocab_size(c.vocab_size)
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre("default")
        writer.add_token_list(byte_vocab())
        writer.add_token_types([gguf.TokenType.NORMAL] * 256)
        writer.add_token_merges([DUMMY_MERGE])
        writer.add_bos_token_id(SPECIAL_ID)
        writer.add_eos_token_id(SPECIAL_ID)
        writer.add_add_bos_token(False)
        writer.add_add_eos_token(False)
        for tensor_name, array in gguf_tensors(model).items():
            writer.add_tensor(tensor_name, array)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()
    tmp.replace(path)
    return path


def read_tensors(path) -> dict[str, np.ndarray]:
    """The tensors of a GGUF file, back in numpy's row-major shape (for tests and checks)."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    return {t.name: np.asarray(t.data).reshape(tuple(int(n) for n in reversed(t.shape))) for t in reader.tensors}


# ---------------------------------------------------------------------------------------------- a big pair


def big_config(n_layers: int = 6, d_model: int = 768, n_heads: int = 12, d_ff: int = 2048) -> ModelConfig:
    """A Llama-shaped byte model whose float32 weights (≈ 4·n_layers·(d_model² + 1.5·d_model·d_ff) bytes, 170 MB
    by default) overflow a CPU's last-level cache, so every decode pass reads them from DRAM."""
    return ModelConfig(n_layers=n_layers, d_model=d_model, n_heads=n_heads, d_ff=d_ff, max_seq_len=4096)


PRINTABLE = range(32, 127)  # the bytes a random model may emit: printable ASCII


def random_model(config: ModelConfig, seed: int = 0) -> Transformer:
    """Random weights (N(0, 0.02), norms 1), float32: the book's init, seeded. Its outputs mean nothing; its
    cost is a real model's of that shape. The LM head's rows for bytes outside printable ASCII are zero, so
    their logits are 0 while the printable ones' are random around 0: greedy decoding emits printable ASCII
    (the chance that all 95 are negative at once is 2^-95), which an engine streams as text (random bytes
    are mostly not UTF-8, and a server holds back incomplete characters)."""
    torch.manual_seed(validate.integer("seed", seed, low=0))
    m = Transformer(config).eval()
    with torch.no_grad():
        keep = torch.zeros(config.vocab_size, dtype=torch.bool)
        keep[list(PRINTABLE)] = True
        m.lm_head.weight[~keep] = 0.0
    return m


def weight_bytes(config: ModelConfig) -> int:
    """Float32 bytes of a model's weights (what one decode pass reads), early-exit head excluded."""
    d, f, v = config.d_model, config.d_ff, config.vocab_size
    return 4 * (2 * v * d + d + config.n_layers * (4 * d * d + 3 * d * f + 2 * d))


# ---------------------------------------------------------------------------------------------- any GGUF pair


# llama.cpp's rule for a draft model (common/speculative.cpp at the pinned version, common_speculative_are_compatible):
# the same tokenizer type, the same BOS/EOS handling, vocabulary sizes within 128 tokens of each other, and the same
# text for every token from id 5 up to the smaller vocabulary's size
VOCAB_MAX_SIZE_DIFFERENCE = 128
VOCAB_CHECK_START_TOKEN_ID = 5


def check_gguf(path) -> Path:
    """``path`` as a Path, if it is a GGUF file whose header reads (``gguf_header.read_header``); else a ValueError
    that says what it is instead."""
    return gguf_header.read_header(path).path


def vocabulary(path) -> dict:
    """What llama.cpp compares between a target and its draft, read from a GGUF file's header
    (``gguf_header.read_header``): the tokenizer model, whether BOS/EOS are added and their ids, and the token
    texts. A file without a token list, or with one of these fields of the wrong type or out of range, gets a
    ValueError naming the file and the field."""
    header = gguf_header.read_header(path)
    meta, where = header.metadata, f"GGUF file {header.path}"
    tokens = meta.get("tokenizer.ggml.tokens")
    if not tokens:
        raise validate.BadArgument(f"{path} has no tokenizer.ggml.tokens: llama-server cannot serve it")
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise validate.BadArgument(f"{where}: tokenizer.ggml.tokens must be an array of strings")

    def field(key, kinds, what):
        value = meta.get(key)
        if value is not None and (not isinstance(value, kinds) or (kinds is int and isinstance(value, bool))):
            raise validate.BadArgument(f"{where}: {key} must be {what}, got {validate.shown(value)}")
        if kinds is int and value is not None and not 0 <= value < len(tokens):
            raise validate.BadArgument(f"{where}: {key} must be a token id in [0, {len(tokens) - 1}], got {value}")
        return value

    return {"model": field("tokenizer.ggml.model", str, "a string"),
            "add_bos": field("tokenizer.ggml.add_bos_token", bool, "a bool"),
            "add_eos": field("tokenizer.ggml.add_eos_token", bool, "a bool"),
            "bos": field("tokenizer.ggml.bos_token_id", int, "a token id"),
            "eos": field("tokenizer.ggml.eos_token_id", int, "a token id"), "tokens": tokens}


def check_pair(target, draft) -> dict:
    """Can ``draft`` draft for ``target`` in llama-server? Both must be GGUF files whose vocabularies pass llama.cpp's
    own test (``VOCAB_MAX_SIZE_DIFFERENCE``): else a ValueError naming the first difference, before any server
    starts (llama-server itself would only log it and refuse to load the draft). -> {"target": n tokens, "draft":
    n tokens, "tokenizer": its model}."""
    t, d = vocabulary(target), vocabulary(draft)
    why = None
    if t["model"] != d["model"]:
        why = f"tokenizer type {d['model']!r} against the target's {t['model']!r}"
    for end in ("bos", "eos"):
        if why is None and (t[f"add_{end}"] != d[f"add_{end}"] or (t[f"add_{end}"] and t[end] != d[end])):
            why = (f"{end.upper()} handling (added: {d[f'add_{end}']}, id {d[end]}) against the target's "
                   f"(added: {t[f'add_{end}']}, id {t[end]})")
    nt, nd = len(t["tokens"]), len(d["tokens"])
    if why is None and abs(nt - nd) > VOCAB_MAX_SIZE_DIFFERENCE:
        why = f"{nd} tokens against the target's {nt}, more than {VOCAB_MAX_SIZE_DIFFERENCE} apart"
    if why is None:
        for i in range(VOCAB_CHECK_START_TOKEN_ID, min(nt, nd)):
            if t["tokens"][i] != d["tokens"][i]:
                why = f"token {i} is {d['tokens'][i]!r} in the draft and {t['tokens'][i]!r} in the target"
                break
    if why is not None:
        raise validate.BadArgument(f"the draft {Path(draft).name} cannot draft for {Path(target).name}: its vocabulary "
                                   f"differs ({why}). llama-server's draft model needs the target's vocabulary")
    return {"target": nt, "draft": nd, "tokenizer": t["model"]}
