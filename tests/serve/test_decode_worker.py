"""The decode worker: continuous batching with speculation, and the drafter-state handoff."""

import random
import re

import pytest
import torch

from specnotes.sampling import exact
from specnotes.serve import decode_worker
from specnotes.serve.decode_worker import DecodeWorker, Handoff, MissingDrafterState, check_handoff, prefill
from specnotes.tiny import generate, model
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
    with pytest.raises(MissingDrafterState, match=r"request 7: .*no prompt for the draft_model drafter \(it needs: "
                                                  r"prompt; it can also use: draft_cache\).*"
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
    with_cache = prefill(target, prompts[0], 4, 3, draft=pair64[1])
    assert check_handoff(with_cache, "draft_model") == "draft_cache"  # used when it comes with its prompt
    cache_only = Handoff(3, bare.target_cache, bare.last_token, 4, draft_cache=with_cache.draft_cache)
    with pytest.raises(MissingDrafterState, match=r"no prompt .*its draft_cache cannot be checked"):
        check_handoff(cache_only, "draft_model")  # a draft cache alone is not enough: nothing to check it against
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
    last = exact.sample_from(target_probs[:, k], generator)
    return torch.cat([draft_tokens, last[:, None]], 1), torch.full((B,), k, dtype=torch.int64)


def resample_from_p(draft_tokens, draft_probs, target_probs, generator=None, **kwargs):
    """Rejects like the real rule but draws the replacement from p instead of the residual max(0, p - q)."""
    tokens, accepted = exact.speculative_sample(draft_tokens, draft_probs, target_probs, generator, **kwargs)
    rows = torch.arange(tokens.shape[0])
    replace = accepted < draft_tokens.shape[1]
    fresh = exact.sample_from(target_probs[rows, accepted], generator)
    tokens[rows[replace], accepted[replace]] = fresh[replace]
    return tokens, accepted


@pytest.fixture(scope="module")
def hard_position():
    """A held-out prompt whose next byte the two models disagree on (overlap about a half): p and q are far apart."""
    target, draft = model.load_target(), model.load_draft()
    text = model.load_text("eval")
    candidates = [model.encode(text[i * 311: i * 311 + 24]) for i in range(40)]
    with torch.inference_mode():
        p = [exact.logits_to_probs(target(c[None])[0, -1], 1.0) for c in candidates]
        q = [exact.logits_to_probs(draft(c[None])[0, -1], 1.0) for c in candidates]
    tv = [exact.total_variation(a, b) for a, b in zip(p, q, strict=True)]
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
        assert exact.total_variation(empirical, p) < 3 * sampling_noise(p, len(draws)), state
    assert tv_pq > 6 * sampling_noise(p, 48 * 25)  # the wrong samplers below are visibly off


@pytest.mark.parametrize("wrong", [accept_everything, resample_from_p])
def test_the_distribution_check_rejects_wrong_samplers(hard_position, wrong, monkeypatch, one_thread):
    prompt, p, _ = hard_position
    target, draft = model.load_target(), model.load_draft()
    monkeypatch.setattr(decode_worker, "speculative_sample", wrong)
    draws = first_tokens(target, draft, prompt, 2, rows=48, repeats=25, state=dict(draft=draft))
    empirical = torch.bincount(draws, minlength=256).double() / len(draws)
    assert exact.total_variation(empirical, p) > 3 * sampling_noise(p, len(draws))


# ---------------------------------------------------------------------------------------------- isolation
# One request's bad state never touches another's: every bad handoff an audit found is refused (or decoded
# plainly) at admission, and a request that breaks inside a step fails alone. Each case runs next to healthy
# requests whose outputs must equal plain greedy decoding, token for token.


def bad_handoffs(target, draft, prompts):
    """{name: (a handoff whose drafter state is bad, the message that must name the problem)}, for a request
    whose prompt is prompts[4] and whose target state is good."""
    good = prefill(target, prompts[4], 9, request_id=4, draft=draft)
    same_length = torch.cat([prompts[5][: len(prompts[4]) - 1], prompts[4][-1:]])  # as long, same last token
    other = prefill(target, same_length, 9, request_id=99, draft=draft)
    longer = prefill(target, torch.cat([prompts[4], prompts[0]]), 9, request_id=98, draft=draft)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        twin = model.Transformer(draft.config).to(draft.lm_head.weight.dtype).eval()  # same shape, other weights
    twins = prefill(target, prompts[4], 9, request_id=97, draft=twin)
    as_float32 = model.KVCache(draft.config, 1, good.draft_cache.capacity, dtype=torch.float32)
    as_float32.k.copy_(good.draft_cache.k), as_float32.v.copy_(good.draft_cache.v)
    as_float32.lengths.copy_(good.draft_cache.lengths)

    def handoff(**state):
        return Handoff(4, good.target_cache, good.last_token, 9, **state)

    return {
        "stale draft_cache longer than the prompt": (handoff(prompt=good.prompt, draft_cache=longer.draft_cache),
                                                    r"draft_cache holds \d+ tokens; the request's prefix has \d+"),
        "empty prompt": (handoff(prompt=torch.zeros(0, dtype=torch.int64)), r"prompt holds 0 tokens"),
        "prompt shorter than the target cache": (handoff(prompt=good.prompt[-3:]), r"prompt holds 3 tokens"),
        "target cache as draft state": (handoff(prompt=good.prompt, draft_cache=good.target_cache),
                                        r"draft_cache is shaped .* another model's cache"),
        "a tensor as state": (handoff(prompt=good.prompt, draft_cache=torch.zeros(2, 3)),
                              r"draft_cache must be a specnotes.tiny.model.KVCache, got Tensor"),
        "{} as state": (handoff(prompt=good.prompt, draft_cache={}), r"draft_cache must be .*KVCache, got dict"),
        "another request's cache of the same length": (handoff(prompt=good.prompt, draft_cache=other.draft_cache),
                                                       r"draft_cache is not this draft model's KV of this request's"),
        "another model's cache of the same shape": (handoff(prompt=good.prompt, draft_cache=twins.draft_cache),
                                                    r"draft_cache is not this draft model's KV .* another model"),
        "a draft cache of the wrong dtype": (handoff(prompt=good.prompt, draft_cache=as_float32),
                                             r"draft_cache is torch.float32 on cpu; this worker's model is "
                                             r"torch.float64"),
        "another request's prompt of the same length": (handoff(prompt=other.prompt), r"prompt is not the prefix"),
        "a draft cache without its prompt": (handoff(draft_cache=good.draft_cache),
                                             r"no prompt .*its draft_cache cannot be checked"),
        **{f"a {dtype} prompt": (handoff(prompt=good.prompt.to(dtype)), r"prompt must be a 1-D torch.int64 or "
                                 r"torch.int32 tensor of token ids .*got a torch.(u?int8|int16) tensor")
           for dtype in (torch.uint8, torch.int8, torch.int16)},
    }


BAD = ["stale draft_cache longer than the prompt", "empty prompt", "prompt shorter than the target cache",
       "target cache as draft state", "a tensor as state", "{} as state", "another request's cache of the same length",
       "another model's cache of the same shape", "a draft cache of the wrong dtype",
       "another request's prompt of the same length", "a draft cache without its prompt",
       "a torch.uint8 prompt", "a torch.int8 prompt", "a torch.int16 prompt"]
MISSING = {"a draft cache without its prompt"}  # the draft-model drafter needs the prompt: the state is missing


@pytest.mark.parametrize("policy", ["refuse", "plain"])
@pytest.mark.parametrize("case", BAD)
def test_a_bad_handoff_never_touches_its_healthy_neighbours(pair64, prompts, case, policy, one_thread):
    target, draft = pair64
    bad, message = bad_handoffs(target, draft, prompts)[case]
    worker = DecodeWorker(target, draft, slots=3, capacity=64, k_max=3, on_missing=policy)
    worker.admit(prefill(target, prompts[2], 12, 2, draft=draft))
    if policy == "refuse":
        error = MissingDrafterState if case in MISSING else decode_worker.InvalidDrafterState
        with pytest.raises(error, match=message):
            worker.admit(bad)
        assert worker.n == 1  # nothing half-admitted
    else:
        assert worker.admit(bad) is False  # decoded without speculation, k = 0
    worker.admit(prefill(target, prompts[3], 10, 3))  # a healthy neighbour admitted after it (prompt only)
    out, failed = {}, []
    while worker.n:
        result = worker.step(3)
        out.update({f.request_id: f for f in result.finished})
        failed += result.failed
    assert not failed
    assert torch.equal(out[2].tokens, plain_reference(target, prompts[2], 12)) and out[2].speculated
    assert torch.equal(out[3].tokens, plain_reference(target, prompts[3], 10)) and out[3].speculated
    if policy == "plain":  # its target state was good: it decodes exactly, plainly, and says why
        assert torch.equal(out[4].tokens, plain_reference(target, prompts[4], 9))
        assert not out[4].speculated and re.search(message, out[4].reason)


def test_a_handoff_whose_target_state_is_bad_is_refused_under_any_policy(pair64, prompts):
    target, draft = pair64
    good = prefill(target, prompts[0], 4, 0, draft=draft)
    worker = DecodeWorker(target, draft, slots=2, capacity=64, k_max=2, on_missing="plain")
    for bad, message in [(Handoff(0, good.draft_cache, good.last_token, 4), r"target_cache is shaped"),
                         (Handoff(0, {}, good.last_token, 4), r"target_cache must be a specnotes.tiny.model.KVCache"),
                         (Handoff(0, good.target_cache, 300, 4), r"last_token must be an integer in \[0, 255\]"),
                         (Handoff(0, good.target_cache, good.last_token, 0), r"max_new_tokens must be an integer")]:
        with pytest.raises(BadArgument, match=message):
            worker.admit(bad)
    assert worker.n == 0


def corrupt_draft_length(worker, row):
    worker.draft_cache.lengths[row] = worker.committed[row] + 5  # stale state: ahead of the tokens it has


def corrupt_target_length(worker, row):
    worker.target_cache.lengths[row] -= 2


def corrupt_last_token(worker, row):
    worker.history[row, worker.committed[row] - 1] = 999  # not a token id: the model raises for this row only


@pytest.mark.parametrize("corrupt,reason", [
    (corrupt_draft_length, r"request 1: its draft cache holds \d+ tokens, more than its \d+ committed"),
    (corrupt_target_length, r"request 1: its target cache holds \d+ tokens"),
    (corrupt_last_token, r"request 1: BadArgument: tokens must be ids in \[0, 256\)"),
])
@pytest.mark.parametrize("k", [0, 3])
def test_a_request_that_breaks_inside_a_step_fails_alone(pair64, prompts, corrupt, reason, k, one_thread):
    target, draft = pair64
    worker = DecodeWorker(target, draft, slots=4, capacity=64, k_max=3)
    lengths = {0: 14, 1: 14, 2: 9, 3: 11}
    for i, n in lengths.items():
        worker.admit(prefill(target, prompts[i], n, i, draft=draft))
    out, failed = {}, []
    for step in range(40):
        if step == 2:
            corrupt(worker, worker.request_ids.index(1))
        if not worker.n:
            break
        result = worker.step(k)
        out.update({f.request_id: f for f in result.finished})
        failed += result.failed
    assert [f.request_id for f in failed] == [1] and re.search(reason, failed[0].reason), failed
    delivered = failed[0].tokens[:-1]  # what it had before it broke (the last one may be the corrupted one)
    assert torch.equal(delivered, plain_reference(target, prompts[1], lengths[1])[: len(delivered)])
    for i in (0, 2, 3):  # the rest go on as if request 1 were absent
        assert torch.equal(out[i].tokens, plain_reference(target, prompts[i], lengths[i])), i


def test_an_error_no_request_raises_alone_is_the_workers_and_is_raised(pair64, prompts, monkeypatch):
    target, draft = pair64
    worker = DecodeWorker(target, draft, slots=2, capacity=64, k_max=2)
    worker.admit(prefill(target, prompts[0], 4, 0, draft=draft))
    worker.admit(prefill(target, prompts[1], 4, 1, draft=draft))
    before = worker.snapshot()
    real = decode_worker.speculative_sample

    def breaks_batches(drafts, *args, **kwargs):
        if drafts.shape[0] > 1:
            raise RuntimeError("the sampler breaks on batches")
        return real(drafts, *args, **kwargs)

    monkeypatch.setattr(decode_worker, "speculative_sample", breaks_batches)
    with pytest.raises(RuntimeError, match="the sampler breaks on batches"):
        worker.step(2)
    assert worker.n == 2 and worker.request_ids[:2] == [0, 1]  # nobody was blamed for it
    assert all(torch.equal(a, b) for a, b in zip(before, worker.snapshot(), strict=True))  # the step was undone


def bad_request(target, draft, prompt, request_id, worker):
    """Admit a request, then break it: a token id the model refuses, so it raises even alone."""
    worker.admit(prefill(target, prompt, 6, request_id, draft=draft))
    row = worker.request_ids.index(request_id)
    worker.history[row, worker.committed[row] - 1] = 999


@pytest.mark.parametrize("n_bad", [1, 2])
@pytest.mark.parametrize("k", [0, 2])
def test_a_batch_of_bad_requests_only_fails_each_and_the_worker_goes_on(pair64, prompts, n_bad, k, one_thread):
    target, draft = pair64
    worker = DecodeWorker(target, draft, slots=2, capacity=64, k_max=2)
    for i in range(n_bad):
        bad_request(target, draft, prompts[i], i, worker)
    result = worker.step(k)
    assert sorted(f.request_id for f in result.failed) == list(range(n_bad)) and result.batch == 0
    assert all(re.search(r"BadArgument: tokens must be ids in \[0, 256\)", f.reason) for f in result.failed)
    assert worker.n == 0 and worker.request_ids == [None, None]
    worker.admit(prefill(target, prompts[5], 7, 5, draft=draft))  # still usable
    out = {}
    while worker.n:
        result = worker.step(k)
        assert not result.failed
        out.update({f.request_id: f for f in result.finished})
    assert torch.equal(out[5].tokens, plain_reference(target, prompts[5], 7))


def test_a_sampler_that_always_raises_fails_every_request_with_its_reason(pair64, prompts, monkeypatch):
    target, draft = pair64
    worker = DecodeWorker(target, draft, slots=2, capacity=64, k_max=2)
    worker.admit(prefill(target, prompts[0], 4, 0, draft=draft))
    worker.admit(prefill(target, prompts[1], 4, 1, draft=draft))

    def broken(*args, **kwargs):
        raise RuntimeError("the sampler itself is broken")

    monkeypatch.setattr(decode_worker, "speculative_sample", broken)
    result = worker.step(2)
    assert sorted(f.request_id for f in result.failed) == [0, 1] and worker.n == 0
    assert all("RuntimeError: the sampler itself is broken" in f.reason for f in result.failed)


def test_at_temperature_one_the_others_redraw_as_if_the_failed_request_had_never_come(pair64, prompts, one_thread):
    """A request that fails in its first step: the step is rerun without it from the random state it began with,
    so the others draw exactly what a worker that never admitted it draws."""
    target, draft = pair64
    outputs = []
    for with_bad in (True, False):
        worker = DecodeWorker(target, draft, slots=3, capacity=64, k_max=3, temperature=1.0,
                              generator=torch.Generator().manual_seed(7))
        for i in (0, 1):
            worker.admit(prefill(target, prompts[i], 12, i, draft=draft))
        if with_bad:
            bad_request(target, draft, prompts[2], 2, worker)
        out, failed = {}, []
        while worker.n:
            result = worker.step(3)
            out.update({f.request_id: f.tokens for f in result.finished})
            failed += [f.request_id for f in result.failed]
        assert failed == ([2] if with_bad else [])
        outputs.append(out)
    assert outputs[0].keys() == outputs[1].keys() == {0, 1}
    assert all(torch.equal(outputs[0][i], outputs[1][i]) for i in (0, 1))


def test_keys_rotated_in_float32_match_in_float64():
    # apply_rope rotates in float32: a float64 model's keys agree only to float32 rounding
    fresh = torch.randn(4, 16, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    assert decode_worker.same_keys(fresh.float().double(), fresh)
    assert not decode_worker.same_keys(fresh + 1e-2, fresh)


def test_an_int32_prompt_is_a_prompt(pair64, prompts, one_thread):
    target, draft = pair64
    good = prefill(target, prompts[4], 6, 4)
    worker = DecodeWorker(target, draft, slots=1, capacity=64, k_max=2)
    assert worker.admit(Handoff(4, good.target_cache, good.last_token, 6, prompt=good.prompt.int())) is True
    out = {}
    while worker.n:
        out.update({f.request_id: f for f in worker.step(2).finished})
    assert torch.equal(out[4].tokens, plain_reference(target, prompts[4], 6))
