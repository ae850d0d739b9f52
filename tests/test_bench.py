"""Smoke tests of the benchmark suite: a tiny configuration runs in-process and its document
has the documented structure. Nothing here checks speed."""

from __future__ import annotations

import json
import math

import numba
import numpy as np
import pytest

import pylucid as pl
from pylucid import bench
from pylucid.__main__ import main
from pylucid.bench import cli as bench_cli
from pylucid.bench import report
from pylucid.bench.jit_cost import run_probe

# A batch of 2 ms and two repeats: enough to exercise the timer, not to time anything.
TINY_TIMER = bench.TimerConfig(target_s=0.002, repeats=2, warmup=1)
CORE_IMPLS = ("pylucid", "pylucid.kernel", "numpy")


def tiny_config(**overrides: object) -> bench.Config:
    fields = {
        "ops": ("log2",),
        "dtypes": ("float32", "float64"),
        "sizes": (100,),
        "impls": CORE_IMPLS,
        "timer": TINY_TIMER,
        "bandwidth_bytes": 8 << 20,
        "jit": False,
    }
    return bench.Config(**{**fields, **overrides})


@pytest.fixture(scope="module")
def doc() -> dict:
    return bench.run(tiny_config())


def positive_finite(value: object) -> bool:
    return isinstance(value, float) and math.isfinite(value) and value > 0


def test_document_structure(doc: dict) -> None:
    assert doc["schema"] == bench.SCHEMA
    assert {"created", "config", "environment", "bandwidth", "results", "jit"} <= set(doc)
    assert doc["jit"] is None
    assert doc["errors"] == []
    assert doc["environment"]["numpy"] and doc["environment"]["cpu_model"]
    assert positive_finite(doc["bandwidth"]["gbps"])
    # Strict JSON (no NaN or inf) survives a round trip unchanged.
    assert json.loads(json.dumps(doc, allow_nan=False)) == doc


def test_every_case_has_every_core_impl(doc: dict) -> None:
    got = {(r["kind"], r["dtype"], r["impl"]) for r in doc["results"]}
    for kind in bench.KINDS:
        for dtype in ("float32", "float64"):
            # The kernel level has no forward+backward through the graph.
            impls = CORE_IMPLS if kind != "forward_backward" else ("pylucid", "numpy")
            assert {(kind, dtype, impl) for impl in impls} <= got
    assert doc["missing"] == []


def test_numbers_are_positive_and_consistent(doc: dict) -> None:
    bandwidth = doc["copy_gbps"]
    assert bandwidth == max(doc["bandwidth"]["gbps"], doc["bandwidth_end"]["gbps"])
    for row in doc["results"]:
        assert row["op"] == "log2" and row["size"] == 100
        for key in ("median_s", "min_s", "gbps", "bandwidth_fraction", "vs_numpy"):
            assert positive_finite(row[key]), (key, row)
        assert row["min_s"] <= row["median_s"]
        assert row["repeats"] == TINY_TIMER.repeats and row["number"] >= 1
        assert row["gbps"] == pytest.approx(row["bytes"] / row["median_s"] / 1e9)
        assert row["bandwidth_fraction"] == pytest.approx(row["gbps"] / bandwidth)
        assert row["vs_torch"] is None
    numpy_rows = [row for row in doc["results"] if row["impl"] == "numpy"]
    assert all(row["vs_numpy"] == 1.0 for row in numpy_rows)
    # A float32 forward moves 2 arrays of 100 * 4 bytes; log2's backward reads x and g.
    forward = next(r for r in doc["results"] if r["kind"] == "forward" and r["dtype"] == "float32")
    backward = next(
        r for r in doc["results"] if r["kind"] == "backward" and r["dtype"] == "float64"
    )
    assert (forward["bytes"], backward["bytes"]) == (800, 2400)


def test_threads_are_restored() -> None:
    before = numba.get_num_threads()
    bench.run(tiny_config(dtypes=("float32",), kinds=("forward",), threads=1))
    assert numba.get_num_threads() == before


def test_reports_render(doc: dict) -> None:
    text = report.text(doc)
    assert "log2 forward" in text and "copy bandwidth" in text
    md = report.markdown(doc)
    assert "#### log2 backward" in md and "| dtype | size | pylucid |" in md


def test_cli_presents_a_saved_run(doc: dict, tmp_path, capsys) -> None:
    path = report.write_json(doc, tmp_path / "bench.json")
    assert main(["bench", "--load", str(path), "--markdown", "--no-plot"]) == 0
    assert "#### log2 forward+backward" in capsys.readouterr().out


def test_cli_writes_the_results_into_a_doc(doc: dict, tmp_path, capsys) -> None:
    path = report.write_json(doc, tmp_path / "bench.json")
    page = tmp_path / "performance.md"
    page.write_text(f"# Title\n{bench_cli.BEGIN}\nold table\n{bench_cli.END}\nafter\n")
    assert main(["bench", "--load", str(path), "--no-plot", "--write-doc", str(page)]) == 0
    text = page.read_text()
    assert text.startswith("# Title\n") and text.endswith(f"{bench_cli.END}\nafter\n")
    assert "old table" not in text and "#### log2 forward" in text
    # A page without the markers is refused before anything runs.
    page.write_text("no markers\n")
    assert main(["bench", "--load", str(path), "--no-plot", "--write-doc", str(page)]) == 2
    assert "no <!-- bench:begin -->" in capsys.readouterr().err


def test_cli_rejects_an_unknown_op(capsys) -> None:
    assert main(["bench", "--ops", "no_such_op", "--no-jit", "--no-plot"]) == 2
    assert "no benchmark for no_such_op" in capsys.readouterr().err


def test_cases_come_from_the_op_database() -> None:
    ops = bench.benchmark_ops()
    assert next(iter(ops)) == "log2"
    for name, op in ops.items():
        assert op.info.name == name and len(op.info.samplers) == 1
        assert issubclass(op.op_class, pl.ops.UnaryOp)
    assert "to_dtype" not in ops and "add" not in ops


def test_timer_reports_failures_without_stopping() -> None:
    def broken() -> None:
        raise RuntimeError("boom")

    measured, errors = bench.measure({"ok": lambda: None, "broken": broken}, TINY_TIMER)
    assert set(measured) == {"ok"} and errors == {"broken": "RuntimeError: boom"}
    assert len(measured["ok"].samples_s) == TINY_TIMER.repeats


def test_optional_libraries(tmp_path) -> None:
    pytest.importorskip("torch", reason="PyTorch is not installed: its impl is optional")
    pytest.importorskip("mlx.core", reason="MLX is not installed: its impl is optional")
    doc = bench.run(
        tiny_config(dtypes=("float32",), impls=("numpy", "torch", "mlx", "pylucid.mlx"))
    )
    assert doc["errors"] == []
    impls = {(r["kind"], r["impl"]) for r in doc["results"]}
    assert {(kind, impl) for kind in bench.KINDS for impl in ("torch", "mlx")} <= impls
    assert all(positive_finite(r["vs_torch"]) for r in doc["results"])


def test_plot(doc: dict, tmp_path) -> None:
    pytest.importorskip("matplotlib", reason="matplotlib is not installed: the plot is optional")
    assert report.plot(doc, tmp_path / "bench.png").startswith("wrote")
    assert (tmp_path / "bench.png").stat().st_size > 0


def test_jit_probe_reports_every_timing() -> None:
    # With this process's Numba cache (warm after the runs above): about a second.
    timings = run_probe("log2", cache_dir=None)
    assert all(positive_finite(timings[key]) for key in timings), timings
    assert timings["first_op_s"] >= timings["first_forward_s"]


def test_half_dtypes_are_timed_forward_against_numpys_float32_chain() -> None:
    impls = ("pylucid", "pylucid.autocast", "pylucid.kernel", "numpy")
    doc = bench.run(tiny_config(dtypes=("float16", "bfloat16", "float32"), impls=impls))
    assert doc["errors"] == [] and doc["missing"] == []
    got = {(r["kind"], r["dtype"], r["impl"]) for r in doc["results"]}
    for dtype in ("float16", "bfloat16"):
        assert {("forward", dtype, impl) for impl in impls} <= got
        assert not any(kind != "forward" for kind, d, _ in got if d == dtype)
        half_rows = [r for r in doc["results"] if r["dtype"] == dtype]
        assert all(r["bytes"] == 400 for r in half_rows)  # 2 bytes in, 2 bytes out
        assert all(positive_finite(r["vs_numpy"]) for r in half_rows)
    # autocast changes nothing for float32 inputs: no such row, and nothing reported missing
    assert ("forward", "float32", "pylucid.autocast") not in got
    lines = report.text(doc).splitlines()
    assert any(line.startswith("bfloat16  100") for line in lines)


def test_half_cases_compute_what_numpy_computes() -> None:
    from pylucid.bench.cases import build_case, load_libraries, make_inputs

    op = bench.benchmark_ops()["log2"]
    impls = ("pylucid", "pylucid.autocast", "pylucid.kernel", "numpy")
    for dtype in ("float16", "bfloat16"):
        inputs = make_inputs(op, dtype, 1000)
        calls, missing = build_case("forward", op, dtype, inputs, impls, load_libraries(impls))
        assert set(calls) == set(impls) and missing == {}
        want = calls["numpy"]()
        assert want.dtype == inputs.x.dtype
        for impl in ("pylucid", "pylucid.kernel"):
            got = calls[impl]()
            got = got.numpy() if isinstance(got, pl.Tensor) else got
            assert got.dtype == want.dtype and np.array_equal(got.view("u2"), want.view("u2"))
        autocast = calls["pylucid.autocast"]()
        assert autocast.dtype is pl.float32
        assert np.array_equal(autocast.numpy().astype(want.dtype).view("u2"), want.view("u2"))
