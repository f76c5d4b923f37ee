"""`qkv attention`: every attention map of a translation, as JSON and as heatmaps.

    qkv attention --model DIR --out OUTDIR "a source sentence"
    qkv attention --model DIR --out OUTDIR --input FILE            # one sentence per line

Each sentence is translated (the search options of `qkv translate`), then the attention weights of
every layer and head are computed by one teacher-forced pass over the best translation
(`qkv.decode.search.attention_weights`) and written to OUTDIR: attention.json (rows are queries,
columns keys) and PNG heatmaps. OUTDIR must be new or empty, so that it holds the maps of these
sentences only (`overwrite` removes what an earlier `qkv attention` wrote there first).

Details: docs/architecture.md, "Attention maps" (the JSON fields, the file names and folders).
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from torch import Tensor

from ..decode.options import DecodeOptions
from ..model import AttentionWeights
from ..modeldir import (
    TEMPORARY_NAME,
    atomic_write,
    atomic_write_text,
    remove_orphan_temporaries,
)
from .plots import grid
from .translator import Translation, Translator

JSON_FILE = "attention.json"
PNG_NAME = re.compile(r"(cross|encoder|decoder)_(layers|layer[0-9]+_heads)\.png")  # plot_maps'
DECIMALS = 6  # weights are written rounded to this many decimals
KINDS = {  # name -> figure title
    "cross": "cross-attention (rows: target, columns: source)",
    "encoder": "encoder self-attention",
    "decoder": "decoder self-attention (rows: written, columns: read)",
}


def write_attention(
    translator: Translator,
    texts: Sequence[str],
    out_dir: str | os.PathLike[str],
    options: DecodeOptions | None = None,
    *,
    overwrite: bool = False,
) -> list[Path]:
    """Translate `texts` and write their attention maps (JSON and PNGs) into `out_dir`, as
    docs/architecture.md, "Attention maps", says (`overwrite`: replace an earlier output there),
    batched as the translator's `runtime` says. Returns the paths written, attention.json first."""
    texts = list(texts)
    if not texts:
        raise ValueError("no sentences given: nothing to show the attention of")
    out = Path(out_dir)
    check_out(out, overwrite)
    translations = translator.translate_detailed(texts, options, attention_maps=True)
    bos = translator.tokenizer.tgt_sp.id_to_piece(translator.tokenizer.bos_id)
    records = [attention_record(s, t, bos) for s, t in zip(texts, translations, strict=True)]
    remove_earlier_output(out)
    out.mkdir(parents=True, exist_ok=True)
    json_path = out / JSON_FILE
    document = records[0] if len(records) == 1 else records
    atomic_write_text(json_path, json.dumps(document, ensure_ascii=False) + "\n")
    paths = [json_path]
    for i, (record, t) in enumerate(zip(records, translations, strict=True), start=1):
        folder = out if len(records) == 1 else out / str(i)
        if t.attention_maps is not None:
            paths += plot_maps(t.attention_maps, record, folder)
    return paths


def check_out(out: Path, overwrite: bool = False) -> None:
    """Refuse (ValueError) an `out` that is a file, or a folder that is not empty unless
    `overwrite`."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file, not a folder")
    if not overwrite and out.is_dir() and any(out.iterdir()):
        raise ValueError(
            f"--out {out} is not empty; choose a new folder, or give --overwrite to replace the "
            f"{JSON_FILE} and heatmaps of an earlier qkv attention there (other files stay)"
        )


def remove_earlier_output(out: Path) -> list[Path]:
    """Delete what an earlier `write_attention` wrote into `out`: attention.json and the heatmaps
    (regular files named as plot_maps names them) in `out` and its numbered folders, the
    temporaries of these files that killed runs left, and the numbered folders that this empties.
    Returns the files removed; other files stay."""
    if not out.is_dir():
        return []
    numbered = [p for p in out.iterdir() if p.name.isdigit() and _is(p, stat.S_ISDIR)]
    removed = []
    for folder in [out, *numbered]:
        names = [p.name for p in folder.iterdir() if _is(p, stat.S_ISREG)]
        temporaries = [m["name"] for m in map(TEMPORARY_NAME.fullmatch, names) if m is not None]
        ours = {n for n in names + temporaries if PNG_NAME.fullmatch(n)}
        if folder == out:
            ours.add(JSON_FILE)
        removed += remove_orphan_temporaries(folder, tuple(sorted(ours)))
        for name in sorted(ours.intersection(names)):
            (folder / name).unlink()
            removed.append(folder / name)
    for folder in numbered:
        if not any(folder.iterdir()):
            folder.rmdir()
    return removed


def _is(path: Path, kind: Any) -> bool:
    """Whether `path` itself (not what a link points to) is of `kind` (stat.S_ISREG, ...)."""
    return bool(kind(path.lstat().st_mode))


def attention_record(text: str, translation: Translation, bos: str = "<s>") -> dict[str, Any]:
    """The JSON object of one sentence (docs/architecture.md, "Attention maps") from its
    Translation, which carries attention_maps and tokens."""
    source_tokens = translation.source_tokens or []
    target_tokens = translation.target_tokens or []
    maps = translation.attention_maps or AttentionWeights()

    def rounded(layers: list[Tensor]) -> list[Any]:
        return [w.double().round(decimals=DECIMALS).tolist() for w in layers]  # (H, T_q, T_k)

    return {
        "source": text,
        "translation": translation.text,
        "source_tokens": source_tokens,
        "target_tokens": target_tokens,
        "target_input_tokens": [bos, *target_tokens[:-1]] if target_tokens else [],
        "encoder": rounded(maps.encoder),
        "decoder": rounded(maps.decoder),
        "cross": rounded(maps.cross),
    }


def plot_maps(maps: AttentionWeights, record: dict[str, Any], folder: Path) -> list[Path]:
    """The PNG heatmaps of one sentence's maps, labelled with the tokens of its record."""
    folder.mkdir(parents=True, exist_ok=True)
    labels = {  # kind -> (x labels: keys, y labels: queries)
        "cross": (record["source_tokens"], record["target_tokens"]),
        "encoder": (record["source_tokens"], record["source_tokens"]),
        "decoder": (record["target_input_tokens"], record["target_tokens"]),
    }
    paths = []
    for kind, title in KINDS.items():
        layers: list[Tensor] = getattr(maps, kind)
        if not layers:
            continue
        x, y = labels[kind]
        averaged = [w.mean(dim=0).numpy() for w in layers]  # (T_q, T_k) per layer
        names = [f"layer {n}" for n in range(1, len(layers) + 1)]
        figure = grid(averaged, x, y, names, suptitle=f"{title}, heads averaged")
        paths.append(_save(figure, folder / f"{kind}_layers.png"))
        for n, w in enumerate(layers, start=1):
            heads = [f"head {h}" for h in range(1, w.size(0) + 1)]
            figure = grid(list(w.numpy()), x, y, heads, suptitle=f"{title}, layer {n}")
            paths.append(_save(figure, folder / f"{kind}_layer{n}_heads.png"))
    return paths


def _save(figure: Figure, path: Path) -> Path:
    atomic_write(path, lambda tmp: figure.savefig(tmp, dpi=100, format="png"))
    return path


__all__ = [
    "attention_record",
    "check_out",
    "plot_maps",
    "remove_earlier_output",
    "write_attention",
]
