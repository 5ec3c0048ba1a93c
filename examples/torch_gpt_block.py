"""A GPT block written in plain PyTorch, imported into fuserlite and sharded with
PyTorch's tensor-parallel vocabulary on 8 simulated devices.

    python examples/torch_gpt_block.py          # needs the torch extra:
                                                # pip install 'fuserlite[torch]'

1. `fl.from_torch(block, x)` traces the block with torch.export: one fusion input per
   parameter, named as PyTorch names it (attn.q.weight), then the example input x.
2. `fl.parallelize(fusion, mesh, plan)` places it as parallelize_module would place
   the module: q, k, v and fc1 column-parallel (weights split by output features),
   proj and fc2 row-parallel (split by input features), so each device holds 1/8 of
   the heads and of the MLP, and each row-parallel linear's partial sums need one
   Allreduce. With "sequence" on the LayerNorms (Megatron-SP) the Allreduces become
   a ReduceScatter (out) and an Allgather (back in, before the next column-parallel
   linear).
3. fl.explain says why each communication is there; the sharded run on 8 simulated
   devices is checked against torch's own forward.

The same from the shell: fuserlite import examples/torch_gpt_block.py:make_block
--example "torch.randn(2, 16, 64)" --plan attn.q=colwise,... --mesh 8 -o block.fus
"""

from __future__ import annotations

import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

import fuserlite as fl


class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = (
            lin(x).view(b, t, self.heads, c // self.heads).transpose(1, 2)
            for lin in (self.q, self.k, self.v)
        )
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))


class MLP(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.drop = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.fc2(F.gelu(self.fc1(x))))


class Block(nn.Module):
    def __init__(self, dim: int = 64, heads: int = 8) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.mlp = MLP(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def make_block() -> Block:
    """The block in eval mode (dropout off), with seeded weights: `fuserlite import` calls this."""
    torch.manual_seed(0)
    return Block().eval()


TENSOR_PARALLEL = {
    "attn.q": "colwise",
    "attn.k": "colwise",
    "attn.v": "colwise",
    "attn.proj": "rowwise",
    "mlp.fc1": "colwise",
    "mlp.fc2": "rowwise",
}
SEQUENCE_PARALLEL = {**TENSOR_PARALLEL, "ln1": "sequence", "ln2": "sequence"}


def main() -> None:
    block, x = make_block(), torch.randn(2, 16, 64)
    want = block(x).detach().numpy()

    start = time.perf_counter()
    fusion, inputs = fl.from_torch(block, x)
    took = time.perf_counter() - start
    names = [t.user_name for t in fusion.inputs]
    print(f"imported in {took:.2f} s: {len(names)} inputs ({', '.join(names[:3])}, ..., x)")

    for title, plan in (
        ("tensor parallel", TENSOR_PARALLEL),
        ("sequence parallel", SEQUENCE_PARALLEL),
    ):
        sharded, _ = fusion.clone()
        fl.parallelize(sharded, fl.DeviceMesh(list(range(8))), plan)
        by_name = {t.user_name: t for t in sharded.inputs}
        print(f"\n== {title} on 8 devices")
        print(
            f"attn.q.weight {by_name['attn.q.weight'].placements}, "
            f"attn.proj.weight {by_name['attn.proj.weight'].placements}, "
            f"x {by_name['x'].placements}"
        )
        executor = fl.FusionExecutor(sharded)
        print(fl.explain(executor.program).strip())
        (got,) = executor.run(inputs)
        kinds = [s.kind.name for s in executor.program.steps if hasattr(s, "kind")]
        error = float(np.max(np.abs(got - want)))
        assert error < 1e-4, f"max abs error {error} against torch"
        print(f"communications: {', '.join(kinds)}; matches torch (max abs error {error:.1e})")


if __name__ == "__main__":
    main()
