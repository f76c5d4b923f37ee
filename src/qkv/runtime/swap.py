"""The one way a fast module is swapped into a model, from outside it: `replace_modules`.

    replace_modules(model, nn.Dropout, lambda d: MaskDropout(d.p))             # a new module
    replace_modules(model, MultiHeadedAttention,                               # the same weights,
                    lambda m: rebuilt_as(m, DecodingAttention))                # other methods

Each submodule of the given class is set on its parent (`setattr`) as a new module built from it.
The module it replaces is left as it was: a replacement made by `rebuilt_as` holds its parameters,
buffers and submodules (the tensors themselves, not copies) in registries of its own.
"""

from __future__ import annotations

import copy
import weakref
from collections.abc import Callable
from typing import TypeVar

from torch import nn

M = TypeVar("M", bound=nn.Module)


def replace_modules(
    model: nn.Module, kind: type[nn.Module], make: Callable[[nn.Module], nn.Module]
) -> nn.Module:
    """Replace (in place) every submodule of class `kind`, exactly (its subclasses are replacements
    already), by `make(module)`. Returns the model, or its replacement when the model itself is a
    `kind`. A module registered in several places gets one replacement, registered in all of them.
    """
    # (parent, name) places, not the modules: each one is released once its replacement is set (a
    # float weight freed as its packed copy is made), unless another place still holds it
    places = [
        (parent, name)
        for parent in model.modules()
        for name, child in parent._modules.items()
        if type(child) is kind
    ]
    made: dict[int, tuple[weakref.ref[nn.Module], nn.Module]] = {}

    def replacement(module: nn.Module) -> nn.Module:
        known = made.get(id(module))
        if known is None or known[0]() is not module:
            known = made[id(module)] = (weakref.ref(module), make(module))
        return known[1]

    for parent, name in places:
        setattr(parent, name, replacement(parent._modules[name]))
    return replacement(model) if type(model) is kind else model


def rebuilt_as(module: nn.Module, cls: type[M]) -> M:
    """`module` as a new `cls`, a subclass of its class that adds methods and no state: it holds the
    same settings, parameters, buffers and submodules, and its own registries of them (registering
    a module on one of the two leaves the other as it is)."""
    if not issubclass(cls, type(module)):
        raise TypeError(f"{cls.__name__} is not a subclass of {type(module).__name__}")
    new = cls.__new__(cls)
    for name, value in vars(module).items():  # settings as they are, registries copied
        new.__dict__[name] = copy.copy(value) if isinstance(value, (dict, set)) else value
    return new


__all__ = ["rebuilt_as", "replace_modules"]
