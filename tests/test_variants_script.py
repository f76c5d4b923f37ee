"""benchmarks/variants.py runs a table end to end at a tiny budget: the trainer, the translator and
the markdown table it prints (the real runs take up to ~2 CPU hours per table)."""

from __future__ import annotations

import argparse
import functools
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_heads_table_runs_at_two_updates(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.variants", "heads", "--steps", "2",
         "--n-test", "4", "--threads", "1", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=300, check=False, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.splitlines()
    assert lines[0] == "### heads" and any(line.startswith("machine: ") for line in lines)
    assert "2 updates per variant (equal updates)" in run.stdout
    rows = [line for line in lines if line.startswith("| synthetic |")]
    assert [row.split(" | ")[1] for row in rows] == ["1-heads", "2-heads", "4-heads", "8-heads"]
    saved = json.loads((tmp_path / "heads.json").read_text())
    assert [r["steps"] for r in saved] == [2] * 4
    assert len({r["params"] for r in saved}) == 1  # equal parameters for any number of heads
    # 2 updates: warm-up max(1, 2 // 4) = 1, so the 2nd update runs at sqrt(1 / 2) of the peak
    assert [(r["warmup"], r["lr_pct_of_peak"]) for r in saved] == [(1, 70.7)] * 4


@pytest.mark.parametrize(("table", "extra", "columns"), [
    ("classify", ["--n-train", "3", "6", "--n-unlabelled", "20"],
     {"labelled_per_language", "pretraining_steps", "accuracy", "macro_f1"}),
    ("exposure-bias", ["--points", "2", "--seeds", "2"],
     {"tf_token_acc", "greedy_token_acc", "seeds", "greedy_token_acc_per_seed"}),
    ("ffn", ["--variants", "d_ff-0d", "d_ff-2d", "d_ff-0d-wide"],
     {"exact_match", "valid_loss", "params"}),
    ("extrapolation", ["--seeds", "2", "--variants", "none", "rope"],
     {f"{m}_{k}_digits" for m in ("exact", "chars") for k in (6, 7, 8, 9)} | {"seeds"}),
])
@pytest.mark.slow
def test_the_other_tables_run_at_two_updates(tmp_path: Path, table: str, extra: list[str],
                                             columns: set[str]) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.variants", table, "--steps", "2",
         "--n-test", "4", "--threads", "1", "--out", str(tmp_path), *extra],
        capture_output=True, text=True, timeout=300, check=False, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.splitlines()[0] == f"### {table}"
    saved = json.loads((tmp_path / f"{table}.json").read_text())
    assert saved and all(columns <= set(row) for row in saved)
    if table == "extrapolation":  # --variants: those rows only, in the table's order
        assert [r["variant"] for r in saved] == ["none", "rope"]
    if table == "ffn":  # d_ff 0 leaves the FFN's weights out; the wide control puts them back
        assert [r["variant"] for r in saved] == ["d_ff-0d", "d_ff-2d", "d_ff-0d-wide"]
        no_ffn, with_ffn, wide = (r["params"] for r in saved)
        assert no_ffn < with_ffn <= wide < 1.06 * with_ffn
    if table == "classify":  # one mlm model, then scratch and from-mlm for each size
        assert [(r["labelled_per_language"], r["pretraining_steps"]) for r in saved] == [
            (3, 0), (3, 2), (6, 0), (6, 2)]


def test_the_multi30k_budget_replaces_the_budget_on_multi30k_only(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))  # the benchmarks package
    from benchmarks import variants

    args = argparse.Namespace(table="transformer-vs-rnn", budget=120.0, steps=None,
                              multi30k_budget=480.0, check_every=50, out="unused",
                              multi30k_warmup=None)
    run = variants.Run(args, variants.DEFAULTS[args.table])
    assert run.limits("synthetic")["max_hours"] == 120 / 3600
    assert run.limits("multi30k")["max_hours"] == 480 / 3600
    args.multi30k_budget = None
    assert run.limits("multi30k")["max_hours"] == 120 / 3600


def test_the_multi30k_warm_up_is_the_recipes_unless_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """With --budget the Multi30k recipe's warm-up (configs/multi30k-small.yaml: 1000 updates)
    stands unless --multi30k-warmup replaces it; with --steps a quarter of the updates, at most
    200; the synthetic task keeps its own either way."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import variants

    args = argparse.Namespace(table="transformer-vs-rnn", budget=420.0, steps=None,
                              multi30k_budget=None, check_every=50, out="unused",
                              multi30k_warmup=None, threads=1, seed=1, data_dir="unused")
    run = variants.Run(args, variants.DEFAULTS[args.table])
    assert run.recipe("multi30k")["warmup"] == 1000
    args.multi30k_warmup = 40
    assert run.recipe("multi30k")["warmup"] == 40
    assert run.recipe("synthetic")["warmup"] == 200
    args.budget, args.steps, args.multi30k_steps = None, 1500, 150
    run = variants.Run(args, variants.DEFAULTS[args.table])
    assert run.recipe("multi30k")["warmup"] == 40
    args.multi30k_warmup = None
    assert run.recipe("multi30k")["warmup"] == 150 // 4
    assert run.recipe("synthetic")["warmup"] == 200


def test_edit_distance_equals_the_recursive_definition(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))  # the benchmarks package
    from benchmarks import variants

    @functools.cache
    def levenshtein(a: tuple[int, ...], b: tuple[int, ...]) -> int:
        if not a or not b:
            return len(a) + len(b)
        return min(levenshtein(a[1:], b) + 1, levenshtein(a, b[1:]) + 1,
                   levenshtein(a[1:], b[1:]) + (a[0] != b[0]))

    rng = random.Random(0)
    for _ in range(200):
        a = [rng.randrange(3) for _ in range(rng.randrange(7))]
        b = [rng.randrange(3) for _ in range(rng.randrange(7))]
        assert variants.edit_distance(a, b) == levenshtein(tuple(a), tuple(b))


def test_a_variants_runs_make_one_row_of_medians(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))  # the benchmarks package
    from benchmarks import variants

    runs = [{"variant": "a", "steps": s, "params": 7, "exact_match": m, "valid_loss": v}
            for s, m, v in ((10, 50.0, 1.0), (12, 100.0, None), (11, 0.5, 3.0))]
    row = variants.median_row(runs)
    assert row == {"variant": "a", "steps": 11, "params": 7, "exact_match": 50.0,
                   "valid_loss": 2.0, "seeds": 3, "exact_match_per_seed": "50 / 100 / 0.5",
                   "valid_loss_per_seed": "1 / — / 3"}
    assert variants.median_row(runs[:1]) == runs[0]
