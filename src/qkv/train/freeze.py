"""Frozen parts of a translation model (`freeze`): their parameters get no gradient, so the
optimizer never changes them and they leave training bit for bit as they came.

    embeddings   the token embeddings (and the output projection's weight where it is tied to
                 them: one tensor), learned positions
    encoder      the encoder's layers and final norm (not its embeddings)
    decoder      the decoder's layers and final norm (not its embeddings)
    output       the output projection (its weight and its bias)

A tensor shared by parts (tied embeddings) is frozen when any of its names is in a frozen part.
"""

from __future__ import annotations

from torch import nn

FREEZE_GROUPS = ("embeddings", "encoder", "decoder", "output")


def group_of(name: str) -> str | None:
    """The group (FREEZE_GROUPS) of the parameter `name`, or None."""
    top, _, rest = name.partition(".")
    if top == "output_projection":
        return "output"
    if top in ("encoder", "decoder"):
        part = rest.partition(".")[0]
        return "embeddings" if part in ("embedding", "absolute") else top
    return None


def freeze(model: nn.Module, groups: tuple[str, ...]) -> int:
    """Stop the gradients of the parameters in `groups`; returns how many values are frozen. A
    ValueError when every parameter would be frozen."""
    frozen = 0
    for name, p in model.named_parameters(remove_duplicate=False):
        if group_of(name) in groups and p.requires_grad:
            p.requires_grad_(False)
            frozen += p.numel()
    if not any(p.requires_grad for p in model.parameters()):
        raise ValueError(f"freeze {', '.join(groups)} leaves no parameter to train")
    return frozen


__all__ = ["FREEZE_GROUPS", "freeze", "group_of"]
