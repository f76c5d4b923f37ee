"""Models from and to other toolkits: Marian / OPUS-MT import, CTranslate2 and Marian export.

The formats `qkv convert FORMAT` and `qkv export FORMAT` take are the keys of two registries:

    IMPORTERS   FORMAT -> function(src_dir, out_dir) -> the new qkv model directory
    EXPORTERS   FORMAT -> function(model_dir, out_dir, quantization) -> the new directory
    QUANTIZATIONS  FORMAT -> the weight types an exporter writes, its default first
    ABOUT       FORMAT -> what the format is, in a few words (the commands' help)

A new format is a module here, its function in IMPORTERS (or EXPORTERS and QUANTIZATIONS) and a
line in ABOUT.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from . import ctranslate2, marian_export
from .ctranslate2 import export_ctranslate2
from .hub import convert_marian_named
from .marian_export import export_marian

Importer = Callable[[str | Path, str | Path], Path]
Exporter = Callable[[str | Path, str | Path, str], Path]

IMPORTERS: dict[str, Importer] = {"marian": convert_marian_named}
EXPORTERS: dict[str, Exporter] = {"ctranslate2": export_ctranslate2, "marian": export_marian}
QUANTIZATIONS: dict[str, tuple[str, ...]] = {
    "ctranslate2": ctranslate2.QUANTIZATIONS,
    "marian": tuple(q for q in marian_export.QUANTIZATIONS if q),
}
ABOUT: dict[str, str] = {
    "marian": "OPUS-MT / Hugging Face Marian: a directory (convert: or a Hub name ORG/NAME)",
    "ctranslate2": "a CTranslate2 model",
}

__all__ = ["ABOUT", "EXPORTERS", "IMPORTERS", "QUANTIZATIONS", "Exporter", "Importer"]
