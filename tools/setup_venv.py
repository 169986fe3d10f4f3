"""Create the project's virtual environment for `make demo` / `make test`, quietly, and say which torch it
uses. Run by the Makefile with the interpreter the user chose (``make PYTHON=...``).

Why a script and not three pip lines: on Linux, PyPI's ``torch`` wheel is the CUDA build (several GB with
its nvidia-* dependencies), which a demo on CPU ranks does not need. So torch is taken, in this order:

1. a torch the chosen interpreter already has (the venv then sees its packages: ``--system-site-packages``);
2. a torch wheel pip finds on this machine (find-links, a local index): no download;
3. on Linux, the CPU-only build from the PyTorch CPU index; elsewhere PyPI's wheel (CPU there).

pip's output goes to ``.venv/install.log``; the terminal gets one line per step, and the log's tail when a
step fails.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import venv
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

TORCH_PIN = "torch==2.13.0"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class TorchSource:
    """How to get torch: ``pip_args`` to install (empty: it is there already) and a line for the user."""

    pip_args: tuple[str, ...]
    says: str


def say(line: str) -> None:
    print(f"setup: {line}", flush=True)


def choose_source(report: dict[str, object] | None, platform: str, index_url: str | None) -> TorchSource:
    """Where to install torch from, given pip's dry-run report for the pin (None when pip could not resolve
    it from the configured sources). Pure, so that tests can walk every branch."""
    if index_url:
        return TorchSource((TORCH_PIN, "--index-url", index_url), f"{TORCH_PIN} from {index_url} (TORCH_INDEX_URL)")
    picked = _picked(report)
    if picked is not None:
        url, version = picked
        parsed = urlparse(url)
        if parsed.scheme == "file":
            path = unquote(parsed.path)
            return TorchSource((path,), f"torch {version} from a wheel on this machine ({path})")
        if not platform.startswith("linux") or "+cpu" in version:
            return TorchSource((f"torch=={version}",), f"torch {version} from {parsed.netloc or 'the index'}")
    if platform.startswith("linux"):
        # PyPI's Linux wheel is the CUDA build; the CPU index has the same release without it
        return TorchSource((TORCH_PIN, "--index-url", CPU_INDEX), f"{TORCH_PIN} CPU-only build from {CPU_INDEX}")
    return TorchSource((TORCH_PIN,), f"{TORCH_PIN} from PyPI")


def _picked(report: dict[str, object] | None) -> tuple[str, str] | None:
    """(download url, version) of the torch wheel a ``pip install --dry-run --report`` chose."""
    if not report:
        return None
    for item in report.get("install") or []:  # type: ignore[attr-defined]
        meta, info = item.get("metadata") or {}, item.get("download_info") or {}
        if str(meta.get("name", "")).lower() == "torch" and info.get("url"):
            return str(info["url"]), str(meta.get("version", "?"))
    return None


class Step:
    """Runs commands with their output appended to the log; on failure prints the log's tail and exits."""

    def __init__(self, log: Path) -> None:
        self.log = log

    def run(self, what: str, cmd: list[str], check: bool = True) -> bool:
        with open(self.log, "a", encoding="utf-8") as out:
            out.write(f"\n$ {' '.join(cmd)}\n")
            out.flush()
            done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, check=False)
        if done.returncode != 0 and check:
            tail = self.log.read_text(encoding="utf-8", errors="replace").splitlines()[-25:]
            print("\n".join(tail), file=sys.stderr)
            say(f"{what} failed (exit {done.returncode}); the whole output is in {self.log}")
            sys.exit(1)
        return done.returncode == 0


def existing_torch(python: Path) -> str | None:
    """``version (CPU-only | CUDA x) at path`` of the torch that ``python`` imports, or None."""
    probe = ("import torch, os; cuda = torch.version.cuda; "
             "print(torch.__version__, 'CPU-only' if cuda is None else 'CUDA ' + cuda, "
             "'at', os.path.dirname(torch.__file__))")
    done = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else None


def dry_run_report(step: Step, python: Path) -> dict[str, object] | None:
    with tempfile.TemporaryDirectory(prefix="commprof-setup-") as tmp:
        report = Path(tmp) / "report.json"
        ok = step.run("resolving torch", [str(python), "-m", "pip", "install", "--dry-run", "--no-deps",
                                          "--ignore-installed", "--quiet", "--report", str(report), TORCH_PIN],
                      check=False)
        if not ok or not report.exists():
            return None
        loaded: dict[str, object] = json.loads(report.read_text())
        return loaded


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("venv", type=Path)
    parser.add_argument("--extras", default="dev,record", help="extras of the project to install")
    args = parser.parse_args(argv)
    env_dir: Path = args.venv
    python = env_dir / "bin" / "python"
    if sys.version_info < (3, 10):  # noqa: UP036 - this script runs before the venv exists, on any python3
        say(f"commprof needs Python >= 3.10; {sys.executable} is {sys.version.split()[0]} "
            "(pick another with `make PYTHON=/path/to/python3.11`)")
        return 1
    if not python.exists():
        system_torch = importlib.util.find_spec("torch") is not None
        say(f"creating {env_dir} with {sys.executable}"
            + (" (it has torch: the venv sees its packages)" if system_torch else ""))
        try:
            venv.create(env_dir, with_pip=True, system_site_packages=system_torch)
        except (OSError, subprocess.CalledProcessError) as err:
            # Debian/Ubuntu ship venv's pip bootstrap separately
            say(f"cannot create {env_dir} ({err}); on Debian/Ubuntu install python3-venv, or pick another "
                "interpreter with `make PYTHON=/path/to/python3`")
            return 1
    env_dir.mkdir(exist_ok=True)
    step = Step(env_dir / "install.log")
    say(f"installing quietly; pip's output goes to {step.log}")
    step.run("upgrading pip", [str(python), "-m", "pip", "install", "--quiet", "--upgrade", "pip"])
    found = existing_torch(python)
    if found:
        say(f"torch: using the one already installed, {found}")
    else:
        source = choose_source(dry_run_report(step, python), sys.platform, os.environ.get("TORCH_INDEX_URL"))
        say(f"torch: installing {source.says}")
        step.run("installing torch", [str(python), "-m", "pip", "install", "--quiet", *source.pip_args])
        say(f"torch: {existing_torch(python) or 'installed, but it does not import (see the log)'}")
    say(f"installing commprof from {ROOT} (editable, extras {args.extras})")
    step.run("installing commprof", [str(python), "-m", "pip", "install", "--quiet", "-e", f"{ROOT}[{args.extras}]"])
    say(f"{env_dir} is ready")
    return 0


if __name__ == "__main__":
    sys.exit(main())
