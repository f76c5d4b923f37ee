"""Beam search shown step by step, for one sentence: at each step the candidates ranked by summed
log-probability, the ones that end (with their length-penalised score) and the beam kept; then
the finished hypotheses, best first. Beam 1 shows greedy decoding (beam search with a beam of 1 is
exactly greedy, `decode.search`).

    steps = trace_translation(translator, "4 0 5 2", DecodeOptions(beam=3))
    print(format_trace(steps, translator, DecodeOptions(beam=3)))


A worked trace of the demo model: docs/decoding.md.
"""

from __future__ import annotations

import math

from ..data.batching import pad_sequences
from ..decode.options import DecodeOptions
from ..decode.search import BeamStep, Hypothesis, beam_search, length_penalty
from .translator import Translator

SHOWN = 8  # candidates shown per step (of the 2 * beam ranked)


def trace_translation(translator: Translator, text: str, options: DecodeOptions) -> list[BeamStep]:
    """Every step of the beam search (beam `options.beam`; 1: greedy) that translates `text`."""
    [ids] = translator.encode([text])
    return traced_search(translator, ids, options)[0]


def traced_search(
    translator: Translator, ids: list[int], options: DecodeOptions
) -> tuple[list[BeamStep], list[Hypothesis]]:
    """The beam search that translates source `ids` (`Translator.encode`'s or a prepared job's),
    traced: its steps and its `options.beam` best hypotheses, best first."""
    if not options.beam_search:
        raise ValueError("the trace shows greedy and beam search; sampling draws: leave it out")
    tok = translator.tokenizer
    src = pad_sequences([[*ids, tok.eos_id]], tok.pad_id).to(translator.device)  # (1, S)
    steps: list[BeamStep] = []
    [hyps] = beam_search(
        translator.model,
        src,
        beam=options.beam,
        alpha=options.alpha,
        nbest=options.beam,
        max_len=options.max_output_length(len(ids)),
        min_len=options.min_len,
        trace=steps.append,
    )
    return steps, hyps


def format_trace(steps: list[BeamStep], translator: Translator, options: DecodeOptions) -> str:
    """The steps as text: one block per step, then the finished hypotheses, best first."""
    pieces = translator.tokenizer.tgt_vocabulary()
    eos = translator.tokenizer.eos_id
    lines = [
        f"beam {options.beam}, length penalty alpha {options.alpha:g}: "
        "score = log-prob / ((5 + length) / 6) ** alpha, length counting </s>"
    ]
    finished: list[Hypothesis] = []
    for s in steps:
        lines.append(f"step {s.step}   candidates by summed log-prob (showing {SHOWN} at most)")
        ended = {tuple(h.tokens): h for h in s.ended}
        kept = {tuple(tokens) for tokens, _ in s.kept}
        for rank, (tokens, logprob) in enumerate(s.candidates[:SHOWN], 1):
            text = " ".join("</s>" if t == eos else pieces[t] for t in tokens)
            what = ""
            if tokens[-1] == eos and tuple(tokens[:-1]) in ended:
                h = ended[tuple(tokens[:-1])]
                lp = length_penalty(len(h.tokens) + 1, options.alpha)
                what = (
                    f"ended  score {h.score:.3f} = {logprob:.3f} / lp({len(h.tokens) + 1}) {lp:.3f}"
                )
            elif tuple(tokens) in kept and not s.done:
                what = "kept"
            lines.append(f"  {rank:2d} {logprob:8.3f}  {text:<40} {what}".rstrip())
        finished.extend(s.ended)
        if s.done:
            lines.append(
                "  the search ends here (nothing alive can beat what ended, or the length limit)"
            )
    lines.append("finished hypotheses, best score first:")
    for h in sorted(finished, key=lambda h: -h.score):
        text = translator.tokenizer.decode_tgt([h.tokens])[0]
        lines.append(
            f"  {h.score:8.3f}  (log-prob {h.logprob:.3f}, p {math.exp(h.logprob):.3g})  {text}"
        )
    return "\n".join(lines)


__all__ = ["format_trace", "trace_translation"]
