"""Redistribution on N-D meshes: fuserlite's planner against the optimum and the classic planner.

    python benchmarks/redistribute.py

For every pair of DTensor placements (Shard on each tensor axis, Replicate or
Partial per mesh axis for the source; Shard or Replicate for the complete
target) of a [8, 8, 16] float32 tensor on 2x2, 2x4 and 2x2x2 meshes: the
bytes each device sends and the number of collectives of fuserlite's plan
(`fuserlite.plan.plan`, Dijkstra over placement states), of the brute-force
optimum (every sequence of up to one step more than fuserlite's longest plan,
`fuserlite.plan.BruteForce`) and of the classic planner (one mesh axis at a
time through replicated, `fuserlite.plan.classic_steps`, as DTensor's default
planner goes). Bytes are the ring formulas of `fuserlite/plan/steps.py`.
Each mesh is measured twice: by bytes alone (latency_bytes=0, the byte optimum) and
at the default latency (plan.cost: bytes + 131072 per collective), the optimum then
being the brute force's under the same cost. Prints a table per mesh as it finishes
and a summary, writes results/redistribute.json. Target: fuserlite = optimum on 100%
of pairs, at both latencies.
"""

from __future__ import annotations

import time

from _report import print_table, write_json

from fuserlite.plan import (
    DEFAULT_LATENCY_BYTES,
    BruteForce,
    Planner,
    classic_steps,
    dtensor_placements,
)

SHAPE, ITEMSIZE = (8, 8, 16), 4  # float32
MESHES = [(2, 2), (2, 4), (2, 2, 2)]
LATENCIES = [0, DEFAULT_LATENCY_BYTES]
COLUMNS = [
    "mesh",
    "latency B",
    "pairs",
    "fuserlite = optimum",
    "classic = optimum",
    "optimum KiB",
    "fuserlite KiB",
    "classic KiB",
    "classic / optimum",
    "classic worst",
    "collectives opt / fl / classic",
    "plan ms/pair",
]


def measure(mesh: tuple[int, ...], latency: int) -> tuple[dict, list[dict]]:
    """Every pair on one mesh, a collective costing `latency`: its summary row and one
    record per pair."""
    planner = Planner(SHAPE, ITEMSIZE, mesh, latency)
    sources = list(dtensor_placements(len(SHAPE), len(mesh)))
    targets = [p for p in sources if p.is_complete]
    start = time.perf_counter()
    plans = {(s, t): planner.plan(s, t) for s in sources for t in targets}
    seconds = time.perf_counter() - start
    bound = max(len(p.steps) for p in plans.values()) + 1
    brute = BruteForce(SHAPE, ITEMSIZE, mesh, latency)
    pairs = []
    for s in sources:
        optima = brute.optima(s, bound)
        for t in targets:
            p, o = plans[s, t], optima[t]
            classic = planner.planned(s, classic_steps(s, t))
            sent = sum(c.bytes for c in classic)
            launches = sum(c.step.kind.is_collective for c in classic)
            pairs.append(
                {
                    "source": str(s),
                    "target": str(t),
                    "fuserlite": [p.bytes, p.collectives, p.cost.total],
                    "optimum": [o.bytes, o.collectives, o.cost],
                    "classic": [sent, launches, sent + latency * launches],
                    "plan": p.describe(),
                }
            )
    return summarize(mesh, latency, pairs, seconds), pairs


def summarize(mesh: tuple[int, ...], latency: int, pairs: list[dict], seconds: float) -> dict:
    """The summary row of one mesh at one latency."""
    total = {k: sum(r[k][0] for r in pairs) for k in ("optimum", "fuserlite", "classic")}
    ratios = [r["classic"][0] / r["optimum"][0] for r in pairs if r["optimum"][0]]
    return {
        "mesh": "x".join(map(str, mesh)),
        "latency_bytes": latency,
        "pairs": len(pairs),
        # the same cost and collectives (so the same bytes) as the optimum
        "fuserlite_optimal": sum(r["fuserlite"] == r["optimum"] for r in pairs),
        "classic_optimal": sum(r["classic"][2] == r["optimum"][2] for r in pairs),  # by cost
        "bytes": total,
        "classic_ratio": total["classic"] / total["optimum"],
        "classic_worst": max(ratios),
        "collectives": {
            k: sum(r[k][1] for r in pairs) for k in ("optimum", "fuserlite", "classic")
        },
        "plan_ms_per_pair": 1e3 * seconds / len(pairs),
    }


def cells(row: dict) -> list:
    """A summary row as table cells."""
    n, mb, c = row["pairs"], row["bytes"], row["collectives"]
    return [
        row["mesh"],
        row["latency_bytes"],
        n,
        f"{row['fuserlite_optimal']}/{n} ({100 * row['fuserlite_optimal'] / n:.0f}%)",
        f"{row['classic_optimal']}/{n} ({100 * row['classic_optimal'] / n:.0f}%)",
        mb["optimum"] // 1024,
        mb["fuserlite"] // 1024,
        mb["classic"] // 1024,
        row["classic_ratio"],
        row["classic_worst"],
        f"{c['optimum']} / {c['fuserlite']} / {c['classic']}",
        row["plan_ms_per_pair"],
    ]


def main() -> None:
    """Measure every mesh, printing its row as it finishes; then the summary and the JSON."""
    rows, records = [], {}
    for latency in LATENCIES:
        for mesh in MESHES:
            row, pairs = measure(mesh, latency)
            rows.append(row)
            records[f"{row['mesh']} latency {latency}"] = pairs
            title = f"redistribute {list(SHAPE)} float32 on {row['mesh']}, latency {latency} B"
            print_table(title, COLUMNS, [cells(row)])
    print_table(
        f"redistribute {list(SHAPE)} float32: every DTensor placement pair",
        COLUMNS,
        [cells(r) for r in rows],
    )
    short = sum(r["pairs"] - r["fuserlite_optimal"] for r in rows)
    print(f"fuserlite misses the optimum on {short} of {sum(r['pairs'] for r in rows)} pairs")
    write_json(
        "redistribute",
        {"shape": list(SHAPE), "itemsize": ITEMSIZE, "meshes": rows, "pairs": records},
    )


if __name__ == "__main__":
    main()
