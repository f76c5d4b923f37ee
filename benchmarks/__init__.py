"""The benchmark scripts, run as modules from the repository root: `python -m benchmarks.speed`,
`python -m benchmarks.quality NAME`, ... (each module's docstring says what it measures). What
they share is `benchmarks.common`; their measurements are written under benchmarks/results/."""
