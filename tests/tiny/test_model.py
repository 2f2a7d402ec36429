"""The tiny transformer: cached == uncached, ragged batch == per-sequence, early exit, shipped weights."""

import pytest
import torch

from specnotes.tiny.model import (
    ModelConfig,
    Transformer,
    decode,
    encode,
    eval_loss,
    load_draft,
    load_target,
    load_text,
    model_card,
)

pytestmark = pytest.mark.usefixtures("one_thread")


TINY = ModelConfig(n_layers=3, d_model=32, n_heads=2, d_ff=64, exit_layer=2, max_seq_len=256)


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    model = Transformer(TINY).double().eval()
    for p in model.parameters():  # larger than the training init, so logits are far from uniform
        if p.dim() >= 2:
            p.data.normal_(0, 0.2)
    return model


def close(a, b):
    return torch.allclose(a, b, atol=1e-9, rtol=1e-9)


@torch.no_grad()
def test_cached_incremental_forward_equals_full_forward(tiny):
    tokens = torch.randint(0, 256, (3, 20), generator=torch.Generator().manual_seed(1))
    full = tiny(tokens)
    cache = tiny.new_cache(3, 32)
    parts = [tiny(tokens[:, :7], cache)]
    for i in range(7, 12):
        parts.append(tiny(tokens[:, i : i + 1], cache))
    parts.append(tiny(tokens[:, 12:], cache))
    assert close(torch.cat(parts, 1), full)
    assert cache.lengths.tolist() == [20, 20, 20]


@torch.no_grad()
def test_ragged_batch_equals_per_sequence_runs(tiny):
    g = torch.Generator().manual_seed(2)
    lengths = [3, 9, 1, 6]
    prompts = [torch.randint(0, 256, (n,), generator=g) for n in lengths]
    steps = torch.randint(0, 256, (4, 2, 3), generator=g)  # two more passes of 3 tokens each
    padded = torch.zeros(4, 9, dtype=torch.int64)
    for b, p in enumerate(prompts):
        padded[b, : len(p)] = p
    cache = tiny.new_cache(4, 32)
    first = tiny(padded, cache, n_valid=torch.tensor(lengths))
    later = [tiny(steps[:, i], cache) for i in range(2)]
    for b, p in enumerate(prompts):
        alone = tiny(torch.cat([p, steps[b, 0], steps[b, 1]])[None])[0]
        assert close(first[b, : len(p)], alone[: len(p)])
        assert close(later[0][b], alone[len(p) : len(p) + 3])
        assert close(later[1][b], alone[len(p) + 3 :])
    assert cache.lengths.tolist() == [n + 6 for n in lengths]


@torch.no_grad()
def test_early_exit_runs_only_the_first_layers(tiny):
    tokens = torch.randint(0, 256, (2, 10), generator=torch.Generator().manual_seed(3))
    _, exit_logits = tiny.forward_with_exit(tokens)
    assert close(tiny(tokens, exit_layer=2), exit_logits)
    cache = tiny.new_cache(2, 16)
    incremental = torch.cat([tiny(tokens[:, :4], cache, exit_layer=2), tiny(tokens[:, 4:], cache, exit_layer=2)], 1)
    assert close(incremental, exit_logits)
    assert cache.k[2].abs().sum() == 0  # the skipped layer's cache was never written
    assert close(tiny(tokens, exit_layer=3), tiny(tokens))  # exit at the last layer is the full model


@torch.no_grad()
def test_a_rows_view_runs_the_first_sequences_in_the_shared_cache(tiny):
    tokens = torch.randint(0, 256, (4, 9), generator=torch.Generator().manual_seed(4))
    cache = tiny.new_cache(4, 16)
    tiny(tokens[:, :6], cache)
    view = cache.rows(2)
    out = tiny(tokens[:2, 6:], view)  # only the first two sequences advance
    cache.lengths[:2] = view.lengths
    assert cache.lengths.tolist() == [9, 9, 6, 6]
    assert close(out, tiny(tokens[:2])[:, 6:])  # their keys and values landed in the shared cache
    after = torch.randint(0, 256, (4, 1), generator=torch.Generator().manual_seed(5))
    later = tiny(after, cache)  # the whole cache again: each sequence continues from its own length
    for b, n in enumerate((9, 9, 6, 6)):
        assert close(later[b, 0], tiny(torch.cat([tokens[b, :n], after[b]])[None])[0, -1])
    for bad in (0, 5):
        with pytest.raises(ValueError):
            cache.rows(bad)


def test_encode_decode_round_trip():
    text = "It is a truth universally acknowledged — naïve café"
    ids = encode(text)
    assert ids.dtype == torch.int64 and int(ids.max()) < 256
    assert decode(ids) == text
    assert decode(torch.cat([encode("ab"), torch.tensor([-1, -1])])) == "ab"


# ------------------------------------------------------------------------- shipped weights


@pytest.fixture(scope="module")
def shipped():
    return load_target(), load_draft()


def test_shipped_pair_sizes(shipped):
    target, draft = shipped
    ratio = target.num_params / draft.num_params
    assert 10 <= ratio <= 20
    assert 1.5e6 <= target.num_params <= 4e6
    assert target.config.exit_layer is not None and draft.config.exit_layer is None
    card = model_card()
    assert card["target"]["params"] == target.num_params and card["draft"]["params"] == draft.num_params


def test_shipped_models_beat_the_unigram_baseline(shipped):
    target, draft = shipped
    card = model_card()
    unigram = card["unigram_baseline"]["eval_loss_nats_per_byte"]
    text = load_text("eval")[:8192]  # a slice keeps this fast; the card has the full held-out loss
    target_loss, draft_loss = eval_loss(target, text), eval_loss(draft, text)
    exit_loss = eval_loss(target, text, exit_layer=target.config.exit_layer)
    assert target_loss < draft_loss < 0.8 * unigram
    assert target_loss < exit_loss < unigram
    # the recorded full held-out losses say the same
    assert card["target"]["eval_loss_nats_per_byte"] < card["draft"]["eval_loss_nats_per_byte"] < 0.8 * unigram
    assert abs(card["target"]["eval_loss_bits_per_byte"] * 0.6931 - card["target"]["eval_loss_nats_per_byte"]) < 1e-3


def test_corpus_split_is_disjoint_and_held_out():
    train, held_out = load_text("train"), load_text("eval")
    assert 1_000_000 < len(train) < 3_000_000 and 0.03 < len(held_out) / (len(train) + len(held_out)) < 0.07
    assert held_out[:200] not in train


def test_training_smoke_run_is_reproducible(tmp_path):
    from specnotes.tiny.train import TrainConfig, save, train

    config = ModelConfig(n_layers=2, d_model=16, n_heads=2, d_ff=32, exit_layer=1)
    tc = TrainConfig(steps=3, batch=2, block=16, warmup=1)
    text = load_text("eval")[:2000]
    model_a, record = train(config, tc, log_every=10, eval_text=text)
    model_b, _ = train(config, tc, log_every=10, eval_text=text)
    state_a, state_b = model_a.state_dict(), model_b.state_dict()
    assert all(torch.equal(state_a[name], state_b[name]) for name in state_a)
    assert record["params"] == model_a.num_params and record["train"]["steps"] == 3
    assert 0 < record["exit_eval_loss_nats_per_byte"] < 10
    save("tiny", model_a, record, data_dir=tmp_path)
    state = torch.load(tmp_path / "tiny.pt", weights_only=True)
    assert all(v.dtype == torch.float16 for v in state.values())
    assert "unigram_baseline" in (tmp_path / "models.json").read_text()
