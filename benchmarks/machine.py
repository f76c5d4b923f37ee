"""What the benchmark scripts record about the machine they ran on."""

from __future__ import annotations

import platform
import subprocess


def cpu_model() -> str:
    """The `Model name` line of lscpu (the processor's name), or platform.processor()."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return platform.processor()
    names = [line.split(":", 1)[1].strip() for line in out.splitlines() if line.startswith("Model name")]
    return names[0] if names else platform.processor()
