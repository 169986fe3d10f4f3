"""The separate virtualenv that holds Holistic Trace Analysis 0.5.0, so HTA's pins never touch .venv.

HTA 0.5.0 imports pandas, numpy, plotly, networkx, yaml and psutil but not torch; the last two come in
only through its declared (heavy) requirements such as jupyterlab, so it is installed with its
requirements as published, once. A stamp file marks a finished install; a half-made venv is redone.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HTA_REQUIREMENT = "HolisticTraceAnalysis==0.5.0"


def bench_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def ensure(venv: Path) -> Path | None:
    """Python of a venv with HTA 0.5.0 in it, made on first use; None (and why, printed) if it fails."""
    stamp = venv / f".installed-{HTA_REQUIREMENT}"
    python = bench_python(venv)
    if stamp.is_file() and python.exists():
        return python
    print(f"setting up {venv.name} with {HTA_REQUIREMENT} (first run only, about 30 s) ...", flush=True)
    steps = [
        [sys.executable, "-m", "venv", "--clear", str(venv)],
        [str(python), "-m", "pip", "install", "--quiet", "--upgrade", "pip"],
        [str(python), "-m", "pip", "install", "--quiet", HTA_REQUIREMENT],
        [str(python), "-c", "import hta.trace_analysis"],
    ]
    for cmd in steps:
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode:
            tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-5:])
            print(f"could not set up {venv.name}: `{' '.join(cmd[-3:])}` failed:\n{tail}", file=sys.stderr)
            return None
    stamp.touch()
    return python
