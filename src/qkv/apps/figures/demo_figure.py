"""The figure of a trained model: the cross-attention of the number-words demo."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from matplotlib.figure import Figure

DEMO_NUMBERS = ["4 0 5 2", "9 1 7", "3 0 0 8"]


def train_demo_model(directory: Path, small: bool) -> Path:
    """The `qkv demo` recipe on numbers up to 9999 with fewer updates (small: a few, to test)."""
    from ...train import Trainer
    from ..demo import demo_config

    if small:
        settings = {
            "synthetic_train": 300,
            "synthetic_valid": 20,
            "max_steps": 20,
            "valid_every": 20,
            "warmup": 10,
        }
    else:
        settings = {
            "synthetic_train": 5000,
            "synthetic_valid": 100,
            "max_steps": 600,
            "valid_every": 600,
        }
    cfg = demo_config(synthetic_max_value=9999, **settings)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: one thread is nearly as fast, and steady when busy
    try:
        Trainer(cfg, directory, overwrite=True).train()
    finally:
        torch.set_num_threads(threads)
    return directory


SCALE_WORDS = ("thousand", "hundred")  # words the number's length decides, not one digit


def demo_attention_maps(model_dir: Path) -> list[dict[str, Any]]:
    """What the figure plots, per DEMO_NUMBERS sentence: its greedy translation, the source and
    output tokens (`</s>` last) and the cross-attention rows (last layer, heads averaged)."""
    from ...decode.options import DecodeOptions
    from ...runtime.runtime_options import RuntimeOptions
    from ..translator import Translator

    translator = Translator.load(model_dir, RuntimeOptions(precision="fp32"))
    results = translator.translate_detailed(DEMO_NUMBERS, DecodeOptions(beam=1), attention=True)
    tokenizer = translator.tokenizer
    maps = []
    for text, result in zip(DEMO_NUMBERS, results, strict=True):
        assert result.attention is not None
        src_ids = tokenizer.encode_src([text])[0]
        maps.append({
            "source": text,
            "translation": result.text,
            "source_tokens": [tokenizer.src_sp.id_to_piece(i) for i in src_ids] + ["</s>"],
            "target_tokens": [tokenizer.tgt_sp.id_to_piece(i) for i in result.tokens] + ["</s>"],
            "weights": [[round(float(w), 6) for w in row] for row in result.attention],
        })  # fmt: skip
    return maps


def draw_demo_attention(maps: list[dict[str, Any]]) -> tuple[Figure, str]:
    """The figure of `demo_attention_maps`' maps, and a line of what it shows."""
    from ..plots import heatmap

    fig = Figure(figsize=(4 * len(maps) + 1, 4), layout="constrained")
    axes = fig.subplots(1, len(maps))
    on_end = []  # the weight of each scale word on the source </s>
    for ax, m in zip(axes, maps, strict=True):
        src, tgt, attention = m["source_tokens"], m["target_tokens"], torch.tensor(m["weights"])
        image = heatmap(ax, attention, src, tgt, vmin=0, vmax=1, annotate=0.1)
        ax.set_aspect("auto")
        ax.set_title(f"{m['source']} → {m['translation']}", fontsize=9)
        ax.set_xlabel("source token")
        rows = zip(tgt, attention, strict=True)
        on_end += [float(w[-1]) for t, w in rows if t.strip("▁") in SCALE_WORDS]
    axes[0].set_ylabel("output token (the query that predicted it)")
    fig.colorbar(image, ax=axes, shrink=0.8, label="attention weight (weights ≥ 0.1 written)")
    fig.suptitle(
        "cross-attention of the demo model, last layer, heads averaged; rows: the queries, "
        "each named by the token it writes; columns: the source tokens (keys)",
        fontsize=10,
    )
    summary = "; ".join(f"{m['source']} -> {m['translation']}" for m in maps)
    return fig, summary + f"; thousand/hundred on </s>: {', '.join(f'{w:.2f}' for w in on_end)}"
