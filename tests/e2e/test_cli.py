"""The lazy-mlir command line: dump, compile, cache, --help, and user errors."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import sys, torch, torch.nn.functional as F, lazy_mlir as lm
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(2 * 6 * 6, 3)).to("lazy")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        opt.zero_grad()
        F.cross_entropy(model(torch.randn(2, 1, 8, 8).to("lazy")),
                        torch.tensor([0, 2]).to("lazy")).backward()
        opt.step()
        lm.mark_step()
    print("trained", steps)
""")


def cli(*args, env=None, cwd=None):
    e = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "lazy_mlir.tools.cli", *args],
                          capture_output=True, text=True, env=e, cwd=cwd)


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    p = tmp_path_factory.mktemp("script") / "train.py"
    p.write_text(SCRIPT)
    return p


@pytest.fixture(scope="module")
def dumped(script, tmp_path_factory):
    out = tmp_path_factory.mktemp("dump")
    r = cli("dump", str(script), "--out", str(out), "--html",
            "--stages", "fx,torch,torch-backend,linalg,iree-flow,vmfb", "--", "3")
    assert r.returncode == 0, r.stderr
    return out, r


def test_dump_writes_every_stage_and_a_manifest(dumped):
    out, r = dumped
    assert "trained 3" in r.stdout and "lazy-mlir dump" in r.stdout
    manifest = json.loads((out / "manifest.json").read_text())
    graphs = manifest["graphs"]
    assert len(graphs) >= 2  # the first step, then the steady-state step
    for g in graphs:
        names = [s["name"] for s in g["stages"]]
        assert names == ["fx", "torch", "torch-backend", "linalg", "iree-flow", "vmfb"]
        for s in g["stages"]:
            assert (out / s["file"]).stat().st_size == s["bytes"] > 0
            assert s["seconds"] >= 0
        assert len(g["cache_key"]) == 64 and g["target"] == "cpu"
        i = g["index"]
        # the cpu target's convolution as its im2col matmul (passes/conv_matmul.py)
        assert "torch.aten.unfold" in (out / f"{i:04d}-torch.mlir").read_text()
        assert "linalg" in (out / f"{i:04d}-linalg.mlir").read_text()
        assert (out / f"{i:04d}.vmfb").read_bytes()[:2] == b"PK"


@pytest.mark.skipif(not shutil.which("chromium"), reason="Debian's chromium is not installed")
def test_dump_html_shows_every_stage_in_a_browser(dumped, tmp_path):
    out, _ = dumped
    page = out / "index.html"
    r = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu",
                        "--disable-background-networking", "--disable-component-update",
                        "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path}",
                        "--dump-dom", page.as_uri()], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    shown = r.stdout.split('data-stages-shown="')[1].split('"')[0].split()
    manifest = json.loads((out / "manifest.json").read_text())
    expected = [f"{g['index']}:{s['name']}" for g in manifest["graphs"] for s in g["stages"]]
    assert sorted(shown) == sorted(expected)


def test_dump_dir_env_makes_any_program_dump(script, tmp_path):
    out = tmp_path / "env-dump"
    r = subprocess.run([sys.executable, str(script), "2"], capture_output=True, text=True,
                       env=dict(os.environ, LAZY_MLIR_DUMP_DIR=str(out)))
    assert r.returncode == 0, r.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["graphs"] and (out / "0000-linalg.mlir").exists()


def test_compile_command(dumped, tmp_path):
    out, _ = dumped
    torch_ir = out / "0000-torch.mlir"
    r = cli("compile", str(torch_ir), "--from", "torch", "--to", "linalg")
    assert r.returncode == 0, r.stderr
    assert "linalg.generic" in r.stdout or "linalg.matmul" in r.stdout
    vmfb = tmp_path / "m.vmfb"
    r = cli("compile", str(out / "0000-linalg.mlir"), "--from", "linalg", "--to", "vmfb",
            "-o", str(vmfb))
    assert r.returncode == 0, r.stderr
    assert vmfb.read_bytes()[:2] == b"PK"
    r = cli("compile", str(out / "0000-linalg.mlir"), "--from", "linalg", "--to", "iree-stream")
    assert r.returncode == 0 and "stream." in r.stdout


USER_ERRORS = [
    (["dump", "missing.py"], "no such script"),
    (["dump", "{script}", "--stages", "linalg,bogus"], "unknown stage(s) bogus; valid stages"),
    (["dump", "{script}", "--pipeline-config", "{bad_toml}"], "is not valid TOML"),
    (["dump", "{script}", "--pipeline-config", "{bad_pass}"], "'no-such-pass' does not refer"),
    (["dump", "{raises}"], "raised ZeroDivisionError"),
    (["compile", "missing.mlir"], "no such file"),
    (["compile", "{garbage}", "--to", "linalg"], "garbage.mlir"),
    (["compile", "{garbage}", "--to", "nope"], "unknown --to 'nope'"),
    (["dump", "{script}", "--target", "tpu"], "unknown target 'tpu'"),
]
HELPS = [[], ["demo"], ["dump"], ["compile"], ["cache"], ["export"], ["run"], ["doctor"]]

# Each command line in a process of its own costs an import of torch (~6 s
# a line on 2 cores): the user errors and the helps run as commands of one
# process, ``main`` called as the console script calls it.
MANY = textwrap.dedent("""
    import contextlib, io, json, sys, traceback
    from lazy_mlir.tools.cli import main
    out = []
    for argv in json.loads(sys.argv[1]):
        o, e = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
            try:
                rc = main(argv)
            except SystemExit as x:
                rc = x.code if isinstance(x.code, int) else 1
            except BaseException:
                traceback.print_exc()
                rc = 1
        out.append([rc, o.getvalue(), e.getvalue()])
    print(json.dumps(out))
""")


@pytest.fixture(scope="module")
def many(script, tmp_path_factory):
    """{index: (returncode, stdout, stderr)} of USER_ERRORS, then HELPS."""
    tmp = tmp_path_factory.mktemp("errors")
    files = {"script": script, "bad_toml": tmp / "bad.toml", "bad_pass": tmp / "bad_pass.toml",
             "raises": tmp / "raises.py", "garbage": tmp / "garbage.mlir"}
    files["bad_toml"].write_text("opt_level = [")
    files["bad_pass"].write_text('linalg_after = ["no-such-pass"]\n')
    files["raises"].write_text("import lazy_mlir\n1 / 0\n")
    files["garbage"].write_text("this is not mlir")
    argvs = [[a.format(**files) for a in args] for args, _ in USER_ERRORS]
    argvs += [[*command, "--help"] for command in HELPS]
    r = subprocess.run([sys.executable, "-c", MANY, json.dumps(argvs)], capture_output=True,
                       text=True, cwd=tmp)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", range(len(USER_ERRORS)),
                         ids=[" ".join(a) for a, _ in USER_ERRORS])
def test_user_errors_get_one_line_and_nonzero_exit(case, many):
    rc, _, stderr = many[case]
    assert rc != 0
    assert USER_ERRORS[case][1] in stderr
    assert "Traceback" not in stderr and len(stderr.strip().splitlines()) == 1, stderr


@pytest.mark.parametrize("case", range(len(HELPS)), ids=[" ".join(c) or "-" for c in HELPS])
def test_help(case, many):
    rc, stdout, _ = many[len(USER_ERRORS) + case]
    assert rc == 0 and "usage:" in stdout


def test_the_console_script_reports_a_user_error():
    """The module run as a program (what ``lazy-mlir`` runs): a user error
    is one line on stderr and a nonzero exit."""
    r = cli("compile", "missing.mlir")
    assert r.returncode != 0 and "no such file" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_doctor_lists_versions_drivers_and_cache():
    r = cli("doctor")
    assert r.returncode == 0, r.stderr
    for word in ("torch", "iree", "local-task", "cpu", "cache"):
        assert word in r.stdout
    wide = cli("doctor", env={"COLUMNS": "250"}).stdout  # a flag and its note on one line
    assert "--iree-opt-data-tiling (only for a graph with a matmul of 2^26+ multiply-adds)" in wide
    forced = cli("doctor", env={"COLUMNS": "250", "LAZY_MLIR_BLAS": "1",
                                "LAZY_MLIR_HOST_ATTENTION": "0"}).stdout
    assert "matmuls on (LAZY_MLIR_BLAS=1), attention off (LAZY_MLIR_HOST_ATTENTION=0)" in forced
    assert "auto means on only for MKL on an Intel CPU" in forced
