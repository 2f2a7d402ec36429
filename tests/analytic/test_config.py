"""The config.json reader (``moe.read_config``, ``moe.shape_from_config``): every field it reads refused by name when
outside its range, before anything is computed from it (issue 45 part 2)."""

from __future__ import annotations

import json
import time
from dataclasses import replace

import pytest
from named_cases import DEEPSEEK_V3, LLAMA_8B, QWEN3_MOE

from specnotes import validate
from specnotes.analytic import cost, moe


@pytest.mark.parametrize("base, change, says", [
    (LLAMA_8B, {"num_hidden_layers": 10**30}, r"num_hidden_layers must be an integer in \[1, 1024\], got 1e\+30"),
    (LLAMA_8B, {"num_hidden_layers": 10**5000}, r"num_hidden_layers must be an integer in \[1, 1024\], got about "
                                                 r"10\^5000"),
    (LLAMA_8B, {"num_hidden_layers": 32.0}, r"num_hidden_layers must be an integer in \[1, 1024\], got 32\.0"),
    (LLAMA_8B, {"vocab_size": 10**30}, r"vocab_size must be an integer in \[1, 2097152\], got 1e\+30"),
    (LLAMA_8B, {"hidden_size": 0}, r"hidden_size must be an integer in \[1, 262144\], got 0"),
    (LLAMA_8B, {"num_key_value_heads": 64}, r"num_key_value_heads must be an integer in \[1, 32\], got 64"),
    (LLAMA_8B, {"num_key_value_heads": 0}, r"num_key_value_heads must be an integer in \[1, 32\], got 0"),
    (LLAMA_8B, {"head_dim": "128"}, r"head_dim must be an integer in \[1, 262144\], got '128'"),
    (LLAMA_8B, {"tie_word_embeddings": "false"}, r"tie_word_embeddings must be true or false, got 'false'"),
    (LLAMA_8B, {"num_attention_heads": 30}, r"hidden_size \(4096\) must be a multiple of num_attention_heads \(30\), "
                                             r"or head_dim must be given"),
    (LLAMA_8B, {"num_key_value_heads": 5}, r"num_attention_heads \(32\) must be a multiple of "
                                            r"num_key_value_heads \(5\)"),
    (LLAMA_8B, {"_name_or_path": 7}, r"_name_or_path must be a string, got 7"),
    (LLAMA_8B, {"text_config": "llama"}, r"text_config must be an object, got 'llama'"),
    (QWEN3_MOE, {"num_hidden_layers": 10**9}, r"num_hidden_layers must be an integer in \[1, 1024\]"),
    (QWEN3_MOE, {"num_experts": 10**6}, r"num_experts must be an integer in \[1, 4096\], got 1000000"),
    (QWEN3_MOE, {"num_experts_per_tok": 200}, r"num_experts_per_tok must be at most n_experts \(num_experts = 128\)"),
    (QWEN3_MOE, {"moe_layers": "all"}, r"moe_layers must be a list of layer indices in \[0, 47\], got 'all'"),
    (QWEN3_MOE, {"moe_layers": [0, 48]}, r"moe_layers\[1\] must be an integer in \[0, 47\], got 48"),
    (QWEN3_MOE, {"mlp_only_layers": 5}, r"mlp_only_layers must be a list of layer indices in \[0, 47\], got 5"),
    (QWEN3_MOE, {"mlp_only_layers": [True]}, r"mlp_only_layers\[0\] must be an integer in \[0, 47\], got True"),
    (QWEN3_MOE, {"decoder_sparse_step": "2"}, r"decoder_sparse_step must be an integer in \[1, 48\], got '2'"),
    (QWEN3_MOE, {"decoder_sparse_step": 0}, r"decoder_sparse_step must be an integer in \[1, 48\], got 0"),
    (QWEN3_MOE, {"interleave_moe_layer_step": 49}, r"interleave_moe_layer_step must be an integer in \[1, 48\]"),
    (QWEN3_MOE, {"shared_expert_intermediate_size": [1]}, r"shared_expert_intermediate_size must be an integer"),
    (DEEPSEEK_V3, {"qk_rope_head_dim": None}, r"lacks qk_rope_head_dim: an integer in \[0, 262144\]"),
    (DEEPSEEK_V3, {"first_k_dense_replace": 62}, r"first_k_dense_replace must be an integer in \[0, 61\], got 62"),
    (DEEPSEEK_V3, {"moe_layer_freq": 0}, r"moe_layer_freq must be an integer in \[1, 61\], got 0"),
    (DEEPSEEK_V3, {"kv_lora_rank": -5}, r"kv_lora_rank must be an integer in \[1, 262144\], got -5"),
])
def test_a_bad_field_is_refused_by_name(base, change, says, tmp_path):
    config = {k: v for k, v in {**base, **change}.items() if v is not None}
    start = time.perf_counter()
    with pytest.raises(validate.BadArgument, match=says):
        moe.shape_from_config(config)
    assert time.perf_counter() - start < 5  # a MoE of 10^9 layers was a loop of 10^9
    try:
        text = json.dumps(config)
    except ValueError:  # an integer of more digits than Python prints
        return
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(validate.BadArgument, match=says) as err:
        moe.read_config(path)
    assert str(err.value).startswith(str(path))  # the file is named first


def test_a_config_file_is_read_once_and_named(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(QWEN3_MOE))
    assert moe.read_config(path) == replace(cost.MOE_PRESETS["Qwen3-30B-A3B"], name="qwen3_moe")  # its model_type
    for text, says in (("[1, 2]", "holds a JSON list, not the object"), ("{", "is not JSON"), ("", "is not JSON"),
                       ("[" * 100_000, "is not JSON"), ('{"a": ' + "9" * 5000 + "}", "is not JSON")):
        path.write_text(text)
        with pytest.raises(validate.BadArgument, match=f"^config: {path}.*{says}"):
            moe.read_config(path)
    with pytest.raises(validate.BadArgument, match=r"cannot read .*missing\.json"):
        moe.read_config(tmp_path / "missing.json")
