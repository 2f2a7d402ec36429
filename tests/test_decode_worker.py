"""The decode worker: continuous batching with speculation, and the drafter-state handoff."""

import random

import pytest
import torch

from specnotes import decode_worker, generate, model, sampling
from specnotes.decode_worker import DecodeWorker, Handoff, MissingDrafterState, check_handoff, prefill
from specnotes.validate import BadArgument


@pytest.fixture(scope="module")
def pair64():
    """In float64 a verify pass and a decode step give the same logits to ~1e-15: greedy outputs must match."""
    return model.load_target(dtype=torch.float64), model.load_draft(dtype=torch.float64)


@pytest.fixture(scope="module")
def prompts():
    text = model.load_text("eval")
    return [model.encode(text[i * 997: i * 997 + 12 + i % 7]) for i in range(10)]


def plain_reference(target, prompt, n):
    return generate.generate(target, [prompt], n).tokens[0]


@pytest.mark.parametrize("seed", [0, 1])
def test_any_schedule_of_arrivals_and_ks_decodes_exactly_like_plain_greedy(pair64, prompts, seed, one_thread):
    """Requests join and leave at random, k changes every step (0 included: the draft then catches up),
    some handoffs carry the draft's KV, some only the prompt, some nothing (decoded plainly)."""
    target, draft = pair64
    lengths = [6 + 3 * i for i in range(len(prompts))]
    reference = [plain_reference(target, p, n) for p, n in zip(prompts, lengths, strict=True)]
    rng = random.Random(seed)
    state = [dict(draft=draft), dict(), dict(drafter_state=False)]  # draft KV, prompt only, nothing
    handoffs = [prefill(target, p, n, i, **state[rng.randrange(3)])
                for i, (p, n) in enumerate(zip(prompts, lengths, strict=True))]
    worker = DecodeWorker(target, draft, slots=4, capacity=64, k_max=4, on_missing="plain")
    queue, finished = list(handoffs), {}
    while queue or worker.n:
        while queue and worker.n < rng.randint(1, 4):
            worker.admit(queue.pop(0))
        for done in worker.step(rng.choice([0, 0, 1, 2, 4])).finished:
            finished[done.request_id] = done
    for h in handoffs:
        assert torch.equal(finished[h.request_id].tokens, reference[h.request_id]), h.request_id
        assert finished[h.request_id].speculated == (h.prompt is not None or h.draft_cache is not None)


def test_steps_report_what_they_delivered(pair64, prompts, one_thread):
    target, draft = pair64
    worker = DecodeWorker(target, draft, slots=2, capacity=64, k_max=3)
    worker.admit(prefill(target, prompts[0], 5, 0, draft=draft))
    worker.admit(prefill(target, prompts[1], 40, 1, draft=draft))
    delivered = []
    while worker.n:
        result = worker.step(3)
        assert result.k == 3 and 0 <= result.drafts_accepted <= result.drafts_checked
        delivered.append(result.tokens)
    assert sum(delivered) == 45  # overshoot past a request's budget is not counted


# ---------------------------------------------------------------------------------------------- the handoff


def test_a_handoff_without_drafter_state_is_refused_clearly(pair64, prompts):
    target, draft = pair64
    worker = DecodeWorker(target, draft, slots=2, capacity=64, k_max=2)  # on_missing="refuse" by default
    broken = prefill(target, prompts[0], 8, request_id=7, drafter_state=False)
    with pytest.raises(MissingDrafterState, match=r"request 7: .*draft_model drafter .*draft_cache, prompt.*"
                                                  r"on_missing='plain'.*#36140"):
        worker.admit(broken)
    assert worker.n == 0  # nothing half-admitted
    worker.admit(prefill(target, prompts[0], 8, request_id=8, draft=draft))
    assert worker.n == 1 and worker.step(2).batch == 1


def test_a_handoff_without_drafter_state_can_decode_plainly(pair64, prompts, one_thread):
    target, draft = pair64
    worker = DecodeWorker(target, draft, slots=2, capacity=64, k_max=2, on_missing="plain")
    assert worker.admit(prefill(target, prompts[2], 10, 0, drafter_state=False)) is False
    assert worker.admit(prefill(target, prompts[3], 10, 1, draft=draft)) is True
    out = {}
    while worker.n:
        result = worker.step(2)
        out.update({f.request_id: f for f in result.finished})
    assert not out[0].speculated and out[1].speculated
    assert torch.equal(out[0].tokens, plain_reference(target, prompts[2], 10))
    assert torch.equal(out[1].tokens, plain_reference(target, prompts[3], 10))


def test_each_drafter_names_the_state_it_needs(pair64, prompts):
    target, _ = pair64
    bare = prefill(target, prompts[0], 4, 3, drafter_state=False)
    for drafter, fields in decode_worker.DRAFTER_STATE.items():
        with pytest.raises(MissingDrafterState, match=", ".join(fields)):
            check_handoff(bare, drafter)
    with_prompt = prefill(target, prompts[0], 4, 3)
    assert check_handoff(with_prompt, "ngram") == "prompt" and check_handoff(with_prompt, "draft_model") == "prompt"
    with pytest.raises(MissingDrafterState, match="hidden"):
        check_handoff(with_prompt, "eagle")  # an EAGLE-style drafter needs the hidden state, not the prompt
    hidden = Handoff(3, bare.target_cache, bare.last_token, 4, hidden=torch.zeros(1, 192))
    assert check_handoff(hidden, "eagle") == "hidden"
    with pytest.raises(BadArgument, match="drafter"):
        check_handoff(with_prompt, "medusa")


# ---------------------------------------------------------------------------------------------- arguments


def test_arguments_and_states_are_checked(pair64, prompts):
    target, draft = pair64
    with pytest.raises(BadArgument, match="on_missing"):
        DecodeWorker(target, draft, slots=1, capacity=32, on_missing="ignore")
    with pytest.raises(BadArgument, match="slots"):
        DecodeWorker(target, draft, slots=0, capacity=32)
    with pytest.raises(BadArgument, match="load the draft with device='cpu'"):
        DecodeWorker(target, model.load_draft().to("meta"), slots=1, capacity=32)
    worker = DecodeWorker(target, draft, slots=1, capacity=32, k_max=2)
    with pytest.raises(RuntimeError, match="no request is running"):
        worker.step(0)
    with pytest.raises(BadArgument, match="past the worker's capacity"):
        worker.admit(prefill(target, prompts[0], 30, 0, draft=draft))
    worker.admit(prefill(target, prompts[0], 4, 0, draft=draft))
    with pytest.raises(RuntimeError, match="all 1 slots are busy"):
        worker.admit(prefill(target, prompts[1], 4, 1, draft=draft))
    with pytest.raises(BadArgument, match="k must be"):
        worker.step(3)
    with pytest.raises(BadArgument, match="prompt"):
        prefill(target, torch.zeros(0, dtype=torch.int64), 4)


# ---------------------------------------------------------------------------------------------- temperature 1


def first_tokens(target, draft, prompt, k, rows, repeats, state):
    """The first new token of ``rows`` copies of one request, ``repeats`` times over (rewound each time)."""
    worker = DecodeWorker(target, draft, slots=rows, capacity=64, k_max=k, temperature=1.0,
                          generator=torch.Generator().manual_seed(0), on_missing="plain")
    for i in range(rows):
        worker.admit(prefill(target, prompt, 8, i, **state))
    snap, draws = worker.snapshot(), []
    for _ in range(repeats):
        worker.step(k)
        draws.append(worker.history[:rows, worker.first_new[0]].clone())
        worker.restore(snap)
    return torch.cat(draws)


def accept_everything(draft_tokens, draft_probs, target_probs, generator=None, **_):
    B, k = draft_tokens.shape
    last = sampling.sample_from(target_probs[:, k], generator)
    return torch.cat([draft_tokens, last[:, None]], 1), torch.full((B,), k, dtype=torch.int64)


def resample_from_p(draft_tokens, draft_probs, target_probs, generator=None, **kwargs):
    """Rejects like the real rule but draws the replacement from p instead of the residual max(0, p - q)."""
    tokens, accepted = sampling.speculative_sample(draft_tokens, draft_probs, target_probs, generator, **kwargs)
    rows = torch.arange(tokens.shape[0])
    replace = accepted < draft_tokens.shape[1]
    fresh = sampling.sample_from(target_probs[rows, accepted], generator)
    tokens[rows[replace], accepted[replace]] = fresh[replace]
    return tokens, accepted


@pytest.fixture(scope="module")
def hard_position():
    """A held-out prompt whose next byte the two models disagree on (overlap about a half): p and q are far apart."""
    target, draft = model.load_target(), model.load_draft()
    text = model.load_text("eval")
    candidates = [model.encode(text[i * 311: i * 311 + 24]) for i in range(40)]
    with torch.inference_mode():
        p = [sampling.logits_to_probs(target(c[None])[0, -1], 1.0) for c in candidates]
        q = [sampling.logits_to_probs(draft(c[None])[0, -1], 1.0) for c in candidates]
    tv = [sampling.total_variation(a, b) for a, b in zip(p, q, strict=True)]
    i = max(range(len(candidates)), key=tv.__getitem__)
    return candidates[i], p[i].double(), tv[i]


def sampling_noise(p: torch.Tensor, n: int) -> float:
    """E|empirical - p| summed over tokens, halved: about ½ Σ sqrt(2 p (1 - p) / (π n)) for n draws."""
    return 0.5 * float(torch.sqrt(2 * p * (1 - p) / (torch.pi * n)).sum())


def test_first_tokens_follow_the_target_at_temperature_one(hard_position, one_thread):
    prompt, p, tv_pq = hard_position
    target, draft = model.load_target(), model.load_draft()
    for state in (dict(draft=draft), dict(drafter_state=False)):  # speculating rows, and plain fallback rows
        draws = first_tokens(target, draft, prompt, 2, rows=48, repeats=25, state=state)
        empirical = torch.bincount(draws, minlength=256).double() / len(draws)
        assert sampling.total_variation(empirical, p) < 3 * sampling_noise(p, len(draws)), state
    assert tv_pq > 6 * sampling_noise(p, 48 * 25)  # the wrong samplers below are visibly off


@pytest.mark.parametrize("wrong", [accept_everything, resample_from_p])
def test_the_distribution_check_rejects_wrong_samplers(hard_position, wrong, monkeypatch, one_thread):
    prompt, p, _ = hard_position
    target, draft = model.load_target(), model.load_draft()
    monkeypatch.setattr(decode_worker, "speculative_sample", wrong)
    draws = first_tokens(target, draft, prompt, 2, rows=48, repeats=25, state=dict(draft=draft))
    empirical = torch.bincount(draws, minlength=256).double() / len(draws)
    assert sampling.total_variation(empirical, p) > 3 * sampling_noise(p, len(draws))
