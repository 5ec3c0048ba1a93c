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


class RMSNorm(nn.Module):
    """Llama's RMSNorm, written out: x * rsqrt(mean(x^2) + eps) * weight, in float32."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(1 + 0.1 * torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight


def rotate(x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding of x [B, T, H, D] at positions [T] (an input, so the
    angles' sin and cos are computed in the fusion, not folded)."""
    d = x.shape[-1]
    freqs = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
    angle = positions[:, None].float() * freqs[None, :]
    cos, sin = angle.cos()[:, None, :], angle.sin()[:, None, :]
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1)


class LlamaBlock(nn.Module):
    """A Llama-style block: RMSNorm, attention with rotary positions, SwiGLU MLP."""

    def __init__(self, dim: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.attn_norm, self.mlp_norm = RMSNorm(dim), RMSNorm(dim)
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(dim, dim, bias=False) for _ in range(4))
        self.w1, self.w3 = nn.Linear(dim, 2 * dim, bias=False), nn.Linear(dim, 2 * dim, bias=False)
        self.w2 = nn.Linear(2 * dim, dim, bias=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        h = self.attn_norm(x)
        q, k, v = (
            w(h).view(b, t, self.heads, c // self.heads) for w in (self.wq, self.wk, self.wv)
        )
        q, k = rotate(q, positions), rotate(k, positions)
        y = nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        x = x + self.wo(y.transpose(1, 2).reshape(b, t, c))
        h = self.mlp_norm(x)
        return x + self.w2(nn.functional.silu(self.w1(h)) * self.w3(h))


LLAMA_TP = {
    "wq": "colwise",
    "wk": "colwise",
    "wv": "colwise",
    "wo": "rowwise",
    "w1": "colwise",
    "w3": "colwise",
    "w2": "rowwise",
}
