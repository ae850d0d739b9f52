"""Present a run: text and Markdown tables, the headline comparisons, JSON and a PNG plot.

The per-op cases get one table per (op, kind): a row per (dtype, size), each
implementation's time per call and the speed-up of pylucid over NumPy and PyTorch (the
throughputs and fractions of the copy bandwidth of every row are in ``bench.json`` and the
plot). The program scenarios (:mod:`pylucid.bench.programs`) get one table per mode - a row
per scenario, a column per library and pylucid's time over PyTorch's - and the contention
check one of its own.

Plain-text lines are at most :data:`WIDTH` characters: a table wider than that is split
into several, each repeating the row's key columns, and paragraphs are wrapped (Markdown is
left to its renderer).

What a figure is worth is said next to it:

- a time whose batches spread widely (the slowest more than :data:`SPREAD_LIMIT` times the
  fastest) is marked :data:`UNSTABLE`, as is a ratio computed from one;
- a ratio beyond :data:`OP_RATIO_LIMIT` (an op) or :data:`PROGRAM_RATIO_LIMIT` (a program)
  either way is marked :data:`IMPLAUSIBLE` and listed under the tables: no sound
  measurement of this suite differs that much, so a compile or a stall was timed;
- a row timed while other processes used more than
  :data:`pylucid.bench.load.BUSY_SHARE` of the CPUs shows that share in a ``busy``
  column, and a busy machine is warned about at the top.

Everything here reads only the run's document (so a saved ``bench.json`` can be presented
again on another machine); matplotlib is imported only to plot.
"""

from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pylucid.bench.cases import ALL_IMPLS, HALF_DTYPES
from pylucid.bench.load import BUSY_SHARE

__all__ = [
    "IMPLAUSIBLE",
    "OP_RATIO_LIMIT",
    "PROGRAM_RATIO_LIMIT",
    "SPREAD_LIMIT",
    "UNSTABLE",
    "WIDTH",
    "flags",
    "format_size",
    "format_time",
    "headlines",
    "markdown",
    "markdown_table",
    "plot",
    "pyplot",
    "read_json",
    "spread",
    "text",
    "text_table",
    "with_stat",
    "wrap",
    "write_json",
]

#: Most characters in a line of the plain-text report.
WIDTH = 100
#: A row whose slowest timed batch took more than this many times its fastest is unstable.
SPREAD_LIMIT = 1.5
#: A ratio of an op's times (pylucid's against NumPy's or PyTorch's) beyond this, either
#: way, is implausible: at 10 elements, where per-call overhead is all there is, pylucid's
#: op takes 7 to 35 times NumPy's bare ufunc call; at 1e6 and more the libraries are
#: within 10x of each other.
OP_RATIO_LIMIT = 100.0
#: The same for a program scenario's pylucid / PyTorch: the widest sound one, a compiled
#: chain against PyTorch eager, is about 1 / 200.
PROGRAM_RATIO_LIMIT = 1000.0
#: The marks of unstable times and ratios, and of implausible ratios.
UNSTABLE = "~"
IMPLAUSIBLE = "!"


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


def spread(row: dict[str, Any]) -> float | None:
    """The slowest batch's time over the fastest's (None with fewer than two batches)."""
    samples = row.get("samples_s") or []
    if len(samples) < 2 or min(samples) <= 0:
        return None
    return max(samples) / min(samples)


def _unstable(*rows: dict[str, Any] | None) -> bool:
    return any(row is not None and (spread(row) or 1.0) > SPREAD_LIMIT for row in rows)


def _time_cell(row: dict[str, Any] | None) -> str:
    if row is None:
        return "-"
    return format_time(row["time_s"]) + (UNSTABLE if _unstable(row) else "")


def _implausible(value: float | None, limit: float) -> bool:
    return value is not None and value > 0 and not 1 / limit <= value <= limit


def _ratio_cell(value: float | None, limit: float, *rows: dict[str, Any] | None) -> str:
    """A ratio, marked implausible beyond ``limit`` either way, else unstable when a time
    it comes from is."""
    if value is None:
        return "-"
    if _implausible(value, limit):
        return _ratio(value) + IMPLAUSIBLE
    return _ratio(value) + (UNSTABLE if _unstable(*rows) else "")


def _busy_cell(share: float | None) -> str:
    return f"{100 * share:.0f}%" if share is not None and share > BUSY_SHARE else ""


def wrap(paragraph: str, bullet: str = "") -> str:
    """``paragraph`` wrapped to :data:`WIDTH` columns, after ``bullet`` (the following
    lines indented to match)."""
    return textwrap.fill(
        paragraph,
        WIDTH,
        initial_indent=bullet,
        subsequent_indent=" " * len(bullet),
        break_on_hyphens=False,
    )


def _split(
    header: list[str], body: list[list[str]], keys: int
) -> list[tuple[list[str], list[list[str]]]]:
    """The table's columns in groups that fit :data:`WIDTH` (two spaces between columns):
    each group the ``keys`` first columns, then as many of the next ones as fit (one at
    least)."""
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    groups: list[list[int]] = [[]]
    for column in range(keys, len(header)):
        wanted = [*range(keys), *groups[-1], column]
        if groups[-1] and sum(widths[i] for i in wanted) + 2 * (len(wanted) - 1) > WIDTH:
            groups.append([])
        groups[-1].append(column)
    chosen = [[*range(keys), *group] for group in groups]
    return [([header[i] for i in c], [[line[i] for i in c] for line in body]) for c in chosen]


def _aligned(header: list[str], body: list[list[str]]) -> str:
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths)) for line in [header, *body]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(line.rstrip() for line in lines)


def text_table(header: list[str], body: list[list[str]], keys: int = 1) -> str:
    """A plain-text table in columns of at most :data:`WIDTH` characters: split into
    several (a blank line between) that repeat the ``keys`` first columns if wider."""
    return "\n\n".join(_aligned(h, b) for h, b in _split(header, body, keys))


def markdown_table(header: list[str], body: list[list[str]]) -> str:
    """A Markdown table, whole: a renderer lays it out, however wide its source."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(line) + " |" for line in body]
    return "\n".join(lines)


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
    """One table per program mode: a row per scenario, a column per library, pylucid's time
    over PyTorch's, and the busy column when some row was timed on a busy machine."""
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
            cells = [_time_cell(index.get((scenario, name))) for name in libraries]
            ours, torch = index.get((scenario, "pylucid")), index.get((scenario, "torch"))
            ratio = ours["time_over_torch"] if ours else None
            busy = next(r.get("others_cpu") for r in rows if r["scenario"] == scenario)
            ratio_cell = _ratio_cell(ratio, PROGRAM_RATIO_LIMIT, ours, torch)
            body.append([scenario, unit, *cells, ratio_cell, _busy_cell(busy)])
        yield _without_empty_busy(title, ["scenario", "per", *libraries, "pylucid/torch", "busy"],
                                  body)  # fmt: skip


def _without_empty_busy(
    title: str, header: list[str], body: list[list[str]]
) -> tuple[str, list[str], list[list[str]]]:
    """The table without its last column, ``busy``, when no row was timed on a busy
    machine."""
    if any(line[-1] for line in body):
        return title, header, body
    return title, header[:-1], [line[:-1] for line in body]


def _contention_table(contention: dict[str, Any]) -> tuple[str, list[str], list[list[str]]]:
    """The contention check: per op, the ratios and the worst fresh process's medians."""
    n = contention["fresh_processes"]
    here = contention["in_process"]
    loaded = contention["libraries_loaded"]
    header = [
        "op",
        "here",
        "worst default",
        "worst 1 thread",
        f"worst ratio (<= {contention['ratio_target']:g})",
        f"loaded/plain (+-{100 * loaded['tolerance']:.0f}%)",
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


def _contention_legend(contention: dict[str, Any]) -> str:
    imported = contention["in_process"]["process"]["imported"]
    loaded = contention["libraries_loaded"]
    peers = "+".join(loaded["peers"]) or "torch+mlx"
    return (
        "here: the ratio in this process"
        + (f" ({' and '.join(imported)} imported)" if imported else "")
        + f"; worst: the highest medians and ratio over the "
        f"{_processes(contention['fresh_processes'])} started afresh; loaded/plain: fresh "
        f"processes with {peers} loaded and used over plain ones (default threads)."
    )


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


def _tables(doc: dict[str, Any]) -> Iterator[tuple[str, list[str], list[list[str]]]]:
    """One table per (op, kind): a row per (dtype, size), each implementation's time, the
    speed-ups of pylucid over NumPy and PyTorch, and the busy column when some row was
    timed on a busy machine."""
    for kind, op, rows in _groups(doc):
        impls = _impls(rows)
        index = {(r["dtype"], r["size"], r["impl"]): r for r in rows}
        bases = [base for base in ("numpy", "torch") if base in impls and "pylucid" in impls]
        body = []
        for dtype, size in dict.fromkeys((r["dtype"], r["size"]) for r in rows):
            found = {impl: index.get((dtype, size, impl)) for impl in impls}
            ours = found.get("pylucid")
            ratios = [
                _ratio_cell(ours and ours[f"vs_{base}"], OP_RATIO_LIMIT, ours, found[base])
                for base in bases
            ]
            busy = next(r.get("others_cpu") for r in found.values() if r is not None)
            cells = [_time_cell(found[impl]) for impl in impls]
            body.append([dtype, format_size(size), *cells, *ratios, _busy_cell(busy)])
        header = ["dtype", "size", *impls, *(f"vs {base}" for base in bases), "busy"]
        yield _without_empty_busy(f"{op} {kind.replace('_', '+')}", header, body)


def flags(doc: dict[str, Any], stat: str = "median") -> dict[str, list[dict[str, Any]]]:
    """The figures the tables mark, from the ``stat`` times.

    Returns
    -------
    dict
        ``unstable``: ``{where, impl, spread, min_s, max_s}`` for each time whose batches
        spread more than :data:`SPREAD_LIMIT` (``where``: the case or the scenario);
        ``implausible``: ``{where, ratio, value, pylucid_s, base, base_s}`` for each ratio
        beyond :data:`OP_RATIO_LIMIT` (an op) or :data:`PROGRAM_RATIO_LIMIT` (a program)
        either way.
    """
    doc = with_stat(doc, stat)
    timed = [
        (f"{r['op']} {r['kind'].replace('_', '+')} {r['dtype']} {format_size(r['size'])}", r)
        for r in doc["results"]
    ]
    programs = doc.get("programs") or {}
    for mode in PROGRAM_MODES:
        label = "" if mode == "same_process" else f" ({mode.replace('_', ' ')})"
        timed += [(f"{r['scenario']}{label}", {**r, "impl": r["library"]}) for r in
                  programs.get(mode) or []]  # fmt: skip
    unstable = [
        {
            "where": where,
            "impl": row["impl"],
            "spread": spread(row),
            "min_s": min(row["samples_s"]),
            "max_s": max(row["samples_s"]),
        }
        for where, row in timed
        if _unstable(row)
    ]
    index: dict[str, dict[str, dict[str, Any]]] = {}
    for where, row in timed:
        index.setdefault(where, {})[row["impl"]] = row
    implausible = []
    for where, rows in index.items():
        ours = rows.get("pylucid")
        if ours is None:
            continue
        if "time_over_torch" in ours:  # a program
            ratios = [("pylucid/torch", ours["time_over_torch"], "torch", PROGRAM_RATIO_LIMIT)]
        else:
            ratios = [(f"vs {b}", ours[f"vs_{b}"], b, OP_RATIO_LIMIT) for b in ("numpy", "torch")]
        implausible += [
            {
                "where": where,
                "ratio": name,
                "value": value,
                "pylucid_s": ours["time_s"],
                "base": base,
                "base_s": rows[base]["time_s"],
            }
            for name, value, base, limit in ratios
            if _implausible(value, limit)
        ]
    return {"unstable": unstable, "implausible": implausible}


def _marks(doc: dict[str, Any]) -> list[str]:
    """The footnotes of the marks the tables carry, for ``doc`` (with its stat)."""
    found = flags(doc, doc["stat"])
    lines = []
    if found["unstable"]:
        worst = max(found["unstable"], key=lambda flag: flag["spread"])
        lines.append(
            f"{UNSTABLE} unstable: {len(found['unstable'])} time(s) whose slowest batch took "
            f"more than {SPREAD_LIMIT:g}x the fastest (and the ratios from them), so the "
            f"figure is uncertain; the widest: {worst['where']}, {worst['impl']}, batches "
            f"{format_time(worst['min_s'])} to {format_time(worst['max_s'])} "
            f"({worst['spread']:.1f}x). Every batch's time is in bench.json (samples_s); "
            f"--stat min shows the best batches."
        )
    if found["implausible"]:
        listed = "; ".join(
            f"{flag['where']}: {flag['ratio']} {_ratio(flag['value'])} (pylucid "
            f"{format_time(flag['pylucid_s'])}, {flag['base']} {format_time(flag['base_s'])})"
            for flag in found["implausible"]
        )
        lines.append(
            f"{IMPLAUSIBLE} implausible: a ratio beyond {OP_RATIO_LIMIT:g}x either way for an "
            f"op, {PROGRAM_RATIO_LIMIT:g}x for a program, which no sound measurement of this "
            f"suite reaches: a compile, or a library whose threads waited for busy CPUs, was "
            f"timed. Rerun on a quieter machine before believing {listed}."
        )
    if _any_busy(doc):
        lines.append(
            f"busy: the share of the CPUs other processes used while the row was timed, where "
            f"it was above {100 * BUSY_SHARE:.0f}% (every row's is in bench.json, others_cpu): "
            f"those times are pessimistic and noisy."
        )
    return lines


def _any_busy(doc: dict[str, Any]) -> bool:
    programs = doc.get("programs") or {}
    rows = doc["results"] + [r for mode in PROGRAM_MODES for r in programs.get(mode) or []]
    return any(_busy_cell(r.get("others_cpu")) for r in rows)


def _find(doc: dict[str, Any], **where: Any) -> dict[str, Any] | None:
    for row in doc["results"]:
        if all(row.get(key) == value for key, value in where.items()):
            return row
    return None


def headlines(doc: dict[str, Any], stat: str = "median") -> list[str]:
    """The comparisons the suite exists for, as sentences (for the first op of the run);
    times and ratios carry the tables' marks."""
    doc = with_stat(doc, stat)
    if not doc["results"]:
        return []
    op = doc["results"][0]["op"]
    sizes = sorted({row["size"] for row in doc["results"]})
    lines = []

    def row(kind: str, dtype: str, size: int, impl: str) -> dict[str, Any] | None:
        return _find(doc, kind=kind, op=op, dtype=dtype, size=size, impl=impl)

    def vs(ours: dict[str, Any], base: str) -> str:
        """``ours``'s speed-up over ``base``, marked as in the tables."""
        theirs = row(ours["kind"], ours["dtype"], ours["size"], base)
        return _ratio_cell(ours[f"vs_{base}"], OP_RATIO_LIMIT, ours, theirs)

    for dtype in ("float32", "float64"):
        for size in (s for s in sizes if s in (1_000_000, 10_000_000)):
            ours = row("forward", dtype, size, "pylucid")
            if ours is None:
                continue
            kernel = row("forward", dtype, size, "pylucid.kernel")
            text = (
                f"{op} forward {dtype} {format_size(size)}: pylucid {_time_cell(ours)}"
                f" = {vs(ours, 'numpy')} NumPy, {vs(ours, 'torch')} torch"
            )
            if kernel is not None:
                text += f" (kernel alone {vs(kernel, 'numpy')} NumPy)"
            lines.append(text)
    for dtype in HALF_DTYPES:
        for size in (s for s in sizes if s in (1_000_000, 10_000_000)):
            ours = row("forward", dtype, size, "pylucid")
            if ours is None:
                continue
            text = (
                f"{op} forward {dtype} {format_size(size)}: pylucid {_time_cell(ours)}"
                f" = {vs(ours, 'numpy')} NumPy's astype(float32) -> {op} -> astype chain"
            )
            if ours["vs_torch"] is not None:
                text += f", {vs(ours, 'torch')} torch"
            autocast = row("forward", dtype, size, "pylucid.autocast")
            if autocast is not None:
                text += (
                    f"; under autocast (float32 result) {_time_cell(autocast)} = "
                    f"{vs(autocast, 'numpy')}"
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
                    f"{_time_cell(kernel)} = {vs(kernel, 'numpy')} NumPy's "
                    f"formula, {100 * kernel['bandwidth_fraction']:.0f}% of copy bandwidth"
                )
    for size in (s for s in sizes if s < 1000):
        ours = row("forward_backward", "float32", size, "pylucid")
        torch = row("forward_backward", "float32", size, "torch")
        if ours is not None:
            text = f"{op} forward+backward float32, {size} element(s): pylucid {_time_cell(ours)}"
            if torch is not None:
                text += (
                    f", PyTorch autograd {_time_cell(torch)} "
                    f"(pylucid {vs(ours, 'torch')} torch)"
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
    time = "Median time per call" if stat == "median" else "Best (minimum) time per call"
    return (
        f"{time}; vs numpy, vs torch: that library's time over pylucid's (above 1: pylucid "
        f"is faster). Throughputs and fractions of the copy bandwidth: bench.json and the "
        f"plot."
    )


def text(doc: dict[str, Any], stat: str = "median") -> str:
    """The run as plain-text tables for a terminal, from the ``stat`` times; no line is
    longer than :data:`WIDTH`."""
    doc = with_stat(doc, stat)
    warning = _busy_warning(doc)
    parts = [wrap(f"WARNING: {warning}.")] if warning else []
    parts.append(wrap(_environment_line(doc)))
    if doc["results"]:
        parts += [wrap(_bandwidth_line(doc)), wrap(_legend(doc["stat"]))]
    for title, header, body in _tables(doc):
        parts.append(f"\n{title}\n{text_table(header, body, keys=2)}")
    for index, (title, header, body) in enumerate(_program_tables(doc)):
        legend = f"{wrap(_programs_legend(doc['programs'], doc['stat']))}\n" if index == 0 else ""
        parts.append(f"\n{wrap(title)}\n{legend}{text_table(header, body, keys=2)}")
    contention = (doc.get("programs") or {}).get("contention")
    if contention:
        title, header, body = _contention_table(contention)
        parts.append(
            f"\n{wrap(title)}\n{wrap(_contention_legend(contention))}\n"
            f"{text_table(header, body)}\n{wrap(_contention_verdict(contention))}"
        )
    if doc.get("jit") and "error" not in doc["jit"]:
        parts.append(
            "\nJIT cost\n" + text_table(["", "warm cache", "empty cache"], _jit_rows(doc["jit"]))
        )
    marks = _marks(doc)
    if marks:
        parts.append("\nMarks\n" + "\n".join(wrap(line, "- ") for line in marks))
    summary = headlines(doc, doc["stat"])
    if summary:
        parts.append("\nHeadlines\n" + "\n".join(wrap(line, "- ") for line in summary))
    notes = _notes(doc)
    if notes:
        parts.append("\nNotes\n" + "\n".join(wrap(line, "- ") for line in notes))
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
        parts += ["", f"#### {title}", "", markdown_table(header, body)]
    for index, (title, header, body) in enumerate(_program_tables(doc)):
        legend = ["", _programs_legend(doc["programs"], doc["stat"])] if index == 0 else []
        parts += ["", f"#### {title}", *legend, "", markdown_table(header, body)]
    contention = (doc.get("programs") or {}).get("contention")
    if contention:
        title, header, body = _contention_table(contention)
        parts += ["", f"#### {title}", "", _contention_legend(contention), ""]
        parts += [markdown_table(header, body), "", _contention_verdict(contention)]
    if doc.get("jit") and "error" not in doc["jit"]:
        parts += [
            "",
            "#### JIT cost (fresh processes)",
            "",
            markdown_table(["", "warm cache", "empty cache"], _jit_rows(doc["jit"])),
        ]
    marks = _marks(doc)
    if marks:
        parts += ["", "Marks:", ""] + [f"- {line}" for line in marks]
    notes = _notes(doc)
    if notes:
        parts += ["", "Notes:", ""] + [f"- {line}" for line in notes]
    return "\n".join(parts) + "\n"


def _color(impl: str) -> str:
    """The same colour for an implementation in every panel."""
    return f"C{ALL_IMPLS.index(impl)}" if impl in ALL_IMPLS else "k"


def pyplot(path: str | Path, saved: str | Path | None) -> tuple[Any, str]:
    """``matplotlib.pyplot`` on its file-only backend and ``""``, or None and the note that
    says the plot ``path`` needs matplotlib (and, with ``saved``, the run's ``bench.json``,
    how to draw it later)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        again = (
            f", then `python -m pylucid bench --load {saved}` draws it from this run"
            if saved is not None
            else ""
        )
        return None, (
            f"no plot: {path} needs matplotlib (pip install 'pylucid[bench]', or matplotlib "
            f"alone){again}"
        )
    return plt, ""


def plot(
    doc: dict[str, Any], path: str | Path, stat: str = "median", saved: str | Path | None = None
) -> str:
    """Plot throughput against size, one line per implementation; return what was done.

    One panel per (kind, op) and dtype, log-log, with the copy bandwidth as a dashed line.
    Without matplotlib nothing is written and the returned note says where the plot would
    have been and how to get it (from ``saved``, the run's ``bench.json``, if given).
    """
    doc = with_stat(doc, stat)
    plt, missing = pyplot(path, saved)
    if plt is None:
        return missing
    groups = list(_groups(doc))
    dtypes = list(dict.fromkeys(row["dtype"] for row in doc["results"]))
    if not groups:
        return "no results to plot"
    width, height = 6 * len(dtypes), 3.6 * len(groups) + 0.4
    fig, axes = plt.subplots(len(groups), len(dtypes), figsize=(width, height), squeeze=False)
    # Fixed margins (in inches): tight_layout measures every tick label, half the time.
    fig.subplots_adjust(left=0.8 / width, right=1 - 0.2 / width, bottom=0.6 / height,
                        top=1 - 0.7 / height, wspace=0.25, hspace=0.45)  # fmt: skip
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
    busy = " (measured while the machine was busy)" if _busy_warning(doc) else ""
    fig.suptitle(f"pylucid bench: {doc['environment']['cpu_model']}{busy}", fontsize=11)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"wrote {path}"
