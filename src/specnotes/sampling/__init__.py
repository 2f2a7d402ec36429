"""Exact speculative sampling: the reference and vectorized samplers (``exact``), sampling straight from logits
(``fused``), its compiled CPU step (``kernel``, csrc/accept.c) and its Triton kernel (``triton_sampler``).
Sits on torch; imports only ``validate``."""
