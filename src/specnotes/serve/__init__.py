"""Speculation in a server: k policies (``serving``), continuous batching with the drafter-state handoff
(``decode_worker``), the disaggregated pool as a SimPy system (``poolsim``), the paged prefix cache
(``kvcache``), llama-server and a streaming OpenAI-compatible client (``engine``, ``engine_client``).
Imports ``tiny`` and below."""
