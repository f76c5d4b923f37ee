"""The benchmark scripts, run as modules from the repository root: `python -m benchmarks.speed`,
`python -m benchmarks.quality NAME`, ... (each module's docstring says what it measures). What
they share is `benchmarks.common`; their measurements are written under benchmarks/results/.

They are of two kinds (and the modules that serve them), listed below and checked by
tests/test_benchmark_kinds.py: the harness measures qkv's speed and memory against a peer or an
earlier tree, to be re-run on every CPU kind and after every change; the studies train and score
models to settle a question of quality (docs/results.md, docs/concepts.md) and are run once.
benchmarks/investigations/ holds one-off measurements behind a reading of docs/benchmarks.md.
"""

HARNESS = (
    "speed", "compare", "serve", "serve_ab", "precision", "train_memory", "translate_memory",
    "scale", "finetune_speed",
)
STUDIES = ("quality", "ablate", "variants", "heads", "glossary", "splitters", "domain")
SUPPORT = ("common", "speed_check", "speed_engines", "speed_tables", "finetune_setup",
           "variant_runs")
