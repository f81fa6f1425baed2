"""``lazy-mlir doctor``: what this installation can compile for and run on.

``add_parser(subparsers)`` registers the subcommand on the ``lazy-mlir``
parser. The handler prints, with rich: the versions of Python, torch,
torch-mlir, the IREE compiler and runtime and lazy-mlir; every IREE runtime
driver with its devices (or why it has none); the compile targets with their
flags and whether they can run here; per target, whether a probe graph
(a matmul, a softmax, a bool mask, an int64 index) compiles, runs and matches
the cpu target (``probe``; cuda and others without a device: compiles only);
the compiled-module cache location. It only reports: it returns 0 whatever
it finds (``--no-probe`` skips the probe compiles).
"""
from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import sys


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Add ``doctor`` to ``subparsers`` (from ``add_subparsers``); returns its parser."""
    p = subparsers.add_parser(
        "doctor", help="versions, IREE drivers and devices, compile targets, cache location")
    p.add_argument("--no-probe", action="store_true",
                   help="skip compiling and running the probe graph on each target")
    p.set_defaults(func=run)
    return p


def _probe_fn(x, w, ids):
    y = (x @ w).softmax(-1)
    return y, y > 0.2, x[ids].sum(0)


def _probe_args():
    import torch
    g = torch.Generator().manual_seed(0)
    return (torch.randn(5, 7, generator=g), torch.randn(7, 3, generator=g),
            torch.tensor([4, 0, 2, 2]))


def probe(name: str, runs: bool) -> tuple[str, str]:
    """(status, detail) of the probe graph on target ``name``: status is
    "ok" (compiled, ran, matched the cpu target within 1e-4), "compiles"
    (compiled; no device to run it), "wrong" or "fails"."""
    import torch
    from ..frontends.jit import jit
    from ..pipeline.stages import compile_stages
    from ..targets import get_target
    args = _probe_args()
    try:
        lowered = jit(_probe_fn).lower(*args, target=name)
        if not runs:
            target = get_target(name)
            compiled = compile_stages((lowered.stage("linalg", target),), target,
                                      lowered.config)
            return "compiles", f"{len(compiled.vmfb):,} bytes; no device to run it"
        want = jit(_probe_fn).lower(*args, target="cpu").compile()(*args)
        got = lowered.compile()(*args)
    except Exception as e:  # report, never raise
        return "fails", " ".join(str(e).split())[:300]
    for g, w in zip(got, want):
        if g.dtype != w.dtype or g.shape != w.shape or not torch.allclose(
                g.float(), w.float(), atol=1e-4, rtol=1e-4):
            return "wrong", f"differs from the cpu target: {g.flatten()[:4].tolist()} vs " \
                            f"{w.flatten()[:4].tolist()}"
    return "ok", "compiled, ran, matches the cpu target"


def versions() -> dict[str, str]:
    """Python and the packages lazy-mlir is built from ("not installed" when absent)."""
    out = {"python": f"{platform.python_version()} ({sys.executable})"}
    for name in ("torch", "torch-mlir", "iree-base-compiler", "iree-base-runtime", "lazy-mlir"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def drivers() -> list[tuple[str, list[dict], str]]:
    """(driver, devices, error) for every driver of the IREE runtime."""
    from ..targets import driver_devices
    from ..targets import configure_cpu_threads
    try:
        import iree.runtime as rt
        names = sorted(rt.query_available_drivers())
    except Exception as e:  # no runtime at all: still report the rest
        return [("(iree.runtime)", [], " ".join(str(e).split()))]
    out = []
    for name in names:
        if name == "local-task":
            try:
                configure_cpu_threads()  # the driver starts its workers when made
            except ValueError as e:
                out.append((name, [], str(e)))
                continue
        devices, err = driver_devices(name)
        out.append((name, list(devices), err))
    return out


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    t = Table(title="versions", show_header=False)
    t.add_column(style="bold")
    t.add_column()
    for name, version in versions().items():
        t.add_row(name, version)
    console.print(t)

    found = drivers()
    usable = {name for name, devices, _ in found if devices}
    t = Table(title="IREE runtime drivers")
    t.add_column("driver", style="bold", no_wrap=True)
    t.add_column("devices")
    for name, devices, err in found:
        if devices:
            listed = "\n".join(_device_line(d) for d in devices)
            if name == "local-task":
                listed += f"\n[dim]{_threads_note()}\n{_host_gemm_note()}[/dim]"
        else:
            listed = f"[yellow]none[/yellow]: {_short(err)}" if err else "[yellow]none[/yellow]"
        t.add_row(name, listed)
    console.print(t)

    console.print(_targets_table(usable))
    if not getattr(args, "no_probe", False):
        console.print(_probe_table(usable))

    from ..compile_service.disk_cache import cache_enabled, default_cache_dir
    t = Table(title="compiled-module cache", show_header=False)
    t.add_column(style="bold")
    t.add_column()
    t.add_row("location", str(default_cache_dir()))
    t.add_row("enabled", "yes" if cache_enabled() else "no (LAZY_MLIR_CACHE=0)")
    console.print(t)
    return 0


def _targets_table(usable: set[str]):
    from rich.table import Table
    from ..targets import LARGE_MATMUL_MACS, TARGETS
    only_large = (f" (only for a graph with a matmul of 2^{LARGE_MATMUL_MACS.bit_length() - 1}+"
                  " multiply-adds)")
    t = Table(title="compile targets (lazy_mlir.set_target / LAZY_MLIR_TARGET)")
    t.add_column("target", style="bold", no_wrap=True)
    t.add_column("backend / driver", no_wrap=True)
    t.add_column("runs here", no_wrap=True)
    t.add_column("chosen for / iree-compile flags", overflow="fold")
    for name in TARGETS:
        try:
            target = TARGETS[name]
        except Exception as e:  # e.g. a malformed LAZY_MLIR_CUDA_SM
            t.add_row(name, "", "[red]no[/red]", f"[red]{e}[/red]")
            continue
        runs = ("[green]yes[/green]" if target.driver in usable
                else "[yellow]compile only[/yellow]")
        flags = "\n".join(f"[dim]{f}{only_large if f in target.large_matmul_flags else ''}[/dim]"
                          for f in target.flags)
        t.add_row(name, f"{target.backend} / {target.driver}", runs,
                  f"{target.device}\n{flags}")
    return t


def _probe_table(usable: set[str]):
    from rich.table import Table
    from ..targets import TARGETS
    t = Table(title="probe graph per target (matmul, softmax, bool mask, int64 index)")
    t.add_column("target", style="bold", no_wrap=True)
    t.add_column("result", no_wrap=True)
    t.add_column("detail", overflow="fold")
    colour = {"ok": "green", "compiles": "yellow", "wrong": "red", "fails": "red"}
    for name in TARGETS:
        try:
            runs = TARGETS[name].driver in usable
        except Exception as e:
            t.add_row(name, "[red]fails[/red]", str(e))
            continue
        status, detail = probe(name, runs)
        t.add_row(name, f"[{colour[status]}]{status}[/{colour[status]}]", detail)
    return t


def _short(err: str) -> str:
    """The reason in an IREE status message, without source locations."""
    for code in ("UNAVAILABLE; ", "NOT_FOUND; ", "INVALID_ARGUMENT; ", "INTERNAL; "):
        if code in err:
            return err.split(code, 1)[1].split(";")[0].split(": Tried")[0].strip()
    return err


def _device_line(d: dict) -> str:
    name = str(d.get("name", "")) or "(unnamed)"
    path = str(d.get("path", ""))
    return f"{d.get('device_id', '?')}: {name}" + (f" [dim]({path})[/dim]" if path else "")


def _threads_note() -> str:
    from ..targets import cpu_threads
    try:
        from ..runtime.host_memory import requested
        kept = requested()
        return (f"cpu target: {cpu_threads()} worker threads (LAZY_MLIR_CPU_THREADS); freed "
                f"memory {'kept in the heap' if kept else 'returned to the system'} "
                "(LAZY_MLIR_KEEP_FREED_MEMORY)")
    except ValueError as e:
        return str(e)


def _host_gemm_note() -> str:
    """Whether cpu modules call PyTorch's GEMM (``host_gemm``), and why."""
    import torch

    from ..host_calls import gemm as host_gemm
    parts = []
    for what, switch in (("matmuls", "LAZY_MLIR_BLAS"), ("attention", "LAZY_MLIR_HOST_ATTENTION")):
        try:
            on = host_gemm.switch(switch)
        except ValueError as e:
            return str(e)
        parts.append(f"{what} {'on' if on else 'off'} ({switch}={os.environ.get(switch, 'auto')})")
    blas = "MKL" if torch.backends.mkl.is_available() else "not MKL"
    return (f"calls into PyTorch's GEMM: {', '.join(parts)}; auto means {host_gemm.AUTO_MEANS} "
            f"(here: {host_gemm.cpu_vendor() or 'vendor unknown'}, {blas})")
