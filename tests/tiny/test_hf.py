"""Cross-check against Hugging Face transformers (the optional ``specnotes[hf]`` extra): the exported Llama models
compute specnotes' logits, and transformers' greedy, assisted and prompt-lookup decoding produce specnotes'
tokens with the same number of target passes.

``transformers`` is an optional extra: without it these tests skip, except under CI (``CI=true``), where
``make test`` has installed ``specnotes[hf]`` and a missing or broken ``transformers`` must fail, not skip."""

import os

import pytest
import torch

if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
    import transformers  # CI: an ImportError here fails the run
else:
    transformers = pytest.importorskip("transformers")

from specnotes.tiny import hf  # noqa: E402
from specnotes.tiny.drafters import EarlyExitDrafter, NgramDrafter, quote_task  # noqa: E402
from specnotes.tiny.generate import generate, speculative_generate  # noqa: E402
from specnotes.tiny.model import ModelConfig, Transformer, encode, load_draft, load_target, load_text  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def shipped():
    # float64: greedy tokens are compared one for one, and fp32 rounding could flip a near-tie
    target, draft = load_target(dtype=torch.float64), load_draft(dtype=torch.float64)
    return {"target": (target, hf.to_transformers(target)), "draft": (draft, hf.to_transformers(draft)),
            "exit": (target, hf.to_transformers(target, exit_layer=target.config.exit_layer))}


def test_pinned_version():
    assert transformers.__version__ == hf.TRANSFORMERS_VERSION


@pytest.mark.parametrize("which", ["target", "draft", "exit"])
def test_exported_logits_equal_specnotes(shipped, which):
    ours, theirs = shipped[which]
    x = encode(load_text("eval")[:256])[None]
    kwargs = {"exit_layer": ours.config.exit_layer} if which == "exit" else {}
    with torch.no_grad():
        a, b = ours(x, **kwargs), theirs(x).logits
    assert a.abs().max() > 5  # not a degenerate comparison
    assert (a - b).abs().max() < 1e-4  # fp32: RoPE and RMSNorm rounding differ in the last bits
    assert theirs.config.num_key_value_heads == ours.config.n_heads and not theirs.config.tie_word_embeddings


def test_a_wrong_mapping_is_caught():
    """The logit check has teeth: swapping gate and up, or rotating interleaved pairs, changes the logits."""
    torch.manual_seed(0)
    model = Transformer(ModelConfig(n_layers=1, d_model=32, n_heads=2, d_ff=48, max_seq_len=64)).eval()
    for p in model.parameters():
        if p.dim() >= 2:
            p.data.normal_(0, 0.3)
    x = torch.randint(0, 256, (1, 16))
    good = hf.to_transformers(model)
    with torch.no_grad():
        assert (model(x) - good(x).logits).abs().max() < 1e-4
        state = hf.llama_state_dict(model, 1)
        gate, up = state["model.layers.0.mlp.gate_proj.weight"], state["model.layers.0.mlp.up_proj.weight"]
        swapped = dict(state) | {"model.layers.0.mlp.gate_proj.weight": up, "model.layers.0.mlp.up_proj.weight": gate}
        good.load_state_dict(swapped)
        assert (model(x) - good(x).logits).abs().max() > 1e-2
        d = model.config.d_head
        interleave = torch.arange(d).view(2, d // 2).t().flatten()  # Meta's layout: pairs (0, 1), (2, 3), ...
        perm = torch.cat([h * d + interleave for h in range(model.config.n_heads)])
        rotated = dict(state) | {name: state[name][perm] for name in ("model.layers.0.self_attn.q_proj.weight",
                                                                        "model.layers.0.self_attn.k_proj.weight")}
        good.load_state_dict(rotated)
        assert (model(x) - good(x).logits).abs().max() > 1e-2


PROMPTS = [load_text("eval")[:60], load_text("eval")[4000:4100]]
QUOTE = quote_task(load_text("eval")[:150])  # a passage, then the start of a quotation of it (Chapter 7)


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_and_assisted_generation_match_specnotes(shipped, prompt):
    (target, hf_target), (draft, hf_draft) = shipped["target"], shipped["draft"]
    plain = generate(target, [prompt], 48).tokens[0]
    tokens, passes = hf.hf_generate(hf_target, encode(prompt), 48)
    assert torch.equal(tokens, plain) and passes == 48  # HF's prefill pass also yields the first token
    for k in (2, 4):
        spec = speculative_generate(target, draft, [prompt], 48, k=k)
        tokens, passes = hf.hf_generate(hf_target, encode(prompt), 48, assistant=hf_draft, k=k)
        assert torch.equal(tokens, plain) and torch.equal(spec.tokens[0], plain)
        # same drafts, same acceptances: HF folds the prefill into its first verify pass
        assert passes == spec.stats.target_passes - 1


def test_assisted_generation_with_the_exported_early_exit(shipped):
    (target, hf_target), (_, hf_exit) = shipped["target"], shipped["exit"]
    prompt = PROMPTS[0]
    spec = speculative_generate(target, EarlyExitDrafter(target), [prompt], 40, k=3)
    tokens, passes = hf.hf_generate(hf_target, encode(prompt), 40, assistant=hf_exit, k=3)
    assert torch.equal(tokens, spec.tokens[0]) and passes == spec.stats.target_passes - 1


@pytest.mark.parametrize(("k", "max_ngram"), [(3, 2), (6, 3)])
def test_prompt_lookup_matches_the_ngram_drafter(shipped, k, max_ngram):
    target, hf_target = shipped["target"]
    for prompt in [*PROMPTS, QUOTE]:
        spec = speculative_generate(target, NgramDrafter(max_ngram=max_ngram), [prompt], 48, k=k)
        tokens, passes = hf.hf_generate(hf_target, encode(prompt), 48, prompt_lookup=k, max_ngram=max_ngram)
        assert torch.equal(tokens, spec.tokens[0])
        assert passes == spec.stats.target_passes - 1  # the same lookups, accepted alike
        assert spec.stats.mean_tokens_per_iteration > 1  # lookups did propose and get accepted
    assert passes < 48 * 3 // 4  # on the quotation prompt lookups save over a quarter of the 48 decode passes


def test_bad_arguments():
    with pytest.raises(TypeError):
        hf.to_transformers(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError):
        hf.to_transformers(load_draft(), exit_layer=1)  # the draft has no early-exit head
