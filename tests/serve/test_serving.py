"""Policies that pick k from the batch, goodput, step-time tables, and the serving loop."""

import numpy as np
import pytest

from specnotes.analytic import cost
from specnotes.serve import serving
from specnotes.serve.decode_worker import DecodeWorker, prefill
from specnotes.tiny import model
from specnotes.validate import BadArgument


def linear_step(batch, k):
    """A step costs 1 (overhead and weights), 0.1 per draft pass and 0.02 per verified token."""
    return 1 + 0.1 * k + 0.02 * batch * (k + 1)


def test_fixed_and_vllm_threshold_policies():
    assert [serving.FixedK(3)(b) for b in (1, 64, 4096)] == [3, 3, 3]
    rule = serving.DisableAbove(4, disable_by_batch_size=8)
    # vLLM V0 disables once running_queue_size >= disable_by_batch_size
    assert [rule(b) for b in (1, 7, 8, 9)] == [4, 4, 0, 0]
    with pytest.raises(BadArgument, match="k"):
        serving.FixedK(-1)
    with pytest.raises(BadArgument, match="disable_by_batch_size"):
        serving.DisableAbove(2, 0)


def test_k_table_lookup_and_vllm_form():
    table = serving.KTable(((1, 64, 3), (65, 128, 1), (129, 512, 0)))
    assert [table(b) for b in (1, 64, 65, 128, 129, 512, 10_000)] == [3, 3, 1, 1, 0, 0, 0]
    assert table.vllm_config() == [[1, 64, 3], [65, 128, 1], [129, 512, 0]]
    assert serving.table_from_ks([2, 2, 1, 1, 1, 0]).ranges == ((1, 2, 2), (3, 5, 1), (6, 6, 0))
    for bad in ((), ((2, 5, 1),), ((1, 4, 1), (6, 9, 0)), ((1, 4, -1),)):
        with pytest.raises(BadArgument):
            serving.KTable(bad)


def test_adaptive_k_maximizes_goodput_by_hand():
    # alpha = 0.8: E[N] = 1, 1.8, 2.44, 2.952, 3.3616 for k = 0..4. At B = 1 the goodputs E[N]/T are
    # 0.980, 1.579, 1.937, 2.139, 2.241: k = 4. At B = 100: 0.333, 0.353, 0.339, 0.321, 0.299: k = 1.
    # At B = 200: 0.200, 0.198, ...: k = 0.
    table = serving.adaptive_k(linear_step, 0.8, max_batch=300, k_max=4)
    assert (table(1), table(100), table(200)) == (4, 1, 0)
    ks = [table(b) for b in range(1, 301)]
    assert ks == sorted(ks, reverse=True)  # k never rises with the batch here
    assert serving.goodput(linear_step, 0.8, 1, 4) == pytest.approx(3.3616 / 1.5)


def test_crossover_by_hand():
    # k = 1 pays while 1.8 / (1.1 + 0.04 B) > 1 / (1 + 0.02 B), i.e. while 0.7 > 0.004 B: up to B = 174
    assert serving.crossover(linear_step, 0.8, 1, max_batch=1000) == 175
    assert serving.crossover(linear_step, 0.8, 1, max_batch=100) is None
    assert serving.crossover(lambda b, k: 1 + k, 0.1, 1, max_batch=50) == 1  # never pays


def test_monotone_envelope_by_hand():
    # a larger batch or more drafts cannot be faster: slow outliers are lowered to the next larger step
    env = serving.monotone_envelope(np.array([[1.0, 3.0, 2.0], [2.0, 1.5, 4.0]]))
    np.testing.assert_allclose(env, [[1.0, 1.5, 2.0], [1.5, 1.5, 4.0]])


def test_step_times_interpolate_and_extrapolate():
    times = serving.StepTimes((1, 4, 8), ((1.0, 1.3, 2.1), (2.0, 2.6, 4.2)))
    assert times(1, 0) == 1.0 and times(2, 0) == pytest.approx(1.1) and times(6, 1) == pytest.approx(3.4)
    assert times(16, 0) == pytest.approx(2.1 + 8 * 0.2)  # the last segment's slope, 0.8 / 4 per sequence
    assert times.k_max == 1


def test_modelled_step_time_is_the_cost_model():
    step = serving.modelled_step_time(cost.LLAMA_3_8B, cost.LLAMA_3_2_1B, "H100-SXM", context=256, overhead=1e-4)
    assert step(16, 0) == cost.pass_time(cost.LLAMA_3_8B, "H100-SXM", 16, 1, 256, overhead=1e-4)
    assert step(16, 3) == cost.iteration_time(cost.LLAMA_3_8B, cost.LLAMA_3_2_1B, "H100-SXM", 16, 3, 256,
                                              overhead=1e-4)


def test_concurrency_limits():
    assert serving.concurrency_limits([(2, 1), (3, 8), (0, 4)]) == [1, 1, 8, 8, 8]
    with pytest.raises(BadArgument, match="concurrency"):
        serving.concurrency_limits([(2, 0)])


# ---------------------------------------------------------------------------------------------- on the model pair


@pytest.fixture(scope="module")
def pair():
    return model.load_target(), model.load_draft()


@pytest.fixture(scope="module")
def handoffs(pair):
    target, draft = pair
    text = model.load_text("eval")
    lengths = [5, 9, 3, 12, 7, 4, 10, 6]
    return [prefill(target, model.encode(text[i * 500: i * 500 + 20]), n, i, draft=draft)
            for i, n in enumerate(lengths)]


def test_serve_admits_up_to_the_limit_and_follows_the_policy(pair, handoffs, one_thread):
    limits = [1, 1, 3, 3, 3, 3, 2, 2]
    policy = serving.KTable(((1, 1, 3), (2, 2, 1), (3, 8, 0)))
    workers = [DecodeWorker(*pair, slots=4, capacity=40, k_max=3) for _ in range(2)]
    runs = serving.serve(workers, handoffs, limits, [policy, serving.FixedK(0)])
    for run in runs:
        assert {i: n for i, (_, _, n) in run.requests.items()} == {h.request_id: h.max_new_tokens for h in handoffs}
        assert all(b <= 3 for _, b, _, _ in run.steps)
        assert sum(t for *_, t in run.steps) == sum(h.max_new_tokens for h in handoffs)
    assert all(k == policy(b) for _, b, k, _ in runs[0].steps)
    assert {k for *_, k, _ in runs[1].steps} == {0} and np.isnan(runs[1].alpha)
    assert runs[0].steps[0][1] == 1  # the first request runs alone: its limit is 1
    per_token = runs[0].s_per_token
    assert per_token.shape == (8,) and (per_token > 0).all()


def test_fastest_keeps_each_step_at_its_fastest(pair, handoffs, one_thread):
    workers = [DecodeWorker(*pair, slots=4, capacity=40, k_max=2)]
    a, b = (serving.serve(workers, handoffs, [2] * 8, [serving.FixedK(2)])[0] for _ in range(2))
    assert a.work == b.work  # temperature 0: the same steps, the same tokens
    best = serving.fastest([a, b])
    assert [s[0] for s in best.steps] == [min(x[0], y[0]) for x, y in zip(a.steps, b.steps, strict=True)]
    assert best.step_s <= min(a.step_s, b.step_s)
    c = serving.serve(workers, handoffs, [2] * 8, [serving.FixedK(1)])[0]
    with pytest.raises(BadArgument, match="different work"):
        serving.fastest([a, c])


def test_measured_step_times_are_monotone_and_cover_every_k(pair, handoffs, one_thread):
    worker = DecodeWorker(*pair, slots=4, capacity=40, k_max=2)
    long = [prefill(pair[0], model.encode("It is a truth universally"), 8, i, draft=pair[1]) for i in range(4)]
    times = serving.measure_step_times(worker, long, (1, 4), k_max=2, warmup=1, repeats=2, progress=False)
    seconds = np.array(times.seconds)
    assert seconds.shape == (3, 2) and (seconds > 0).all()
    assert (np.diff(seconds, axis=0) >= 0).all() and (np.diff(seconds, axis=1) >= 0).all()
    assert worker.n == 0
    with pytest.raises(BadArgument, match="max_new_tokens"):
        serving.measure_step_times(worker, handoffs[2:3], (1,), k_max=2, progress=False)  # a 3-token request ends


def test_serve_needs_a_worker_per_policy(pair, handoffs):
    worker = DecodeWorker(*pair, slots=2, capacity=40, k_max=1)
    with pytest.raises(BadArgument, match="worker of its own"):
        serving.serve([worker, worker], handoffs, [1] * 8, [serving.FixedK(0), serving.FixedK(1)])
    with pytest.raises(BadArgument, match="one limit per handoff"):
        serving.serve([worker], handoffs, [1], [serving.FixedK(0)])


def test_batch_expansion_charges_every_expanded_sequence_of_a_speculative_step():
    expanded = serving.batch_expansion(linear_step, per_sequence_s=0.001)
    assert expanded(8, 0) == linear_step(8, 0)  # a plain step is not expanded
    assert expanded(8, 3) == pytest.approx(linear_step(8, 3) + 0.001 * 8 * 4)  # 8 sequences scored as 32
    with pytest.raises(BadArgument, match="per_sequence_s"):
        serving.batch_expansion(linear_step, -1.0)


def test_the_qwama_draft_shape():
    # Qwen2-0.5B (24 x 896, 14 heads, 2 KV heads, 4864) with Llama-3's vocabulary: about half a billion weights
    assert 0.45e9 < serving.QWAMA_0_5B.params < 0.65e9
    assert serving.QWAMA_0_5B.vocab == cost.LLAMA_3_70B.vocab


def test_fixed_cost_sentence_follows_the_fitted_lines():
    # Chapter 8's stored run: 4.104 ms per step and 0.165 ms per sequence at k = 0
    stored = serving.LinearStepTimes((4.104e-3,), (0.165e-3,))
    assert serving.describe_fixed_cost(stored, 128) == (
        "By the fitted step times, the fixed cost of a plain step, what it costs whatever the batch, is 96% of it at "
        "B = 1 and 16% at B = 128. Here small batches pay mostly the fixed per-step overhead, and large ones their "
        "rows.")
    assert serving.describe_fixed_cost(stored, 4).endswith("Here every pass costs mostly its fixed per-step overhead.")
    rows = serving.LinearStepTimes((1e-3,), (2e-3,))
    assert serving.describe_fixed_cost(rows, 64).endswith("even a one-sequence step costs mostly its rows, not its "
                                                          "fixed overhead.")


def test_fit_lines_recovers_a_line_and_smooths_noise():
    exact = serving.StepTimes((1, 4, 16, 64), tuple(tuple(0.002 + 0.001 * k + (0.0001 + 0.00005 * k) * b
                                                          for b in (1, 4, 16, 64)) for k in range(3)))
    lines = serving.fit_lines(exact)
    assert lines.intercepts == pytest.approx((0.002, 0.003, 0.004)) and lines.slopes == pytest.approx(
        (0.0001, 0.00015, 0.0002))
    assert lines(32, 2) == pytest.approx(0.004 + 0.0002 * 32) and lines.k_max == 2
    # one slow outlier moves the line a little, not the policy read off it
    noisy = serving.StepTimes(exact.batches, (exact.seconds[0], (0.0031, 0.0045, 0.0055, 0.0126), exact.seconds[2]))
    assert serving.fit_lines(noisy)(8, 1) == pytest.approx(lines(8, 1), rel=0.1)
    flat = serving.fit_lines(serving.StepTimes((1, 2), ((0.003, 0.002),)))
    assert flat.slopes == (0.0,) and flat(100, 0) == pytest.approx(0.0025)


def test_the_blog_pool_fit_reproduces_the_bars_it_was_fitted_to():
    import json
    from importlib import resources

    # the three bars, read from the data file as plain JSON (qps 1: with and without; qps 4: with)
    doc = json.loads((resources.files("specnotes") / "data" / "published" / "vllm_blog_2024.json").read_text())
    series = next(s for s in doc["series"] if s["id"] == "fig5_draft_model_sharegpt")
    bars = {p["qps"]: p for p in series["points"]}
    pool = serving.fit_blog_pool()
    assert serving.fit_blog_pool() is pool  # fitted once per process: the chapter and the checker share it
    plain, fixed = serving.FixedK(0), serving.FixedK(serving.BLOG_K)
    latency = lambda rate, step, policy: serving.mean_latency(rate, step, policy, pool.alpha,  # noqa: E731
                                                              pool.output_tokens, **pool.simulation)
    # eight bisection steps leave each fitted number within a fraction of a percent of its bar
    assert latency(1, pool.roofline_step, plain) == pytest.approx(bars[1]["latency_plain"], rel=0.02)
    assert latency(1, pool.roofline_step, fixed) == pytest.approx(bars[1]["latency_sd"], rel=0.02)
    assert latency(4, pool.step, fixed) == pytest.approx(bars[4]["latency_sd"], rel=0.02)
    assert pool.step(64, 4) > pool.roofline_step(64, 4) and pool.step(64, 0) == pool.roofline_step(64, 0)


# ---------------------------------------------------------------------------------------------- the model check


def test_context_lines_interpolate_in_the_context():
    short = serving.LinearStepTimes((1.0, 2.0), (0.1, 0.2))
    long = serving.LinearStepTimes((2.0, 3.0), (0.3, 0.2))
    lines = serving.ContextLines((50, 100), (short, long))
    assert lines(10, 0, 50) == pytest.approx(2.0) and lines(10, 0, 100) == pytest.approx(5.0)
    assert lines(10, 0, 75) == pytest.approx(3.5) and lines(10, 1, 75) == pytest.approx(4.5)
    assert lines(10, 0, 150) == pytest.approx(8.0)  # extended linearly past the longer context
    assert lines.at(75).intercepts == pytest.approx((1.5, 2.5))
    with pytest.raises(BadArgument, match="two increasing"):
        serving.ContextLines((100, 50), (short, long))


def fake_run(steps, contexts):
    run = serving.ServeRun("p", steps=[(s, b, k, 1) for s, b, k in steps], contexts=contexts)
    run.requests = {0: (0, len(steps) - 1, len(steps))}
    return run


def test_model_check_splits_the_error_into_drift_context_and_rest():
    # the table says 1 s per step; during the run the same steps cost 1.2 s at context 50 and 1.8 s at 100
    table = lambda b, k: 1.0
    sampled = serving.ContextLines((50, 100), (serving.LinearStepTimes((1.2,), (0.0,)),
                                               serving.LinearStepTimes((1.8,), (0.0,))))
    run = fake_run([(2.0, 1, 0), (2.2, 1, 0)], [50, 100])  # measured 4.2 s
    check = serving.model_check(run, table, sampled, table_context=50)
    assert check["measured s"] == pytest.approx(4.2) and check["table s"] == pytest.approx(2.0)
    assert check["drift"] == pytest.approx(1.2) and check["context"] == pytest.approx(3.0 / 2.4)
    assert check["rest"] == pytest.approx(4.2 / 3.0) and check["sampled s"] == pytest.approx(3.0)
    product = check["drift"] * check["context"] * check["rest"]
    assert product == pytest.approx(1 + check["table error"])  # the factors multiply to measured / table


def check_row(policy, measured, table, drift, context):
    rest = measured / (table * drift * context)
    return {"policy": policy, "measured s": measured, "table s": table, "drift": drift, "context": context,
            "rest": rest}


def test_explain_ratio_names_the_side_and_the_largest_factor():
    adaptive = check_row("adaptive k", 1.0, 1.0, 1.0, 1.0)
    # plain predicted 1.08x adaptive's time, measured 0.975x: the machine drifted against speculation
    plain = check_row("plain decoding", 0.975, 1.08, 0.90, 1.0)
    text = serving.explain_ratio(plain, adaptive, bar=0.01)
    assert text.startswith("Adaptive k fell behind plain decoding: plain decoding took 0.97× adaptive k's time")
    assert "predicted 1.08×" in text and "drift" in text and "give 0.97×" in text
    # the contexts: sampled at the table's context it agrees; at each step's own context it does not
    plain = check_row("plain decoding", 0.975, 1.08, 1.0, 0.9)
    assert "the contexts the steps ran at" in serving.explain_ratio(plain, adaptive, bar=0.01)
    # what the step times do not explain
    plain = check_row("plain decoding", 0.975, 1.08, 1.0, 1.0)
    assert "serving itself" in serving.explain_ratio(plain, adaptive, bar=0.01)
    # as predicted, within the noise floor
    plain = check_row("plain decoding", 1.10, 1.11, 1.0, 1.0)
    text = serving.explain_ratio(plain, adaptive, bar=0.02)
    assert text.startswith("Adaptive k beat plain decoding") and text.endswith("within the noise floor.")
    with pytest.raises(BadArgument, match="bar"):
        serving.explain_ratio(plain, adaptive, bar=-1)


def test_serve_records_each_steps_context_and_samples_between_rounds(pair, handoffs, one_thread):
    target, draft = pair
    text = model.load_text("eval")
    k_max = 2
    workers = {}
    for c in (20, 28):
        workers[c] = DecodeWorker(target, draft, slots=3, capacity=40, k_max=k_max)
        for i in range(3):
            workers[c].admit(prefill(target, model.encode(text[i * 500: i * 500 + c]), 5, i, draft=draft))
    sampler = serving.StepSampler(workers, (1, 3), k_max, every=1)
    served = [DecodeWorker(*pair, slots=4, capacity=40, k_max=k_max)]
    [run] = serving.serve(served, handoffs, [2] * 8, [serving.FixedK(1)], between=sampler)
    assert len(run.contexts) == len(run.steps) and run.contexts[0] == 20  # the prompts hold 20 tokens
    assert all(c >= 20 for c in run.contexts)
    assert sampler.calls == len(run.steps) and sum(map(len, sampler.samples.values())) == len(run.steps)
    assert all(w.n == 3 and w.context == c for c, w in workers.items())  # rewound and restored after each sample
    times = sampler.step_times(20)
    assert np.array(times.seconds).shape == (k_max + 1, 2) and times.batches == (1, 3)
    lines = sampler.lines()
    assert lines.contexts == (20, 28) and lines(3, 1, 24) > 0
    assert serving.predicted_seconds(run, lines) == pytest.approx(sum(lines(b, k, c) for (_, b, k, _), c
                                                                      in zip(run.steps, run.contexts, strict=True)))
    with pytest.raises(BadArgument, match="context must be one of 20, 28"):
        sampler.step_times(24)
    with pytest.raises(BadArgument, match="fewer than fastest_of"):
        sampler.step_times(20, fastest_of=1000)
    sparse = serving.StepSampler(workers, (1,), 0, every=3)
    for _ in range(7):
        sparse()
    assert sum(map(len, sparse.samples.values())) == 2  # calls 3 and 6


def test_step_sampler_refuses_workers_it_cannot_rewind(pair):
    target, draft = pair
    prompt = model.encode("It is a truth universally acknowledged")
    ok = DecodeWorker(target, draft, slots=2, capacity=60, k_max=2)
    ending = DecodeWorker(target, draft, slots=2, capacity=60, k_max=2)
    for w, n in ((ok, 8), (ending, 3)):
        for i in range(2):
            w.admit(prefill(target, prompt, n, i, draft=draft))
    with pytest.raises(BadArgument, match="exactly two contexts"):
        serving.StepSampler({prompt.numel(): ok}, (1,), 2)
    with pytest.raises(BadArgument, match="max_new_tokens > k_max"):
        serving.StepSampler({prompt.numel(): ok, prompt.numel() + 1: ending}, (1,), 2)
    with pytest.raises(BadArgument, match="batches"):
        serving.StepSampler({prompt.numel(): ok, 99: ok}, (4,), 2)
