"""The GGUF export without llama.cpp: the file read back by gguf's own reader, and a numpy Llama that reads it
the way llama.cpp's ``llama`` architecture does (adjacent-pair rotary embeddings, ggml's tensor layout) must give
specnotes' logits. tests/serve/test_engine.py checks the same files on llama-server itself (make engine-smoke)."""

import numpy as np
import pytest
import torch

gguf = pytest.importorskip("gguf")

from gguf_files import vocab_file  # noqa: E402

from specnotes.tiny import gguf_export, model  # noqa: E402
from specnotes.tiny.model import apply_rope  # noqa: E402


def llama_cpp_rope(x: np.ndarray, positions: np.ndarray, base: float) -> np.ndarray:
    """llama.cpp's LLAMA_ROPE_TYPE_NORM: pairs (2i, 2i+1) of each head rotated by pos · base^(-2i/d).
    x [n, H, D]."""
    d = x.shape[-1]
    theta = positions[:, None] * base ** (-np.arange(0, d, 2) / d)  # [n, D/2]
    cos, sin = np.cos(theta)[:, None], np.sin(theta)[:, None]
    even, odd = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out


def llama_cpp_forward(tensors: dict, tokens: list[int], n_heads: int, eps: float, base: float) -> np.ndarray:
    """Logits [n, V] of a llama GGUF's tensors, computed as llama.cpp's graph does (float64)."""
    t = {k: v.astype(np.float64) for k, v in tensors.items()}
    rms = lambda x, w: x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w
    x = t["token_embd.weight"][tokens]
    n, d = x.shape
    dh = d // n_heads
    pos = np.arange(n, dtype=np.float64)
    causal = np.triu(np.full((n, n), -np.inf), 1)
    layers = 1 + max(int(k.split(".")[1]) for k in t if k.startswith("blk."))
    for i in range(layers):
        w = lambda name, i=i: t[f"blk.{i}.{name}.weight"]
        h = rms(x, w("attn_norm"))
        q = llama_cpp_rope((h @ w("attn_q").T).reshape(n, n_heads, dh), pos, base)
        k = llama_cpp_rope((h @ w("attn_k").T).reshape(n, n_heads, dh), pos, base)
        v = (h @ w("attn_v").T).reshape(n, n_heads, dh)
        scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(dh) + causal
        p = np.exp(scores - scores.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        x = x + np.einsum("hqk,khd->qhd", p, v).reshape(n, d) @ w("attn_output").T
        h = rms(x, w("ffn_norm"))
        gate, up = h @ w("ffn_gate").T, h @ w("ffn_up").T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ w("ffn_down").T
    return rms(x, t["output_norm.weight"]) @ t["output.weight"].T


def test_the_permutation_turns_rotate_half_into_adjacent_pairs():
    rng = np.random.default_rng(0)
    H, D, d_model, n = 3, 8, 12, 5
    w = rng.standard_normal((H * D, d_model))
    h = rng.standard_normal((n, d_model))
    config = model.ModelConfig(n_layers=1, d_model=H * D, n_heads=H, d_ff=8, max_seq_len=64)
    cos, sin = model.rope_table(config)
    pos = torch.arange(n)
    ours = apply_rope(torch.tensor(h @ w.T).view(1, n, H, D).transpose(1, 2), cos[pos][None], sin[pos][None])
    ours = ours.transpose(1, 2)[0].numpy()  # [n, H, D], rotate-half layout
    theirs = llama_cpp_rope((h @ gguf_export.rope_permute(w, H).T).reshape(n, H, D), pos.numpy().astype(float),
                            config.rope_base)
    # the same rotated vectors, each head's dimensions in the interleaved order
    assert np.allclose(theirs, gguf_export.rope_permute(ours.reshape(n, H * D).T, H).T.reshape(n, H, D), atol=1e-5)
    # the mutant: rows left in rotate-half order are rotated in the wrong pairs
    wrong = llama_cpp_rope((h @ w.T).reshape(n, H, D), pos.numpy().astype(float), config.rope_base)
    assert not np.allclose(wrong, ours, atol=1e-3)


@pytest.mark.parametrize("which", ["draft", "target"])
def test_the_file_computes_specnotes_logits(tmp_path, which):
    m = model.load_model(which)
    path = gguf_export.write_gguf(m, tmp_path / f"{which}.gguf", which, context=256)
    tensors = gguf_export.read_tensors(path)
    assert all(a.dtype == np.float32 for a in tensors.values())
    assert sum(a.size for a in tensors.values()) == m.num_params - (m.config.d_model if m.exit_norm else 0)
    tokens = model.encode("It is a truth universally acknowledged").tolist()
    with torch.no_grad():
        ours = m(torch.tensor([tokens]))[0].double().numpy()
    theirs = llama_cpp_forward(tensors, tokens, m.config.n_heads, m.config.norm_eps, m.config.rope_base)
    assert np.abs(theirs - ours).max() < 1e-3 * np.abs(ours).max()
    assert (theirs.argmax(-1) == ours.argmax(-1)).all()


def test_the_metadata_is_a_byte_vocabulary_llama_cpp_accepts(tmp_path):
    path = gguf_export.write_gguf(model.load_draft(), tmp_path / "d.gguf", "d", context=256)
    fields = gguf.GGUFReader(str(path)).fields
    value = lambda key: fields[key].contents()
    assert value("general.architecture") == "llama" and value("llama.context_length") == 256
    assert value("tokenizer.ggml.model") == "gpt2" and value("tokenizer.ggml.pre") == "default"
    tokens = value("tokenizer.ggml.tokens")
    assert len(tokens) == len(set(tokens)) == 256 and tokens[ord("a")] == "a" and tokens[ord(" ")] == "Ġ"
    # a merges list must be there (gguf-py drops an empty one, and llama.cpp refuses a file without), and its
    # one merge must never apply to a byte
    assert value("tokenizer.ggml.merges") == [gguf_export.DUMMY_MERGE]
    assert not set(gguf_export.DUMMY_MERGE.split()) & set(tokens)
    assert value("tokenizer.ggml.add_bos_token") is False
    assert value("llama.rope.dimension_count") == 32 and value("general.file_type") == 0  # ALL_F32


def test_bad_input_is_refused(tmp_path):
    with pytest.raises(ValueError, match="specnotes Transformer"):
        gguf_export.write_gguf("model", tmp_path / "x.gguf")
    with pytest.raises(ValueError, match="context"):
        gguf_export.write_gguf(model.load_draft(), tmp_path / "x.gguf", context=10**6)
    with pytest.raises(ValueError, match="heads of even size"):
        gguf_export.rope_permute(np.zeros((6, 4)), 2)
    assert not list(tmp_path.iterdir())


def test_the_big_model_overflows_a_last_level_cache():
    config = gguf_export.big_config()
    assert gguf_export.weight_bytes(config) > 100e6  # far above this machine's 48 MB L3
    m = gguf_export.random_model(gguf_export.big_config(n_layers=1, d_model=64, n_heads=2, d_ff=128), seed=3)
    assert gguf_export.weight_bytes(m.config) == 4 * sum(p.numel() for p in m.parameters())
    # its greedy text is printable ASCII, so an engine streams it as text
    from specnotes.tiny import generate

    out = generate.generate(m, [model.encode("It is a truth")], 64).tokens[0]
    assert all(32 <= int(t) < 127 for t in out)


def test_a_pair_with_the_same_vocabulary_passes_llama_cpps_test(tmp_path):
    byte = gguf_export.byte_vocab()
    target, draft = vocab_file(tmp_path / "t.gguf", byte), vocab_file(tmp_path / "d.gguf", byte)
    assert gguf_export.check_pair(target, draft) == {"target": 256, "draft": 256, "tokenizer": "gpt2"}
    # llama.cpp tolerates up to 128 extra tokens at the end, and differences below id 5
    longer = vocab_file(tmp_path / "l.gguf", byte + [f"<extra {i}>" for i in range(128)])
    assert gguf_export.check_pair(target, longer)["draft"] == 384
    low = vocab_file(tmp_path / "low.gguf", ["<s>"] + byte[1:])
    assert gguf_export.check_pair(target, low)["draft"] == 256


@pytest.mark.parametrize(("draft", "says"), [
    (dict(tokens=gguf_export.byte_vocab() + [f"<x{i}>" for i in range(129)]), "385 tokens against the target's 256"),
    (dict(tokens=gguf_export.byte_vocab()[:5] + ["zz"] + gguf_export.byte_vocab()[6:]), "token 5 is 'zz'"),
    (dict(tokens=gguf_export.byte_vocab(), tokenizer="llama"), "tokenizer type 'llama'"),
    (dict(tokens=gguf_export.byte_vocab(), add_bos=True), "BOS handling"),
])
def test_a_draft_with_another_vocabulary_is_refused_by_name(tmp_path, draft, says):
    target = vocab_file(tmp_path / "t.gguf", gguf_export.byte_vocab())
    other = vocab_file(tmp_path / "d.gguf", **draft)
    with pytest.raises(ValueError, match="cannot draft for t.gguf: its vocabulary differs") as error:
        gguf_export.check_pair(target, other)
    assert says in str(error.value)


def test_a_file_that_is_not_gguf_is_refused_by_name(tmp_path):
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"\x08\x00\x00\x00{}      ")
    with pytest.raises(ValueError, match="model.safetensors is not a GGUF file: it starts with"):
        gguf_export.check_gguf(weights)
    with pytest.raises(ValueError, match="no model file"):
        gguf_export.check_gguf(tmp_path / "missing.gguf")
    empty = vocab_file(tmp_path / "e.gguf", ["a"])
    with pytest.raises(ValueError, match="not a GGUF file"):
        gguf_export.check_pair(weights, empty)
