"""A tiny byte-level mixture-of-experts target: the shipped dense target's attention with MoE MLPs.

``MoETransformer`` is a ``model.Transformer`` (same KV cache, masks, rotary positions and prefill), so the
shipped speculative loop (``generate.speculative_generate``) runs it unchanged with the shipped draft.
Each block's MLP is ``n_experts`` gated experts of width ``expert_d_ff``; a router sends each token to its
top ``experts_per_token`` (softmax weights over the chosen), and the experts run as grouped matmuls
(``moe_stack.experts``). With ``model.record_routes()`` every pass appends each block's chosen experts
[B, n, m] to a list, so a measurement can count the distinct experts a verify pass touched and how often
consecutive tokens share experts.

Trained by ``python -m specnotes.tiny.train --which moe`` (with a Switch-style load-balancing loss, weight
``aux_weight``); weights ship in fp16 as ``data/moe_target.pt`` beside ``data/moe_models.json`` (config,
training settings, wall time, provenance, held-out loss).
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import torch
from torch import nn

from specnotes import validate
from specnotes.measure.moe_stack import experts
from specnotes.tiny.model import Block, ModelConfig, Transformer, data_file


@dataclass(frozen=True)
class MoEConfig(ModelConfig):
    n_experts: int = 16
    experts_per_token: int = 2
    expert_d_ff: int = 96

    def __post_init__(self):
        super().__post_init__()
        n = validate.integer("n_experts", self.n_experts, low=1)
        validate.integer("experts_per_token", self.experts_per_token, low=1, high=n)
        validate.integer("expert_d_ff", self.expert_d_ff, low=1)


# The shipped dense target's attention (4 layers, d = 192, 4 heads); 16 experts of width 96, 2 per token
MOE_TARGET_CONFIG = MoEConfig(n_layers=4, d_model=192, n_heads=4, d_ff=192, n_experts=16, experts_per_token=2,
                              expert_d_ff=96)


class MoEBlock(Block):
    def __init__(self, config: MoEConfig):
        super().__init__(config)
        del self.w_gate_up, self.w_down  # the dense MLP's weights: replaced by the experts
        n, d, f = config.n_experts, config.d_model, config.expert_d_ff
        self.per_token = config.experts_per_token
        self.router = nn.Linear(d, n, bias=False)
        self.w_gate_up = nn.Parameter(torch.randn(n, 2 * f, d) * 0.02)
        self.w_down = nn.Parameter(torch.randn(n, d, f) * 0.02)
        self.routes: list | None = None  # set by MoETransformer.record_routes
        self.aux = None  # the load-balancing loss of the last pass (training)

    def mlp(self, x):
        B, n, d = x.shape
        flat = self.mlp_norm(x).reshape(B * n, d)
        layer = {"router": self.router.weight, "w_gate_up": self.w_gate_up, "w_down": self.w_down}
        y, chosen = experts(flat, layer, self.per_token)
        if self.training:
            self.aux = balance_loss(flat @ self.router.weight.t(), chosen)
        if self.routes is not None:
            self.routes.append(chosen.view(B, n, -1).detach().cpu())
        return x + y.view(B, n, d)


def balance_loss(logits: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
    """Switch Transformer's load-balancing loss N·Σ_e f_e·P_e (Fedus et al. 2021): f_e the share of the (token,
    choice) pairs routed to expert e, P_e the mean router probability of e; 1 when both are uniform."""
    n = logits.shape[-1]
    share = torch.bincount(chosen.flatten(), minlength=n).float() / chosen.numel()
    return n * (share * torch.softmax(logits.float(), dim=-1).mean(0)).sum()


class MoETransformer(Transformer):
    def __init__(self, config: MoEConfig):
        if not isinstance(config, MoEConfig):
            raise validate.BadArgumentType(f"config must be a MoEConfig, got {type(config).__name__}")
        super().__init__(config)
        self.blocks = nn.ModuleList(MoEBlock(config) for _ in range(config.n_layers))
        for block in self.blocks:
            block.apply(_init_linear)

    @contextmanager
    def record_routes(self):
        """Within the block, every pass appends each block's chosen experts [B, n, m] (on the CPU) to the list
        this yields: ``routes[i]`` is the i-th (pass, block) in order, blocks of one pass together."""
        routes: list[torch.Tensor] = []
        for block in self.blocks:
            block.routes = routes
        try:
            yield routes
        finally:
            for block in self.blocks:
                block.routes = None

    def aux_loss(self) -> torch.Tensor:
        """The mean load-balancing loss of the blocks' last training pass."""
        return sum(block.aux for block in self.blocks) / len(self.blocks)


def _init_linear(module: nn.Module):
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, std=0.02)


def moe_card() -> dict:
    """Config, training settings and held-out loss of the shipped MoE target (data/moe_models.json)."""
    return json.loads(data_file("moe_models.json").read_text())


def load_moe_target(dtype=torch.float32, device="cpu") -> MoETransformer:
    """The shipped byte-level MoE target (``python -m specnotes.tiny.train --which moe`` made it)."""
    card = moe_card()["moe_target"]
    model = MoETransformer(MoEConfig(**card["config"]))
    with data_file("moe_target.pt").open("rb") as f:
        state = torch.load(f, map_location="cpu", weights_only=True)
    model.load_state_dict(state)
    return model.to(device=device, dtype=dtype).eval()


def config_dict(config: MoEConfig) -> dict:
    return asdict(config)
