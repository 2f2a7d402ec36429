"""The model files llama-server serves: the shipped target and draft written as float32 GGUF files, and a random
model larger than a CPU's last-level cache (``big_gguf``), each written once into ``models_dir``."""

from __future__ import annotations

from pathlib import Path

from specnotes.serve.engine.build import engine_dir

SHIPPED_CONTEXT = 256  # the shipped pair's training block: its context
MODEL_NAMES = {"target": "specnotes-target", "draft": "specnotes-draft"}


def models_dir() -> Path:
    return engine_dir() / "models"


def shipped_ggufs(folder: Path | None = None) -> dict[str, Path]:
    """The shipped target and draft as float32 GGUF files (written once, again when the weights change; a new
    ``gguf_export.FORMAT_VERSION`` names new files): {"target": path, "draft": path}. Their context is the
    256-byte training block."""
    from specnotes.tiny import gguf_export, model

    folder = Path(folder or models_dir())
    paths = {}
    for which in ("target", "draft"):
        path = folder / f"{MODEL_NAMES[which]}-f32-v{gguf_export.FORMAT_VERSION}.gguf"
        weights = model.data_file(f"{which}.pt")
        if not path.exists() or path.stat().st_mtime < Path(str(weights)).stat().st_mtime:
            gguf_export.write_gguf(model.load_model(which), path, MODEL_NAMES[which], context=SHIPPED_CONTEXT)
        paths[which] = path
    return paths


def big_gguf(folder: Path | None = None, seed: int = 0, **shape) -> Path:
    """``gguf_export.big_config(**shape)`` with random weights (seeded) as a float32 GGUF, written once: a model
    larger than a CPU's last-level cache (its name says the shape, the seed and ``gguf_export.FORMAT_VERSION``).
    Served as its own draft, every draft is accepted (α = 1)."""
    from specnotes.tiny import gguf_export

    config = gguf_export.big_config(**shape)
    folder = Path(folder or models_dir())
    path = folder / (f"random-{config.n_layers}x{config.d_model}-ff{config.d_ff}-h{config.n_heads}-s{seed}-f32"
                     f"-v{gguf_export.FORMAT_VERSION}.gguf")
    if not path.exists():
        gguf_export.write_gguf(gguf_export.random_model(config, seed), path, path.stem, context=SHIPPED_CONTEXT)
    return path
