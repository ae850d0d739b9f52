"""Present a run: text and Markdown tables, the headline comparisons, JSON and a PNG plot.

The program scenarios (:mod:`pylucid.bench.programs`) get one table per mode - a row per
scenario, a column per library and pylucid's time over PyTorch's - and the contention check
one of its own; a busy machine is warned about at the top.

Everything here reads only the run's document (so a saved ``bench.json`` can be presented
again on another machine); matplotlib is imported only to plot.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pylucid.bench.cases import ALL_IMPLS, HALF_DTYPES

__all__ = [
    "format_size",
    "format_time",
    "headlines",
    "markdown",
    "plot",
    "read_json",
    "text",
    "with_stat",
    "write_json",
]


def format_size(size: int) -> str:
    """``10``, ``1e6``, ``6.4e7``: element counts as the tables show them."""
    if size < 1000:
        return str(size)
    exponent = int(math.floor(math.log10(size)))
    return f"{size / 10**exponent:g}e{exponent}"


def format_time(seconds: float) -> str:
    """Three significant digits in s, ms, us or ns."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def _ratio(value: float | None) -> str:
    """A ratio with two decimals, or two significant digits below 0.1 (a compiled chain
    runs at a few thousandths of PyTorch's time: "0.00x" would say nothing)."""
    if value is None:
        return "-"
    return f"{value:.2f}x" if value >= 0.1 or value == 0 else f"{value:.2g}x"


def write_json(doc: dict[str, Any], path: str | Path) -> Path:
    """Write ``doc`` as indented JSON; return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def read_json(path: str | Path) -> dict[str, Any]:
    """Read a document written by :func:`write_json`."""
    return json.loads(Path(path).read_text())


STATS = ("median", "min")


def with_stat(doc: dict[str, Any], stat: str = "median") -> dict[str, Any]:
    """A copy of ``doc`` whose rows say ``time_s`` and whose throughputs, bandwidth fractions
    and ratios come from the ``stat`` time ("median", as stored, or "min", the best batch:
    the better estimate on a busy machine, where other processes only ever add time).

    ``copy_gbps`` is the higher of the copy bandwidths measured before and after the cases
    (from the same statistic), ``copy_gbps_before`` and ``copy_gbps_after`` the two (None
    when the cases did not run). The program rows get ``time_s`` and ``time_over_torch``
    from the ``stat`` time too.
    """
    if stat not in STATS:
        raise ValueError(f"stat must be one of {STATS}, not {stat!r}")
    speed = "gbps" if stat == "median" else "gbps_best"
    before = doc["bandwidth"][speed] if doc.get("bandwidth") else None
    after = doc["bandwidth_end"][speed] if doc.get("bandwidth_end") else None
    copy = max(before, after or 0.0) if before is not None else None
    key = f"{stat}_s"
    times = {(r["kind"], r["op"], r["dtype"], r["size"], r["impl"]): r[key] for r in doc["results"]}
    rows = []
    for r in doc["results"]:
        case = (r["kind"], r["op"], r["dtype"], r["size"])
        t = r[key]
        gbps = r["bytes"] / t / 1e9
        ratios = {
            f"vs_{base}": times[(*case, base)] / t if (*case, base) in times else None
            for base in ("numpy", "torch")
        }
        rows.append(
            {
                **r,
                "time_s": t,
                "gbps": gbps,
                "bandwidth_fraction": gbps / copy,
                **ratios,
            }
        )
    programs = doc.get("programs")
    if programs:
        programs = {
            **programs,
            **{
                mode: _program_rows_with_stat(programs[mode], key)
                for mode in PROGRAM_MODES
                if programs.get(mode)
            },
        }
    return {
        **doc,
        "results": rows,
        "programs": programs,
        "stat": stat,
        "copy_gbps": copy,
        "copy_gbps_before": before,
        "copy_gbps_after": after,
    }


#: The program modes with a table of scenarios, and their titles.
PROGRAM_MODES = {
    "same_process": "Programs, all libraries in one process (timed interleaved)",
    "isolated": "Programs, each library alone in a fresh process",
}


def _program_rows_with_stat(rows: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    torch = {r["scenario"]: r[key] for r in rows if r["library"] == "torch"}
    return [
        {
            **r,
            "time_s": r[key],
            "time_over_torch": r[key] / torch[r["scenario"]] if r["scenario"] in torch else None,
        }
        for r in rows
    ]


def _program_tables(doc: dict[str, Any]) -> Iterator[tuple[str, list[str], list[list[str]]]]:
    """One table per program mode: a row per scenario, a column per library."""
    programs = doc.get("programs") or {}
    for mode, title in PROGRAM_MODES.items():
        rows = programs.get(mode)
        if not rows:
            continue
        present = {r["library"] for r in rows}
        libraries = [name for name in programs["libraries"] if name in present]
        index = {(r["scenario"], r["library"]): r for r in rows}
        body = []
        for scenario in dict.fromkeys(r["scenario"] for r in rows):
            unit = next(r["unit"] for r in rows if r["scenario"] == scenario)
            cells = [
                format_time(index[(scenario, name)]["time_s"]) if (scenario, name) in index else "-"
                for name in libraries
            ]
            ours = index.get((scenario, "pylucid"))
            body.append([scenario, unit, *cells, _ratio(ours["time_over_torch"] if ours else None)])
        yield title, ["scenario", "per", *libraries, "pylucid/torch"], body


def _contention_table(contention: dict[str, Any]) -> tuple[str, list[str], list[list[str]]]:
    """The contention check: per op, the ratios and the worst fresh process's medians."""
    n = contention["fresh_processes"]
    here = contention["in_process"]
    imported = here["process"]["imported"]
    loaded = contention["libraries_loaded"]
    header = [
        "op",
        "ratio, this process" + (f" ({' and '.join(imported)} imported)" if imported else ""),
        f"worst of {n} fresh: default",
        "1 thread",
        f"worst ratio (<= {contention['ratio_target']:g})",
        f"{'+'.join(loaded['peers']) or 'torch+mlx'} loaded / not "
        f"(+-{100 * loaded['tolerance']:.0f}%)",
    ]
    body = []
    for name, what in contention["ops"].items():
        mine = here["ops"].get(name)
        worst = contention["worst"].get(name)
        compared = loaded["ops"].get(name)
        body.append(
            [
                what,
                _ratio(mine["ratio"] if mine else None),
                format_time(worst["default_s"]) if worst else "-",
                format_time(worst["one_thread_s"]) if worst else "-",
                _ratio(worst["ratio"] if worst else None),
                _ratio(compared["ratio"] if compared else None),
            ]
        )
    title = (
        f"Contention: a CPU-bound competitor running; pylucid, default threads / 1 thread "
        f"(medians), in this process and in {_processes(n)} started afresh"
    )
    return title, header, body


def _processes(count: int) -> str:
    return f"{count} process" + ("es" if count != 1 else "")


def _contention_verdict(contention: dict[str, Any]) -> str:
    loaded = contention["libraries_loaded"]
    verdict = (
        f"Worst ratio default / 1 thread at most {contention['ratio_target']:g}: "
        f"{'met' if contention['ratio_met'] else 'NOT met'}. "
    )
    if loaded["skipped"]:
        return verdict + f"No loaded comparison: {loaded['skipped']}."
    return verdict + (
        f"{' and '.join(loaded['peers'])} loaded ({_processes(len(loaded['processes']))}) within "
        f"{100 * loaded['tolerance']:.0f}% of plain: {'met' if loaded['met'] else 'NOT met'}."
    )


def _programs_legend(programs: dict[str, Any], stat: str) -> str:
    time = "Median" if stat == "median" else "Best (minimum)"
    per_op = sorted(
        {f"{s['ops_per_call']}" for s in programs["scenarios"].values() if s["unit"] == "op"}
    )
    calls = f" (one call of a chain runs {' or '.join(per_op)} ops)" if per_op else ""
    return (
        f"{time} time per op{calls}, per training step or per call of a layer (forward and "
        f"backward); pylucid/torch: pylucid's time over PyTorch's (below 1: pylucid is faster)."
    )


def _busy_warning(doc: dict[str, Any]) -> str | None:
    return (doc.get("busy") or {}).get("warning")


def _impls(rows: list[dict[str, Any]]) -> list[str]:
    present = {row["impl"] for row in rows}
    known = [impl for impl in ALL_IMPLS if impl in present]
    return known + sorted(present - set(known))


def _groups(doc: dict[str, Any]) -> Iterator[tuple[str, str, list[dict[str, Any]]]]:
    """The results by (kind, op), in the order they ran."""
    seen: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in doc["results"]:
        seen.setdefault((row["kind"], row["op"]), []).append(row)
    for (kind, op), rows in seen.items():
        yield kind, op, rows


def _cell(row: dict[str, Any] | None) -> str:
    if row is None:
        return "-"
    return (
        f"{format_time(row['time_s'])} {row['gbps']:.3g} GB/s "
        f"{100 * row['bandwidth_fraction']:.0f}% {_ratio(row['vs_numpy'])}"
    )


def _tables(doc: dict[str, Any]) -> Iterator[tuple[str, list[str], list[list[str]]]]:
    for kind, op, rows in _groups(doc):
        impls = _impls(rows)
        index = {(r["dtype"], r["size"], r["impl"]): r for r in rows}
        keys = list(dict.fromkeys((r["dtype"], r["size"]) for r in rows))
        body = [
            [dtype, format_size(size)] + [_cell(index.get((dtype, size, impl))) for impl in impls]
            for dtype, size in keys
        ]
        yield f"{op} {kind.replace('_', '+')}", ["dtype", "size", *impls], body


def _find(doc: dict[str, Any], **where: Any) -> dict[str, Any] | None:
    for row in doc["results"]:
        if all(row.get(key) == value for key, value in where.items()):
            return row
    return None


def headlines(doc: dict[str, Any], stat: str = "median") -> list[str]:
    """The comparisons the suite exists for, as sentences (for the first op of the run)."""
    doc = with_stat(doc, stat)
    if not doc["results"]:
        return []
    op = doc["results"][0]["op"]
    sizes = sorted({row["size"] for row in doc["results"]})
    lines = []

    def row(kind: str, dtype: str, size: int, impl: str) -> dict[str, Any] | None:
        return _find(doc, kind=kind, op=op, dtype=dtype, size=size, impl=impl)

    for dtype in ("float32", "float64"):
        for size in (s for s in sizes if s in (1_000_000, 10_000_000)):
            ours = row("forward", dtype, size, "pylucid")
            if ours is None:
                continue
            kernel = row("forward", dtype, size, "pylucid.kernel")
            text = (
                f"{op} forward {dtype} {format_size(size)}: pylucid {format_time(ours['time_s'])}"
                f" = {_ratio(ours['vs_numpy'])} NumPy, {_ratio(ours['vs_torch'])} torch"
            )
            if kernel is not None:
                text += f" (kernel alone {_ratio(kernel['vs_numpy'])} NumPy)"
            lines.append(text)
    for dtype in HALF_DTYPES:
        for size in (s for s in sizes if s in (1_000_000, 10_000_000)):
            ours = row("forward", dtype, size, "pylucid")
            if ours is None:
                continue
            text = (
                f"{op} forward {dtype} {format_size(size)}: pylucid {format_time(ours['time_s'])}"
                f" = {_ratio(ours['vs_numpy'])} NumPy's astype(float32) -> {op} -> astype chain"
            )
            if ours["vs_torch"] is not None:
                text += f", {_ratio(ours['vs_torch'])} torch"
            autocast = row("forward", dtype, size, "pylucid.autocast")
            if autocast is not None:
                text += (
                    f"; under autocast (float32 result) {format_time(autocast['time_s'])} = "
                    f"{_ratio(autocast['vs_numpy'])}"
                )
            lines.append(text)
    largest = sizes[-1]
    if largest >= 1_000_000:
        for dtype in ("float32", "float64"):
            parts = [
                f"{impl} {100 * r['bandwidth_fraction']:.0f}%"
                for impl in ALL_IMPLS
                if (r := row("forward", dtype, largest, impl)) is not None
            ]
            if parts:
                lines.append(
                    f"{op} forward {dtype} {format_size(largest)}, fraction of the copy "
                    f"bandwidth ({doc['copy_gbps']:.1f} GB/s): " + ", ".join(parts)
                )
    for dtype in ("float32", "float64"):
        for size in (s for s in sizes if s in (1_000_000, 10_000_000)):
            kernel = row("backward", dtype, size, "pylucid.kernel")
            if kernel is not None and kernel["vs_numpy"] is not None:
                lines.append(
                    f"{op} fused backward kernel {dtype} {format_size(size)}: "
                    f"{format_time(kernel['time_s'])} = {_ratio(kernel['vs_numpy'])} NumPy's "
                    f"formula, {100 * kernel['bandwidth_fraction']:.0f}% of copy bandwidth"
                )
    for size in (s for s in sizes if s < 1000):
        ours = row("forward_backward", "float32", size, "pylucid")
        torch = row("forward_backward", "float32", size, "torch")
        if ours is not None:
            text = f"{op} forward+backward float32, {size} element(s): pylucid " + format_time(
                ours["time_s"]
            )
            if torch is not None:
                text += (
                    f", PyTorch autograd {format_time(torch['time_s'])} "
                    f"(pylucid {_ratio(ours['vs_torch'])} torch)"
                )
            lines.append(text)
    jit = doc.get("jit")
    if jit and "error" not in jit:
        warm, cold = jit["warm"], jit["cold"]
        lines.append(
            f"JIT ({jit['op']}): import numpy+numba {format_time(warm['import_deps_s'])}, "
            f"import pylucid {format_time(warm['import_pylucid_s'])}; first {jit['op']} call "
            f"{format_time(warm['first_forward_s'])} with a warm cache, "
            f"{format_time(cold['first_forward_s'])} with an empty one; fresh process to first "
            f"result {format_time(warm['process_s'])} warm, {format_time(cold['process_s'])} cold"
        )
    return lines


def _jit_rows(jit: dict[str, Any]) -> list[list[str]]:
    labels = {
        "import_deps_s": "import numpy, numba",
        "import_pylucid_s": "import pylucid",
        "first_forward_s": f"first {jit['op']} forward (10 elements)",
        "first_backward_s": "first backward",
        "first_parallel_forward_s": "first forward above the parallel threshold",
        "steady_forward_s": "later forward (best of 100, for comparison)",
        "first_op_s": "imports + first forward",
        "process_s": "whole probe process",
    }
    return [
        [label, format_time(jit["warm"][key]), format_time(jit["cold"][key])]
        for key, label in labels.items()
        if key in jit["warm"] and key in jit["cold"]
    ]


def _environment_line(doc: dict[str, Any]) -> str:
    env = doc["environment"]
    libs = ", ".join(
        f"{name} {env[name]}" for name in ("numpy", "numba", "torch", "mlx") if env.get(name)
    )
    load = env.get("load_average")
    return (
        f"{env['cpu_model']} ({env['cpu_count']} CPUs), Python {env['python']}, {libs}; "
        f"{doc['config']['threads']} threads"
        + (f"; load average {load[0]:.2f} at start" if load else "")
    )


def _notes(doc: dict[str, Any]) -> list[str]:
    notes = [f"{impl}: {why}" for impl, why in doc.get("skipped", {}).items()]
    if doc.get("jit") and "error" in doc["jit"]:
        notes.append(f"the JIT probe of {doc['jit']['op']} failed: {doc['jit']['error']}")
    kinds: dict[tuple[str, str, str], list[str]] = {}
    for m in doc.get("missing", []):
        kinds.setdefault((m["impl"], m["op"], m["reason"]), []).append(m["kind"])
    notes += [
        f"{impl} not timed for {op} ({', '.join(k.replace('_', '+') for k in ks)}): {why}"
        for (impl, op, why), ks in kinds.items()
    ]
    notes += [
        f"{e['impl']} failed on {e['kind']} {e['op']} {e['dtype']} {format_size(e['size'])}: "
        f"{e['error']}"
        for e in doc.get("errors", [])
    ]
    programs = doc.get("programs") or {}
    notes += [
        f"{name}: {why} (no program scenarios)"
        for name, why in programs.get("skipped", {}).items()
        if doc.get("skipped", {}).get(name) != why
    ]
    notes += [
        f"{e['library']} failed on {e['scenario']} ({e['mode'].replace('_', ' ')}): {e['error']}"
        for e in programs.get("errors", [])
    ]
    contention = programs.get("contention") or {}
    notes += [
        f"a {e['process']} process of the contention check failed: {e['error']}"
        for e in contention.get("errors", [])
    ]
    return notes


def _aligned(header: list[str], body: list[list[str]]) -> str:
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths)) for line in [header, *body]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(line.rstrip() for line in lines)


def _markdown_table(header: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(line) + " |" for line in body]
    return "\n".join(lines)


def _bandwidth_line(doc: dict[str, Any], bold: str = "") -> str:
    after = doc["copy_gbps_after"]
    return (
        f"Copy bandwidth ({doc['bandwidth']['threads']} threads, read + write): "
        f"{bold}{doc['copy_gbps']:.1f} GB/s{bold}"
        + (
            f" (the higher of {doc['copy_gbps_before']:.1f} GB/s before the cases and "
            f"{after:.1f} GB/s after them)"
            if after is not None
            else ""
        )
        + "."
    )


def _legend(stat: str) -> str:
    time = "median time per call" if stat == "median" else "best (minimum) time per call"
    return (
        f"Each cell: {time}, throughput (least bytes read + written / time), that throughput "
        f"as a fraction of the copy bandwidth, and the speed-up over NumPy (NumPy time / this "
        f"time: above 1 is faster)."
    )


def text(doc: dict[str, Any], stat: str = "median") -> str:
    """The run as plain-text tables for a terminal, from the ``stat`` times."""
    doc = with_stat(doc, stat)
    warning = _busy_warning(doc)
    parts = [f"WARNING: {warning}"] if warning else []
    parts.append(_environment_line(doc))
    if doc["results"]:
        parts += [_bandwidth_line(doc), _legend(doc["stat"])]
    for title, header, body in _tables(doc):
        parts.append(f"\n{title}\n{_aligned(header, body)}")
    for index, (title, header, body) in enumerate(_program_tables(doc)):
        legend = f"{_programs_legend(doc['programs'], doc['stat'])}\n" if index == 0 else ""
        parts.append(f"\n{title}\n{legend}{_aligned(header, body)}")
    contention = (doc.get("programs") or {}).get("contention")
    if contention:
        title, header, body = _contention_table(contention)
        parts.append(f"\n{title}\n{_aligned(header, body)}\n{_contention_verdict(contention)}")
    if doc.get("jit") and "error" not in doc["jit"]:
        parts.append(
            "\nJIT cost\n" + _aligned(["", "warm cache", "empty cache"], _jit_rows(doc["jit"]))
        )
    summary = headlines(doc, doc["stat"])
    if summary:
        parts.append("\nHeadlines\n" + "\n".join(f"- {line}" for line in summary))
    notes = _notes(doc)
    if notes:
        parts.append("\nNotes\n" + "\n".join(f"- {line}" for line in notes))
    return "\n".join(parts)


def markdown(doc: dict[str, Any], stat: str = "median") -> str:
    """The run as Markdown (what ``docs/performance.md`` shows), from the ``stat`` times."""
    doc = with_stat(doc, stat)
    parts = [
        f"Run {doc['created']}, `{doc['environment'].get('git') or 'unknown revision'}`"
        + (" (`--quick`)" if doc["config"]["quick"] else "")
        + f": {_environment_line(doc)}.",
    ]
    warning = _busy_warning(doc)
    if warning:
        parts += ["", f"**Warning:** {warning}."]
    if doc["results"]:
        parts += ["", f"{_bandwidth_line(doc, '**')} {_legend(doc['stat'])}"]
    summary = headlines(doc, doc["stat"])
    if summary:
        parts += ["", "Headlines:", ""] + [f"- {line}" for line in summary]
    for title, header, body in _tables(doc):
        parts += ["", f"#### {title}", "", _markdown_table(header, body)]
    for index, (title, header, body) in enumerate(_program_tables(doc)):
        legend = ["", _programs_legend(doc["programs"], doc["stat"])] if index == 0 else []
        parts += ["", f"#### {title}", *legend, "", _markdown_table(header, body)]
    contention = (doc.get("programs") or {}).get("contention")
    if contention:
        title, header, body = _contention_table(contention)
        parts += ["", f"#### {title}", "", _markdown_table(header, body)]
        parts += ["", _contention_verdict(contention)]
    if doc.get("jit") and "error" not in doc["jit"]:
        parts += [
            "",
            "#### JIT cost (fresh processes)",
            "",
            _markdown_table(["", "warm cache", "empty cache"], _jit_rows(doc["jit"])),
        ]
    notes = _notes(doc)
    if notes:
        parts += ["", "Notes:", ""] + [f"- {line}" for line in notes]
    return "\n".join(parts) + "\n"


def _color(impl: str) -> str:
    """The same colour for an implementation in every panel."""
    return f"C{ALL_IMPLS.index(impl)}" if impl in ALL_IMPLS else "k"


def plot(doc: dict[str, Any], path: str | Path, stat: str = "median") -> str:
    """Plot throughput against size, one line per implementation; return what was done.

    One panel per (kind, op) and dtype, log-log, with the copy bandwidth as a dashed line.
    Without matplotlib nothing is written and the returned note says so.
    """
    doc = with_stat(doc, stat)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot (pip install matplotlib)"
    groups = list(_groups(doc))
    dtypes = list(dict.fromkeys(row["dtype"] for row in doc["results"]))
    if not groups:
        return "no results to plot"
    fig, axes = plt.subplots(
        len(groups), len(dtypes), figsize=(6 * len(dtypes), 3.6 * len(groups)), squeeze=False
    )
    for (kind, op, rows), ax_row in zip(groups, axes):
        for dtype, ax in zip(dtypes, ax_row):
            for impl in _impls(rows):
                points = sorted(
                    (r["size"], r["gbps"])
                    for r in rows
                    if r["impl"] == impl and r["dtype"] == dtype
                )
                if points:
                    ax.plot(*zip(*points), marker="o", markersize=3, label=impl, color=_color(impl))
            if not ax.lines:  # no case of this kind for this dtype (halves: forward only)
                ax.set_visible(False)
                continue
            ax.axhline(doc["copy_gbps"], color="gray", linestyle="--", label="copy")
            ax.set(xscale="log", yscale="log", xlabel="elements", ylabel="GB/s")
            ax.set_title(f"{op} {kind.replace('_', '+')} {dtype}", fontsize=10)
            ax.grid(True, which="major", alpha=0.3)
            ax.legend(fontsize=7)
    fig.suptitle(f"pylucid bench: {doc['environment']['cpu_model']}", fontsize=11)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"wrote {path}"
