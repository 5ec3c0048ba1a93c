"""Small PyTorch models for the frontend's end-to-end tests: the GPT block of
examples/torch_gpt_block.py (a file a user reads alone, so the models live there) at
other sizes, an MLP behind a LayerNorm, and a tiny language model with an embedding."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch
from torch import nn

_SPEC = importlib.util.spec_from_file_location(
    "torch_gpt_block", Path(__file__).resolve().parents[1] / "examples" / "torch_gpt_block.py"
)
_EXAMPLE = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_EXAMPLE)

Block, MLP = _EXAMPLE.Block, _EXAMPLE.MLP
TP, SP = _EXAMPLE.TENSOR_PARALLEL, _EXAMPLE.SEQUENCE_PARALLEL


class NormMLP(nn.Module):
    """LayerNorm, then the MLP, with a residual."""

    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(dim)
        self.mlp = MLP(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(self.ln(x))


class TinyLM(nn.Module):
    """Token embedding, one block, a head."""

    def __init__(self, vocab: int = 40, dim: int = 32) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.block = Block(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(self.wte(idx)))
