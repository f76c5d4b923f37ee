"""Export a qkv translation model to CTranslate2, the inference engine behind many servers.

    qkv export ctranslate2 runs/demo --out demo-ct2 --quantization int8     # the command line
    export_ctranslate2("runs/demo", "demo-ct2", quantization="int8")         # the same in Python
    spec = transformer_spec(model, tokenizer)                               # a ctranslate2 spec

The model is built directly from qkv's modules with `ctranslate2.specs`, whose options say what
qkv's config says. CTranslate2's length penalty is not GNMT's, so the README.md written beside the
model gives the Python lines that rank its hypotheses by qkv's score. What CTranslate2 cannot
compute (ALiBi in the encoder, scores other than dot products) is refused with a ValueError.

Details: docs/formats.md, "CTranslate2".
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from ..data.tokenizer import SubwordTokenizer
from ..decode.options import DecodeOptions
from ..model import Transformer
from ..model.attention import MultiHeadedAttention
from ..model.layers import PositionwiseFeedForward
from ..model.positions import sinusoid_table
from ..model.transformer import Stack
from ..modeldir import atomic_write_bytes, atomic_write_text, load_model_dir

QUANTIZATIONS = ("float32", "int8", "int8_float32", "bfloat16")


def _array(t: Tensor) -> np.ndarray:
    return t.detach().float().cpu().numpy()


def _set_linear(spec, linear: nn.Linear) -> None:
    spec.weight = _array(linear.weight)
    if linear.bias is not None:
        spec.bias = _array(linear.bias)


def _set_norm(spec, norm: nn.Module) -> None:
    spec.gamma = _array(norm.weight)
    if getattr(norm, "bias", None) is not None:
        spec.beta = _array(norm.bias)


def _set_attention(spec, attn: MultiHeadedAttention, norm: nn.Module) -> None:
    """Self-attention: linear[0] = [W^Q; W^K; W^V]; cross-attention: linear[0] = W^Q and
    linear[1] = [W^K; W^V]; the last linear is W^O. The score scale includes the temperature."""
    projections = [attn.q_proj, attn.kv_proj] if attn.cross else [attn.in_proj]
    for linear_spec, linear in zip(spec.linear, [*projections, attn.out_proj], strict=True):
        _set_linear(linear_spec, linear)
    spec.queries_scale = np.float32(attn.score.scale / attn.temperature)
    _set_norm(spec.layer_norm, norm)


def _set_feed_forward(spec, ff: PositionwiseFeedForward, norm: nn.Module) -> None:
    """linear_0 = W_1 (SwiGLU: its gate half, and linear_0_noact its value half), linear_1 = W_2."""
    if ff.activation == "swiglu":
        gate, value = ff.w_1.weight.chunk(2)
        spec.linear_0.weight, spec.linear_0_noact.weight = _array(gate), _array(value)
        if ff.w_1.bias is not None:
            gate_bias, value_bias = ff.w_1.bias.chunk(2)
            spec.linear_0.bias, spec.linear_0_noact.bias = _array(gate_bias), _array(value_bias)
    else:
        _set_linear(spec.linear_0, ff.w_1)
    _set_linear(spec.linear_1, ff.w_2)
    _set_norm(spec.layer_norm, norm)


def _set_stack(spec, stack: Stack) -> None:
    """Embeddings, positions and the final norm (pre-norm) of an encoder or decoder."""
    cfg = stack.cfg
    embeddings = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings
    embeddings.weight = _array(stack.embedding.weight)
    spec.scale_embeddings = cfg.scale_embeddings
    if cfg.positional == "sinusoidal":
        spec.position_encodings.encodings = _array(sinusoid_table(cfg.max_positions, cfg.d_model))
    elif cfg.positional == "learned":
        spec.position_encodings.encodings = _array(stack.absolute.weight)
    elif cfg.positional == "none":  # a table of zeros adds nothing
        spec.position_encodings.encodings = np.zeros((cfg.max_positions, cfg.d_model), np.float32)
    if cfg.norm_first:
        _set_norm(spec.layer_norm, stack.norm)
    for layer_spec in spec.layer:
        if cfg.positional == "relative":  # one table per stack, read by every layer
            attention = layer_spec.self_attention
            attention.relative_attention_bias = _array(stack.score_bias.embedding.weight)
            attention.relative_attention_max_distance = np.int32(cfg.relative_max_distance)


# what the export writes (`_set_stack`, `transformer_spec`); any other value is refused, so that a
# new choice of the config is refused until the exporter writes it
EXPORTABLE = {
    "positional": ("sinusoidal", "learned", "none", "relative", "rope"),
    "norm": ("layernorm", "rmsnorm"),
    "attention": ("scaled_dot", "dot"),
}
WHY_NOT = {  # the reason, where CTranslate2 itself lacks the choice
    ("positional", "alibi"): "CTranslate2 has no ALiBi in its encoder",
    ("norm", "batchnorm"): "CTranslate2 has layer and RMS norms only",
    ("attention", "additive"): "CTranslate2 computes dot-product scores only",
    ("attention", "bilinear"): "CTranslate2 computes dot-product scores only",
}


def check_exportable(model: nn.Module) -> None:
    """ValueError naming what the export cannot write (`EXPORTABLE` lists what it can)."""
    if not isinstance(model, Transformer):
        raise ValueError(
            f"CTranslate2 export covers encoder-decoder Transformers, not {type(model).__name__}"
        )
    for key, accepted in EXPORTABLE.items():
        value = getattr(model.config, key)
        if value not in accepted:
            why = WHY_NOT.get((key, value), "the export does not write it")
            raise ValueError(f"{key}={value!r}: {why}; it exports {key} {', '.join(accepted)}")


def transformer_spec(model: Transformer, tokenizer: SubwordTokenizer):
    """The `ctranslate2.specs.TransformerSpec` of a qkv Transformer and its tokenizer."""
    check_exportable(model)
    try:
        from ctranslate2.specs import (
            TransformerDecoderSpec,
            TransformerEncoderSpec,
            TransformerSpec,
        )
        from ctranslate2.specs.common_spec import Activation
    except ImportError:
        raise ValueError("the export needs CTranslate2: pip install 'qkv[interop]'") from None
    cfg = model.config
    activation = {"relu": Activation.RELU, "gelu": Activation.GELU}.get(
        cfg.activation, Activation.SWISH  # silu, and swiglu's gate
    )
    options = dict(
        pre_norm=cfg.norm_first,
        activation=activation,
        ffn_glu=cfg.activation == "swiglu",
        rms_norm=cfg.norm == "rmsnorm",
        relative_attention_bias=cfg.positional == "relative",
        num_heads_kv=None if cfg.kv_heads == cfg.n_heads else cfg.kv_heads,
    )
    if cfg.positional == "rope":  # rotate all of each head, in halves (not interleaved)
        options.update(rotary_dim=0, rotary_interleave=False, rotary_base=cfg.rope_base)
    encoder = TransformerEncoderSpec(cfg.n_encoder_layers, cfg.n_heads, **options)
    decoder = TransformerDecoderSpec(cfg.n_decoder_layers, cfg.n_heads, **options)
    if cfg.positional == "rope":
        del encoder.position_encodings  # rotary only (CTranslate2 would add sinusoids)
    _set_stack(encoder, model.encoder)
    _set_stack(decoder, model.decoder)
    for layer_spec, layer in zip(encoder.layer, model.encoder.layers, strict=True):
        _set_attention(layer_spec.self_attention, layer.self_attn, layer.self_attn_block.norm)
        _set_feed_forward(layer_spec.ffn, layer.feed_forward, layer.ff_block.norm)
    for layer_spec, layer in zip(decoder.layer, model.decoder.layers, strict=True):
        _set_attention(layer_spec.self_attention, layer.self_attn, layer.self_attn_block.norm)
        _set_attention(layer_spec.attention, layer.cross_attn, layer.cross_attn_block.norm)
        _set_feed_forward(layer_spec.ffn, layer.feed_forward, layer.ff_block.norm)
    _set_linear(decoder.projection, model.output_projection)

    spec = TransformerSpec(encoder, decoder)
    source, target = tokenizer.src_vocabulary(), tokenizer.tgt_vocabulary()
    if (len(source), len(target)) != (cfg.src_vocab_size, cfg.target_vocab_size):
        raise ValueError(
            f"the tokenizer has {len(source)}/{len(target)} pieces, the model "
            f"{cfg.src_vocab_size}/{cfg.target_vocab_size} embeddings"
        )
    spec.register_source_vocabulary(source)
    spec.register_target_vocabulary(target)
    spec.config.unk_token = target[cfg.unk_id]
    spec.config.bos_token = target[cfg.bos_id]
    spec.config.eos_token = target[cfg.eos_id]
    spec.config.decoder_start_token = target[cfg.bos_id]
    spec.config.add_source_eos = True
    spec.config.layer_norm_epsilon = cfg.norm_eps
    return spec


def never_generated(model: Transformer, tokenizer: SubwordTokenizer) -> list[list[str]]:
    """The tokens qkv never writes (pad, bos), as CTranslate2's `suppress_sequences`."""
    target = tokenizer.tgt_vocabulary()
    return [[target[i]] for i in dict.fromkeys([model.config.bos_id, model.config.pad_id])]


README = """# {name}: a qkv model for CTranslate2

Exported by `qkv export ctranslate2` ({quantization} weights). Translate as `qkv translate` does
(beam search, GNMT's length penalty) with:

```python
import ctranslate2
import sentencepiece as spm

source = spm.SentencePieceProcessor(model_file="{out}/source.spm")
target = spm.SentencePieceProcessor(model_file="{out}/target.spm")
translator = ctranslate2.Translator("{out}", device="cpu")
texts = ["{example}"]
pieces = [source.encode({lower}, out_type=str) for text in texts]
beam, alpha = {beam}, {alpha}  # qkv translate --beam {beam} --alpha {alpha}
results = translator.translate_batch(
    pieces, beam_size=beam, length_penalty=0, patience=2, num_hypotheses=2 * beam,
    return_scores=True, min_decoding_length=0, max_decoding_length={max_length},
    suppress_sequences={suppress},
)


def qkv_score(tokens, logprob):  # GNMT: log P / ((5 + L) / 6) ** alpha, L counting the end token
    return logprob / ((5 + len(tokens) + 1) / 6) ** alpha


best = [max(zip(r.hypotheses, r.scores), key=lambda h: qkv_score(*h))[0] for r in results]
print([{detokenize} for tokens in best])
```

The source's end token is added by CTranslate2.{vocabulary}
`suppress_sequences` keeps CTranslate2 from writing the tokens qkv never writes.
`min_decoding_length=0` allows an empty translation, as qkv does.
Sentences have at most {positions} tokens.{language}

## Why the length penalty is applied outside CTranslate2

qkv ranks finished hypotheses by log P / ((5 + L) / 6) ** alpha. CTranslate2's `length_penalty`
divides by L ** length_penalty (L also counting the end token), a different function of L that no
setting turns into GNMT's. Its default, 1, ranks by log P per token, and with a penalty CTranslate2
stops once `beam_size * patience` hypotheses have ended, before the longer ones qkv goes on to find:
translations then differ from qkv's, and are often wrong. So the lines above take CTranslate2's
unpenalised log-probs (`length_penalty=0`) of 2 * beam finished hypotheses (`num_hypotheses`, which
`patience=2` allows; without a penalty CTranslate2 goes on until one step's best candidate has ended
and that many have) and pick the best by qkv's score. The search itself is the same: each step keeps
2 * beam candidates, ends the hypotheses whose end token ranks among the first beam, and extends the
beam most probable others. What can still differ:

* Stopping: qkv stops once beam hypotheses have ended and its best unfinished one, scored at its
  current length, no longer beats the beam-th best; CTranslate2 stops as said above and returns its
  2 * beam most probable finished hypotheses. A hypothesis only one of them reaches can change the
  pick.
* Suppressed tokens: CTranslate2 removes them before the softmax (the other tokens' probabilities
  are renormalised), qkv after: each step's log-prob is qkv's - log(1 - P(pad) - P(bos)), the same
  once a model has learned never to write them; for an untrained model it can break near-ties.
* Length limits: `qkv translate` ends a translation at its source's token count + 50 tokens
  (`--max-len-a 1 --max-len-b 50`) with an end token; CTranslate2 at `max_decoding_length` tokens,
  without one.
"""

LANGUAGE_NOTE = """

This model reads a target-language token first (e.g. {code}): put it before the pieces,
`pieces = [["{code}", *source.encode(text, out_type=str)] for text in texts]`.
"""

VOCABULARY_NOTE = """ The text is written as qkv (and MarianTokenizer) write it: a piece that
target.spm lacks (this model's vocabulary holds pieces of both sides) passes through as it is,
then each "▁" becomes a space; `target.decode` would leave such a piece's "▁" in the text."""

CT2_MAX_DECODING_LENGTH = 256  # translate_batch's default


def _detokenize(tokenizer: SubwordTokenizer) -> str:
    """The README's expression for the text of `tokens`, as qkv's decode_tgt writes it: with a
    vocabulary of pieces (an imported Marian model), unknown pieces dropped, the others passed
    through SentencePiece and every "▁" left a space."""
    if tokenizer.tgt_pieces is None:
        return "target.decode(tokens)"
    unk = tokenizer.tgt_vocabulary()[tokenizer.unk_id]
    return f'target.decode_pieces([t for t in tokens if t != "{unk}"]).replace("▁", " ").strip()'


def _readme(out: Path, tokenizer: SubwordTokenizer, model: Transformer, quantization: str) -> str:
    codes = [p for p in tokenizer.src_vocabulary() if p.startswith(">>") and p.endswith("<<")]
    cfg = model.config
    table = cfg.positional in ("sinusoidal", "learned", "none")  # positions beyond it: none
    defaults = DecodeOptions()
    return README.format(
        name=out.name,
        out=out,
        quantization=quantization,
        example="Hello world.",
        lower="text.lower()" if tokenizer.lowercase else "text",
        beam=defaults.beam,
        alpha=defaults.alpha,
        max_length=cfg.max_positions if table else CT2_MAX_DECODING_LENGTH,
        suppress=never_generated(model, tokenizer),
        positions=cfg.max_positions if table else "any",
        language=LANGUAGE_NOTE.format(code=codes[0]) if codes else "",
        detokenize=_detokenize(tokenizer),
        vocabulary="" if tokenizer.tgt_pieces is None else VOCABULARY_NOTE,
    )


@torch.no_grad()
def export_ctranslate2(
    model_dir: str | Path, out_dir: str | Path, quantization: str = "float32"
) -> Path:
    """Write the CTranslate2 model of the qkv model directory `model_dir` to `out_dir` (new or
    empty), with its SentencePiece models and a README.md."""
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization {quantization!r}; choose from {QUANTIZATIONS}")
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"{out} exists and is not an empty directory; choose a new one")
    model = load_model_dir(model_dir)
    tokenizer = SubwordTokenizer.load(model_dir)
    spec = transformer_spec(model, tokenizer)
    spec.validate()
    spec.optimize(quantization=quantization)
    out.mkdir(parents=True, exist_ok=True)
    spec.save(str(out))
    atomic_write_bytes(out / "source.spm", tokenizer.sentencepiece_models[0])
    atomic_write_bytes(out / "target.spm", tokenizer.sentencepiece_models[1])
    atomic_write_text(out / "README.md", _readme(out, tokenizer, model, quantization))
    return out


__all__ = [
    "QUANTIZATIONS",
    "check_exportable",
    "export_ctranslate2",
    "never_generated",
    "transformer_spec",
]
