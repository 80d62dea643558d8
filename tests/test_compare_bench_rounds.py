"""scripts/compare_bench_rounds.py, the table of scripts/bench-against-baseline: pooled medians over
the rounds of each side, each round's ratio, and the bandwidths every run measured."""

import json
import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[1] / "scripts" / "compare_bench_rounds.py"


def _run(out, side, round_, times, host_copy):
    path = out / side / f"round{round_}"
    path.mkdir(parents=True)
    case = {"name": "vgg2d", "pyooc_pageable_s": sorted(times)[len(times) // 2], "times": {"pageable": times},
            "pyooc_pinned_s": 0.1}
    (path / "conv_forward.json").write_text(json.dumps(
        {"cases": [case], "bandwidth": {"h2d": 55.0, "d2h": 55.0, "bidir": 90.0, "host_copy": host_copy}}))


def test_pooled_medians_and_per_round_ratios(tmp_path):
    _run(tmp_path, "baseline", 1, [0.20, 0.22, 0.21], 30.0)
    _run(tmp_path, "current", 1, [0.22, 0.23, 0.24], 30.0)
    _run(tmp_path, "baseline", 2, [0.30, 0.31, 0.29], 15.0)  # a slower host in round 2, on both sides
    _run(tmp_path, "current", 2, [0.28, 0.30, 0.29], 15.0)
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), "conv_forward", "2"], capture_output=True,
                          text=True, check=True)
    table = (tmp_path / "compare.md").read_text()
    assert table in done.stdout, "the table is printed as written"
    row = next(line for line in table.splitlines() if "| pageable |" in line)
    # Pooled: baseline median of 6 runs = (0.22 + 0.29) / 2, current = (0.24 + 0.28) / 2.
    assert "255.0 ms (6)" in row and "260.0 ms (6)" in row and "| 1.020 |" in row, row
    assert row.endswith("| 1.095 0.967 |"), row  # 0.23 / 0.21 and 0.29 / 0.30
    pinned = next(line for line in table.splitlines() if "| pinned |" in line)
    assert "| 1.000 |" in pinned, "a run without timed lists uses its recorded median"
    assert "| conv_forward | baseline | 2 | 55.0 | 55.0 | 90.0 | 15.0 |" in table


def test_no_comparable_runs_fails(tmp_path):
    (tmp_path / "baseline" / "round1").mkdir(parents=True)
    (tmp_path / "current" / "round1").mkdir(parents=True)
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), "conv_forward", "1"], capture_output=True,
                          text=True)
    assert done.returncode == 1
