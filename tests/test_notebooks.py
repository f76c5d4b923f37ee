"""The notebooks of docs/notebooks: the tutorials' own examples, run through qkv's modules.

The notebooks are executed afresh (nbclient, kernel python3); each must be the generator's cells,
print what is saved in it, and print the same in both languages. The key numbers they print are
checked against the tutorials' examples computed here by hand, with plain math (not qkv).
"""

from __future__ import annotations

import importlib.util
import math
import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ROOT = Path(__file__).resolve().parent.parent


def load_generator():
    spec = importlib.util.spec_from_file_location(
        "notebooks_generate", ROOT / "docs" / "notebooks" / "generate.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


generate = load_generator()


def printed(nb) -> list[str]:
    """The text each code cell prints, one string per code cell."""
    return [
        "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")
        for cell in nb.cells
        if cell.cell_type == "code"
    ]


def numbers_after(text: str, label: str) -> list[float]:
    """The numbers on the line that starts with `label` (after the label)."""
    line = next(line for line in text.splitlines() if line.strip().startswith(label))
    return [float(x) for x in re.findall(r"-?\d+\.\d+", line.strip()[len(label) :])]


def softmax(scores: list[float]) -> list[float]:
    exps = [math.exp(s) for s in scores]
    return [e / sum(exps) for e in exps]


@pytest.fixture(scope="module")
def executed() -> dict[str, object]:
    return {lang: generate.execute(generate.build(lang)) for lang in generate.LANGUAGES}


def test_the_saved_notebooks_are_the_generators_cells_with_the_outputs_they_print(
    executed,
) -> None:
    for language, fresh in executed.items():
        saved = nbformat.read(generate.path(language), as_version=4)
        assert [c.source for c in saved.cells] == [c.source for c in generate.build(language).cells]
        assert printed(saved) == printed(fresh), f"{language}: saved outputs are stale"
        assert not any(o.output_type == "error" for c in fresh.cells for o in c.get("outputs", []))
    assert printed(executed["en"]) == printed(executed["zh"])  # one set of code cells


def test_the_notebooks_print_the_tutorials_examples_computed_by_hand(executed) -> None:
    text = "\n".join(printed(executed["en"]))
    e = math.e
    # 002's lookup: softmax([1, 1, 0, 1]) weighs the ages 18, 20, 22, 19: 19.33, not 19
    assert numbers_after(text, "weights") == pytest.approx(softmax([1, 1, 0, 1]), abs=1e-4)
    assert numbers_after(text, "answer") == pytest.approx([(57 * e + 22) / (3 * e + 1)], abs=1e-4)
    assert numbers_after(text, "answer")[0] == pytest.approx(19.33, abs=0.005)
    assert numbers_after(text, "masked")[-1] == 19.0  # 李四 masked: the tutorial's 19
    s = math.exp(1 / math.sqrt(3))
    assert numbers_after(text, "scaled")[-1] == pytest.approx((57 * s + 22) / (3 * s + 1), abs=1e-4)
    # 000's 段誉 table: 7, 1, 9, 5 are scores; one lookup blends, two find 降龙十八掌
    assert numbers_after(text, "fractions") == pytest.approx(
        [7 / 22, 1 / 22, 9 / 22, 5 / 22], abs=1e-4
    )
    assert numbers_after(text, "softmax") == pytest.approx(softmax([7, 1, 9, 5]), abs=1e-4)
    one_lookups = [line for line in text.splitlines() if line.startswith("one lookup")]
    assert len(one_lookups) == 3
    assert all(numbers_after(line, "one lookup")[-1] < 0.25 for line in one_lookups)
    assert text.count("-> 降龙十八掌") == 1 and "(his signature skill)" in text
    assert numbers_after(text, "lookup 2")[-1] > 0.99
    # 000's 青花瓷: Q = K = V is its code, symmetric; the softmax of its printed scores
    assert "equals the tutorial's code: True" in text and "scores symmetric: True" in text
    assert "W_Q != W_K: scores symmetric: False" in text
    tutorial = [[3.2897, 0.7432, -1.1652], [0.7432, 1.3647, -1.1707], [-1.1652, -1.1707, 5.6380]]
    for name, scores in zip("青花瓷", tutorial, strict=True):
        assert numbers_after(text, f"{name} tutorial's weights") == pytest.approx(
            softmax(scores), abs=1e-4
        )
    assert "on the diagonal: 3 of 3" in text
    # the exp/log div_term is the power 10000^(-2i/d), to float32 rounding
    powers = [10000 ** (-i / 10) for i in range(0, 10, 2)]
    assert numbers_after(text, "div_term, exp/log:") == pytest.approx(powers, abs=1e-4)
    assert float(text.split("largest difference:")[1].split()[0]) < 1e-6
    assert "tutorial's PE equals qkv's: True" in text
    # 000's 乘着风 mask is causal & padding; no weight on pads
    assert "equals the tutorial's matrix: True" in text
    assert numbers_after(text, "乘") == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert numbers_after(text, "weight on pads:") == [0.0]
    # 我爱吃梨 with Q = K = X: every row's largest weight on the diagonal
    assert "on the diagonal: 4 of 4" in text
    assert "output = weights @ V, then W_O: True" in text
