"""shard_map blocks in .fus text: read, run, written back as written."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import fuserlite as fl
from fuserlite import models

DIDx = fl.ParallelType.DIDx

SEED = """\
mesh m = [0, 1, 2, 3]
input t1: float32[4096] on m
shard_map m (t1 [DIDx]) -> (t5 [DIDx])
    t2 = all_gather(t1)
    t3 = all_reduce(t2, op=sum)
    t4 = reduce_scatter(t3, op=sum, scatter_dim=0, shard_count=4)
    s = sum(t4)
    t5 = reshape(s, [1])
    return t5
end
output t5
"""


def round_trips(fusion: fl.Fusion) -> str:
    text = fl.to_fus(fusion)
    again = fl.parse(text)
    assert fl.to_fus(again) == text and str(again) == str(fusion)
    return text


def test_a_block_reads_and_runs_per_device():
    fusion = fl.parse(SEED)
    out = fl.FusionExecutor(fusion).run_per_device([np.ones(4096, np.float32)])
    assert {d: o[0].tolist() for d, o in out.items()} == {d: [16384.0] for d in range(4)}
    assert "shard_map m0 (T0 [DIDx]) -> (T13 [DIDx])" in round_trips(fusion)


def comms(ex: fl.FusionExecutor) -> list[tuple[str, tuple[str, ...], int]]:
    return [(c.kind.value, c.group_names, c.bytes_per_device) for c in ex.communications]


def test_seed_000_lowers_to_exactly_its_collectives():
    """The replicated input of SEED is sliced into its blocks first (0 B); the example's
    input arrives sharded, so its program is exactly torch_xla's three collectives."""
    b = 4096 * 4  # the gathered tensor's bytes on 4 devices
    x = ("DIDx",)
    ex = fl.FusionExecutor(fl.parse(SEED))
    ex.run([np.ones(4096, np.float32)])
    assert comms(ex) == [
        ("LocalSlice", x, 0),
        ("Allgather", x, 3 * b // 4),
        ("Allreduce", x, 2 * 3 * b // 4),
        ("ReduceScatter", x, 3 * b // 4),
    ]
    example = fl.load(Path(__file__).resolve().parents[1] / "examples" / "seed_000.fus")
    b = 8192 * 4
    assert comms(fl.FusionExecutor(example)) == [
        ("Allgather", x, 7 * b // 8),
        ("Allreduce", x, 2 * 7 * b // 8),
        ("ReduceScatter", x, 7 * b // 8),
    ]


def test_the_python_programs_round_trip():
    text = round_trips(models.all_gather_all_reduce_reduce_scatter(4, 8))
    assert "    l3 = reduce_scatter(l2, op=sum, scatter_dim=0, shard_count=4)" in text
    with fl.Fusion() as fusion:
        x, w = fl.tensor([8, 4]), fl.tensor([4, 16])
        fusion.add_input(x)
        fusion.add_input(w)
        shift = [(i, (i + 1) % 4) for i in range(4)]

        @fl.shard_map(
            mesh=fl.DeviceMesh.for_num_devices(4),
            in_specs=[(DIDx,), (None, DIDx)],
            out_specs=[(DIDx,), None],
        )
        def step(a, b):
            moved = fl.ppermute(fl.all_to_all(a, 1, 0), DIDx, shift)
            return moved, fl.psum(fl.matmul(fl.exp(a), b), "DIDx")

        for out in step(x, w):
            fusion.add_output(out)
    text = round_trips(fusion)
    assert "ppermute(l2, axis=DIDx, perm=[[0, 1], [1, 2], [2, 3], [3, 0]])" in text
    assert "psum(l5, axis=DIDx)" in text


def test_a_collective_outside_a_block_is_a_located_error():
    text = "mesh m = [0, 1]\ninput x: float32[4] on m\ny = psum(x)\noutput y\n"
    with pytest.raises(
        fl.ParseError, match=r"<string>:3:1: psum is a collective: it runs only inside"
    ):
        fl.parse(text)


@pytest.mark.parametrize(
    "change, message",
    [
        (("end\noutput t5\n", ""), "this shard_map block has no `end`"),
        (("    return t5\n", ""), "needs `return` before `end`"),
        (("t2 = all_gather(t1)", "t2 = all_gather(zz)"), "'zz' is not a local value"),
        (
            ("t2 = all_gather(t1)", "t2 = all_gather(t1, nope=1)"),
            "all_gather: .*unexpected keyword argument 'nope'",
        ),
        (("output t5", "return t5"), "`return` outside a shard_map block"),
        (("[DIDx]) ->", "[3]) ->"), "a spec lists a mesh axis"),
        (("    t2 = all_gather(t1)\n", "    output t1\n"), "only op calls and `return`"),
        (
            ("shard_map m", "shard_map [0, 1]"),
            "<string>:6:5: reduce_scatter: shard_count 4 must equal the 2 devices",
        ),
    ],
)
def test_mistakes_in_a_block_are_parse_errors(change, message):
    with pytest.raises(fl.ParseError, match=message):
        fl.parse(SEED.replace(*change))


def test_end_without_a_block():
    with pytest.raises(fl.ParseError, match="<string>:1:1: `end` without a shard_map block"):
        fl.parse("end\n")
