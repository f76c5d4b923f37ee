"""The sequence-classification head of an encoder-only model (BERT, Devlin et al., 2019, 3.2).

    pooled = h[:, 0]                          "first": the state of the first token ([CLS]; qkv
                                              puts bos there)
           | sum_t m_t h_t / sum_t m_t        "mean": the mean of the real (non-pad) tokens' states
    logits = W_c Dropout(tanh(W_p pooled + b_p)) + b_c          (B, n_classes)
"""

from __future__ import annotations

from torch import Tensor, nn

from ..config import POOLINGS


class ClassificationHead(nn.Module):
    """Encoder states (B, S, D) and their padding (B, S) -> class logits (B, n_classes)."""

    def __init__(
        self, d_model: int, n_classes: int, pooling: str = "first", dropout: float = 0.1
    ) -> None:
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling={pooling!r}; choose from {POOLINGS}")
        self.pooling = pooling
        self.pooler = nn.Linear(d_model, d_model)  # tanh(W_p h + b_p), BERT's pooler
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(d_model, n_classes))

    def pool(self, hidden: Tensor, real: Tensor) -> Tensor:
        """hidden (B, S, D), real (B, S) bool (True = a token, False = pad) -> (B, D)."""
        if self.pooling == "first":
            return hidden[:, 0]
        weights = real.to(hidden.dtype)[:, :, None]  # (B, S, 1)
        return (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)

    def forward(self, hidden: Tensor, real: Tensor) -> Tensor:
        pooled = self.pool(hidden, real)  # (B, D)
        return self.classifier(self.pooler(pooled).tanh())  # (B, n_classes)
