"""Export the shipped models to Hugging Face ``transformers`` (``pip install specnotes[hf]``): a cross-check
against an implementation somebody else wrote.

``to_transformers(model)`` builds a ``LlamaForCausalLM`` whose logits equal specnotes' to float tolerance.
The mapping, piece by piece:

- RMSNorm: same formula and ``eps``; HF normalizes in float32 and casts back;
- rotary embeddings: specnotes rotates the two *halves* of each head, [x1·cos − x2·sin, x1·sin + x2·cos]
  with frequencies base^(−i/(d/2)); that is HF's ``rotate_half`` convention with the same frequencies,
  so q and k need no permutation (checkpoints converted from Meta's interleaved layout do);
- attention: multi-head (``num_key_value_heads = n_heads``), ``wqkv`` split into q, k, v (rows in that order,
  each head contiguous), no biases;
- SwiGLU: ``w_gate_up`` holds gate then up (``chunk(2)``): rows [:d_ff] → ``gate_proj``, [d_ff:] → ``up_proj``;
- the LM head is untied (its own matrix), so ``tie_word_embeddings=False``.

``to_transformers(target, exit_layer=j)`` exports the early exit as a model of its own: the first j blocks,
the exit norm as the final norm, the shared LM head. ``hf_generate`` runs HF's greedy, assisted and
prompt-lookup decoding on byte prompts and counts the target's forward passes.
"""

from __future__ import annotations

import torch

from specnotes import validate
from specnotes.tiny.model import Transformer

TRANSFORMERS_VERSION = "5.24.0"  # the version the tests and Chapter 7 ran with (requirements.txt pins it)


def llama_config(model: Transformer, n_layers: int):
    from transformers import LlamaConfig

    c = model.config
    return LlamaConfig(
        vocab_size=c.vocab_size, hidden_size=c.d_model, intermediate_size=c.d_ff, num_hidden_layers=n_layers,
        num_attention_heads=c.n_heads, num_key_value_heads=c.n_heads, head_dim=c.d_head, hidden_act="silu",
        max_position_embeddings=c.max_seq_len, rms_norm_eps=c.norm_eps,
        rope_parameters={"rope_type": "default", "rope_theta": c.rope_base},
        attention_bias=False, mlp_bias=False, tie_word_embeddings=False,
        bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )


def llama_state_dict(model: Transformer, n_layers: int) -> dict[str, torch.Tensor]:
    """specnotes parameter -> LlamaForCausalLM parameter, for the first ``n_layers`` blocks."""
    d, d_ff = model.config.d_model, model.config.d_ff
    state = {"model.embed_tokens.weight": model.tok_emb.weight, "lm_head.weight": model.lm_head.weight,
             "model.norm.weight": (model.norm if n_layers == model.config.n_layers else model.exit_norm).weight}
    for i, block in enumerate(model.blocks[:n_layers]):
        q, k, v = block.wqkv.weight.split(d)
        gate, up = block.w_gate_up.weight.split(d_ff)
        prefix = f"model.layers.{i}."
        state |= {
            prefix + "input_layernorm.weight": block.attn_norm.weight,
            prefix + "self_attn.q_proj.weight": q, prefix + "self_attn.k_proj.weight": k,
            prefix + "self_attn.v_proj.weight": v, prefix + "self_attn.o_proj.weight": block.wo.weight,
            prefix + "post_attention_layernorm.weight": block.mlp_norm.weight,
            prefix + "mlp.gate_proj.weight": gate, prefix + "mlp.up_proj.weight": up,
            prefix + "mlp.down_proj.weight": block.w_down.weight,
        }
    return {name: w.detach().clone() for name, w in state.items()}


def to_transformers(model: Transformer, exit_layer: int | None = None, attn_implementation: str = "eager"):
    """A ``transformers.LlamaForCausalLM`` computing the same logits as ``model`` (or as its early exit),
    in ``model``'s dtype and on its device, in eval mode. No download: the weights are copied."""
    from transformers import LlamaForCausalLM

    if not isinstance(model, Transformer):
        raise validate.BadArgumentType(f"model must be a specnotes Transformer, got {type(model).__name__}")
    n_layers = model.check_exit_layer(exit_layer)
    weight = model.lm_head.weight
    hf = LlamaForCausalLM(llama_config(model, n_layers)).to(dtype=weight.dtype)
    hf.config._attn_implementation = validate.choice("attn_implementation", attn_implementation, ("eager", "sdpa"))
    hf.load_state_dict(llama_state_dict(model, n_layers), strict=True)
    hf.generation_config.pad_token_id = 0  # bytes have no pad token; this silences HF's warning only
    return hf.to(weight.device).eval()


def count_forwards(hf_model):
    """Attach a counter of ``hf_model``'s forward calls: returns a list whose length is the count so far."""
    calls = []
    hf_model.register_forward_pre_hook(lambda module, args: calls.append(1))
    return calls


@torch.inference_mode()
def hf_generate(hf_target, prompt: torch.Tensor, max_new_tokens: int, *, assistant=None, k: int | None = None,
                prompt_lookup: int | None = None, max_ngram: int = 2) -> tuple[torch.Tensor, int]:
    """Greedy decoding with transformers' ``generate`` from one byte prompt [n] -> (new tokens [max_new_tokens],
    the target's forward passes). ``assistant`` (an exported draft) with ``k`` drafts per iteration: assisted
    generation with a constant k and no confidence cut-off, the plain speculative loop; ``prompt_lookup=k``:
    prompt-lookup decoding matching up to ``max_ngram`` tokens."""
    max_new_tokens = validate.integer("max_new_tokens", max_new_tokens, low=1)
    ids = torch.as_tensor(prompt, dtype=torch.int64).reshape(1, -1).to(hf_target.device)
    kwargs = {"max_new_tokens": max_new_tokens, "do_sample": False, "pad_token_id": 0,
              "attention_mask": torch.ones_like(ids)}
    if assistant is not None:
        assistant.generation_config.num_assistant_tokens = validate.integer("k", k, low=1)
        assistant.generation_config.num_assistant_tokens_schedule = "constant"
        assistant.generation_config.assistant_confidence_threshold = 0.0
        kwargs["assistant_model"] = assistant
    if prompt_lookup is not None:
        kwargs |= {"prompt_lookup_num_tokens": validate.integer("prompt_lookup", prompt_lookup, low=1),
                   "max_matching_ngram_size": validate.integer("max_ngram", max_ngram, low=1)}
    from transformers.utils import logging

    calls = count_forwards(hf_target)
    verbosity = logging.get_verbosity()
    logging.set_verbosity_error()  # assisted generation warns about its own internal generation_config
    try:
        out = hf_target.generate(ids, **kwargs)
    finally:
        logging.set_verbosity(verbosity)
    return out[0, ids.shape[1]:].cpu(), len(calls)
