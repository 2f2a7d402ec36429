"""Token trees: draft several candidates per position and verify every node in one target pass.

A tree hangs below its *root*, the last committed token. Node j (1..T) has a parent (0: the root)
and a rank r: it is its parent's r-th candidate (the draft's r-th most likely token, or its r-th
independent sample). Nodes are numbered level by level, so a parent comes before its children.

**Verification.** The target reads [root, node 1, ..., node T]: T + 1 tokens per sequence in one pass.
Node j sits at rotary position L + depth(j) and attends to the committed prefix and to its own
ancestors only (the *tree mask*, ``tree_attention``); its K/V land at cache slot L + j. After
acceptance, ``keep_path`` moves the accepted nodes' K/V to slots L + 1, L + 2, ...

**Acceptance** (``tree_sample``), SpecInfer's multi-step speculative sampling (Miao et al., arXiv
2305.09781, §4.3: ``VerifyStochastic`` in Algorithm 2, exact by Theorem 4.2; SpecInfer tries the children
in random order, we try them by rank): at a node with target distribution p, try its children in turn.
Child s, a token x_s drawn from its proposal q_s, is accepted with probability min(1, p(x_s)/q_s(x_s)); on a rejection
p ← norm(max(0, p − q_s)) and the next child is tried against that residual. If every child is
rejected, one token is drawn from the last residual; below an accepted leaf, a bonus token from the
target. Each round is one Leviathan step (it emits a sample of its p, by accepting or by passing the
residual on), so the token emitted at every depth follows the target exactly, provided each x_s is
drawn from q_s independently of the earlier rounds: i.i.d. samples of the draft (q_s = q, SpecInfer)
or fixed choices such as the draft's top-m (q_s = one-hot). At temperature 0 this is greedy
acceptance of the longest path that matches the target's argmax (``greedy_tree_accept``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import cached_property

import torch

from specnotes import validate
from specnotes.measure.timing import sync
from specnotes.sampling.exact import draw_uniforms, inverse_cdf, logits_to_probs, sample_from
from specnotes.tiny.model import KVCache, Transformer, prefill


@dataclass(frozen=True)
class Tree:
    """A static tree shape: ``parents[j - 1]`` is the parent of node j (0 = the root), level by level."""

    parents: tuple[int, ...]

    def __post_init__(self):
        parents = tuple(validate.integers("parents", self.parents, low=0))
        object.__setattr__(self, "parents", parents)
        for j, parent in enumerate(parents, start=1):
            if parent >= j:
                raise validate.BadArgument(f"parents[{j - 1}] = {parent}: a parent must come before its child")
        if list(self.depths[1:]) != sorted(self.depths[1:]):
            raise validate.BadArgument("nodes must be listed level by level (depths non-decreasing)")

    @classmethod
    def from_branching(cls, branching) -> Tree:
        """Every node at depth d - 1 has ``branching[d - 1]`` children: (3, 2, 1) is 3 + 6 + 6 nodes."""
        branching = validate.integers("branching", branching, low=1)
        parents, level = [], [0]
        for m in branching:
            nxt = []
            for parent in level:
                for _ in range(m):
                    parents.append(parent)
                    nxt.append(len(parents))
            level = nxt
        return cls(tuple(parents))

    @classmethod
    def chain(cls, k: int) -> Tree:
        """k drafts in a row: the chain that ``speculative_generate`` verifies."""
        k = validate.integer("k", k, low=1)
        return cls(tuple(range(k)))

    @property
    def size(self) -> int:
        """T, the drafted nodes (the root not counted)."""
        return len(self.parents)

    @cached_property
    def depths(self) -> tuple[int, ...]:
        """Depth of every node, the root (index 0) included: the root is at depth 0."""
        depths = [0]
        for parent in self.parents:
            depths.append(depths[parent] + 1)
        return tuple(depths)

    @property
    def depth(self) -> int:
        return max(self.depths)

    @cached_property
    def ranks(self) -> tuple[int, ...]:
        """Rank of every node among its siblings (the root's is 0)."""
        seen, ranks = [0] * (self.size + 1), [0]
        for parent in self.parents:
            ranks.append(seen[parent])
            seen[parent] += 1
        return tuple(ranks)

    @cached_property
    def levels(self) -> tuple[tuple[int, ...], ...]:
        """The nodes at depth 0 (the root), 1, ..., D."""
        return tuple(tuple(j for j, d in enumerate(self.depths) if d == depth) for depth in range(self.depth + 1))

    @cached_property
    def children(self) -> torch.Tensor:
        """[T + 1, max children] int64: the children of every node in rank order, -1 where there are fewer."""
        width = max(self.ranks) + 1
        table = torch.full((self.size + 1, width), -1, dtype=torch.int64)
        for j, parent in enumerate(self.parents, start=1):
            table[parent, self.ranks[j]] = j
        return table

    @cached_property
    def ancestors(self) -> torch.Tensor:
        """[T + 1, T + 1] bool: ancestors[j, i] is True when node i is on the path root..j (j included)."""
        anc = torch.eye(self.size + 1, dtype=torch.bool)
        for j, parent in enumerate(self.parents, start=1):
            anc[j] |= anc[parent]
        return anc


def tree_attention(tree: Tree, base: torch.Tensor, nodes, context: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotary positions [B, n] and visibility [B, n, context] for feeding tree ``nodes`` (indices, 0 = the root)
    when node j lives at cache slot base[b] + j: each node sees slots 0..base (the prefix and the root)
    and its ancestors' slots."""
    nodes = torch.as_tensor(nodes, dtype=torch.int64, device=base.device)
    depths = torch.tensor(tree.depths, device=base.device)
    positions = base[:, None] + depths[nodes]
    offset = torch.arange(context, device=base.device) - base[:, None]  # [B, context]: which node a slot holds
    in_tree = (offset > 0) & (offset <= tree.size)
    anc = tree.ancestors.to(base.device)[nodes]  # [n, T + 1]
    visible = anc[:, offset.clamp(0, tree.size)].permute(1, 0, 2) & in_tree[:, None]
    return positions, visible | (offset <= 0)[:, None]


def keep_path(cache: KVCache, base: torch.Tensor, path: torch.Tensor, kept: torch.Tensor):
    """After a tree pass wrote node j at slot base + j: move the first ``kept[b]`` nodes of ``path[b]`` to
    slots base + 1, base + 2, ... and set the lengths to base + 1 + kept (the root stays at base)."""
    D = path.shape[1]
    steps = torch.arange(D, device=base.device)
    dst = base[:, None] + 1 + steps
    src = torch.where(steps < kept[:, None], base[:, None] + path.clamp(min=0), dst)  # others: copied onto themselves
    L, B, H, _, Dh = cache.k.shape
    src_index = src[None, :, None, :, None].expand(L, B, H, D, Dh)
    dst_index = dst[None, :, None, :, None].expand(L, B, H, D, Dh)
    for store in (cache.k, cache.v):
        store.scatter_(3, dst_index, store.gather(3, src_index))
    cache.lengths = base + 1 + kept


def greedy_tree_accept(tree: Tree, node_tokens: torch.Tensor, target_logits: torch.Tensor):
    """Temperature 0: follow, from the root, the child that equals the target's argmax, as deep as it goes.
    -> (tokens [B, D + 1] with -1 padding, num_accepted [B], path [B, D] node indices with -1 padding)."""
    B = node_tokens.shape[0]
    rows = torch.arange(B, device=node_tokens.device)
    best = target_logits.argmax(-1)  # [B, T + 1]: the target's choice after the root and after every node
    tokens = torch.cat([torch.zeros_like(node_tokens[:, :1]), node_tokens], 1)  # node j's token at column j
    children = tree.children.to(node_tokens.device)
    node = torch.zeros(B, dtype=torch.int64, device=node_tokens.device)
    path = torch.full((B, tree.depth), -1, dtype=torch.int64, device=node_tokens.device)
    for d in range(tree.depth):
        kids = children[node]  # [B, m]
        match = (kids >= 0) & (tokens[rows[:, None], kids.clamp(min=0)] == best[rows, node][:, None])
        found = match.any(1)
        path[:, d] = torch.where(found, kids[rows, match.long().argmax(1)], -1)
        node = torch.where(found, path[:, d], node)
        if not found.any():
            break
    return assemble(tokens, path, best[rows, node])


def assemble(tokens: torch.Tensor, path: torch.Tensor, last: torch.Tensor):
    """(tokens [B, D + 1]: the path's tokens then ``last``, -1 after; num_accepted; path)."""
    num_accepted = (path >= 0).sum(1)
    steps = torch.arange(path.shape[1] + 1, device=path.device)
    out = torch.gather(tokens, 1, torch.cat([path, path[:, :1]], 1).clamp(min=0))
    out = torch.where(steps < num_accepted[:, None], out, -1)
    out = torch.where(steps == num_accepted[:, None], last[:, None], out)
    return out, num_accepted, path


def tree_sample(
    tree: Tree,
    node_tokens: torch.Tensor,
    proposal_probs: torch.Tensor,
    target_probs: torch.Tensor,
    generator: torch.Generator | None = None,
    uniforms: tuple[torch.Tensor, torch.Tensor] | None = None,
):
    """Multi-step speculative sampling over a token tree (module docstring), vectorized over the batch.

    node_tokens [B, T] int64; proposal_probs [B, T, V]: the distribution node j was drawn from (its
    parent's draft distribution for sampled children, one-hot for fixed ones); target_probs [B, T + 1, V]:
    row 0 after the root, row j after node j. Randomness: u [B, T] (one accept test per node) and v [B]
    (the final token), as ``draw_uniforms(B, T)``; on a chain this is ``speculative_sample`` sample for sample.
    -> (tokens [B, D + 1], num_accepted [B], path [B, D]) as in ``greedy_tree_accept``.
    """
    B, T = node_tokens.shape
    if T != tree.size or proposal_probs.shape[:2] != (B, T) or target_probs.shape[:2] != (B, T + 1):
        raise validate.BadArgument(
            f"a tree of {tree.size} nodes needs node_tokens [B, {tree.size}], proposal_probs [B, {tree.size}, V] and "
            f"target_probs [B, {tree.size + 1}, V]; got {tuple(node_tokens.shape)}, {tuple(proposal_probs.shape)}, "
            f"{tuple(target_probs.shape)}")
    device = target_probs.device
    u, v = draw_uniforms(B, T, generator, device) if uniforms is None else uniforms
    rows = torch.arange(B, device=device)
    children = tree.children.to(device)
    tokens = torch.cat([torch.zeros_like(node_tokens[:, :1]), node_tokens], 1)
    node = torch.zeros(B, dtype=torch.int64, device=device)
    weights = target_probs[:, 0].clone()  # the current p, up to the factor `mass`
    mass = torch.ones(B, dtype=weights.dtype, device=device)
    alive = torch.ones(B, dtype=torch.bool, device=device)
    path = torch.full((B, tree.depth), -1, dtype=torch.int64, device=device)
    for d in range(tree.depth):
        moved = torch.zeros_like(alive)
        for s in range(children.shape[1]):
            child = children[node, s]
            trying = alive & ~moved & (child >= 0)
            if not trying.any():
                continue
            j = child.clamp(min=1)
            x = tokens[rows, j]
            q = proposal_probs[rows, j - 1]
            q_x = q.gather(1, x[:, None]).squeeze(1)
            accept = trying & (u[rows, j - 1] * q_x * mass < weights.gather(1, x[:, None]).squeeze(1))
            reject = trying & ~accept
            if reject.any():  # the next sibling is tried against norm(max(0, p - q_s))
                residual = (weights / mass[:, None] - q).clamp_(min=0)
                left = residual.sum(1)
                use = reject & (left > 0)  # p == q up to rounding leaves nothing: keep p (a zero-probability event)
                weights = torch.where(use[:, None], residual, weights)
                mass = torch.where(use, left, mass)
            if accept.any():
                path[:, d] = torch.where(accept, child, path[:, d])
                node = torch.where(accept, child, node)
                weights = torch.where(accept[:, None], target_probs[rows, j], weights)
                mass = torch.where(accept, torch.ones_like(mass), mass)
                moved |= accept
        alive &= moved
        if not alive.any():
            break
    return assemble(tokens, path, inverse_cdf(weights, v))


# ---------------------------------------------------------------------------------------------- drafting


CANDIDATES = ("top", "sample")


class TreeDrafter:
    """Drafts a ``Tree`` with a small model (or the target's early exit), one pass per level.

    ``candidates="top"``: node of rank r is the draft's r-th most likely token (proposal one-hot: exact at
    any temperature; at temperature 0 the tree holds the draft's top-m at every node). ``"sample"``: every
    child is an independent sample of its parent's draft distribution (proposal q: SpecInfer's scheme).

    The draft's cache holds the committed tokens except the ``pending`` ones (the accepted path and the
    target's last token, fed at the start of the next ``propose``); the tree's levels are written past
    them and forgotten after each ``propose``. A pass per level: depth D costs D draft passes, like a
    chain of D drafts, each over more tokens.
    """

    def __init__(self, model: Transformer, tree: Tree, candidates: str = "top", exit_layer: int | None = None):
        self.model, self.tree, self.exit_layer = model, tree, exit_layer
        self.candidates = validate.choice("candidates", candidates, CANDIDATES)
        self.passes = 0

    @property
    def device(self):
        return self.model.lm_head.weight.device

    def forward(self, tokens, **kwargs):
        self.passes += 1
        return self.model(tokens, self.cache, exit_layer=self.exit_layer, **kwargs)

    def start(self, prompts: list[torch.Tensor], capacity: int):
        self.cache, last, passes = prefill(self.model, prompts, capacity + self.tree.size, self.exit_layer)
        self.passes += passes
        self.pending = torch.zeros(len(prompts), self.tree.depth + 1, dtype=torch.int64, device=self.device)
        self.pending[:, 0] = last
        self.pending_len = torch.ones(len(prompts), dtype=torch.int64, device=self.device)

    def propose(self, temperature: float, generator: torch.Generator | None = None):
        """-> node_tokens [B, T] int64, proposal_probs [B, T, V] (see ``tree_sample``)."""
        tree = self.tree
        B = self.pending.shape[0]
        rows = torch.arange(B, device=self.device)
        self.saved = (self.cache.lengths.clone(), self.pending.clone(), self.pending_len.clone())
        width = int(self.pending_len.max())
        logits = {0: self.forward(self.pending[:, :width], n_valid=self.pending_len)[rows, self.pending_len - 1]}
        base = self.cache.lengths - 1  # the root's slot: node j goes to base + j
        tokens = torch.zeros(B, tree.size + 1, dtype=torch.int64, device=self.device)
        proposals = [None] * tree.size
        for depth in range(1, tree.depth + 1):
            level = tree.levels[depth]
            for parent in dict.fromkeys(tree.parents[j - 1] for j in level):  # each parent once, in order
                kids = [int(j) for j in tree.children[parent] if j >= 0]
                chosen, proposal = self.children_of(logits[parent], len(kids), temperature, generator)
                for r, j in enumerate(kids):
                    tokens[:, j] = chosen[:, r]
                    proposals[j - 1] = proposal[:, r]
            if depth < tree.depth:
                context = int(self.cache.lengths.max()) + len(level)
                positions, visible = tree_attention(tree, base, level, context)
                out = self.forward(tokens[:, list(level)], positions=positions, visible=visible)
                logits.update({j: out[:, i] for i, j in enumerate(level)})
        self.cache.rollback(base + 1)
        return tokens[:, 1:], torch.stack(proposals, 1)

    def children_of(self, logits: torch.Tensor, m: int, temperature: float, generator: torch.Generator | None):
        """The m children of one node, from its draft logits [B, V]: tokens [B, m] (rank order) and the
        distributions they were drawn from [B, m, V]. ``"sample"``: m independent draws of q, each reported
        with q; ``"top"``: the draft's m most likely tokens, fixed choices, each reported one-hot. Exactness
        needs exactly this: each child drawn from what it reports, independently of its siblings."""
        if self.candidates == "sample":
            q = logits_to_probs(logits, temperature)
            chosen = torch.stack([sample_from(q, generator, validate=False) for _ in range(m)], 1)
            return chosen, q[:, None].expand(-1, m, -1)
        chosen = logits.topk(m, dim=-1).indices
        return chosen, torch.nn.functional.one_hot(chosen, logits.shape[-1]).to(torch.float32)

    def commit(self, tokens: torch.Tensor, num_accepted: torch.Tensor, active: torch.Tensor | None = None):
        """The accepted path and the final token become pending: the next ``propose`` feeds them."""
        pending = tokens.clamp(min=0)
        pending_len = num_accepted + 1
        lengths = self.cache.lengths
        if active is not None:
            old_lengths, old_pending, old_len = self.saved
            lengths = torch.where(active, lengths, old_lengths)
            pending = torch.where(active[:, None], pending, old_pending)
            pending_len = torch.where(active, pending_len, old_len)
        self.cache.lengths = lengths
        self.pending, self.pending_len = pending, pending_len


# ---------------------------------------------------------------------------------------------- decoding


@torch.inference_mode()
def tree_generate(target: Transformer, drafter: TreeDrafter, prompts, max_new_tokens: int,
                  temperature: float = 0.0, generator: torch.Generator | None = None):
    """Batched speculative decoding with token trees: the tree drafter proposes, the target verifies all
    T + 1 tokens per sequence in one pass with the tree mask, ``tree_sample`` walks the tree, and the
    accepted path's K/V are compacted. Stats as ``speculative_generate``'s, with k = the tree's depth."""
    from specnotes.tiny.generate import Generation, GenerationStats, append_emitted, as_prompt_list

    max_new_tokens = validate.integer("max_new_tokens", max_new_tokens, low=0)
    temperature = validate.number("temperature", temperature, low=0)
    tree = drafter.tree
    D, T = tree.depth, tree.size
    extra = max_new_tokens + T + D + 2  # the last iteration may overshoot by D, then write T + 1 tree slots
    prompts = as_prompt_list(prompts, target, extra)
    device = target.lm_head.weight.device
    B = len(prompts)
    rows = torch.arange(B, device=device)
    sync(device)
    start = time.perf_counter()
    capacity = max(len(p) for p in prompts) + extra
    cache, last, target_passes = prefill(target, prompts, capacity)
    draft_passes_before = drafter.passes
    drafter.start(prompts, capacity)
    out = torch.full((B, max_new_tokens + D + 1), -1, dtype=torch.int64, device=device)
    produced = torch.zeros(B, dtype=torch.int64, device=device)
    accepted_log = []
    while (produced < max_new_tokens).any():
        active = produced < max_new_tokens
        node_tokens, proposals = drafter.propose(temperature, generator)
        base = cache.lengths.clone()
        positions, visible = tree_attention(tree, base, range(T + 1), int(base.max()) + T + 1)
        logits = target(torch.cat([last[:, None], node_tokens], 1), cache, positions=positions, visible=visible)
        target_passes += 1
        probs = logits_to_probs(logits, temperature)
        tokens, num_accepted, path = tree_sample(tree, node_tokens, proposals.to(probs.dtype), probs, generator)
        keep_path(cache, base, path, torch.where(active, num_accepted, 0))
        cache.lengths = torch.where(active, cache.lengths, base)
        drafter.commit(tokens, num_accepted, active)
        gained = append_emitted(out, produced, tokens, num_accepted, active)
        last = torch.where(active, tokens[rows, num_accepted], last)
        produced += gained
        accepted_log.append(torch.where(active, num_accepted, -1).cpu())
    sync(device)
    stats = GenerationStats(
        k=D, temperature=temperature, batch=B,
        accepted=torch.stack(accepted_log) if accepted_log else torch.zeros(0, B, dtype=torch.int64),
        target_passes=target_passes, draft_passes=drafter.passes - draft_passes_before,
        wall_time_s=time.perf_counter() - start, new_tokens=B * max_new_tokens,
    )
    return Generation(out[:, :max_new_tokens].cpu(), stats)


# ---------------------------------------------------------------------------------------------- expected length


def expected_tokens(tree: Tree, rank_acceptance) -> float:
    """E[N] for a tree under positional acceptance: the child of rank r of an accepted node is the one
    accepted with probability a_r, whatever the depth and the context (a_0 + a_1 + ... <= 1). A node is
    reached with the product of a_rank along its path, and an iteration yields the reached drafted nodes
    plus one token of the target's own:  E[N] = 1 + sum over nodes j of prod_{i on path(j)} a_rank(i).
    A chain of k with a_0 = alpha gives Leviathan's (1 - alpha^(k+1)) / (1 - alpha)."""
    a = [validate.probability(f"rank_acceptance[{r}]", x) for r, x in enumerate(rank_acceptance)]
    if sum(a) > 1 + 1e-9:
        raise validate.BadArgument(f"rank acceptances must sum to at most 1 (one child is accepted), got {sum(a):.4f}")
    if max(tree.ranks) >= len(a):
        raise validate.BadArgument(f"the tree has rank {max(tree.ranks)} children: give {max(tree.ranks) + 1} "
                                   f"rank acceptances, got {len(a)}")
    reach = [1.0]
    for j, parent in enumerate(tree.parents, start=1):
        reach.append(reach[parent] * a[tree.ranks[j]])
    return math.fsum(reach)


def best_tree(rank_acceptance, size: int, max_depth: int | None = None) -> Tree:
    """The ``size``-node tree with the largest ``expected_tokens`` under positional acceptance: add, one at
    a time, the candidate node with the largest reach (the product of a_rank along its path). A child never
    reaches further than its parent, nor a sibling of higher rank further than one of lower rank, so the
    greedy choice is optimal (Sequoia builds its trees on the same assumption, with a dynamic program).
    Nodes deeper than ``max_depth`` are not considered."""
    a = [validate.probability(f"rank_acceptance[{r}]", x) for r, x in enumerate(rank_acceptance)]
    size = validate.integer("size", size, low=1)
    max_depth = size if max_depth is None else validate.integer("max_depth", max_depth, low=1)
    nodes = []  # (reach, depth, parent index in nodes (-1: root), rank)
    frontier = [(a[0], 1, -1, 0)]
    while len(nodes) < size and frontier:
        best = max(range(len(frontier)), key=lambda i: frontier[i][0])
        reach, depth, parent, rank = frontier.pop(best)
        nodes.append((reach, depth, parent, rank))
        me = len(nodes) - 1
        if depth < max_depth:
            frontier.append((reach * a[0], depth + 1, me, 0))
        if rank + 1 < len(a):
            frontier.append((reach / a[rank] * a[rank + 1] if a[rank] else 0.0, depth, parent, rank + 1))
    order = sorted(range(len(nodes)), key=lambda i: (nodes[i][1], nodes[i][2], nodes[i][3]))
    # level order: parents (already placed in earlier levels) first, siblings by rank
    index = {old: new for new, old in enumerate(order, start=1)}
    index[-1] = 0
    ordered = sorted(order, key=lambda i: (nodes[i][1], index[nodes[i][2]], nodes[i][3]))
    index = {old: new for new, old in enumerate(ordered, start=1)} | {-1: 0}
    return Tree(tuple(index[nodes[i][2]] for i in ordered))


def tree_speedup(target, draft, accel, batch: int, tree: Tree, tokens: float, context: int = 0, **model) -> float:
    """Modelled S(B) of tree speculation, from ``cost.pass_time``: the draft runs one pass per level (the
    first over the pending token, level d over its n_d nodes per sequence), the target one pass over the
    T + 1 tree tokens; an iteration yields ``tokens`` (E[N], measured or from ``expected_tokens``).

        S = E[N] · T_target(B, 1) / (Σ_d T_draft(B, n_d) + T_target(B, T + 1))

    ``draft``: a ``cost.ModelShape`` or ``cost.EarlyExit``; ``model``: ``cost.pass_time``'s keywords
    (dtype, overhead, overlap, tp, allreduce_latency) plus ``draft_overhead``. A chain of k is
    ``cost.batch_speedup`` at the α whose E[N] is ``tokens``."""
    from specnotes.analytic import cost

    tokens = validate.number("tokens", tokens, low=1, high=tree.size + 1)
    draft_overhead = model.pop("draft_overhead", None)
    if isinstance(draft, cost.EarlyExit):
        draft = cost.early_exit_shape(target, draft.layers)
    draft_model = dict(model, overhead=model.get("overhead", 0.0) if draft_overhead is None else draft_overhead)
    levels = [1] + [len(level) for level in tree.levels[1:-1]]
    drafting = sum(cost.pass_time(draft, accel, batch, n, context + d, **draft_model) for d, n in enumerate(levels))
    verify = cost.pass_time(target, accel, batch, tree.size + 1, context, **model)
    return tokens * cost.pass_time(target, accel, batch, 1, context, **model) / (drafting + verify)


def tree_crossover(target, draft, accel, tree: Tree, tokens: float, context: int = 0, max_batch: int = 1 << 14,
                   **model) -> int | None:
    """The smallest B with ``tree_speedup`` <= 1 (1 if it never pays; None if it still pays at ``max_batch``).
    Doubling then bisection: the modelled S(B) falls with B once the verify pass leaves the bandwidth roof
    (weights dominate the bytes; at long context see ``cost.paying_batches``)."""
    max_batch = validate.integer("max_batch", max_batch, low=1)
    pays = lambda b: tree_speedup(target, draft, accel, b, tree, tokens, context, **model) > 1
    if not pays(1):
        return 1
    lo, hi = 1, 2
    while pays(min(hi, max_batch)):
        if hi >= max_batch:
            return None
        lo, hi = hi, 2 * hi
    hi = min(hi, max_batch)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if pays(mid) else (lo, mid)
    return hi


def rank_acceptance(target_logits: torch.Tensor, draft_logits: torch.Tensor, ranks: int) -> list[float]:
    """a_r, r = 0..ranks-1, at temperature 0: the fraction of positions where the target's argmax is the draft's
    r-th most likely token (ties broken toward the lower rank). a_0 is the chain's greedy α; a tree with
    top-m candidates accepts a child at a node with a_0 + ... + a_(m-1)."""
    ranks = validate.integer("ranks", ranks, low=1)
    if target_logits.shape != draft_logits.shape:
        raise validate.BadArgument(f"logits must have the same shape, got {tuple(target_logits.shape)} and "
                                   f"{tuple(draft_logits.shape)}")
    best = target_logits.argmax(-1, keepdim=True)
    rank = (draft_logits > draft_logits.gather(-1, best)).sum(-1)  # how many draft tokens beat the target's choice
    return [float((rank == r).double().mean()) for r in range(ranks)]
