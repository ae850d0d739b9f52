"""Present a model benchmark (:mod:`pylucid.bench.models`): text and Markdown tables, a plot.

One table per mode: a row per model, a column per implementation (its median time per
training step, or what happened instead: ``raises``, ``fallback``, ``failed``,
``skipped``), pylucid eager's time over PyTorch eager's, and a ``busy``
column where other processes - the mode's own competitor left out - took more than
:data:`pylucid.bench.load.BUSY_SHARE` of the CPUs. Then the first steps' losses side by
side (all implementations start from the same weights on the same batch), the product
that dominates a GPT step in NumPy's BLAS and PyTorch's, and notes: why an implementation
was not timed, what compiling cost. The marks are :mod:`pylucid.bench.report`'s: ``~``
for a time whose batches spread more than :data:`~pylucid.bench.report.SPREAD_LIMIT`,
``!`` for a ratio beyond :data:`~pylucid.bench.report.PROGRAM_RATIO_LIMIT`. Plain-text
lines are at most :data:`~pylucid.bench.report.WIDTH` characters.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pylucid.bench.load import BUSY_SHARE
from pylucid.bench.report import (
    IMPLAUSIBLE,
    PROGRAM_RATIO_LIMIT,
    SPREAD_LIMIT,
    UNSTABLE,
    format_time,
    markdown_table,
    pyplot,
    spread,
    text_table,
    wrap,
)

__all__ = ["loss_table", "markdown", "mode_tables", "notes", "plot", "text"]


def _impls(doc: dict[str, Any]) -> list[str]:
    """The implementations with something to show: those some mode timed or did not
    time for a reason of its own (an implementation skipped everywhere - not installed -
    is a note only)."""
    shown = []
    for impl in doc["config"]["impls"]:
        outcomes = [
            mode["outcomes"].get(model, {}).get(impl, {})
            for mode in doc["modes"].values()
            for model in doc["config"]["models"]
        ]
        if any(o.get("status") not in (None, "skipped") for o in outcomes):
            shown.append(impl)
    return shown


def _unstable(row: dict[str, Any] | None) -> bool:
    return row is not None and (spread(row) or 1.0) > SPREAD_LIMIT


def _ratio(ours: dict[str, Any] | None, torch: dict[str, Any] | None, stat: str) -> str:
    if ours is None or torch is None:
        return "-"
    value = ours[f"{stat}_s"] / torch[f"{stat}_s"]
    text = f"{value:.2f}x" if value >= 0.1 else f"{value:.2g}x"
    if not 1 / PROGRAM_RATIO_LIMIT <= value <= PROGRAM_RATIO_LIMIT:
        return text + IMPLAUSIBLE
    return text + (UNSTABLE if _unstable(ours) or _unstable(torch) else "")


def _busy(mode: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """Other processes' share while a model was timed, less the mode's competitor's
    average share, where above :data:`BUSY_SHARE`."""
    shares = [r["others_cpu"] for r in rows if r.get("others_cpu") is not None]
    if not shares:
        return ""
    share = max(0.0, max(shares) - (mode.get("competitor_cpu") or 0.0))
    return f"{100 * share:.0f}%" if share > BUSY_SHARE else ""


def _mode_title(mode: dict[str, Any]) -> str:
    load = mode.get("load_average_before")
    parts = [f"Models, {mode['title']}"]
    facts = []
    if load:
        facts.append(f"load average {load[0]:.2f} at the start")
    if mode.get("others_cpu") is not None:
        facts.append(f"other processes took {100 * mode['others_cpu']:.0f}% of the CPUs")
    if mode.get("competitor_cpu") is not None:
        facts.append(f"the competitor {100 * mode['competitor_cpu']:.0f}%")
    return parts[0] + (f" ({'; '.join(facts)})" if facts else "")


def mode_tables(
    doc: dict[str, Any], stat: str = "median"
) -> Iterator[tuple[str, list[str], list[list[str]]]]:
    """One ``(title, header, body)`` per mode: a row per model, a column per implementation,
    pylucid eager's time over PyTorch eager's and the busy column (when some row has a
    share)."""
    impls = _impls(doc)
    for mode in doc["modes"].values():
        index = {(r["model"], r["impl"]): r for r in mode["rows"]}
        body = []
        for model in doc["config"]["models"]:
            outcomes = mode["outcomes"].get(model, {})
            cells = []
            for impl in impls:
                row = index.get((model, impl))
                if row is not None:
                    cells.append(
                        format_time(row[f"{stat}_s"]) + (UNSTABLE if _unstable(row) else "")
                    )
                else:
                    cells.append(outcomes.get(impl, {}).get("status", "-"))
            ratio = _ratio(index.get((model, "pylucid")), index.get((model, "torch")), stat)
            rows = [r for r in mode["rows"] if r["model"] == model]
            body.append([model, *cells, ratio, _busy(mode, rows)])
        header = ["model", *impls, "pylucid/torch", "busy"]
        if not any(line[-1] for line in body):
            header, body = header[:-1], [line[:-1] for line in body]
        yield _mode_title(mode), header, body


def _losses(doc: dict[str, Any]) -> dict[str, dict[str, list[float]]]:
    """Each model's first-step losses by implementation, over the modes."""
    found: dict[str, dict[str, list[float]]] = {}
    for mode in doc["modes"].values():
        for model, losses in mode["losses"].items():
            for impl, loss in losses.items():
                found.setdefault(model, {}).setdefault(impl, []).append(loss)
    return found


def loss_table(doc: dict[str, Any]) -> tuple[list[str], list[list[str]]] | None:
    """The first step's loss of every implementation (the first mode's), and the largest
    relative difference from PyTorch eager's (pylucid's without PyTorch) over every mode
    and implementation; None when no step ran."""
    found = _losses(doc)
    if not found:
        return None
    impls = [i for i in doc["config"]["impls"] if any(i in by for by in found.values())]
    body = []
    for model, by_impl in found.items():
        base = by_impl.get("torch", by_impl.get("pylucid", [None]))[0]
        worst = (
            max(
                (abs(v - base) / abs(base) for values in by_impl.values() for v in values),
                default=0.0,
            )
            if base
            else None
        )
        cells = [f"{by_impl[i][0]:.6g}" if i in by_impl else "-" for i in impls]
        body.append([model, *cells, "-" if worst is None else f"{worst:.1e}"])
    return ["model", *impls, "largest rel. diff"], body


def _products_line(mode: dict[str, Any]) -> str | None:
    products = mode.get("products")
    if not products:
        return None
    m, k, n = products["shape"]
    pools = (mode.get("threads_reported") or {}).get("threadpools") or []
    blas = next((p for p in pools if p.get("internal_api") in ("openblas", "mkl", "blis")), None)
    kind = f"{blas['internal_api']}, {blas.get('architecture') or 'its'} kernels" if blas else ""
    parts = []
    for name, label in (
        ("numpy", f"NumPy's BLAS ({kind})" if kind else "NumPy's BLAS"),
        ("torch", "PyTorch's"),
    ):
        seconds = products.get(f"{name}_s")
        if seconds:
            parts.append(
                f"{label} {format_time(seconds)} = {products['flops'] / seconds / 1e9:.0f} GFLOP/s"
            )
    return f"Product ({m}, {k}) @ ({k}, {n}) float32, as pylucid calls it: " + "; ".join(parts)


def _first_sentence(reason: str, most: int = 300) -> str:
    """The first sentence of ``reason``'s first line, at most ``most`` characters."""
    line = reason.strip().splitlines()[0] if reason.strip() else ""
    end = line.find(". ")
    sentence = line[: end + 1] if end >= 0 else line
    return sentence if len(sentence) <= most else sentence[: most - 3] + "..."


def notes(doc: dict[str, Any]) -> list[str]:
    """Why implementations were not timed (grouped over the modes), what the compiling
    ones' first calls cost (first mode), and the modes' failures."""
    lines = []
    grouped: dict[tuple[str, str, str], list[tuple[str, str]]] = {}
    for mode in doc["modes"].values():
        if mode.get("error"):
            lines.append(f"{mode['title']}: {mode['error']}")
        for model, outcomes in mode["outcomes"].items():
            for impl, outcome in outcomes.items():
                if outcome["status"] != "timed":
                    key = (impl, outcome["status"], _first_sentence(outcome["reason"]))
                    grouped.setdefault(key, []).append((model, mode["title"]))
    for (impl, status, reason), where in grouped.items():
        models = ", ".join(dict.fromkeys(model for model, _ in where))
        modes = list(dict.fromkeys(title for _, title in where))
        every = len(modes) == len(doc["modes"])
        lines.append(
            f"{impl} {status} ({models}; {'every mode' if every else ', '.join(modes)}): {reason}"
        )
    first = next(iter(doc["modes"].values()), None)
    if first is not None:
        for impl in ("torch.compile", "pl.compile", "jax.jit"):
            calls = [
                f"{model} "
                + " + ".join(f"{s:.2f}" for s in outcome["warmup_s"])
                + "".join(f" ({n})" for n in outcome.get("notes", []))
                for model, outcomes in first["outcomes"].items()
                if (outcome := outcomes.get(impl, {})).get("status") == "timed"
            ]
            if calls:
                lines.append(
                    f"{impl}'s untimed first calls (compiles, captures), {first['title']}, "
                    f"seconds: {'; '.join(calls)}"
                )
    return lines


def _environment_line(doc: dict[str, Any]) -> str:
    env = doc["environment"]
    first = next(iter(doc["modes"].values()), {})
    versions = ", ".join(
        f"{name} {version}" for name, version in (first.get("libraries") or {}).items() if version
    )
    openblas = first.get("env", {}).get("OPENBLAS_CORETYPE")
    blas = (
        f"OPENBLAS_CORETYPE={openblas} in the modes' processes"
        if openblas
        else "OPENBLAS_CORETYPE unset in the modes' processes"
    )
    return (
        f"{env['cpu_model']} ({env['cpu_count']} CPUs), Python {env['python']}, numpy "
        f"{env['numpy']}, numba {env['numba']}"
        + (f", {versions}" if versions else "")
        + f"; {blas}."
    )


def _legend(doc: dict[str, Any], stat: str) -> str:
    time = "Median" if stat == "median" else "Best (minimum)"
    return (
        f"{time} time per training step (the loss read back each step), the implementations "
        f"timed interleaved batch by batch in one fresh process per mode. pylucid.mlx: "
        f"pylucid on its gpu device (MLX; its CPU stream where there is no GPU). "
        f"pylucid/torch: pylucid eager's time over PyTorch eager's (below 1: pylucid is faster). "
        f"raises, fallback: pl.compile's capture raised, or its step ran eagerly (Notes)."
    )


def _marks(doc: dict[str, Any], stat: str) -> list[str]:
    lines = []
    rows = [r for mode in doc["modes"].values() for r in mode["rows"]]
    unstable = [r for r in rows if _unstable(r)]
    if unstable:
        worst = max(unstable, key=lambda r: spread(r) or 1.0)
        lines.append(
            f"{UNSTABLE} unstable: {len(unstable)} time(s) whose slowest batch took more than "
            f"{SPREAD_LIMIT:g}x the fastest; the widest: {worst['model']} {worst['impl']}, "
            f"{format_time(min(worst['samples_s']))} to {format_time(max(worst['samples_s']))}."
        )
    if any(
        IMPLAUSIBLE in cell
        for _, _, body in mode_tables(doc, stat)
        for line in body
        for cell in line
    ):
        lines.append(
            f"{IMPLAUSIBLE} implausible: a ratio beyond {PROGRAM_RATIO_LIMIT:g}x either "
            f"way: a compile or a stall was timed."
        )
    if any(line[-1].endswith("%") for _, _, body in mode_tables(doc, stat) for line in body):
        lines.append(
            f"busy: other processes' share of the CPUs while the model was timed, "
            f"less the mode's competitor's, where above {100 * BUSY_SHARE:.0f}%: "
            f"those times are pessimistic and noisy."
        )
    return lines


def text(doc: dict[str, Any], stat: str = "median") -> str:
    """The run as plain text, lines of at most 100 characters."""
    warning = (doc.get("busy") or {}).get("warning")
    parts = [wrap(f"WARNING: {warning}.")] if warning else []
    parts += [wrap(_environment_line(doc)), wrap(_legend(doc, stat))]
    for mode, (title, header, body) in zip(doc["modes"].values(), mode_tables(doc, stat)):
        product = _products_line(mode)
        parts.append(
            f"\n{wrap(title)}\n{text_table(header, body)}"
            + (f"\n{wrap(product)}" if product else "")
        )
    losses = loss_table(doc)
    if losses:
        title = "First step's loss (same weights, same batch; the first mode's)"
        parts.append(f"\n{title}\n{text_table(*losses)}")
    parts.append(
        "\nModels\n"
        + "\n".join(
            wrap(f"{name}: {model['description']}", "- ") for name, model in doc["models"].items()
        )
    )
    for heading, lines in (("Marks", _marks(doc, stat)), ("Notes", notes(doc))):
        if lines:
            parts.append(f"\n{heading}\n" + "\n".join(wrap(line, "- ") for line in lines))
    return "\n".join(parts)


def markdown(doc: dict[str, Any], stat: str = "median") -> str:
    """The run as Markdown."""
    parts = [
        f"Run {doc['created']}, `{doc['environment'].get('git') or 'unknown revision'}`"
        + (" (`--models --quick`)" if doc["config"]["quick"] else "")
        + f": {_environment_line(doc)}",
        "",
        _legend(doc, stat),
    ]
    warning = (doc.get("busy") or {}).get("warning")
    if warning:
        parts += ["", f"**Warning:** {warning}."]
    for mode, (title, header, body) in zip(doc["modes"].values(), mode_tables(doc, stat)):
        parts += ["", f"#### {title}", "", markdown_table(header, body)]
        product = _products_line(mode)
        if product:
            parts += ["", product + "."]
    losses = loss_table(doc)
    if losses:
        parts += ["", "#### First step's loss", "", markdown_table(*losses)]
    parts += ["", "Models:", ""]
    parts += [f"- `{name}`: {model['description']}" for name, model in doc["models"].items()]
    for heading, lines in (("Marks", _marks(doc, stat)), ("Notes", notes(doc))):
        if lines:
            parts += ["", f"{heading}:", ""] + [f"- {line}" for line in lines]
    return "\n".join(parts) + "\n"


def plot(
    doc: dict[str, Any], path: str | Path, stat: str = "median", saved: str | Path | None = None
) -> str:
    """Bars of the time per step, a panel per model (log scale), a group per mode and a
    bar per implementation; return what was done (without matplotlib: how to get it)."""
    plt, missing = pyplot(path, saved)
    if plt is None:
        return missing
    models = doc["config"]["models"]
    impls = _impls(doc)
    modes = list(doc["modes"].values())
    if not any(mode["rows"] for mode in modes):
        return "no results to plot"
    width, height = max(6.0, 0.6 * len(modes) * len(impls)), 2.8 * len(models) + 0.8
    fig, axes = plt.subplots(len(models), 1, figsize=(width, height), squeeze=False)
    # Fixed margins (in inches): tight_layout measures every tick label, half the time.
    fig.subplots_adjust(left=0.8 / width, right=1 - 0.2 / width, bottom=0.4 / height,
                        top=1 - 0.7 / height, hspace=0.55)  # fmt: skip
    bar = 0.8 / max(1, len(impls))
    for model, (ax,) in zip(models, axes):
        for j, impl in enumerate(impls):
            points = [
                (i + (j - (len(impls) - 1) / 2) * bar, r[f"{stat}_s"] * 1e3)
                for i, mode in enumerate(modes)
                for r in mode["rows"]
                if (r["model"], r["impl"]) == (model, impl)
            ]
            if points:
                ax.bar(*zip(*points), width=bar, label=impl, color=f"C{j}")
        ax.set_xticks(range(len(modes)), [mode["title"] for mode in modes], fontsize=8)
        ax.set_xlim(-0.5, len(modes) - 0.5)
        ax.set(yscale="log", ylabel="ms per step")
        ax.set_title(model, fontsize=10)
        ax.grid(True, axis="y", which="major", alpha=0.3)
        ax.legend(fontsize=7, ncol=len(impls))
    busy = (
        " (measured while the machine was busy)" if (doc.get("busy") or {}).get("warning") else ""
    )
    fig.suptitle(f"pylucid bench --models: {doc['environment']['cpu_model']}{busy}", fontsize=10)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return f"wrote {path}"
