"""Smoke tests of the benchmark suite: a tiny configuration runs in-process and its document
has the documented structure; the reports fit 100 columns and mark what they should. Nothing
here checks speed (how long ``--quick`` takes is measured by running it, not here)."""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import sys
from dataclasses import asdict, replace

import numba
import numpy as np
import pytest

import pylucid as pl
from pylucid import bench
from pylucid.__main__ import main
from pylucid.bench import cli as bench_cli
from pylucid.bench import load, model_report, models, programs, report, runner
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
        "scenarios": (),
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
    for row in doc["results"]:  # measured on Linux, else unknown
        assert row["others_cpu"] is None or 0 <= row["others_cpu"] <= 1
    assert set(doc["busy"]["others_cpu"]) == {"cases"}
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


def test_threads_and_the_collector_are_restored() -> None:
    before = numba.get_num_threads(), gc.get_freeze_count()
    bench.run(tiny_config(dtypes=("float32",), kinds=("forward",), threads=1))
    assert (numba.get_num_threads(), gc.get_freeze_count()) == before


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


# ---- program scenarios -------------------------------------------------------------------


@pytest.fixture(scope="module")
def programs_doc() -> dict:
    """Only the program scenarios, same process, pylucid only."""
    everything = tuple(programs.SCENARIOS)
    return bench.run(tiny_config(cases=False, impls=("pylucid",), scenarios=everything))


@pytest.fixture(scope="module")
def contention() -> dict:
    """The contention check with one fresh process and no loaded comparison."""
    return programs.run_contention(TINY_TIMER, fresh_processes=1, peers=())


def check_program_row(row: dict, scenario: str, library: str) -> None:
    info = programs.SCENARIOS[scenario]
    assert (row["scenario"], row["library"]) == (scenario, library)
    assert (row["unit"], row["ops_per_call"]) == (info.unit, info.ops_per_call)
    assert positive_finite(row["median_s"]) and row["min_s"] <= row["median_s"]
    assert row["number"] >= 1 and row["repeats"] == len(row["samples_s"]) == TINY_TIMER.repeats


def test_programs_document(programs_doc: dict) -> None:
    doc = programs_doc
    assert doc["schema"] == bench.SCHEMA
    assert doc["bandwidth"] is None and doc["results"] == [] and doc["jit"] is None
    section = doc["programs"]
    assert section["modes"] == ["same_process"] and section["libraries"] == ["pylucid"]
    assert section["errors"] == [] and section["skipped"] == {}
    assert section["isolated"] is None and section["contention"] is None
    assert list(section["scenarios"]) == list(programs.SCENARIOS)
    assert section["scenarios"]["chain_forward"]["ops_per_call"] == programs.CHAIN_OPS == 150
    assert [r["scenario"] for r in section["same_process"]] == list(programs.SCENARIOS)
    for row in section["same_process"]:
        check_program_row(row, row["scenario"], "pylucid")
        assert row["time_over_torch"] is None
    busy = doc["busy"]
    assert set(busy) == {
        "load_average_start",
        "load_average_end",
        "threshold",
        "others_cpu",
        "busy_share",
        "busy",
        "warning",
    }
    assert busy["threshold"] == bench.runner.BUSY_LOAD_PER_CPU * os.cpu_count()
    assert busy["others_cpu"]["programs"] == section["others_cpu"]
    assert all("others_cpu" in row for row in section["same_process"])
    assert json.loads(json.dumps(doc, allow_nan=False)) == doc


# The other libraries of the programs, and the module each is imported as.
PEERS = pytest.mark.parametrize(
    ("library", "module_name"), [("torch", "torch"), ("mlx", "mlx.core")], ids=["torch", "mlx"]
)


@PEERS
def test_programs_compute_what_pylucid_computes(library: str, module_name: str) -> None:
    module = pytest.importorskip(module_name, reason=f"{library} is not installed: optional")
    # Each call of a step updates the parameters: the second call checks the update too.
    # train_mlp's dropout draws each library's own masks (p = 0.1 of 128 units): its
    # losses agree to a few percent; every other program to float32's rounding.
    for scenario in programs.SCENARIOS:
        want = programs.build_program(scenario, "pylucid")
        got = programs.build_program(scenario, library, module)
        want_values = [want().item() for _ in range(2)]
        relative = 0.05 if scenario == "train_mlp" else 1e-5
        assert [got().item() for _ in range(2)] == pytest.approx(want_values, rel=relative), (
            scenario
        )


@PEERS
def test_programs_time_each_library(library: str, module_name: str) -> None:
    module = pytest.importorskip(module_name, reason=f"{library} is not installed: optional")
    modules = {"pylucid": pl, library: module}
    rows, errors = programs.time_scenarios(programs.SCENARIOS, modules, 1, TINY_TIMER)
    assert errors == []
    for scenario in programs.SCENARIOS:
        for name in modules:
            row = next(r for r in rows if (r["scenario"], r["library"]) == (scenario, name))
            check_program_row(row, scenario, name)
            assert (row["time_over_torch"] is None) == (library != "torch")


def test_isolated_worker_imports_only_its_library() -> None:
    rows, errors = programs.time_isolated(["chain_forward"], ["pylucid"], 1, TINY_TIMER)
    assert errors == [] and len(rows) == 1
    check_program_row(rows[0], "chain_forward", "pylucid")
    process = rows[0]["process"]
    assert process["pid"] != os.getpid() and process["imported"] == []


def test_isolated_worker_reports_its_failure() -> None:
    rows, errors = programs.time_isolated(["chain_forward"], ["no_such_library"], 1, TINY_TIMER)
    assert rows == [] and len(errors) == 1
    assert errors[0]["mode"] == "isolated" and "unknown libraries" in errors[0]["error"]


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_competitor_is_killed_when_the_block_ends() -> None:
    with programs.competitor() as process:
        assert process.poll() is None and not gone(process.pid)
    assert process.returncode is not None and gone(process.pid)
    with pytest.raises(RuntimeError, match="measurement failed"):
        with programs.competitor() as process:
            raise RuntimeError("measurement failed")
    assert process.returncode is not None and gone(process.pid)


def test_contention_check(contention: dict) -> None:
    ops = list(programs.CONTENTION_OPS)
    assert list(contention["ops"]) == ops and contention["errors"] == []
    assert contention["competitor"]["returncode"] is not None
    assert gone(contention["competitor"]["pid"])
    assert contention["fresh_processes"] == len(contention["processes"]) == 1
    for answer in (contention["in_process"], *contention["processes"]):
        assert list(answer["ops"]) == ops and answer["errors"] == {}
        assert answer["threads_default"] >= 1 and answer["peers"] == []
        for row in answer["ops"].values():
            assert positive_finite(row["default_s"]) and positive_finite(row["one_thread_s"])
            assert row["ratio"] == pytest.approx(row["default_s"] / row["one_thread_s"])
    assert contention["processes"][0]["process"]["pid"] != os.getpid()
    assert contention["worst"] == contention["processes"][0]["ops"]
    assert contention["ratio_target"] == programs.RATIO_TARGET
    assert isinstance(contention["ratio_met"], bool)
    loaded = contention["libraries_loaded"]
    assert loaded["skipped"] and loaded["ops"] == {} and loaded["met"] is None
    # this process's thread count is restored
    assert pl.get_num_threads() == contention["in_process"]["threads_default"]
    assert json.loads(json.dumps(contention, allow_nan=False)) == contention


def test_contention_compares_a_process_with_mlx_loaded() -> None:
    pytest.importorskip("mlx.core", reason="MLX is not installed: the comparison is optional")
    section = programs.run_contention(TINY_TIMER, fresh_processes=1, peers=("mlx",))
    loaded = section["libraries_loaded"]
    assert loaded["skipped"] is None and loaded["peers"] == ["mlx"]
    (process,) = loaded["processes"]
    assert process["peers"] == ["mlx"] and process["process"]["imported"] == ["mlx"]
    assert list(loaded["ops"]) == list(programs.CONTENTION_OPS)
    for row in loaded["ops"].values():
        assert row["ratio"] == pytest.approx(row["with_s"] / row["without_s"])
    assert isinstance(loaded["met"], bool) and loaded["tolerance"] == programs.LOADED_TOLERANCE


def test_busy_check() -> None:
    cpus = os.cpu_count()
    idle = bench.busy_check([0.0, 0.0, 0.0], [0.0, 0.0, 0.0])
    assert idle["busy"] is False and idle["warning"] is None
    busy = bench.busy_check([0.0, 0.0, 0.0], [cpus, 0.0, 0.0])
    assert busy["busy"] is True and "busy" in busy["warning"]
    assert bench.busy_check(None, None)["busy"] is None
    # Other processes' share of the CPUs, where measured, decides; the load averages (over
    # the minute before the start, and counting the run's own threads at the end) do not.
    shares = {"cases": 0.6, "programs": 0.1}
    taken = bench.busy_check([0.0, 0.0, 0.0], [cpus, 0.0, 0.0], shares)
    assert taken["busy"] is True and "CPUs: 60% during the cases" in taken["warning"]
    assert "programs" not in taken["warning"] and taken["others_cpu"] == shares
    quiet = bench.busy_check([cpus, 0.0, 0.0], [cpus, 0.0, 0.0], {"cases": 0.1})
    assert quiet["busy"] is False and quiet["warning"] is None
    assert bench.busy_check(None, None, {"cases": None})["busy"] is None


def test_others_share_of_the_cpus() -> None:
    start = load.snapshot()
    assert start.cpus >= 1 and start.own_s >= 0
    assert load.others_share(start, start) is None  # too short to count
    later = load.CpuSnapshot(start.wall_s + 1.0, start.busy_s, start.own_s, start.cpus)
    if start.busy_s is None:  # no /proc/stat: not measured
        assert load.others_share(start, later) is None
    else:  # busy time up by 1.5 CPU-seconds in 1 s, 0.5 of them this process's
        busier = load.CpuSnapshot(
            start.wall_s + 1.0, start.busy_s + 1.5, start.own_s + 0.5, start.cpus
        )
        assert load.others_share(start, busier) == pytest.approx(min(1.0, 1.0 / start.cpus))
        assert load.others_share(start, later) == 0.0


def test_programs_report_renders(programs_doc: dict, contention: dict, tmp_path, capsys) -> None:
    doc = json.loads(json.dumps(programs_doc))
    doc["programs"]["contention"] = contention
    doc["busy"] = bench.busy_check([1e3, 0.0, 0.0], None)
    text = report.text(doc)
    assert text.startswith("WARNING: the machine was busy")
    assert "Programs, all libraries in one process" in text and "softmax_regression" in text
    assert "Contention" in text and "worst ratio (<= 1.5)" in text
    assert "copy bandwidth" not in text.lower()
    md = report.markdown(doc, "min")
    assert "**Warning:**" in md and "| scenario | per | pylucid | pylucid/torch |" in md
    assert "| op | here | worst default |" in md
    path = report.write_json(doc, tmp_path / "bench.json")
    assert main(["bench", "--load", str(path), "--no-plot"]) == 0
    assert "chain_forward_backward" in capsys.readouterr().out


def test_cli_program_flags(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["bench", "--programs", "--no-programs"])
    assert main(["bench", "--no-programs", "--contention", "--no-plot"]) == 2
    assert "need the programs" in capsys.readouterr().err


# ---- --quick, the width of the report, its marks, the plot ---------------------------------


def bench_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    bench_cli.add_arguments(parser)
    return parser.parse_args(argv)


def test_quick_plan() -> None:
    quick = bench.Config.quick_config()
    assert quick.quick and not quick.jit
    assert quick.sizes == (10, 1_000_000) and quick.dtypes == ("float32", "float64")
    assert quick.ops == ("log2",) and quick.kinds == bench.KINDS
    assert set(quick.impls) == {"pylucid", "pylucid.kernel", "numpy", "torch", "mlx"}
    assert quick.scenarios == runner.QUICK_SCENARIOS and len(quick.scenarios) == 4
    assert quick.program_modes == ("same_process",)
    cases = len(quick.ops) * len(quick.dtypes) * len(quick.sizes) * len(quick.kinds)
    assert cases == 12
    assert quick.timer.target_s * quick.timer.repeats <= 0.06  # timed seconds per impl
    # The command line's --quick is this plan; options replace its fields.
    assert bench_cli.config_from_args(bench_args("--quick")) == quick
    custom = bench_cli.config_from_args(bench_args("--quick", "--jit", "--sizes", "1e3"))
    assert custom.jit and custom.sizes == (1000,) and custom.dtypes == quick.dtypes
    assert bench_cli.config_from_args(bench_args()).jit
    assert not bench_cli.config_from_args(bench_args("--no-jit")).jit


def test_quick_help_says_what_it_runs_and_how_long() -> None:
    parser = argparse.ArgumentParser()
    bench_cli.add_arguments(parser)
    (quick,) = [a for a in parser._actions if "--quick" in a.option_strings]
    assert bench_cli.QUICK_PROMISE in quick.help
    assert "float32 and float64 at 10 and 1e6" in quick.help and "no JIT probe" in quick.help


def rows_of(impls: tuple[str, ...], where: dict, others: float) -> list[dict]:
    """Result rows of one case, each implementation 1 us a call but numpy 2 us."""
    rows = []
    for impl in impls:
        t = 2e-6 if impl == "numpy" else 1e-6
        rows.append({**where, "impl": impl, "bytes": 8 * where["size"], "median_s": t,
                     "min_s": t, "number": 10, "repeats": 3, "samples_s": [t, t, t],
                     "others_cpu": others})  # fmt: skip
    return rows


def synthetic_doc(**changes: float) -> dict:
    """A document of every implementation, dtype, kind and program (no run): wide tables."""
    results = []
    for kind in bench.KINDS:
        for dtype in ("float32", "float64", "float16", "bfloat16"):
            for size in (1, 10_000, 64_000_000):
                where = {"kind": kind, "op": "log2", "dtype": dtype, "size": size}
                results += rows_of(bench.ALL_IMPLS, where, 0.0)
    same = []
    for name, scenario in programs.SCENARIOS.items():
        for library in programs.LIBRARIES:
            t = 1e-5
            same.append({"scenario": name, "library": library, "unit": scenario.unit,
                         "ops_per_call": scenario.ops_per_call, "median_s": t, "min_s": t,
                         "number": 10, "repeats": 3, "samples_s": [t, t, t],
                         "time_over_torch": 1.0, "others_cpu": 0.0})  # fmt: skip
    bandwidth = {"threads": 2, "bytes": 1 << 20, "gbps": 10.0, "gbps_best": 11.0,
                 "median_s": 1e-4, "min_s": 1e-4}  # fmt: skip
    doc = {
        "schema": bench.SCHEMA, "created": "2026-01-01T00:00:00+00:00",
        "config": {"threads": 2, "quick": False},
        "environment": {"cpu_model": "A CPU with a long marketing name of many words " * 2,
                        "cpu_count": 2, "python": "3.11", "numpy": "2.1", "numba": "0.61",
                        "torch": "2.13", "mlx": "0.32", "load_average": [0.1, 0.1, 0.1],
                        "git": "abc"},
        "skipped": {}, "missing": [], "errors": [], "jit": None,
        "bandwidth": bandwidth, "bandwidth_end": bandwidth, "copy_gbps": 10.0,
        "results": results,
        "programs": {"scenarios": {n: {"unit": s.unit, "ops_per_call": s.ops_per_call}
                                   for n, s in programs.SCENARIOS.items()},
                     "libraries": list(programs.LIBRARIES), "modes": ["same_process"],
                     "skipped": {}, "errors": [], "same_process": same, "isolated": same,
                     "contention": None, "others_cpu": 0.0},
        "busy": bench.busy_check([0.1, 0.1, 0.1], None, {"cases": 0.0}),
    }  # fmt: skip
    return json.loads(json.dumps(doc))


def long_lines(rendered: str) -> list[str]:
    return [line for line in rendered.splitlines() if len(line) > report.WIDTH]


def test_reports_fit_100_columns(contention: dict) -> None:
    doc = synthetic_doc()
    doc["programs"]["contention"] = contention
    doc["busy"] = bench.busy_check([9.0, 0.0, 0.0], None, {"cases": 0.9, "programs": 0.9})
    for row in doc["results"] + doc["programs"]["same_process"]:
        row["others_cpu"] = 0.9
    doc["results"][0]["samples_s"] = [1e-6, 1e-3, 1e-6]
    doc["programs"]["same_process"][0]["time_over_torch"] = 1e4
    for stat in report.STATS:
        rendered = report.text(doc, stat)
        assert long_lines(rendered) == [], long_lines(rendered)
    # The eight implementations do not fit one table: it is split, the keys repeated.
    first = rendered.split("\n\nlog2 backward")[0].split("\nlog2 forward\n")[1]
    headers = [line for line in first.splitlines() if line.startswith("dtype ")]
    assert len(headers) >= 2 and all(line.split()[:2] == ["dtype", "size"] for line in headers)
    assert "pylucid.mlx" in first and "vs torch" in first and "busy" in first


def test_unstable_implausible_and_busy_rows_are_marked() -> None:
    doc = synthetic_doc()
    plain = report.text(doc)
    assert report.flags(doc) == {"unstable": [], "implausible": []}
    assert "Marks" not in plain and "busy" not in plain.lower()
    ours = next(r for r in doc["results"] if r["impl"] == "pylucid" and r["dtype"] == "float64")
    ours["samples_s"] = [1e-6, 3e-6, 1.1e-6]  # 3x between batches: unstable
    torch = next(r for r in doc["results"] if r["impl"] == "torch" and r["size"] == 10_000)
    torch["median_s"] = torch["min_s"] = 4.26  # a stalled (or compiling) torch: 4e6x
    torch["samples_s"] = [4.26] * 3
    chain = next(r for r in doc["programs"]["same_process"] if r["library"] == "pylucid")
    chain["median_s"] = chain["min_s"] = 3e-2  # 3000x torch's 1e-5
    chain["samples_s"] = [3e-2] * 3
    chain["others_cpu"] = 0.8
    found = report.flags(doc)
    assert [(f["where"], f["impl"]) for f in found["unstable"]] == [
        (f"log2 {ours['kind']} float64 {report.format_size(ours['size'])}", "pylucid")
    ]
    assert found["unstable"][0]["spread"] == pytest.approx(3.0)
    implausible = {(f["where"], f["ratio"]) for f in found["implausible"]}
    assert implausible == {
        (f"log2 {torch['kind']} {torch['dtype']} 1e4", "vs torch"),
        ("chain_forward", "pylucid/torch"),
    }
    rendered = report.text(doc)
    marks = rendered.split("\nMarks\n")[1]
    assert f"{report.UNSTABLE} unstable: 1 time(s)" in marks
    assert f"{report.IMPLAUSIBLE} implausible" in marks and "chain_forward: pylucid/torch" in marks
    assert "busy: the share of the CPUs other processes used" in marks
    chain_line = next(line for line in rendered.splitlines() if line.startswith("chain_forward "))
    assert chain_line.split()[-2:] == [f"3000.00x{report.IMPLAUSIBLE}", "80%"]
    assert any(cell.endswith(report.UNSTABLE) for cell in rendered.split())
    md = report.markdown(doc)
    assert "Marks:" in md and "4.26 s |" in md


def test_busy_run_is_labelled() -> None:
    doc = synthetic_doc()
    doc["busy"] = bench.busy_check([0.0, 0.0, 0.0], None, {"cases": 0.7, "programs": 0.1})
    warning = "WARNING: the machine was busy (other processes' share of the CPUs: 70% during"
    assert report.text(doc).startswith(warning)
    assert "**Warning:** the machine was busy" in report.markdown(doc)


def test_without_matplotlib_the_plot_is_explained_once(
    doc: dict, tmp_path, capsys, monkeypatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises
    path = report.write_json(doc, tmp_path / "bench.json")
    note = report.plot(doc, tmp_path / "bench.png", saved=path)
    assert note.startswith(f"no plot: {tmp_path / 'bench.png'} needs matplotlib")
    assert "pylucid[bench]" in note and f"--load {path}" in note
    assert not (tmp_path / "bench.png").exists()
    assert main(["bench", "--load", str(path), "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().err.count("no plot:") == 1


# ---- the model benchmark (--models) ----------------------------------------------------------


def model_impls() -> list[str]:
    """The implementations whose libraries are installed (pylucid's always are)."""
    modules, why_not = models._load_libraries(models.IMPLS)
    return [impl for impl in models.IMPLS if impl not in why_not]


@pytest.mark.parametrize("name", list(models.MODELS))
def test_models_step_in_every_library_from_the_same_weights(name: str) -> None:
    cfg = models.MODELS[name].tiny
    modules, _ = models._load_libraries(models.IMPLS)
    state, parameters = models.initial_state(cfg, modules.get("torch"))
    # torch.compile compiles each model for seconds even when tiny: the CNN stands for all.
    impls = [i for i in model_impls() if i != "torch.compile" or name == "cnn"]
    losses = {}
    for impl in impls:
        try:
            program = models.build_program(impl, cfg, state, parameters, modules)
            losses[impl] = program.call()
        except pl.compiler.capture.CaptureError:  # reported as "raises" by the benchmark
            assert impl == "pl.compile"
    assert {"pylucid", "pylucid.mlx"} & set(losses) and "pylucid" in losses
    assert all(math.isfinite(loss) for loss in losses.values())
    assert list(losses.values()) == pytest.approx([losses["pylucid"]] * len(losses), rel=1e-5)


def test_models_without_a_library_say_why() -> None:
    modules, why_not = models._load_libraries(("jax.jit", "pylucid"))
    if "jax" in modules:
        assert why_not == {}
    else:
        assert set(why_not) == {"jax.jit"} and "jax is not installed" in why_not["jax.jit"]


TINY_MODELS = models.ModelsConfig(
    models=("gpt_small", "gpt_medium", "cnn"),
    impls=("torch", "jax.jit", "pylucid", "pl.compile"),
    timer=TINY_TIMER,
    tiny=True,
)


def test_time_models_in_process() -> None:
    before = pl.get_num_threads(), gc.get_freeze_count()
    answer = models.time_models(TINY_MODELS, 1)
    assert (pl.get_num_threads(), gc.get_freeze_count()) == before
    assert answer["threads_reported"]["requested"] == answer["threads_reported"]["pylucid"] == 1
    assert set(answer["outcomes"]) == set(TINY_MODELS.models) == set(answer["losses"])
    for model, outcomes in answer["outcomes"].items():
        assert list(outcomes) == list(TINY_MODELS.impls)
        for impl, outcome in outcomes.items():
            assert outcome["status"] in ("timed", "raises", "fallback", "failed", "skipped")
            assert outcome["status"] == "timed" or outcome["reason"], (model, impl)
        assert outcomes["pylucid"]["status"] == "timed"
        # what fails on the small GPT is not tried again on the medium one
        small = answer["outcomes"]["gpt_small"]
        if model == "gpt_medium":
            for impl in (i for i in TINY_MODELS.impls if small[i]["status"] != "timed"):
                assert outcomes[impl]["status"] == "skipped"
    for row in answer["rows"]:
        assert answer["outcomes"][row["model"]][row["impl"]]["status"] == "timed"
        assert positive_finite(row["median_s"]) and row["min_s"] <= row["median_s"]
        assert row["repeats"] == len(row["samples_s"]) == TINY_TIMER.repeats
        assert len(row["warmup_s"]) >= 1
    assert positive_finite(answer["products"]["numpy_s"])
    assert json.loads(json.dumps(answer, allow_nan=False)) == answer


def test_slow_or_failed_implementations_skip_the_larger_model() -> None:
    medium = models.MODELS["gpt_medium"]
    slow = {"status": "timed", "median_s": 2 * models.MEDIUM_AFTER_S}
    done = {"gpt_small": {"torch": slow, "pylucid": slow, "pylucid.mlx": slow,
                          "pl.compile": {"status": "raises"}}}  # fmt: skip
    assert models._prior(done, medium, "pl.compile") == "raises on gpt_small"
    assert "a step on gpt_small" in models._prior(done, medium, "pylucid.mlx")
    # the pair the ratio compares is timed however slow a busy machine made it
    assert models._prior(done, medium, "torch") is models._prior(done, medium, "pylucid") is None
    assert models._prior(done, models.MODELS["cnn"], "pylucid.mlx") is None


def test_child_environment_sizes_every_pool() -> None:
    base = {"OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_L2_SIZE": "512", "PATH": "/bin"}
    env = models.child_environment(2, native_openblas=False, base=base)
    assert env["OPENBLAS_CORETYPE"] == "Haswell" and env["PATH"] == "/bin"
    for key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS"):
        assert env[key] == "2"
    assert "intra_op_parallelism_threads=2" in env["XLA_FLAGS"]
    native = models.child_environment(1, native_openblas=True, base=base)
    assert not set(models.OPENBLAS_VARIABLES) & set(native) and native["OMP_NUM_THREADS"] == "1"
    assert base["OPENBLAS_CORETYPE"] == "Haswell"  # the caller's mapping is left alone


def test_competing_mode_starts_and_stops_its_process() -> None:
    config = replace(TINY_MODELS, models=("cnn",), impls=("pylucid",), modes=("2_threads_busy",))
    doc = models.run(config)
    mode = doc["modes"]["2_threads_busy"]
    assert mode["error"] is None and mode["competitor"] is True
    assert gone(mode["competitor_pid"])
    if mode["competitor_cpu"] is not None:  # measured on Linux: it ran while the mode did
        assert 0 < mode["competitor_cpu"] <= 1
    assert mode["env"]["OMP_NUM_THREADS"] == "2" and mode["threads"] == 2
    assert mode["threads_reported"]["requested"] == 2 and mode["rows"][0]["impl"] == "pylucid"
    assert set(doc["busy"]["others_cpu"]) == {"2 threads beside a competing process mode"}
    assert json.loads(json.dumps(doc, allow_nan=False)) == doc


def synthetic_models_doc() -> dict:
    """A models document of every implementation, mode and outcome (no run)."""
    impls, statuses = models.IMPLS, ("timed", "raises", "fallback", "failed", "skipped")
    modes = {}
    for index, (name, mode) in enumerate(models.MODES.items()):
        rows, outcomes, losses = [], {}, {}
        for model in models.MODELS:
            outcomes[model], losses[model] = {}, {}
            for j, impl in enumerate(impls):
                status = "timed" if j % 2 == 0 or model == "cnn" else statuses[j % 5]
                if status != "timed":
                    reason = f"a long reason of many words why {impl} did not run; " * 5
                    outcomes[model][impl] = {"status": status, "reason": reason}
                    continue
                t = 1e-3 * (j + 1) * (index + 1)
                outcomes[model][impl] = {"status": status, "warmup_s": [12.0, t], "notes": []}
                losses[model][impl] = 4.17 + 1e-7 * j
                rows.append({"model": model, "impl": impl, "median_s": t, "min_s": t,
                             "number": 1, "repeats": 3, "samples_s": [t, t, t],
                             "warmup_s": [12.0, t], "others_cpu": 0.9})  # fmt: skip
        rows[0]["samples_s"] = [1e-3, 5e-3, 1e-3]  # unstable
        modes[name] = {
            "title": mode.title, "threads": mode.threads, "competitor": mode.competitor,
            "env": {"OPENBLAS_CORETYPE": "Haswell"}, "load_average_before": [3.0, 3.0, 3.0],
            "others_cpu": 0.4, "competitor_cpu": 0.5 if mode.competitor else None,
            "error": None, "libraries": {"torch": "2.13"}, "rows": rows,
            "outcomes": outcomes, "losses": losses,
            "products": {"shape": [2048, 256, 768], "flops": 805306368, "numpy_s": 0.01,
                         "torch_s": 0.008},
        }  # fmt: skip
    doc = {
        "schema": models.SCHEMA, "created": "2026-01-01T00:00:00+00:00",
        "config": {**json.loads(json.dumps(asdict(models.ModelsConfig())))},
        "environment": {"cpu_model": "A CPU with a long marketing name " * 3, "cpu_count": 2,
                        "python": "3.11", "numpy": "2.4", "numba": "0.68", "git": "abc"},
        "models": {n: {"description": s.description} for n, s in models.MODELS.items()},
        "modes": modes,
        "busy": bench.busy_check([3.0, 3.0, 3.0], None, {"1 thread mode": 0.4}),
    }  # fmt: skip
    return json.loads(json.dumps(doc))


def test_models_report_fits_100_columns_and_marks(tmp_path, capsys) -> None:
    doc = synthetic_models_doc()
    for stat in report.STATS:
        rendered = model_report.text(doc, stat)
        assert long_lines(rendered) == [], long_lines(rendered)
    assert rendered.startswith("WARNING: the machine was busy")
    for title in ("Models, 1 thread", "Models, 2 threads (", "beside a competing process"):
        assert title in rendered
    assert "raises" in rendered and "fallback" in rendered and "pylucid/torch" in rendered
    assert "First step's loss" in rendered and "Product (2048, 256) @ (256, 768)" in rendered
    marks = rendered.split("\nMarks\n")[1]
    assert f"{report.UNSTABLE} unstable: 3 time(s)" in marks and "busy:" in marks
    # the busy column leaves the competitor out: 90% - 50% in the competing mode
    competing = rendered.split("beside a competing process")[1].split("\n\n")[0]
    assert "40%" in competing and "90%" not in competing
    assert "cnn" in rendered and "jax.jit" in rendered
    assert "| model | torch |" in model_report.markdown(doc)
    path = report.write_json(doc, tmp_path / "bench.json")
    assert main(["bench", "--load", str(path), "--out", str(tmp_path)]) == 0
    assert "Models, 1 thread" in capsys.readouterr().out
    if (tmp_path / "bench.png").exists():  # drawn where matplotlib is installed
        assert (tmp_path / "bench.png").stat().st_size > 0


def test_models_quick_plan_and_options(capsys) -> None:
    quick = bench_cli.models_config_from_args(bench_args("--models", "--quick"))
    assert quick == models.ModelsConfig.quick_config()
    assert quick.models == ("gpt_small", "cnn") and quick.modes == ("1_thread",)
    assert "pylucid.mlx" not in quick.impls and quick.timer.repeats == 3
    chosen = bench_cli.models_config_from_args(bench_args("--models", "cnn", "--native-openblas"))
    assert chosen.models == ("cnn",) and chosen.native_openblas
    assert chosen.modes == tuple(models.MODES)
    assert main(["bench", "--models", "--contention", "--no-plot"]) == 2
    assert "--models runs alone" in capsys.readouterr().err
    assert main(["bench", "--native-openblas", "--no-plot"]) == 2
    assert "--native-openblas goes with --models" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["bench", "--models", "--programs"])
