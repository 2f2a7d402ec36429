"""Issue 45 part 2's and issue 47 part 4's named cases: a file the package reads, or a command line, each run
through its CLI's ``main`` (``tests/test_bad_input.py``: ``test_a_named_case``). Data and file builders only,
importing nothing of specnotes, so the same table can be run against an older checkout whose modules lived
elsewhere (``CLIS`` names each CLI by what it is; the test maps it to a module).

A case is clear when its command exits with ``rc`` and, for exit status 2, the first line it prints is the
CLI's own error naming what was wrong (``says``, a regular expression searched in that line), never a usage
block or a traceback; for exit status 0, ``says`` is searched in what it printed, its lines joined by single
spaces (the report wraps at 100 columns). ``absent``: a path that must
not exist afterwards (nothing created for a command that was refused).
"""

from __future__ import annotations

import copy
import json
import struct
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from gguf_files import vocab_file

CLIS = ("advise", "engine", "bench", "calibrate", "exercises", "train")


@dataclass(frozen=True)
class Case:
    id: str
    cli: str
    argv: tuple[str, ...]  # "{tmp}" stands for the case's folder
    says: str
    rc: int = 2
    files: dict = field(default_factory=dict)  # name in {tmp} -> a function () -> bytes or str
    absent: str | None = None
    seconds: float = 20.0  # the most it may take (a hang is a failure)
    issue: int = 45


# Qwen/Qwen3-30B-A3B's and deepseek-ai/DeepSeek-V3's config.json, the fields the cost model reads (the same
# configs tests/analytic/test_moe.py cites: transformers' Qwen3MoeConfig defaults; tt-metal's copy of DeepSeek-V3's)
QWEN3_MOE = {"model_type": "qwen3_moe", "decoder_sparse_step": 1, "head_dim": 128, "hidden_size": 2048,
             "intermediate_size": 6144, "mlp_only_layers": [], "moe_intermediate_size": 768,
             "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48,
             "num_key_value_heads": 4, "tie_word_embeddings": False, "vocab_size": 151936}
DEEPSEEK_V3 = {"model_type": "deepseek_v3", "first_k_dense_replace": 3, "hidden_size": 7168,
               "intermediate_size": 18432, "kv_lora_rank": 512, "moe_intermediate_size": 2048, "moe_layer_freq": 1,
               "n_routed_experts": 256, "n_shared_experts": 1, "num_attention_heads": 128, "num_experts_per_tok": 8,
               "num_hidden_layers": 61, "num_key_value_heads": 128, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
               "qk_rope_head_dim": 64, "tie_word_embeddings": False, "v_head_dim": 128, "vocab_size": 129280}
LLAMA_8B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
            "num_hidden_layers": 32, "num_key_value_heads": 8, "tie_word_embeddings": False, "vocab_size": 128256,
            "_name_or_path": "my-org/my-llama"}


def config(base: dict, **change):
    """A config.json's text: ``base`` with ``change`` (None removes a key)."""
    c = {**base, **change}
    return lambda: json.dumps({k: v for k, v in c.items() if v is not None})


def shipped_record() -> dict:
    """The book's llama-server record of the shipped pair (k = 4 at concurrency 1, 2, 4, 8; roofs; L = 128)."""
    folder = resources.files("specnotes").joinpath("data", "reference", "llama-server")
    return json.loads(next(p for p in folder.iterdir() if p.name.startswith("shipped-")).read_text())


def gpu_record() -> dict:
    """What bench serve-speedup writes of a GPU engine: S per concurrency, the served name, the runs' labels."""
    return {"schema": "specnotes.results/1",
            "provenance": {"engine_model": "meta-llama/Llama-3.1-8B-Instruct", "label": "S(B): on, k=3 over off"},
            "sections": {"engine_speedup": [
                {"name": "engine_speedup", "params": {"concurrency": b, "max_tokens": 256, "prompt_chars": 2000},
                 "extra": {"speedup": s}} for b, s in ((1, 1.62), (16, 1.55), (64, 1.31))]},
            "notes": {"on": {"label": "on, k=3"}}}


def record(base, change):
    """A record's text: ``base()`` changed in place by ``change(doc)``."""
    def text():
        doc = copy.deepcopy(base())
        change(doc)
        return json.dumps(doc)
    return text


def first_pair(doc) -> dict:
    return doc["sections"]["engine_speedup"][0]


def gguf(change):
    """A GGUF file (a 300-token vocabulary and nothing else) with its bytes changed by ``change(bytes)``."""
    def data():
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            raw = Path(vocab_file(Path(d) / "v.gguf", [f"t{i}" for i in range(300)])).read_bytes()
        return change(raw)
    return data


GOOD_GGUF = gguf(lambda b: b)
u64 = lambda n: struct.pack("<Q", n)  # noqa: E731
ADVISE = ("--gpu", "H100-SXM", "--alpha", "0.7", "--context", "512")
QWEN = ("--drafter", "eagle3", *ADVISE)
ON_GPU = ("--target", "Llama-3.1-8B", "--drafter", "eagle3", "--gpu", "H100-SXM", "--context", "720", "--alpha", "0.6",
          "--from-record", "{tmp}/r.json")
ON_CPU = ("--from-record", "{tmp}/r.json")
MEASURE = ("measure", "--target", "{tmp}/t.gguf", "--draft", "{tmp}/d.gguf", "--out", "{tmp}/s.json")


def _set(path, value):
    def change(doc):
        *keys, last = path
        for k in keys:
            doc = doc[k]
        doc[last] = value
    return change


def _del(path):
    def change(doc):
        *keys, last = path
        for k in keys:
            doc = doc[k]
        del doc[last]
    return change


PAIR0 = ("sections", "engine_speedup", 0)
CASES = [
    # ---- issue 45: 19 tracebacks
    Case("config: MLA without qk_rope_head_dim", "advise", ("--target", "{tmp}/c.json", *ADVISE),
         r"--target: .*c\.json lacks qk_rope_head_dim", files={"c.json": config(DEEPSEEK_V3, qk_rope_head_dim=None)}),
    Case("config: moe_layers 'all'", "advise", ("--target", "{tmp}/c.json", *QWEN),
         r"c\.json: moe_layers must be a list of layer indices in \[0, 47\], got 'all'",
         files={"c.json": config(QWEN3_MOE, moe_layers="all")}),
    Case("config: mlp_only_layers 5", "advise", ("--target", "{tmp}/c.json", *QWEN),
         r"c\.json: mlp_only_layers must be a list of layer indices in \[0, 47\], got 5",
         files={"c.json": config(QWEN3_MOE, mlp_only_layers=5)}),
    Case("config: decoder_sparse_step '2'", "advise", ("--target", "{tmp}/c.json", *QWEN),
         r"c\.json: decoder_sparse_step must be an integer in \[1, 48\], got '2'",
         files={"c.json": config(QWEN3_MOE, decoder_sparse_step="2")}),
    Case("config: a JSON array", "advise", ("--target", "{tmp}/c.json", *ADVISE),
         r"--target: .*c\.json holds a JSON list, not the object of a Hugging Face config\.json",
         files={"c.json": lambda: "[1, 2]"}),
    Case("record: speedup 'fast'", "advise", ON_GPU,
         r"--from-record: .*r\.json: sections\.engine_speedup\[0\]\.extra\.speedup must be a number in \(0, 4\], "
         r"got 'fast'", files={"r.json": record(gpu_record, _set((*PAIR0, "extra", "speedup"), "fast"))}),
    Case("record: no concurrency", "advise", ON_GPU,
         r"--from-record: .*sections\.engine_speedup\[0\]\.params\.concurrency must be an integer in \[1, 65536\], "
         r"got None", files={"r.json": record(gpu_record, _del((*PAIR0, "params", "concurrency")))}),
    Case("record: concurrency 'eight'", "advise", ON_GPU,
         r"--from-record: .*params\.concurrency must be an integer in \[1, 65536\], got 'eight'",
         files={"r.json": record(gpu_record, _set((*PAIR0, "params", "concurrency"), "eight"))}),
    Case("record: engine_speedup an object", "advise", ON_GPU,
         r"--from-record: .*sections\.engine_speedup must be a list of records, got \{",
         files={"r.json": record(gpu_record, _set(("sections", "engine_speedup"), {"1": 1.5}))}),
    Case("record: engine_speedup a list of numbers", "advise", ON_GPU,
         r"--from-record: .*sections\.engine_speedup\[0\] must be a JSON object, got 1\.5",
         files={"r.json": record(gpu_record, _set(("sections", "engine_speedup"), [1.5, 1.2]))}),
    Case("record: k 'four'", "advise", ON_CPU, r"--from-record: .*r\.json: notes\.k must be an integer in \[1, 64\], "
         r"got 'four'", files={"r.json": record(shipped_record, _set(("notes", "k"), "four"))}),
    Case("record: roofs without flops", "advise", ON_CPU,
         r"--from-record: .*notes\.roofs\.flops must be a number in \(0, 1e\+18\], got None",
         files={"r.json": record(shipped_record, _del(("notes", "roofs", "flops")))}),
    Case("record: provenance a list", "advise", ON_CPU, r"--from-record: .*provenance must be a JSON object, got \[",
         files={"r.json": record(shipped_record, _set(("provenance",), ["llama-server"]))}),
    Case("engine measure: a KV count of 2^63 - 1", "engine", MEASURE,
         r"GGUF file .*t\.gguf: metadata pair count must be an integer in \[0, 65,536\], "
         r"got 9,223,372,036,854,775,807",
         files={"t.gguf": gguf(lambda b: b[:16] + u64(2**63 - 1) + b[24:]), "d.gguf": GOOD_GGUF}),
    Case("engine measure: a first key 2^62 bytes long", "engine", MEASURE,
         r"GGUF file .*t\.gguf: metadata key 0's length must be an integer in \[0, [\d,]+\], got "
         r"4,611,686,018,427,387,904", files={"t.gguf": gguf(lambda b: b[:24] + u64(2**62) + b[32:]),
                                               "d.gguf": GOOD_GGUF}),
    Case("bench chapters --budget-s -1", "bench", ("chapters", "--budget-s", "-1"),
         r"argument --budget-s: must be a number >= 0, got -1"),
    Case("bench chapters --budget-s nan", "bench", ("chapters", "--budget-s", "nan"),
         r"argument --budget-s: must be a number >= 0, got nan"),
    Case("bench chapters --device tpu", "bench", ("chapters", "--device", "tpu"),
         r"--device: device must be 'cpu', 'cuda', 'cuda:N' or 'mps', got 'tpu'"),
    Case("bench chapters --dtype fp7", "bench", ("chapters", "--dtype", "fp7"), r"--dtype: unknown dtype 'fp7'"),
    # ---- issue 45: 11 unclear
    *[Case(f"record: {why} (not --measured's)", "advise", ON_CPU,
           rf"^(?!.*--measured).*--from-record: .*r\.json: {field} must be {allowed}, got {got}",
           files={"r.json": record(shipped_record, change)}) for why, change, field, allowed, got in [
        ("S nan", _set((*PAIR0, "extra", "speedup_engine_tpot"), float("nan")),
         r"sections\.engine_speedup\[0\]\.extra\.speedup_engine_tpot", r"a number in \(0, 5\]", "nan"),
        ("S inf", _set((*PAIR0, "extra", "speedup_engine_tpot"), float("inf")),
         r"sections\.engine_speedup\[0\]\.extra\.speedup_engine_tpot", r"a number in \(0, 5\]", "inf"),
        ("S negative", _set((*PAIR0, "extra", "speedup_engine_tpot"), -0.8),
         r"sections\.engine_speedup\[0\]\.extra\.speedup_engine_tpot", r"a number in \(0, 5\]", "-0.8"),
        ("concurrency 0", _set((*PAIR0, "params", "concurrency"), 0),
         r"sections\.engine_speedup\[0\]\.params\.concurrency", r"an integer in \[1, 65536\]", "0"),
        ("k -1", _set(("notes", "k"), -1), r"notes\.k", r"an integer in \[1, 64\]", "-1"),
        ("bandwidth 0", _set(("notes", "roofs", "bandwidth"), 0), r"notes\.roofs\.bandwidth",
         r"a number in \(0, 1e\+15\]", "0"),
        ("alpha 1.7", _set(("notes", "specnotes_acceptance", "alpha"), 1.7), r"notes\.specnotes_acceptance\.alpha",
         r"a number in \[0\.0, 1\.0\]", "1.7"),
    ]],
    Case("engine measure: a truncated GGUF header", "engine", MEASURE,
         r"GGUF file .*t\.gguf: .* \(a truncated or corrupt GGUF header\)", files={"t.gguf": gguf(lambda b: b[:100]),
                                                                 "d.gguf": GOOD_GGUF}),
    Case("engine measure: an absurd tensor count", "engine", MEASURE,
         r"GGUF file .*t\.gguf: tensor count must be an integer in \[0, 1,048,576\], got 1,099,511,627,776",
         files={"t.gguf": gguf(lambda b: b[:8] + u64(2**40) + b[16:]), "d.gguf": GOOD_GGUF}),
    Case("engine measure --k 0: the message first", "engine", ("measure", "--k", "0"),
         r"^python -m specnotes\.serve\.engine measure: error: argument --k: 0 is not allowed"),
    Case("engine measure --target alone: the message first", "engine", ("measure", "--target", "{tmp}/t.gguf"),
         r"^python -m specnotes\.serve\.engine: error: --target and --draft go together",
         files={"t.gguf": GOOD_GGUF}),
    # ---- issue 45: 3 silent, 1 hang, 1 valid input refused
    Case("config: num_hidden_layers 10^30", "advise", ("--target", "{tmp}/c.json", "--draft", "Llama-3.2-1B", *ADVISE),
         r"--target: .*c\.json: num_hidden_layers must be an integer in \[1, 1024\], got 1e\+30",
         files={"c.json": config(LLAMA_8B, num_hidden_layers=10**30)}),
    Case("config: vocab_size 10^30 with an EAGLE-3 head", "advise", ("--target", "{tmp}/c.json", "--drafter", "eagle3",
                                                                      *ADVISE),
         r"--target: .*c\.json: vocab_size must be an integer in \[1, 2097152\], got 1e\+30",
         files={"c.json": config(LLAMA_8B, vocab_size=10**30)}),
    Case("record at L = 128 asked at --context 100000", "advise", (*ON_CPU, "--context", "100000"),
         r"--context 100000 disagrees with the record .*r\.json, which was measured at L = 128 tokens",
         files={"r.json": record(shipped_record, lambda doc: None)}),
    Case("config: a MoE of 10^9 layers (was: a hang)", "advise", ("--target", "{tmp}/c.json", *QWEN),
         r"c\.json: num_hidden_layers must be an integer in \[1, 1024\], got 1000000000",
         files={"c.json": config(QWEN3_MOE, num_hidden_layers=10**9)}, seconds=10),
    Case("advise --alpha 1e-3 (valid)", "advise", ("--target", "Llama-3.1-8B", "--draft", "Llama-3.2-1B", "--gpu",
                                                    "H100-SXM", "--context", "512", "--alpha", "1e-3"),
         r"α\*\* = 0\.001", rc=0),
    Case("bench serve --out in a missing folder", "bench", ("serve", "--url", "http://127.0.0.1:9/v1", "--model", "m",
                                                            "--out", "{tmp}/missing/dir/x.json"),
         r"--out .*x\.json: its folder .*missing/dir does not exist", absent="{tmp}/missing"),
    # ---- issue 47, part 4: names resolved openly
    *[Case(f"advise --target {name}: said in the first lines", "advise", ("--target", name, *QWEN),
           rf"\*\*Warning\.\*\* --target {name} read as Qwen3-30B-A3B", rc=0, issue=47) for name in
      ("Qwen3-30B", "Qwen3-30B-A3", "Qwen/Qwen3-30B-A3B")],
    Case("advise --target Llama-3.1-8B-Instruct", "advise", ("--target", "Llama-3.1-8B-Instruct", "--draft",
                                                             "Llama-3.2-1B", *ADVISE),
         r"\*\*Warning\.\*\* --target Llama-3\.1-8B-Instruct read as Llama-3\.1-8B \(a -Instruct model", rc=0,
         issue=47),
    Case("advise: a config identical to a preset is the preset", "advise",
         ("--target", "{tmp}/cfg/qwen3moe.json", "--engine", "sglang", *QWEN[:2], "--gpu", "H100-SXM", "--alpha", "0.7",
          "--context", "512"),
         r"(?s)^\*\*Does speculation pay\? Qwen3-30B-A3B with .*has the shape of the preset Qwen3-30B-A3B(?!.*target "
         r"Qwen3-30B-A3B: it was fitted)", rc=0, files={"cfg/qwen3moe.json": config(QWEN3_MOE)}, issue=47),
    Case("advise --weight-bits 4.25 (MXFP4)", "advise", ("--target", "Llama-3.1-8B", "--draft", "Llama-3.2-1B",
                                                          "--weight-bits", "4.25", *ADVISE), r"4\.25-bit weights",
         rc=0, issue=47),
    Case("advise --engine-version without --engine", "advise", ("--target", "Llama-3.1-8B", "--draft", "Llama-3.2-1B",
                                                                "--engine-version", "0.10.1", *ADVISE),
         r"--engine-version needs --engine", issue=47),
    Case("advise --batch 64-1", "advise", ("--target", "Llama-3.1-8B", "--draft", "Llama-3.2-1B", "--batch", "64-1",
                                           *ADVISE), r"--batch range 64-1 is reversed", issue=47),
    Case("advise --plot into a missing folder", "advise", ("--target", "Llama-3.1-8B", "--draft", "Llama-3.2-1B",
                                                           "--plot", "{tmp}/missing/s.png", *ADVISE),
         r"--plot must be a file in a folder that exists .*missing' does not exist", absent="{tmp}/missing", issue=47),
]


def prepare(case: Case, tmp: Path) -> list[str]:
    """Write the case's files into ``tmp``; its argv with ``{tmp}`` filled in."""
    for name, make in case.files.items():
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        data = make()
        path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return [a.replace("{tmp}", str(tmp)) for a in case.argv]
