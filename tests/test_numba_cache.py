"""Numba's kernel cache (pylucid.kernels.jit): a corrupt cache file, an unwritable cache
directory or no cache location at all cost a recompilation and one warning, never a failure.

Every test runs pylucid in a subprocess with its own cache directory (``NUMBA_CACHE_DIR``
under ``tmp_path``, or a copy of the package): the checkout's shared cache is never touched.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import pylucid

#: Calls two kernels (one index file, two data files) and reports the values and the
#: NumbaCacheWarnings, every one of them (``always``: the once-per-process rule is ours).
_OPS_SCRIPT = """
import json, sys, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import pylucid as pl
    from pylucid.kernels.jit import NumbaCacheWarning
    x = pl.tensor([1.0, 2.0, 8.0])
    values = [pl.log2(x).tolist(), pl.exp(x).tolist()]
    if len(sys.argv) > 1:  # replace the cache directory by a file: saving must fail
        import shutil
        shutil.rmtree(sys.argv[1])
        open(sys.argv[1], "w").close()
        # (a new overload of a kernel that has run: its cache, made when the kernel first
        # loaded, is in that directory; a kernel not run yet makes its cache on first use,
        # wherever Numba then finds a writable directory)
        values.append(pl.exp(x.double()).tolist())
ours = [str(w.message) for w in caught if issubclass(w.category, NumbaCacheWarning)]
print(json.dumps({"values": values, "warnings": ours}))
"""

_X = np.array([1.0, 2.0, 8.0], np.float32)
_EXPECTED = [np.log2(_X), np.exp(_X), np.exp(_X.astype(np.float64))]


def _run_ops(cache_dir: Path, *args: str) -> list[str]:
    """Run :data:`_OPS_SCRIPT` with ``cache_dir`` as the cache; check it succeeded and its
    values; return its NumbaCacheWarnings."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache_dir))
    result = subprocess.run(
        [sys.executable, "-c", _OPS_SCRIPT, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.splitlines()[-1])
    assert len(report["values"]) == 2 + len(args)
    for got, expected in zip(report["values"], _EXPECTED):
        np.testing.assert_allclose(got, expected, rtol=1e-6)
    return report["warnings"]


def _files(cache_dir: Path) -> dict[Path, tuple[int, int]]:
    return {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in cache_dir.rglob("*.nb?")}


@pytest.fixture(scope="module")
def warm_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache directory holding the kernels of :data:`_OPS_SCRIPT` (copied by each test)."""
    cache_dir = tmp_path_factory.mktemp("warm") / "cache"
    assert _run_ops(cache_dir) == []
    assert any(cache_dir.rglob("*.nbi")) and any(cache_dir.rglob("*.nbc"))
    return cache_dir


_CORRUPTIONS = {
    "truncated": lambda data: data[: len(data) // 2],
    "empty": lambda data: b"",
    "random": lambda data: np.random.default_rng(7).bytes(max(len(data), 64)),
}


@pytest.mark.parametrize("kind", list(_CORRUPTIONS))
@pytest.mark.parametrize("suffix", ["nbi", "nbc"], ids=["index", "data"])
def test_corrupt_cache_file_is_recompiled_and_repaired(
    warm_cache: Path, tmp_path: Path, suffix: str, kind: str
) -> None:
    """The process that meets the corrupt file computes correctly, warns once naming the
    cache directory and rewrites the file; the next one loads every kernel from the cache
    (no file changes) without a warning."""
    cache_dir = tmp_path / "cache"
    shutil.copytree(warm_cache, cache_dir)
    # (exp's loop: a kernel the script loads on every machine; log2's AVX-512 chunk, first in
    # order, is compiled into its caller and its own file never read back)
    victim = sorted(cache_dir.rglob(f"loops.*.{suffix}"))[0]
    victim.write_bytes(_CORRUPTIONS[kind](victim.read_bytes()))

    warnings = _run_ops(cache_dir)
    assert len(warnings) == 1, warnings
    assert str(victim.parent) in warnings[0] and "corrupt" in warnings[0]
    assert victim.exists()  # rewritten

    before = _files(cache_dir)
    assert _run_ops(cache_dir) == []
    assert _files(cache_dir) == before  # every kernel loaded, none compiled and saved again


def test_unwritable_cache_directory_warns_once(warm_cache: Path, tmp_path: Path) -> None:
    """A kernel's overload compiled after its cache directory became unwritable (a file now
    stands in its place) is computed and not saved, with one warning."""
    cache_dir = tmp_path / "cache"
    shutil.copytree(warm_cache, cache_dir)
    (kernels_dir,) = {p.parent for p in cache_dir.rglob("*.nbi")}  # (the kernels' directory)
    warnings = _run_ops(cache_dir, str(kernels_dir))
    assert len(warnings) == 1, warnings
    assert str(kernels_dir) in warnings[0] and "NUMBA_CACHE_DIR" in warnings[0]


_EAGER_MODULE = """
from pylucid.kernels.jit import njit


@njit("float64(float64)", cache=True, error_model="numpy")
def twice(x):
    return 2.0 * x
"""


def test_eager_signatures_are_cached(tmp_path: Path) -> None:
    """``njit(signature, cache=True)`` compiles at decoration, through the cache: the second
    process loads it."""
    (tmp_path / "eager_module.py").write_text(_EAGER_MODULE)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"), PYTHONPATH=str(tmp_path))
    script = "import eager_module as m; print(m.twice(1.5), sum(m.twice.stats.cache_hits.values()))"
    runs = [
        subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
        )
        for _ in range(2)
    ]
    assert [r.stdout.split() for r in runs] == [["3.0", "0"], ["3.0", "1"]], runs[-1].stderr


def test_no_cache_location_still_imports(tmp_path: Path) -> None:
    """No locator Numba tries can write (a package whose ``__pycache__`` directories are
    files, HOME and XDG_CACHE_HOME under a file, NUMBA_CACHE_DIR unset, then under a file):
    pylucid imports and computes, with one warning naming NUMBA_CACHE_DIR. Paths under a
    regular file cannot be created even by root, unlike read-only directories."""
    root = tmp_path / "site"
    package = root / "pylucid"
    shutil.copytree(
        Path(pylucid.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__")
    )
    for directory in [package, *(p for p in package.rglob("*") if p.is_dir())]:
        (directory / "__pycache__").touch()
    blocker = tmp_path / "a-file"
    blocker.touch()
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env.update(
        HOME=str(blocker / "home"),
        XDG_CACHE_HOME=str(blocker / "cache"),
        PYTHONPATH=str(root),
        PYTHONDONTWRITEBYTECODE="1",
    )
    command = "import pylucid as pl; print(pl.log2(pl.tensor([8.0])).item()); print(pl.__file__)"
    for cache_dir in (None, blocker / "numba-cache"):
        if cache_dir is not None:
            env["NUMBA_CACHE_DIR"] = str(cache_dir)
        result = subprocess.run(
            [sys.executable, "-W", "always", "-c", command],
            env=env,
            cwd=root,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        assert result.stdout.split() == ["3.0", str(package / "__init__.py")]
        ours = [line for line in result.stderr.splitlines() if "NumbaCacheWarning: " in line]
        assert len(ours) == 1, result.stderr[-3000:]
        assert "NUMBA_CACHE_DIR" in ours[0]


def test_a_kernels_cache_stamp_covers_every_kernel_source(tmp_path: Path) -> None:
    """Numba stamps an entry with its function's file only; pylucid's stamp also carries a
    digest of every kernel source, so a kernel whose inlined helpers (simd_math, half)
    changed is recompiled rather than loaded stale."""
    from pylucid.kernels import jit

    @jit.njit(cache=True)
    def double(x):  # pragma: no cover - compiled
        return x * 2

    stamp = double._cache._cache_file._source_stamp
    assert stamp[1] == jit.kernel_sources_digest()
    copy = tmp_path / "kernels"
    shutil.copytree(Path(jit.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "simd_math.py").write_text((copy / "simd_math.py").read_text() + "\n# changed\n")
    jit.kernel_sources_digest.cache_clear()
    original = jit.__file__
    try:
        jit.__file__ = str(copy / "jit.py")
        assert jit.kernel_sources_digest() != stamp[1]
    finally:
        jit.__file__ = original
        jit.kernel_sources_digest.cache_clear()
    assert jit.kernel_sources_digest() == stamp[1]
