"""Redistribution planning as a pure library: placements, steps, plans, blocks, moves
and block permutations.

Imports nothing of fuserlite but `fuserlite.ir.errors`, `fuserlite.ir.placement`,
`fuserlite.ir.teams` and `fuserlite.ir.mesh` (a TensorView's placement is read in the
IR, fuserlite.ir.sharding; a DeviceMesh's teams are the planner's, and so are the names
of its axes, DIDx the last):
the compiler's lower-communications turns a resharding into one of these
plans, the executor and the printers use the block model.
"""

from fuserlite.ir.errors import RedistributionError
from fuserlite.plan.blocks import Box, axis_rows, blocks, chunk_bounds, device_box
from fuserlite.plan.brute_force import BruteForce, Optimum, brute_force
from fuserlite.plan.classic import classic_steps
from fuserlite.plan.cost import DEFAULT_LATENCY_BYTES, Cost
from fuserlite.plan.cross_mesh import Holding, Move, Transfer, holdings, needs, plan_move
from fuserlite.plan.mesh_axes import axis_name, team_name, teams
from fuserlite.plan.permute import chunk_sources, permute_move
from fuserlite.plan.placement import (
    Partial,
    Placement,
    Replicate,
    Shard,
    all_placements,
    dtensor_placements,
)
from fuserlite.plan.search import Alternative, Geometry, Plan, PlannedStep, Planner, plan
from fuserlite.plan.steps import Step, StepKind

__all__ = [
    "Alternative",
    "Box",
    "BruteForce",
    "Cost",
    "DEFAULT_LATENCY_BYTES",
    "Geometry",
    "Holding",
    "Move",
    "Optimum",
    "Partial",
    "Placement",
    "Plan",
    "PlannedStep",
    "Planner",
    "RedistributionError",
    "Replicate",
    "Shard",
    "Step",
    "StepKind",
    "Transfer",
    "all_placements",
    "axis_rows",
    "axis_name",
    "blocks",
    "brute_force",
    "chunk_bounds",
    "chunk_sources",
    "classic_steps",
    "device_box",
    "dtensor_placements",
    "holdings",
    "needs",
    "permute_move",
    "plan",
    "plan_move",
    "team_name",
    "teams",
]
