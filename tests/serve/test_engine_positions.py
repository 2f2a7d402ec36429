"""bench serve's per-position acceptance (Chapter 11): vLLM's speculation counters read from /metrics before and
after each level, by hand and against the stub engine."""

import pytest

pytest.importorskip("aiohttp")
from test_engine_client import MODEL, Stub, run_levels, serving  # noqa: E402

from specnotes.serve import engine_client  # noqa: E402

EXPOSITION = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {drafts}
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="0"}} {p0}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="1"}} {p1}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="2"}} {p2}
"""


def exposition(drafts, p0, p1, p2):
    return EXPOSITION.format(drafts=drafts, p0=p0, p1=p1, p2=p2)


def test_per_position_acceptance_is_the_counters_growth_over_the_drafts():
    before, after = exposition(100, 80, 60, 40), exposition(300, 240, 150, 80)
    got = engine_client.spec_positions(before, after)
    assert got["engine_drafts"] == 200
    assert got["engine_acceptance_by_position"] == pytest.approx([160 / 200, 90 / 200, 40 / 200])
    assert "survival" in got["engine_acceptance_by_position_is"]
    # two engines' counters add; an engine with no speculation counters, or no drafts in between, gives nothing
    two = exposition(100, 80, 60, 40) + exposition(100, 80, 60, 40).replace('engine="0"', 'engine="1"')
    assert engine_client.spec_counters(two) == {"drafts": 200, "accepted": {0: 160, 1: 120, 2: 80}}
    # a fresh engine exports no counter before its first draft: the level counts from zero
    assert engine_client.spec_positions("# nothing here\n", after)["engine_drafts"] == 300
    assert engine_client.spec_positions(before, "# nothing here\n") is None
    assert engine_client.spec_positions(before, before) is None
    assert engine_client.spec_positions(None, after) is None


class MetricsStub(Stub):
    """A stub that also serves vLLM's counters: each completion adds one draft of three tokens, the first two
    accepted."""

    def app(self):
        app = super().app()
        app.router.add_get("/metrics", self.metrics)
        return app

    async def metrics(self, request):
        from aiohttp import web

        n = self.completions
        return web.Response(text=exposition(n, n, n, 0))


def test_bench_serve_records_the_engines_per_position_acceptance():
    with serving(MetricsStub(first_delay=0.01, token_delay=0.005)) as url:
        [level] = run_levels(url, max_tokens=6, requests=4)
    extra = level.record(MODEL, 6, 64).extra
    assert extra["engine_drafts"] == 4 and extra["engine_acceptance_by_position"] == [1.0, 1.0, 0.0]
    with serving(Stub(first_delay=0.01, token_delay=0.005)) as url:  # no /metrics: nothing recorded
        [plain] = run_levels(url, max_tokens=6, requests=4)
    assert plain.positions is None and "engine_acceptance_by_position" not in plain.record(MODEL, 6, 64).extra
