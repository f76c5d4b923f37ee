"""What each attention head of a trained translation model does, measured: entropy, positional
heads, heads that look at </s>, and cross-attention heads that align words.

    python -m benchmarks.heads --model runs/quality/multi30k-en-de-small-avg \
        --data-dir ../shared/data --figure docs/figures/multi30k_heads.png
    python -m benchmarks.heads --from-json docs/figures/multi30k_heads.json \
        --figure docs/figures/multi30k_heads.png            # redraw from the saved numbers

The model reads the first --n test_2016_flickr sentence pairs (en→de), the reference teacher-forced
(`decode.search.attention_weights`), so every map is over real source and reference tokens. For
every layer and head, averaged over the queries of all sentences:

- entropy: of each query's attention distribution, in nats (a uniform row over S keys: ln S);
- offset: for self-attention, the share of attention on the key at offset -1, 0 or +1 from the
  query (the largest of the three, and which): a head above ~0.5 is a positional head;
- eos: the share on the source's last token, </s> (where heads park attention they do not need);
- alignment (cross-attention): for each reference word with a confident translation link, whether
  the head's most attended source word is the linked one (against the same score of a guess
  without the model: the source word at the same relative place, printed after the table). Links: the source word of highest Dice
  coefficient with the target word over the training pairs, at least 0.3 (benchmarks/glossary.py's
  `best_targets`), an alignment that does not come from the model.

Prints a markdown table per attention kind and draws one heatmap each (layers × heads); beside the
PNG, a .json of what it plots, rounded as its cells print it, from which `summary` computes the
numbers the figure's caption in docs/concepts.md reads (tests/test_figure_captions.py checks them).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch
from matplotlib.figure import Figure

from benchmarks.glossary import WORD, best_targets, read
from qkv.apps.translator import Translator
from qkv.data.batching import pad_sequences
from qkv.decode.search import attention_weights
from qkv.runtime.runtime_options import RuntimeOptions

MARK = "\u2581"  # SentencePiece's word start


def words_of(pieces: list[str]) -> list[int]:
    """The word index of each piece: a piece starting with "▁" starts a word."""
    index, out = -1, []
    for k, piece in enumerate(pieces):
        if piece.startswith(MARK) or k == 0:
            index += 1
        out.append(index)
    return out


def word_level(attention: np.ndarray, rows: list[int], cols: list[int]) -> np.ndarray:
    """A (T, S) piece-level map as (words, words): rows averaged over a word's pieces, columns
    summed over a word's pieces."""
    n_rows, n_cols = max(rows) + 1, max(cols) + 1
    summed = np.zeros((attention.shape[0], n_cols))
    for c, w in enumerate(cols):
        summed[:, w] += attention[:, c]
    out = np.zeros((n_rows, n_cols))
    for r, w in enumerate(rows):
        out[w] += summed[r] / rows.count(w)
    return out


def entropy(attention: np.ndarray) -> float:
    """Mean entropy (nats) of the rows of a (queries, keys) map."""
    p = np.clip(attention, 1e-12, 1.0)
    return float(-(attention * np.log(p)).sum(axis=1).mean())


def offset_shares(attention: np.ndarray, offsets: tuple[int, ...]) -> dict[str, float]:
    """The mean share of attention at each offset (key - query) of `offsets`."""
    n, keys = attention.shape
    out = {}
    for d in offsets:
        rows = [i for i in range(n) if 0 <= i + d < keys]
        out[f"offset{d:+d}"] = float(np.mean([attention[i, i + d] for i in rows])) if rows else 0.0
    return out


def links(source: str, reference_words: list[str], best: dict) -> dict[int, str]:
    """Reference word index -> the source word it is linked to (confident Dice links only)."""
    src = set(WORD.findall(source.lower()))
    out = {}
    for k, word in enumerate(reference_words):
        candidates = [(d, s) for s in src for t, d in [best.get(s, ("", 0.0))] if t == word]
        if candidates and max(candidates)[0] >= 0.3:
            out[k] = max(candidates)[1]
    return out


def word_texts(pieces: list[str]) -> list[str]:
    """The words of `pieces` (`words_of`), each without "▁" and punctuation."""
    index = words_of(pieces)
    groups: list[list[str]] = [[] for _ in range(max(index) + 1)]
    for piece, w in zip(pieces, index, strict=True):
        groups[w].append(piece)
    found = [WORD.findall("".join(g).replace(MARK, "")) for g in groups]
    return [f[0] if f else "" for f in found]


KINDS = ("encoder", "decoder", "cross")
OFFSETS = {"encoder": (-1, 0, 1), "decoder": (-1, 0)}


def measure(
    translator: Translator, sources: list[str], references: list[str], best: dict, batch: int = 32
) -> dict[str, dict[str, np.ndarray]]:
    """kind -> statistic -> (layers, heads): each statistic's mean over the sentences (alignment:
    over all links of all sentences)."""
    tok, model = translator.tokenizer, translator.model
    values: dict[tuple[str, str], dict[tuple[int, int], list[float]]] = {}
    for start in range(0, len(sources), batch):
        src = [[*ids, tok.eos_id] for ids in tok.encode_src(sources[start : start + batch])]
        tgt = tok.encode_tgt(references[start : start + batch])
        maps = attention_weights(model, pad_sequences(src, tok.pad_id), tgt)
        for s_ids, t_ids, m, text in zip(src, tgt, maps, sources[start:], strict=False):
            pieces = tok.src_sp.id_to_piece(s_ids[:-1]), tok.tgt_sp.id_to_piece(t_ids)
            for kind in KINDS:
                for layer, heads in enumerate(getattr(m, kind)):
                    for h, a in enumerate(heads.numpy()):
                        for name, got in head_stats(kind, a, *pieces, text, best).items():
                            values.setdefault((kind, name), {}).setdefault((layer, h), []).extend(
                                got
                            )
    out: dict[str, dict[str, np.ndarray]] = {k: {} for k in KINDS}
    for (kind, name), cells in values.items():
        layers, heads = (1 + max(c[i] for c in cells) for i in (0, 1))
        grid = np.full((layers, heads), np.nan)
        for (layer, h), got in cells.items():
            grid[layer, h] = np.mean(got) if got else np.nan
        out[kind][name] = grid
    return out


def head_stats(
    kind: str, a: np.ndarray, s_pieces: list[str], t_pieces: list[str], source: str, best: dict
) -> dict[str, list[float]]:
    """One head's statistics on one sentence (the module docstring), each as a list of values
    (alignment: one 0/1 per link)."""
    stats = {"entropy": [entropy(a)]}
    if kind in OFFSETS:
        stats.update({name: [v] for name, v in offset_shares(a, OFFSETS[kind]).items()})
    if kind != "decoder":
        stats["eos"] = [float(a[:, -1].mean())]
    if kind == "cross":
        rows, cols = words_of(t_pieces), words_of(s_pieces)
        words = word_level(a[:-1, :-1], rows, cols)  # eos row and column left out
        t_words, s_words = word_texts(t_pieces), [w.lower() for w in word_texts(s_pieces)]
        linked = links(source, t_words, best)
        stats["alignment"] = [
            float(s_words[int(words[k].argmax())] == s) for k, s in linked.items()
        ]
        place = [round(k * (len(s_words) - 1) / max(len(t_words) - 1, 1)) for k in linked]
        stats["diagonal"] = [
            float(s_words[i] == s) for i, s in zip(place, linked.values(), strict=True)
        ]
    return stats


def table(stats: dict[str, dict[str, np.ndarray]]) -> str:
    """One markdown row per layer and head of each kind."""
    names = ["entropy", "offset-1", "offset+0", "offset+1", "eos", "alignment"]
    lines = [
        "| attention | layer | head | " + " | ".join(names) + " |",
        "|---|--:|--:|" + "--:|" * len(names),
    ]
    for kind in KINDS:
        grid = stats[kind]["entropy"]
        for layer in range(grid.shape[0]):
            for h in range(grid.shape[1]):
                cells = [
                    f"{stats[kind][n][layer, h]:.2f}" if n in stats[kind] else "–" for n in names
                ]
                lines.append(f"| {kind} | {layer + 1} | {h + 1} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def positional(stats: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The largest offset share of each head and its offset."""
    names = sorted(n for n in stats if n.startswith("offset"))
    shares = np.stack([stats[n] for n in names])  # (offsets, layers, heads)
    offsets = np.array([int(n[len("offset") :]) for n in names])
    return shares.max(axis=0), offsets[shares.argmax(axis=0)]


POSITIONAL = 0.35  # a self-attention head with this share or more at one offset is positional


def figure_data(stats: dict[str, dict[str, np.ndarray]], title: str) -> dict:
    """What the figure plots, rounded as its cells print it: per kind, (layers, heads) grids of the
    largest offset share and its offset (self-attention) or the alignment (cross), and entropy."""
    data: dict = {"title": title}
    for kind in KINDS:
        if kind in OFFSETS:
            share, offset = positional(stats[kind])
            data[kind] = {"share": share, "offset": offset}
        else:
            data[kind] = {"alignment": stats[kind]["alignment"]}
        data[kind]["entropy"] = stats[kind]["entropy"]
        data[kind] = {k: np.round(v, 2).tolist() for k, v in data[kind].items()}
    return data


def span(values: list[float]) -> tuple[float, float]:
    return min(values), max(values)


def summary(data: dict) -> dict[str, object]:
    """The numbers the figure's caption reads, from `figure_data`'s dict, as the figure prints
    them: encoder heads as (layer, head) from 1 -> (share, offset[, entropy]); positional heads
    (share >= POSITIONAL) and the others, split into the sharp ones (entropy no higher than a
    positional head's) and the spread ones; the two best aligning cross heads; layer 1's cross
    heads; the decoder's largest share at each offset."""
    enc, dec, cross = ({k: np.array(v) for k, v in data[kind].items()} for kind in KINDS)
    heads = {
        (i + 1, j + 1): (float(enc["share"][i, j]), int(enc["offset"][i, j]), float(e))
        for (i, j), e in np.ndenumerate(enc["entropy"])
    }
    positional = {c: v for c, v in heads.items() if v[0] >= POSITIONAL}
    sharpest = max(v[2] for v in positional.values())
    others = {c: v for c, v in heads.items() if c not in positional}
    alignment = {(i + 1, j + 1): float(a) for (i, j), a in np.ndenumerate(cross["alignment"])}
    best = sorted(alignment, key=lambda c: -alignment[c])[:2]
    return {
        "positional": {c: v[:2] for c, v in positional.items()},
        "positional_entropy": span([v[2] for v in positional.values()]),
        "sharp_others": {c: v for c, v in others.items() if v[2] <= sharpest},
        "spread_entropy": span([v[2] for v in others.values() if v[2] > sharpest]),
        "best_alignment": {c: alignment[c] for c in best},
        "layer_1_alignment": span([a for (layer, _), a in alignment.items() if layer == 1]),
        "decoder_max": {
            d: float(np.where(dec["offset"] == d, dec["share"], -1.0).max()) for d in (-1, 0)
        },
    }


def draw(data: dict) -> Figure:
    """Three heatmaps (layers × heads) of `figure_data`'s dict: the positional share of the
    encoder's and the decoder's self-attention heads, with their offset, and the alignment
    agreement of the cross heads; each cell also gives the head's entropy."""
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    axes = fig.subplots(1, 3)
    panels = [
        ("encoder self-attention:\nshare at one offset (δ)", "share", "offset"),
        ("decoder self-attention:\nshare at one offset (δ)", "share", "offset"),
        ("cross-attention:\nagreement with word alignment", "alignment", None),
    ]
    for ax, (name, value_key, offset_key), kind in zip(axes, panels, KINDS, strict=True):
        values = np.array(data[kind][value_key])
        offsets = None if offset_key is None else np.array(data[kind][offset_key])
        image = ax.imshow(values, vmin=0, vmax=1, cmap="Blues")
        ent = np.array(data[kind]["entropy"])
        for (layer, h), v in np.ndenumerate(values):
            label = f"{v:.2f}" + ("" if offsets is None else f" δ{offsets[layer, h]:+d}")
            color = "white" if v > 0.6 else "black"
            ax.text(
                h,
                layer,
                f"{label}\nH {ent[layer, h]:.2f}",
                ha="center",
                va="center",
                fontsize=7,
                color=color,
            )
        ax.set_title(name, fontsize=9)
        ax.set_xticks(range(values.shape[1]), [str(h + 1) for h in range(values.shape[1])])
        ax.set_yticks(range(values.shape[0]), [str(k + 1) for k in range(values.shape[0])])
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
    fig.colorbar(image, ax=list(axes), shrink=0.8, label="share / agreement (0–1)")
    fig.suptitle(data["title"], fontsize=9)
    return fig


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", help="the model directory to measure")
    p.add_argument("--data-dir", default="../shared/data")
    p.add_argument("--n", type=int, default=500, help="test sentences read (default: 500)")
    p.add_argument(
        "--figure",
        help="write the heatmaps here (PNG) and what they plot beside it (the same name, .json)",
    )
    p.add_argument("--from-json", help="redraw --figure from a saved .json instead of measuring")
    args = p.parse_args()
    if args.from_json:
        data = json.loads(Path(args.from_json).read_text(encoding="utf-8"))
    elif args.model:
        data = measure_and_print(args)
    else:
        p.error("give --model (to measure) or --from-json (to redraw)")
    print(f"\nthe caption's numbers: {summary(data)}")
    if args.figure:
        draw(data).savefig(args.figure, dpi=110)
        if not args.from_json:
            Path(args.figure).with_suffix(".json").write_text(json.dumps(data, indent=1) + "\n")
    return 0


def measure_and_print(args: argparse.Namespace) -> dict:
    """Measure the model's heads, print the table, return `figure_data`."""
    torch.set_num_threads(1)
    data = Path(args.data_dir)
    best, _ = best_targets(read(data, "train", "en"), read(data, "train", "de"))
    sources = read(data, "test_2016_flickr", "en")[: args.n]
    references = read(data, "test_2016_flickr", "de")[: args.n]
    translator = Translator.load(args.model, RuntimeOptions(precision="fp32", pack=False))
    stats = measure(translator, sources, references, best)
    print(table(stats))
    diagonal = np.nanmean(stats["cross"]["diagonal"])
    print(f"\nalignment of the diagonal guess (source word k * S / T): {diagonal:.2f}")
    title = f"{Path(args.model).name}: {args.n} test_2016 pairs (en→de), reference forced"
    return figure_data(stats, title)


if __name__ == "__main__":
    raise SystemExit(main())
