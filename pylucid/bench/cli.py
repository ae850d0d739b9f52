"""``python -m pylucid bench``: run the suite, print its tables, write JSON and a plot.

Progress goes to stderr, the tables (plain text in lines of at most 100 characters, or
Markdown with ``--markdown``) to stdout; ``DIR/bench.json`` (every row's details: each
batch's time, throughputs, the share of the CPUs other processes took) and, with matplotlib
(``pip install 'pylucid[bench]'``), ``DIR/bench.png`` are written (``--out DIR``, default
``bench-results/``). ``--load FILE`` presents a saved run without running anything.

``--quick`` is a first look; its option below says what it runs and how long it takes.

The program scenarios (:mod:`pylucid.bench.programs`) run after the per-op cases, all
libraries in this process; ``--programs`` runs them alone, ``--no-programs`` not at all;
``--isolated`` also times each library in a fresh process of its own, ``--contention`` adds
the contention check (a competing CPU-bound process, ``--fresh-processes N`` fresh ones).
``--distributed`` runs only the distributed benchmark (:mod:`pylucid.bench.distributed`:
all-reduce on 2 local ranks, pylucid against mpi4py and MLX's ring, and the step-time model).
``--models [MODEL ...]`` runs only the model benchmark (:mod:`pylucid.bench.models`: whole
training steps of a GPT at two sizes, a CNN and a character-level LSTM, pylucid eager, on MLX
and through ``pl.compile`` against PyTorch eager, ``torch.compile`` and ``jax.jit``, at 1
thread, 2 threads and 2 threads beside a competing process, each mode in a fresh process);
with ``--quick``, the small GPT and the CNN at 1 thread. ``--native-openblas`` unsets
``OPENBLAS_CORETYPE`` and ``OPENBLAS_L2_SIZE`` in its processes.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pylucid.bench.models import ModelsConfig
    from pylucid.bench.runner import Config

__all__ = [
    "BEGIN",
    "END",
    "QUICK_PROMISE",
    "add_arguments",
    "config_from_args",
    "main",
    "models_config_from_args",
    "write_doc",
]

#: How long ``--quick`` takes: measured from a fresh copy of the code on the 2-core
#: development VM, PyTorch and MLX installed, while other work kept its 1-minute load
#: average between 2.5 and 7.5 (the first run compiles the kernels it uses into Numba's
#: cache).
QUICK_PROMISE = (
    "under 30 s once Numba's cache is warm, under a minute on the first run, which compiles "
    "its kernels (11-25 s and 18-45 s on 2 shared cores)"
)

#: The markers around the generated results in a Markdown file (``--write-doc``).
BEGIN = "<!-- bench:begin -->"
END = "<!-- bench:end -->"


def _size(text: str) -> int:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 1000, 1e6, 6.4e7)") from None
    if value < 1 or value != int(value):
        raise argparse.ArgumentTypeError(f"a size is a positive whole number, not {text!r}")
    return int(value)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``bench`` options to ``parser``."""
    from pylucid.bench.cases import ALL_DTYPES, ALL_IMPLS, DEFAULT_IMPLS, KINDS
    from pylucid.bench.models import MODELS, QUICK_MODELS
    from pylucid.bench.models import QUICK_PROMISE as MODELS_QUICK_PROMISE
    from pylucid.bench.programs import SCENARIOS

    parser.add_argument(
        "--quick",
        action="store_true",
        help="a first look: log2 forward, backward and both in float32 and float64 at 10 "
        "and 1e6 elements; the op chains eager and compiled and an MLP step; 20 ms batches, "
        f"no JIT probe. It takes {QUICK_PROMISE}",
    )
    parser.add_argument(
        "--sizes", nargs="+", type=_size, metavar="N", help="element counts, e.g. 1e3 1e6 6.4e7"
    )
    parser.add_argument(
        "--dtypes",
        nargs="+",
        choices=ALL_DTYPES,
        help="default: all (float16 and bfloat16 are timed forward only)",
    )
    parser.add_argument(
        "--ops", nargs="+", metavar="OP", help="op names, or 'all' (default: log2; see --list)"
    )
    parser.add_argument("--kinds", nargs="+", choices=KINDS, help="default: all three")
    parser.add_argument(
        "--impls",
        nargs="+",
        choices=ALL_IMPLS,
        help=f"implementations to time (default: {' '.join(DEFAULT_IMPLS)})",
    )
    parser.add_argument("--threads", type=int, help="Numba and PyTorch threads (default: 2)")
    parser.add_argument("--repeats", type=int, help="timed batches per implementation")
    parser.add_argument("--batch-time", type=float, metavar="S", help="seconds per timed batch")
    parser.add_argument(
        "--jit",
        action=argparse.BooleanOptionalAction,
        help="the JIT cost probes in fresh processes, which compile a kernel with an empty "
        "cache (default: on, off with --quick)",
    )
    parser.add_argument("--no-plot", action="store_true", help="do not write bench.png")
    parser.add_argument(
        "--out", type=Path, default=Path("bench-results"), help="output folder (bench-results/)"
    )
    parser.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    parser.add_argument(
        "--stat",
        choices=("median", "min"),
        default="median",
        help="time shown in tables and plot: median (default) or min (better on a busy machine)",
    )
    parser.add_argument(
        "--load", type=Path, metavar="JSON", help="present a saved bench.json instead of running"
    )
    parser.add_argument(
        "--write-doc",
        type=Path,
        metavar="MD",
        help=f"replace the text between {BEGIN} and {END} in MD with the Markdown report",
    )
    parser.add_argument(
        "--list", action="store_true", help="list the ops the suite can time and exit"
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--programs",
        action="store_true",
        help="run only the program scenarios (no per-op cases, copy bandwidth or JIT probe)",
    )
    which.add_argument("--no-programs", action="store_true", help="skip the program scenarios")
    which.add_argument(
        "--distributed",
        action="store_true",
        help="run only the distributed benchmark: all_reduce on 2 local ranks (pylucid, "
        "mpi4py, MLX's ring) and the step-time model for N machines",
    )
    which.add_argument(
        "--models",
        nargs="*",
        choices=tuple(MODELS),
        metavar="MODEL",
        help="run only the model benchmark: whole training steps of "
        f"{', '.join(MODELS)} (default: all), pylucid eager, on MLX and through pl.compile "
        "against torch eager, torch.compile and jax.jit, at 1 thread, 2 threads and 2 threads "
        "beside a competing process, each mode in a fresh process. With --quick: "
        f"{' and '.join(QUICK_MODELS)} at 1 thread, without MLX; it takes "
        f"{MODELS_QUICK_PROMISE}",
    )
    parser.add_argument(
        "--native-openblas",
        action="store_true",
        help="with --models: unset OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE in the benchmark's "
        "own processes (as on a machine that does not set them); this one keeps them",
    )
    parser.add_argument(
        "--scenarios",
        nargs="+",
        choices=tuple(SCENARIOS),
        metavar="NAME",
        help=f"program scenarios to run: {', '.join(SCENARIOS)} (default: all)",
    )
    parser.add_argument(
        "--compile-times",
        action="store_true",
        help="also time the first calls of the pl.compile scenarios in fresh processes, with "
        "an empty cache of generated code and with a warm one",
    )
    parser.add_argument(
        "--isolated",
        action="store_true",
        help="also time each library's scenarios in a fresh process that imports it alone",
    )
    parser.add_argument(
        "--contention",
        action="store_true",
        help="also run the contention check: ops with a competing CPU-bound process running",
    )
    parser.add_argument(
        "--fresh-processes",
        type=int,
        metavar="N",
        help="fresh processes of the contention check (default: 6)",
    )


def _list_ops() -> str:
    from pylucid.bench.cases import NUMPY_GRADIENTS, benchmark_ops, load_libraries

    libs = load_libraries(("torch", "mlx"))
    lines = []
    for name, op in benchmark_ops().items():
        found = [
            f"{fn.__module__}.{fn.__name__}"
            for modules in (libs.torch_modules, libs.mlx_modules)
            if (fn := op.library_fn(modules)) is not None
        ]
        grad = "numpy gradient" if name in NUMPY_GRADIENTS else "no numpy gradient"
        lines.append(f"{name}: {', '.join(found) or 'pylucid and numpy only'}; {grad}")
    return "\n".join(lines)


def write_doc(path: Path, generated: str) -> None:
    """Replace what lies between :data:`BEGIN` and :data:`END` in ``path`` by ``generated``."""
    text = path.read_text()
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{path} has no {BEGIN} ... {END} section to replace")
    path.write_text(f"{text[: start + len(BEGIN)]}\n{generated}{text[end:]}")


def config_from_args(args: argparse.Namespace) -> Config:
    """The :class:`~pylucid.bench.runner.Config` that ``args`` ask for: the full or the
    ``--quick`` configuration, with the options given replacing its fields."""
    from pylucid.bench.runner import Config

    config = Config.quick_config() if args.quick else Config()
    fields = {
        "sizes": tuple(args.sizes) if args.sizes else None,
        "dtypes": tuple(args.dtypes) if args.dtypes else None,
        "ops": tuple(args.ops) if args.ops else None,
        "kinds": tuple(args.kinds) if args.kinds else None,
        "impls": tuple(args.impls) if args.impls else None,
        "threads": args.threads,
        "jit": args.jit,
        "cases": False if args.programs or args.distributed else None,
        "scenarios": ()
        if args.no_programs or args.distributed
        else args.scenarios and tuple(args.scenarios),
        "program_modes": ("same_process",)
        + (("isolated",) if args.isolated else ())
        + (("contention",) if args.contention else ()),
        "fresh_processes": args.fresh_processes,
    }
    config = replace(config, **{k: v for k, v in fields.items() if v is not None})
    timer = {"repeats": args.repeats, "target_s": args.batch_time}
    timer = {k: v for k, v in timer.items() if v is not None}
    if timer:
        config = replace(config, timer=replace(config.timer, **timer))
    return config


def main(args: argparse.Namespace) -> int:
    """Run (or load) and present the benchmarks as ``args`` say."""
    from pylucid.bench import compiled, distributed, model_report, models, report
    from pylucid.bench.runner import run

    if args.list:
        print(_list_ops())
        return 0
    if args.write_doc is not None:
        text = args.write_doc.read_text() if args.write_doc.is_file() else ""
        if not 0 <= text.find(BEGIN) < text.find(END):
            print(f"bench: {args.write_doc} has no {BEGIN} ... {END} section", file=sys.stderr)
            return 2
    if (args.no_programs or args.distributed) and (args.isolated or args.contention):
        print(
            "bench: --isolated and --contention need the programs (no --no-programs or "
            "--distributed)",
            file=sys.stderr,
        )
        return 2
    if args.native_openblas and args.models is None:
        print("bench: --native-openblas goes with --models", file=sys.stderr)
        return 2
    if args.models is not None and (args.isolated or args.contention or args.compile_times):
        print(
            "bench: --models runs alone (no --isolated, --contention or --compile-times)",
            file=sys.stderr,
        )
        return 2
    if args.load is not None:
        doc, saved = report.read_json(args.load), args.load
    elif args.models is not None:
        doc = models.run(models_config_from_args(args), progress=sys.stderr)
        saved = report.write_json(doc, args.out / "bench.json")
        print(f"wrote {saved} ({doc['elapsed_s']:.0f} s)", file=sys.stderr)
    else:
        config = config_from_args(args)
        try:
            doc = run(config, progress=sys.stderr)
        except ValueError as exc:
            print(f"bench: {exc}", file=sys.stderr)
            return 2
        if args.distributed:
            doc["distributed"] = distributed.run(threads=config.threads, progress=sys.stderr)
            doc["elapsed_s"] += doc["distributed"]["elapsed_s"]
        if args.compile_times:
            doc["compile_times"] = compiled.compile_times()
        saved = report.write_json(doc, args.out / "bench.json")
        print(f"wrote {saved} ({doc['elapsed_s']:.0f} s)", file=sys.stderr)
    if not args.no_plot:
        draw = model_report.plot if doc["schema"] == models.SCHEMA else report.plot
        print(draw(doc, args.out / "bench.png", args.stat, saved), file=sys.stderr)
    if args.write_doc is not None:
        write_doc(args.write_doc, _markdown(doc, args.stat))
        print(f"updated {args.write_doc}", file=sys.stderr)
    print(_markdown(doc, args.stat) if args.markdown else _text(doc, args.stat))
    return 0


def models_config_from_args(args: argparse.Namespace) -> ModelsConfig:
    """The :class:`~pylucid.bench.models.ModelsConfig` that ``args`` ask for: all models
    (or those named after ``--models``) in every mode, or ``--quick``'s plan."""
    from pylucid.bench.models import ModelsConfig

    config = ModelsConfig.quick_config() if args.quick else ModelsConfig()
    fields: dict[str, Any] = {"native_openblas": args.native_openblas}
    if args.models:
        fields["models"] = tuple(args.models)
    timer = {"repeats": args.repeats, "target_s": args.batch_time}
    timer = {k: v for k, v in timer.items() if v is not None}
    if timer:
        fields["timer"] = replace(config.timer, **timer)
    return replace(config, **fields)


def _markdown(doc: dict[str, Any], stat: str) -> str:
    """The report of ``doc`` as Markdown, with its distributed section's (if any)."""
    from pylucid.bench import compiled, distributed, model_report, models, report

    if doc["schema"] == models.SCHEMA:
        return model_report.markdown(doc, stat)
    section = doc.get("distributed")
    extra = f"\n{distributed.markdown(section, stat)}" if section else ""
    if "compile_times" in doc:
        extra += f"\n{compiled.times_markdown(doc['compile_times'])}"
    return report.markdown(doc, stat) + extra


def _text(doc: dict[str, Any], stat: str) -> str:
    """The report of ``doc`` as plain text, with its distributed section's (if any)."""
    from pylucid.bench import compiled, distributed, model_report, models, report

    if doc["schema"] == models.SCHEMA:
        return model_report.text(doc, stat)
    section = doc.get("distributed")
    extra = distributed.text(section, stat) if section else ""
    if "compile_times" in doc:
        extra += f"\n{compiled.times_markdown(doc['compile_times'])}"
    return report.text(doc, stat) + extra
