"""qkv: the Transformer of "Attention Is All You Need", readable, verified, fast enough to use."""

from .config import TransformerConfig
from .model import DecoderOnly, EncoderOnly, Transformer

__version__ = "0.1.0"
__all__ = ["DecoderOnly", "EncoderOnly", "Transformer", "TransformerConfig", "__version__"]
