"""`make bench-scale` at a tiny size (bench/scale.py): every series measured at each size,
each compared with its smallest size, and the charts drawn. Figures are never asserted:
they belong to bench/README.md; this keeps the benchmark runnable."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import charts, operator_memory, scale

ROOT = Path(__file__).resolve().parents[2]


def charts_written(folder: Path, name: str) -> str:
    png = (folder / charts.CHARTS / f"{name}.png").read_bytes()
    assert png.startswith(b"\x89PNG"), name
    svg = (folder / charts.CHARTS / f"{name}.svg").read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg, name
    return svg


@pytest.mark.slow
def test_the_scale_benchmark_measures_every_series_at_each_size_and_draws_its_curves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--sizes", "100,1000", "--sample", "400", "--turns", "2", "--groups", "2,20",
            "--group-tasks", "200", "--sweep", "100,500", "--out", str(tmp_path)]  # fmt: skip
    assert scale.main(argv) == 0
    [path] = tmp_path.glob("scale-*.json")
    report = json.loads(path.read_text())
    assert [r["size"] for r in report["pending"]] == [100, 1000]
    assert [r["size"] for r in report["delayed"]] == [100, 1000]
    assert [r["groups"] for r in report["groups"]] == [2, 20]
    assert [r["size"] for r in report["sweep"]] == [100, 500]
    for series, figures in scale.COMPARED.items():
        for row in report[series]:
            for field, _ in figures:
                assert row[field] > 0, (series, field, row)
    # the delayed backlog is really there while the claims run, beside the small pending one
    assert report["delayed"][-1]["delayed"] == 1000
    for kind in ("pending", "delayed"):
        side = report[f"{kind}_side_by_side"]
        assert (side["small"], side["large"]) == (100, 1000)
        assert side["claim_redis_us_per_task_p50"]["ratio"] > 0
    printed = capsys.readouterr().out
    assert "claim_redis_us_per_task_p50" in printed and "(1.00x" in printed
    svg = charts_written(tmp_path, "scale")
    assert "load" in svg  # the machine's load is part of the title


def test_the_peers_chart_draws_a_stored_bench_run_with_its_load(tmp_path: Path) -> None:
    stored = ROOT / "bench" / "results" / "2026-11-27T0946Z.json"
    report = json.loads(stored.read_text())
    paths = charts.peers(report, tmp_path)
    assert sorted(p.name for p in paths) == ["peers.png", "peers.svg"]
    svg = charts_written(tmp_path, "peers")
    assert "under load" in svg  # load 20 before that run


def test_the_operator_memory_chart_and_summary_read_a_stored_run(tmp_path: Path) -> None:
    stored = ROOT / "bench" / "results" / "operator-memory-2026-11-29T1142Z.json"
    report = json.loads(stored.read_text())
    paths = charts.operator_memory(report, tmp_path)
    assert sorted(p.name for p in paths) == ["operator-memory.png", "operator-memory.svg"]
    svg = charts_written(tmp_path, "operator-memory")
    assert "0.08 MB per TaskQueue" in svg  # the goal's line is labelled
    lines = operator_memory.summary(report)
    # that run: the leader 86 MB at start, 190 MB with 1,000 TaskQueues after 3 cycles
    assert lines[0].startswith("leader: 190 MB with 1,000 TaskQueues, 86 MB at start: 0.104")
    assert "goal <= 0.08: missed" in lines[0]
    assert lines[-1].startswith("leader, cycle 3 against cycle 2: 190 vs 191 MB, -0.7 %")


def test_a_run_whose_last_cycle_was_kept_charts_and_sums_up_with_its_new_queue_probes(
    tmp_path: Path,
) -> None:
    stored = ROOT / "bench" / "results" / "operator-memory-2026-11-29T1142Z.json"
    report = json.loads(stored.read_text())
    last = report["cycles"][-1]
    last["rss_empty_mb"] = None  # BENCH_MEMORY_KEEP_LAST: no "empty" sample
    last["new_queue_deployment"] = {"count": 20, "p50_s": 0.41, "p99_s": 1.234, "max_s": 1.3}
    paths = charts.operator_memory(report, tmp_path)
    assert sorted(p.name for p in paths) == ["operator-memory.png", "operator-memory.svg"]
    lines = operator_memory.summary(report)
    assert any(
        line.startswith("a new TaskQueue with 1,000 in place")
        and "p50 0.41 s, p99 1.23 s, max 1.30 s" in line
        for line in lines
    ), lines
