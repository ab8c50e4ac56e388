"""An LSTM language model (word_language_model style) with an optional initial state."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn


# fxls: init(ntoken=50, ninp=24, nhid=32, nlayers=2)
# fxls: tokens = (B=3, T=10) int64
class LSTMLanguageModel(nn.Module):
    """Encoder -> multi-layer LSTM -> decoder; returns ``(logits, (h, c))``."""

    def __init__(
        self, ntoken: int, ninp: int, nhid: int, nlayers: int, dropout: float = 0.5
    ) -> None:
        super().__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout, batch_first=True)
        self.decoder = nn.Linear(nhid, ntoken)
        self.nhid = nhid
        self.nlayers = nlayers
        self.init_weights()

    def init_weights(self) -> None:
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(
        self, tokens: Tensor, hidden: Optional[tuple[Tensor, Tensor]] = None
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        emb = self.drop(self.encoder(tokens))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output)
        return decoded, hidden

    def init_hidden(self, bsz: int) -> tuple[Tensor, Tensor]:
        device = next(self.parameters()).device
        return (
            torch.zeros(self.nlayers, bsz, self.nhid, device=device),
            torch.zeros(self.nlayers, bsz, self.nhid, device=device),
        )
