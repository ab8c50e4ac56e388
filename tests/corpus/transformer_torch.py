"""Models built from torch's own ``nn.TransformerEncoderLayer`` and ``nn.MultiheadAttention``."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


# fxls: init(d_model=32, max_len=64)
# fxls: x = (B=2, T=12, 32)
class PositionalEncoding(nn.Module):
    """Fixed sinusoidal positions, added to a batch-first sequence."""

    pe: Tensor

    def __init__(self, d_model: int, dropout: float = 0.1, max_len: int = 5000) -> None:
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(1, max_len, d_model)
        pe[0, :, 0::2] = torch.sin(position * div_term)
        pe[0, :, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.pe[:, : x.size(1)]
        return self.dropout(x)


# fxls: init(ntoken=40, d_model=32, nhead=4, d_hid=64, nlayers=2, num_classes=5)
# fxls: src = (B=2, T=12) int64
class TextClassifier(nn.Module):
    """Token embedding, sinusoidal positions, a TransformerEncoder, mean pooling, a linear head."""

    def __init__(
        self,
        ntoken: int,
        d_model: int,
        nhead: int,
        d_hid: int,
        nlayers: int,
        num_classes: int,
        dropout: float = 0.1,
    ) -> None:
        super().__init__()
        self.embedding = nn.Embedding(ntoken, d_model)
        self.pos_encoder = PositionalEncoding(d_model, dropout, max_len=64)
        encoder_layers = nn.TransformerEncoderLayer(
            d_model, nhead, d_hid, dropout, batch_first=True, norm_first=True
        )
        self.transformer_encoder = nn.TransformerEncoder(
            encoder_layers, nlayers, enable_nested_tensor=False
        )
        self.d_model = d_model
        self.head = nn.Linear(d_model, num_classes)

    def forward(self, src: Tensor) -> Tensor:
        x = self.embedding(src) * math.sqrt(self.d_model)
        x = self.pos_encoder(x)
        x = self.transformer_encoder(x)
        return self.head(x.mean(dim=1))


# fxls: init(dim=32, num_heads=4)
# fxls: x = (B=2, T=12, 32)
# fxls: context = (B=2, S=7, 32)
class CrossAttentionBlock(nn.Module):
    """Pre-norm cross-attention from ``x`` to ``context`` followed by an MLP."""

    def __init__(self, dim: int, num_heads: int, mlp_ratio: int = 4) -> None:
        super().__init__()
        self.norm_q = nn.LayerNorm(dim)
        self.norm_kv = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, num_heads, batch_first=True)
        self.norm_mlp = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(
            nn.Linear(dim, mlp_ratio * dim), nn.GELU(), nn.Linear(mlp_ratio * dim, dim)
        )

    def forward(self, x: Tensor, context: Tensor) -> Tensor:
        kv = self.norm_kv(context)
        attn_out, _ = self.attn(self.norm_q(x), kv, kv, need_weights=False)
        x = x + attn_out
        return x + self.mlp(self.norm_mlp(x))


# fxls: init(d_model=32, nhead=4)
# fxls: src = (B=2, T=12, 32)
class EncoderLayer(nn.TransformerEncoderLayer):  # fxls-expect: FX107
    """torch's encoder layer with batch-first, pre-norm, GELU defaults (its forward is torch's)."""

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 64) -> None:
        super().__init__(
            d_model,
            nhead,
            dim_feedforward,
            dropout=0.0,
            activation="gelu",
            batch_first=True,
            norm_first=True,
        )
