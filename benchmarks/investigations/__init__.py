"""One-off measurements behind statements of docs/benchmarks.md, each run as a module from the
repository root, e.g. `python -m benchmarks.investigations.decode_ab` (README.md lists them)."""
