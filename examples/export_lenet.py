"""Train LeNet-5 briefly, export it ahead of time, and run it without torch.

    python examples/export_lenet.py [--out lenet-artifact] [--target cpu]

Writes an artifact directory with a batch size chosen at run time and the
weights in ``params.irpa``, then runs it the way a deployment would: the
artifact's own ``run.py`` in a fresh Python whose ``import torch`` fails,
needing only numpy and iree-base-runtime. Prints the test accuracy of eager
PyTorch and of the artifact (they agree).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

import lazy_mlir as lm  # noqa: F401  (registers the lazy device export captures on)
from lazy_mlir.export import export, load
from lazy_mlir.models.seed import LeNet5, digits


def train(steps: int = 100, batch: int = 32) -> LeNet5:
    x, y, _, _ = digits()
    torch.manual_seed(0)
    model = LeNet5()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for i in range(steps):
        j = (i * batch) % (len(y) - batch)
        opt.zero_grad()
        F.cross_entropy(model(x[j:j + batch]), y[j:j + batch]).backward()
        opt.step()
    return model.eval()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="lenet-artifact", help="artifact directory to write")
    p.add_argument("--target", default="cpu", help="cpu (default), vulkan or cuda")
    args = p.parse_args()

    model = train()
    _, _, x_test, y_test = digits()
    path = export(model, x_test[:1], target=args.target, path=args.out, params="external",
                  dynamic_dims={"x": {0: "batch"}})
    fn = load(path)
    print(f"exported {fn.signature} to {path}/")
    for f in sorted(os.listdir(path)):
        print(f"  {f:14s} {os.path.getsize(os.path.join(path, f)):>9,} bytes")

    with torch.no_grad():
        eager = model(x_test).argmax(1).numpy()
    print(f"eager accuracy:    {(eager == y_test.numpy()).mean():.3f}")

    # The deployment side: numpy and iree.runtime only (torch import blocked).
    with tempfile.TemporaryDirectory() as tmp:
        np.save(Path(tmp) / "x.npy", x_test.numpy())
        shim = Path(tmp) / "shim" / "torch"
        shim.mkdir(parents=True)
        (shim / "__init__.py").write_text("raise ImportError('no torch here')\n")
        code = textwrap.dedent(f"""
            import sys
            sys.path.insert(0, {str(Path(path).resolve())!r})
            import numpy as np, run                     # the artifact's own run.py
            logits = run.load({str(Path(path).resolve())!r})(np.load("x.npy"))
            np.save("pred.npy", logits.argmax(1))
        """)
        subprocess.run([sys.executable, "-c", code], cwd=tmp, check=True,
                       env=dict(os.environ, PYTHONPATH=str(shim.parent)))
        pred = np.load(Path(tmp) / "pred.npy")
    print(f"artifact accuracy: {(pred == y_test.numpy()).mean():.3f} "
          f"(batch {len(pred)}, no torch; predictions equal: {bool((pred == eager).all())})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
