"""Train the shipped models: ``python -m specnotes.tiny.train --which target|draft|all|moe``.

Reproducible (fixed seeds, fixed step counts, deterministic batches) and sized for a 2-core CPU:
the whole run takes under 20 minutes. It uses one thread by default: on a shared 2-core machine,
intra-op threads wait on each other and two threads ran 5-10x slower than one. Weights are saved as fp16 state dicts in
``specnotes/data/`` next to ``models.json`` (config, training settings, wall time, held-out loss).
The target is trained with a joint loss on its early-exit head, so self-speculation has a drafter.
``--which moe`` trains Chapter 10's byte-level mixture-of-experts target (``specnotes.tiny.moe_model``) on the same
text, with a load-balancing loss; it is not part of ``all`` and saves to ``moe_target.pt`` and
``moe_models.json``.
``--which parallel`` turns the shipped draft into Chapter 11's PARD-style parallel drafter
(``specnotes.tiny.parallel_drafter``): the same weights and a mask token, trained on the same text to predict up to
``parallel_drafter.BLOCK`` tokens in one pass; it saves to ``parallel_draft.pt`` and ``models.json`` ("parallel").
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from specnotes.measure.records import provenance
from specnotes.tiny import parallel_drafter
from specnotes.tiny.model import (
    DRAFT_CONFIG,
    TARGET_CONFIG,
    ModelConfig,
    Transformer,
    bits,
    config_dict,
    encode,
    eval_loss,
    load_text,
)
from specnotes.tiny.moe_model import MOE_TARGET_CONFIG, MoEConfig, MoETransformer
from specnotes.validate import Parser, cli, integer

DATA_DIR = Path(__file__).parents[1] / "data"


@dataclass(frozen=True)
class TrainConfig:
    steps: int
    batch: int = 8
    block: int = 256  # the longest context the models are trained for (RoPE does not extrapolate)
    lr: float = 3e-3
    warmup: int = 50
    weight_decay: float = 0.1
    exit_weight: float = 0.3  # weight of the early-exit head's loss in the joint loss
    seed: int = 1234
    aux_weight: float = 0.0  # weight of a MoE model's load-balancing loss (moe_model.balance_loss)


TRAIN = {
    "target": (TARGET_CONFIG, TrainConfig(steps=900, seed=1234)),
    "draft": (DRAFT_CONFIG, TrainConfig(steps=900, seed=4321)),  # same tokens as the target
    "moe": (MOE_TARGET_CONFIG, TrainConfig(steps=600, seed=2468, aux_weight=0.01)),
    # from the shipped draft's weights, at a lower peak; each window also carries 32 groups of 7 masks
    "parallel": (parallel_drafter.PARALLEL_CONFIG, TrainConfig(steps=1500, lr=1e-3, warmup=20, seed=8642)),
}
ANCHORS = 32  # mask groups per training window (parallel)


def lr_at(step: int, tc: TrainConfig) -> float:
    # linear warm-up, then cosine decay to a tenth of the peak
    if step < tc.warmup:
        return tc.lr * (step + 1) / tc.warmup
    progress = (step - tc.warmup) / max(1, tc.steps - tc.warmup)
    return tc.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))


def random_batch(ids: torch.Tensor, tc: TrainConfig, generator: torch.Generator):
    starts = torch.randint(0, len(ids) - tc.block - 1, (tc.batch,), generator=generator)
    window = starts[:, None] + torch.arange(tc.block + 1)
    chunk = ids[window]
    return chunk[:, :-1], chunk[:, 1:]


def loss_fn(model: Transformer, x, y, tc: TrainConfig) -> torch.Tensor:
    if isinstance(model, MoETransformer):
        return F.cross_entropy(model(x).flatten(0, 1), y.flatten()) + tc.aux_weight * model.aux_loss()
    if model.config.exit_layer is None:
        return F.cross_entropy(model(x).flatten(0, 1), y.flatten())
    logits, exit_logits = model.forward_with_exit(x)
    final = F.cross_entropy(logits.flatten(0, 1), y.flatten())
    return final + tc.exit_weight * F.cross_entropy(exit_logits.flatten(0, 1), y.flatten())


def make_optimizer(model: Transformer, tc: TrainConfig) -> torch.optim.Optimizer:
    matrices = [p for p in model.parameters() if p.dim() >= 2]
    vectors = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": matrices, "weight_decay": tc.weight_decay}, {"params": vectors, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=tc.lr, betas=(0.9, 0.95))


def train(
    config: ModelConfig, tc: TrainConfig, log_every: int = 50, eval_text: str | None = None
) -> tuple[Transformer, dict]:
    """Train one model; held-out loss on ``eval_text`` (default: the shipped held-out split)."""
    torch.manual_seed(tc.seed)
    model = MoETransformer(config) if isinstance(config, MoEConfig) else Transformer(config)
    ids = encode(load_text("train"))
    generator = torch.Generator().manual_seed(tc.seed)
    opt = make_optimizer(model, tc)
    start = time.perf_counter()
    for step in range(tc.steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, tc)
        x, y = random_batch(ids, tc, generator)
        loss = loss_fn(model, x, y, tc)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % log_every == 0 or step == tc.steps - 1:
            print(f"step {step:5d}  loss {loss.item():.3f}  {time.perf_counter() - start:7.1f} s", flush=True)
    wall = time.perf_counter() - start
    model.eval()
    record = {
        "config": config_dict(config),
        "params": model.num_params,
        "train": {**tc.__dict__, "tokens_seen": tc.steps * tc.batch * tc.block},
        "wall_time_s": round(wall, 1),
        "provenance": provenance("cpu", torch.float32),
    }
    nats = eval_loss(model, eval_text)
    record["eval_loss_nats_per_byte"] = round(nats, 4)
    record["eval_loss_bits_per_byte"] = round(bits(nats), 4)
    if config.exit_layer is not None:
        exit_nats = eval_loss(model, eval_text, exit_layer=config.exit_layer)
        record["exit_eval_loss_nats_per_byte"] = round(exit_nats, 4)
        record["exit_eval_loss_bits_per_byte"] = round(bits(exit_nats), 4)
    return model, record


def train_parallel(tc: TrainConfig, log_every: int = 50, eval_text: str | None = None) -> tuple[Transformer, dict]:
    """The shipped draft turned into a parallel drafter (PARD): trained on the real positions' next-token loss and
    the masks' loss together (``parallel_drafter.training_batch``, ``loss``); held-out next-token loss and the
    greedy accuracy of each depth of one pass (``parallel_drafter.draft_accuracy``)."""
    from specnotes.tiny.model import load_draft

    torch.manual_seed(tc.seed)
    draft = load_draft()
    model = parallel_drafter.from_draft(draft)
    ids = encode(load_text("train"))
    generator = torch.Generator().manual_seed(tc.seed)
    opt = make_optimizer(model, tc)
    k = parallel_drafter.BLOCK
    start = time.perf_counter()
    for step in range(tc.steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step, tc)
        batch = parallel_drafter.training_batch(ids, tc.batch, tc.block, k, ANCHORS, generator)
        real, masks = parallel_drafter.loss(model, *batch, tc.block)
        opt.zero_grad(set_to_none=True)
        (real + masks).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % log_every == 0 or step == tc.steps - 1:
            print(f"step {step:5d}  loss {real.item():.3f} + masks {masks.item():.3f}  "
                  f"{time.perf_counter() - start:7.1f} s", flush=True)
    wall = time.perf_counter() - start
    model.eval()
    held_out = load_text("eval") if eval_text is None else eval_text
    record = {
        "config": config_dict(model.config),
        "params": model.num_params,
        "mask_token": parallel_drafter.MASK,
        "initialized_from": "draft (draft.pt): its weights, one more embedding row (the mask: their mean) and "
                            "one more LM-head row (zeros)",
        "train": {**tc.__dict__, "block_k": k, "mask_groups_per_window": ANCHORS,
                  "tokens_seen": tc.steps * tc.batch * (tc.block + ANCHORS * (k - 1))},
        "wall_time_s": round(wall, 1),
        "provenance": provenance("cpu", torch.float32),
    }
    nats = eval_loss(model, held_out)
    record["eval_loss_nats_per_byte"] = round(nats, 4)
    record["eval_loss_bits_per_byte"] = round(bits(nats), 4)
    record["eval_greedy_accuracy_by_depth"] = [round(a, 4) for a in parallel_drafter.draft_accuracy(model, held_out)]
    return model, record


def unigram_entropy_nats() -> float:
    """Entropy of the held-out bytes under the training byte frequencies (add-one smoothed)."""
    counts = torch.bincount(encode(load_text("train")), minlength=256).double() + 1
    logp = (counts / counts.sum()).log()
    return float(-logp[encode(load_text("eval"))].mean())


def save_moe(model: MoETransformer, record: dict, data_dir: Path = DATA_DIR):
    """The MoE target: fp16 weights in ``moe_target.pt``, its record in ``moe_models.json``."""
    torch.save({k: v.half() for k, v in model.state_dict().items()}, data_dir / "moe_target.pt")
    (data_dir / "moe_models.json").write_text(json.dumps({"moe_target": record}, indent=2) + "\n")


def save(which: str, model: Transformer, record: dict, data_dir: Path = DATA_DIR):
    if which == "moe":
        return save_moe(model, record, data_dir)
    state = {k: v.half() for k, v in model.state_dict().items()}
    torch.save(state, data_dir / ("parallel_draft.pt" if which == "parallel" else f"{which}.pt"))
    card_path = data_dir / "models.json"
    card = json.loads(card_path.read_text()) if card_path.exists() else {}
    card[which] = record
    nats = unigram_entropy_nats()
    card["unigram_baseline"] = {
        "eval_loss_nats_per_byte": round(nats, 4),
        "eval_loss_bits_per_byte": round(bits(nats), 4),
    }
    card_path.write_text(json.dumps(card, indent=2) + "\n")


def main(argv=None):
    parser = Parser(prog="python -m specnotes.tiny.train", description=__doc__.splitlines()[0])
    parser.add_argument("--which", choices=["target", "draft", "all", "moe", "parallel"], default="all")
    parser.add_argument("--threads", type=cli(integer, low=1), default=1,
                        help="1 is fastest on a shared 2-core machine")
    parser.add_argument("--steps", type=cli(integer, low=1), default=None, help="override the step count (smoke runs)")
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    for which in ("target", "draft") if args.which == "all" else (args.which,):
        config, tc = TRAIN[which]
        if args.steps is not None:
            tc = TrainConfig(**{**tc.__dict__, "steps": args.steps})
        count = (MoETransformer(config) if isinstance(config, MoEConfig) else Transformer(config)).num_params
        print(f"== {which}: {count:,} parameters, {tc}", flush=True)
        model, record = train_parallel(tc) if which == "parallel" else train(config, tc)
        print(json.dumps(record, indent=2), flush=True)
        if not args.no_save:
            save(which, model, record)


if __name__ == "__main__":
    main()
