"""Text generation with a decoder-only language model (`qkv train --task lm`): prompts in, one
continuation each out.

    generator = Generator.load("runs/lm")
    generator.generate(["A man"], DecodeOptions(beam=1, max_len_a=0, max_len_b=20))      # greedy
    generator.generate(["A man"], GENERATE.replace(sampling=True, top_p=0.9, seed=1))    # sampled

The searches are qkv.decode's: the prompt [bos] + ids is run through the model once, and every new
token is one step of the incremental decoder with its key/value cache (`use_cache=False`:
every step recomputes the whole prefix, the same ids). Prompts of one token length are decoded
together, in groups of at most `batch_size`; sampling draws group i with seed + i.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..data.tokenizer import SubwordTokenizer
from ..decode.options import DecodeOptions
from ..decode.search import run
from ..model import DecoderOnly
from ..modeldir import load_config, load_model_dir

# greedy decoding of at most 50 new tokens (the prompt's length does not count)
GENERATE = DecodeOptions(beam=1, max_len_a=0.0, max_len_b=50)


class Generator:
    """A decoder-only model and its tokenizer."""

    def __init__(self, model: DecoderOnly, tokenizer: SubwordTokenizer) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer

    @classmethod
    def load(cls, directory: str | Path, device: str = "cpu") -> Generator:
        arch, _, _ = load_config(directory)
        if arch != "decoder_only":
            raise ValueError(
                f"{directory} holds a {arch} model; generate needs a decoder-only language model "
                "(qkv train --task lm)"
            )
        model = load_model_dir(directory, device)
        return cls(model, SubwordTokenizer.load(directory))  # type: ignore[arg-type]

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def generate(
        self,
        prompts: list[str],
        options: DecodeOptions = GENERATE,
        use_cache: bool = True,
        batch_size: int = 32,
    ) -> list[str]:
        """One continuation per prompt: at most options.max_len_b new tokens (eos ends one
        earlier), greedy or, with options.sampling, sampled (temperature, top_k, top_p, seed)."""
        if options.beam != 1:
            raise ValueError("generation is greedy or sampled: use beam=1")
        ids = self.tokenizer.encode_src(prompts)
        by_length: dict[int, list[int]] = {}  # prompt length -> prompt indices, in input order
        for i, x in enumerate(ids):
            by_length.setdefault(len(x), []).append(i)
        groups = [
            rows[start : start + batch_size]
            for rows in by_length.values()
            for start in range(0, len(rows), batch_size)
        ]
        out: list[str] = [""] * len(prompts)
        for g, rows in enumerate(groups):
            src = torch.tensor([ids[i] for i in rows], dtype=torch.long).view(len(rows), -1)
            src = src.to(self.device)
            hyps = run(
                self.model,
                src,
                options,
                options.max_len_b,
                seed=options.seed + g,
                use_cache=use_cache,
            )
            texts = self.tokenizer.decode_tgt([h[0].tokens for h in hyps])
            for i, text in zip(rows, texts, strict=True):
                out[i] = text
        return out
