"""The markdown tables that benchmarks/speed.py prints from its rows' results."""

from __future__ import annotations

from typing import Any


def markdown(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.rjust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    return "\n".join(
        [
            line(header),
            "|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|",
            *(line(r) for r in rows),
        ]
    )


def engine_name(r: dict[str, Any]) -> str:
    """A row's engine and settings as the tables name them ("qkv int8 2x1 processes")."""
    opus = " OPUS-MT" if r.get("model") == "opus" else ""
    if r["engine"] == "ct2":
        return f"CT2 {r['compute_type']} {r['threads_label']}"
    if r["engine"] == "qkv":
        words = ["qkv"]
        words += ["unpacked"] if not r.get("pack", True) and not r.get("capture") else []
        words += ["captured"] if r.get("capture") else []
        words += [r["quantize"]] if r.get("quantize") else []
        words += ["2x1"] if r.get("workers", 1) == 2 else []
        words += ["processes"] if r.get("processes") else []
        words += ["bf16"] if r.get("precision") == "bf16" else []
        words += ["cache off"] if not r.get("cache", True) else []
        return " ".join(words) + opus
    return (
        "HF transformers"
        + (" bf16" if r.get("precision") == "bf16" else "")
        + (f" {r['attention']}" if r.get("attention") else "")
        + opus
    )


def search_name(beam: int) -> str:
    return "greedy" if beam == 1 else f"beam {beam}"


def decode_table(rows: list[dict[str, Any]]) -> str:
    out = []
    for r in rows:
        plain = "qkv OPUS-MT" if r.get("model") == "opus" else "qkv"  # the model's plain qkv row
        base = next(
            q
            for q in rows
            if engine_name(q) == plain and q["beam"] == r["beam"] and q["batch"] == r["batch"]
        )
        out.append(
            [
                search_name(r["beam"]),
                str(r["batch"]),
                engine_name(r),
                f"{r['tokens_per_second']:.0f}",
                f"{r['best_tokens_per_second']:.0f}",
                f"{r['sentences_per_second']:.2f}",
                f"{r['peak_rss_mb']:.0f} ({r['imports_rss_mb']:.0f})",
                f"{r['other_cores']:.2f}",
                f"{base['tokens_per_second'] / r['tokens_per_second']:.2f}",
            ]
        )
    return markdown(
        [
            "search",
            "batch",
            "engine",
            "tokens/s",
            "best tokens/s",
            "sentences/s",
            "peak RSS MB (imports)",
            "others' cores",
            "qkv ÷ engine",
        ],
        out,
    )


def best_rows(rows: list[dict[str, Any]]) -> dict[tuple[int, int, str], dict[str, Any]]:
    """(beam, batch, kind) -> the fastest decoding row of that kind on the base model; kinds: qkv
    float32 / bf16 / int8 (any threads, packing or workers), HF (float32 or bf16), CT2 float32 /
    int8."""

    def kind(r: dict[str, Any]) -> str:
        if r["engine"] == "ct2":
            return f"CT2 {r['compute_type']}"
        if r["engine"] == "hf":
            return "HF"
        return "qkv " + (
            r.get("quantize") or {"bf16": "bf16"}.get(r.get("precision", ""), "float32")
        )

    best: dict[tuple[int, int, str], dict[str, Any]] = {}
    for r in rows:
        key = (r["beam"], r["batch"], kind(r))
        if (
            r.get("model") != "opus"
            and r.get("cache", True)
            and (key not in best or r["tokens_per_second"] > best[key]["tokens_per_second"])
        ):
            best[key] = r
    return best


def peer_table(rows: list[dict[str, Any]]) -> str:
    """Each engine's best row per workload, and its ratio to each peer's best row of that
    workload."""
    best = best_rows(rows)
    kinds = ["qkv float32", "qkv bf16", "qkv int8", "HF", "CT2 float32", "CT2 int8"]
    peers = ["HF", "CT2 float32", "CT2 int8"]
    out = []
    for beam, batch in sorted({(b, n) for b, n, _ in best}):
        for k in kinds:
            r = best.get((beam, batch, k))
            if r is None:
                continue
            ratios = [
                f"{r['tokens_per_second'] / best[beam, batch, p]['tokens_per_second']:.2f}"
                if (beam, batch, p) in best
                else ""
                for p in peers
            ]
            out.append(
                [
                    search_name(beam),
                    str(batch),
                    k,
                    engine_name(r),
                    f"{r['tokens_per_second']:.0f}",
                    *ratios,
                ]
            )
    return markdown(
        ["search", "batch", "best of", "row", "tokens/s", *(f"÷ {p} best" for p in peers)], out
    )


def train_table(rows: list[dict[str, Any]], peak: float, bf16_peak: float | None = None) -> str:
    """The training rows; each row's GFLOP/s as a share of the matmul peak of its precision (bf16
    rows: the bf16 peak where it was measured)."""

    def share(r: dict[str, Any]) -> str:
        own = bf16_peak if r.get("precision") == "bf16" and bf16_peak else peak
        return f"{100 * r['gflops_per_second'] / own:.0f}%"

    def like(r: dict[str, Any]) -> tuple[bool, str]:  # compare like with like
        return bool(r.get("keep_freed_memory")), r.get("precision", "fp32")

    qkv = {like(r): r for r in rows if r["engine"] == "qkv"}
    out = [
        [
            engine_name(r) + (" + keep_freed_memory" if r.get("keep_freed_memory") else ""),
            str(r["target_tokens"]),
            f"{r['seconds']:.2f}",
            f"{r['tokens_per_second']:.0f}",
            f"{r['gflops_per_second']:.0f}",
            share(r),
            f"{r['peak_rss_mb']:.0f}",
            f"{r['other_cores']:.2f}",
            f"{qkv[like(r)]['tokens_per_second'] / r['tokens_per_second']:.2f}",
        ]
        for r in rows
    ]
    return markdown(
        [
            "engine",
            "target tokens/step",
            "s/step",
            "target tokens/s",
            "GFLOP/s",
            "of its matmul peak",
            "peak RSS MB",
            "others' cores",
            "qkv ÷ engine",
        ],
        out,
    )


def attention_table(rows: list[dict[str, Any]]) -> str:
    by = {(r["length"], r["explicit"]): r for r in rows}
    lengths = sorted({r["length"] for r in rows})
    out = []
    for i, L in enumerate(lengths):
        fused, explicit = by[L, False], by[L, True]
        growth = (
            ""
            if i == 0
            else (
                f"{fused['seconds'] / by[lengths[i - 1], False]['seconds']:.1f} / "
                f"{explicit['seconds'] / by[lengths[i - 1], True]['seconds']:.1f}"
            )
        )
        out.append(
            [
                str(L),
                f"{1e3 * fused['seconds']:.1f}",
                f"{1e3 * explicit['seconds']:.1f}",
                f"{explicit['seconds'] / fused['seconds']:.1f}",
                f"{fused['extra_peak_mb']:.0f}",
                f"{explicit['extra_peak_mb']:.0f}",
                f"{8 * L * L * 4 / 2**20:.0f}",
                growth,
                f"{max(fused['other_cores'], explicit['other_cores']):.2f}",
            ]
        )
    return markdown(
        [
            "L",
            "fused ms",
            "explicit ms",
            "explicit ÷ fused",
            "fused peak MB",
            "explicit peak MB",
            "one H·L² fp32 tensor MB",
            "time × vs L/2 (fused / explicit)",
            "others' cores",
        ],
        out,
    )
