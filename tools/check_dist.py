"""Check what ``python -m build`` made (``make dist``), and with ``--install`` use it as a user would (``make
wheel-check``, which CI runs after ``make test``).

Without a release on PyPI, the wheel is how people install commprof outside a checkout, so it has to stand alone:

1. ``dist/`` holds one sdist and one wheel of the version in pyproject.toml, and their metadata is valid
   (``packaging.metadata``, the validation twine and PyPI apply): name, version, a Markdown readme, the runtime
   requirements, and torch only behind the ``record`` extra;
2. the wheel holds every module and data file of ``commprof/``, ``analyzers/`` and ``dashboard/`` at its
   installed path (``commprof/analyzers/calibration.json`` …) and nothing else, and the ``commprof`` script;
3. ``--install``: the wheel alone goes into a fresh venv without torch (``pip install dist/<wheel>``, its
   requirements from the index: one install), which must not pull torch; from outside the checkout that venv's
   ``commprof analyze`` reads a shipped sample, ``commprof dashboard --help`` answers, and the dashboard serves
   the sample's overview over HTTP.

Exit 0 when all holds, 1 with what does not.
"""

from __future__ import annotations

import argparse
import email.parser
import json
import os
import re
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
import venv
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INSTALLED_AS = {"commprof": "commprof", "analyzers": "commprof/analyzers", "dashboard": "commprof/dashboard"}
DATA = (".json", ".md")  # pyproject's package-data; the code reads analyzers/calibration.json at run time
HEAVY = ("torch", "nvidia-", "triton")


class Failed(Exception):
    pass


def say(line: str) -> None:
    print(f"check_dist: {line}", flush=True)


def version() -> str:
    found = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), flags=re.MULTILINE)
    if found is None:
        raise Failed("no version in pyproject.toml")
    return found.group(1)


def built(dist: Path) -> tuple[Path, Path]:
    """(wheel, sdist) of this version: exactly one of each."""
    v = version()
    wheels, sdists = sorted(dist.glob("commprof-*.whl")), sorted(dist.glob("commprof-*.tar.gz"))
    if [w.name for w in wheels] != [f"commprof-{v}-py3-none-any.whl"] or [s.name for s in sdists] != [
            f"commprof-{v}.tar.gz"]:
        raise Failed(f"{dist} should hold commprof-{v}-py3-none-any.whl and commprof-{v}.tar.gz, not "
                     f"{[p.name for p in wheels + sdists]} (make dist empties it first)")
    return wheels[0], sdists[0]


def check_metadata(text: str, where: str) -> None:
    from packaging.metadata import Metadata

    raw = email.parser.Parser().parsestr(text)
    try:
        meta = Metadata.from_email(text, validate=True)
    except Exception as err:  # an ExceptionGroup of InvalidMetadata on Python >= 3.11
        problems = getattr(err, "exceptions", [err])
        raise Failed(f"{where}: invalid metadata: {'; '.join(map(str, problems))}") from None
    if meta.name != "commprof" or str(meta.version) != version():
        raise Failed(f"{where}: {meta.name} {meta.version}, expected commprof {version()}")
    if raw.get("Description-Content-Type") != "text/markdown" or "# commprof" not in (meta.description or ""):
        raise Failed(f"{where}: the README is not the long description (as Markdown)")
    unconditional = {str(r.name).lower() for r in meta.requires_dist or [] if r.marker is None}
    if not {"polars", "dash", "click", "waitress"} <= unconditional:
        raise Failed(f"{where}: runtime requirements missing: {sorted(unconditional)}")
    if any(name.startswith(HEAVY) for name in unconditional):
        raise Failed(f"{where}: torch (or CUDA) is a runtime requirement: {sorted(unconditional)}")


def expected_files() -> set[str]:
    """Installed path of every module and data file of the three source folders."""
    out = set()
    for folder, installed in INSTALLED_AS.items():
        for path in (ROOT / folder).rglob("*"):
            rel = path.relative_to(ROOT / folder)
            if (path.is_file() and path.suffix in (".py", *DATA) and "__pycache__" not in rel.parts
                    and not any(p.startswith(".") for p in rel.parts) and (path.parent / "__init__.py").is_file()
                    and not (folder == "commprof" and rel.parts[0] in ("analyzers", "dashboard"))):
                out.add(f"{installed}/{rel.as_posix()}")
    return out


def check_wheel(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        info = f"commprof-{version()}.dist-info"
        check_metadata(z.read(f"{info}/METADATA").decode(), wheel.name)
        scripts = z.read(f"{info}/entry_points.txt").decode()
    if not re.search(r"^commprof = commprof\.cli:run$", scripts, flags=re.MULTILINE):
        raise Failed(f"{wheel.name}: no 'commprof' script: {scripts!r}")
    shipped = {n for n in names if not n.startswith(f"commprof-{version()}.dist-info/")}
    expected = expected_files()
    missing, extra = sorted(expected - shipped), sorted(shipped - expected)
    if missing or extra:
        raise Failed(f"{wheel.name}: missing {missing[:20]}, unexpected {extra[:20]}")
    for needed in ("commprof/analyzers/calibration.json", "commprof/dashboard/app.py",
                   "commprof/dashboard/pages/overview.py", "commprof/dashboard/access.py"):
        if needed not in shipped:
            raise Failed(f"{wheel.name}: no {needed}")
    say(f"{wheel.name}: {wheel.stat().st_size / 1e3:.0f} kB, {len(shipped)} files (commprof/, its analyzers/ "
        "and dashboard/, calibration.json), metadata valid, torch only in the 'record' extra")


def check_sdist(sdist: Path) -> None:
    top = sdist.name.removesuffix(".tar.gz")
    with tarfile.open(sdist) as t:
        names = set(t.getnames())
        member = t.extractfile(f"{top}/PKG-INFO")
        if member is None:
            raise Failed(f"{sdist.name}: no PKG-INFO")
        check_metadata(member.read().decode(), sdist.name)
    for needed in ("pyproject.toml", "README.md", "analyzers/calibration.json", "dashboard/app.py"):
        if f"{top}/{needed}" not in names:
            raise Failed(f"{sdist.name}: no {needed} (a wheel built from it would lack it)")
    say(f"{sdist.name}: {sdist.stat().st_size / 1e3:.0f} kB, metadata valid")


def run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: int = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, check=False)


def clean_env(tmp: Path, bin_dir: Path) -> dict[str, str]:
    """The user's environment, but nothing that points into the checkout or its venv."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME") and not k.startswith("COMMPROF_")}
    env.update(PATH=f"{bin_dir}:/usr/bin:/bin", COMMPROF_CACHE_DIR=str(tmp / "cache"),
               PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    return env


def install(wheel: Path, tmp: Path) -> tuple[Path, dict[str, str]]:
    env_dir = tmp / "venv"
    venv.create(env_dir, with_pip=True, clear=True)  # no system site-packages: nothing but the wheel's requirements
    bin_dir = env_dir / "bin"
    env = clean_env(tmp, bin_dir)
    say(f"pip install {wheel.relative_to(ROOT) if wheel.is_relative_to(ROOT) else wheel} into a fresh venv "
        "(its requirements from the index)")
    started = time.monotonic()
    done = run([str(bin_dir / "pip"), "install", "--quiet", str(wheel)], cwd=tmp, env=env, timeout=900)
    if done.returncode != 0:
        raise Failed(f"pip install failed (exit {done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")
    listed = run([str(bin_dir / "pip"), "list", "--format", "json"], cwd=tmp, env=env)
    names = sorted(p["name"].lower() for p in json.loads(listed.stdout))
    heavy = [n for n in names if n.startswith(HEAVY)]
    if heavy:
        raise Failed(f"installing the wheel pulled {heavy}: analysis needs no torch")
    say(f"installed in {time.monotonic() - started:.0f} s: {len(names)} packages, no torch")
    return bin_dir, env


def use(bin_dir: Path, env: dict[str, str], sample: Path, tmp: Path) -> None:
    where = run([str(bin_dir / "python"), "-c", "import commprof.analyzers, commprof.dashboard as d; "
                 "print(commprof.analyzers.__file__); print(d.__file__)"], cwd=tmp, env=env)
    if where.returncode != 0 or str(ROOT) in where.stdout or "site-packages" not in where.stdout:
        raise Failed(f"commprof is not imported from the venv: {where.stdout}{where.stderr}")
    analyzed = run([str(bin_dir / "commprof"), "analyze", str(sample)], cwd=tmp, env=env)
    if analyzed.returncode != 0 or "Step time per rank" not in analyzed.stdout:
        raise Failed(f"commprof analyze {sample} (exit {analyzed.returncode}):\n{analyzed.stderr[-3000:]}")
    say(f"commprof analyze {sample.relative_to(ROOT) if sample.is_relative_to(ROOT) else sample}: "
        f"{len(analyzed.stdout.splitlines())} lines, exit 0")
    helped = run([str(bin_dir / "commprof"), "dashboard", "--help"], cwd=tmp, env=env)
    if helped.returncode != 0 or "--token" not in helped.stdout:
        raise Failed(f"commprof dashboard --help (exit {helped.returncode}):\n{helped.stderr[-3000:]}")
    say("commprof dashboard --help: exit 0")
    serve_once(bin_dir, env, sample, tmp)


def serve_once(bin_dir: Path, env: dict[str, str], sample: Path, tmp: Path) -> None:
    """The installed dashboard serves the sample: its page shell, and its router's answer for the overview."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp / "dashboard.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([str(bin_dir / "commprof"), "dashboard", str(sample), "--port", str(port), "-j", "1"],
                                cwd=tmp, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    base, key = f"http://127.0.0.1:{port}", sample.name
    body = {"output": "..page.children...nav.children..",
            "outputs": [{"id": "page", "property": "children"}, {"id": "nav", "property": "children"}],
            "inputs": [{"id": "url", "property": "pathname", "value": f"/run/{key}/overview"}],
            "state": [{"id": "url", "property": "search", "value": ""}], "changedPropIds": ["url.pathname"]}
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(base + "/", timeout=30) as page:
                    shell = page.read().decode()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise Failed(f"the dashboard did not answer:\n{log.read_text()[-3000:]}") from None
                time.sleep(0.3)
        request = urllib.request.Request(base + "/_dash-update-component", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as answer:
            overview = answer.read().decode()
        if "_dash-renderer" not in shell or f"{key} — overview" not in json.dumps(json.loads(overview),
                                                                              ensure_ascii=False):
            raise Failed(f"the dashboard's overview of {key} is not what it should be: {overview[:300]}")
        say(f"commprof dashboard {key}: the page and the overview served over HTTP")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dist", type=Path, help="the folder python -m build wrote")
    parser.add_argument("--install", action="store_true", help="also install the wheel into a fresh venv and use it")
    parser.add_argument("--sample", type=Path, default=ROOT / "sample_traces" / "tp2_dp2")
    args = parser.parse_args(argv)
    try:
        wheel, sdist = built(args.dist)
        check_sdist(sdist)
        check_wheel(wheel)
        if args.install:
            with tempfile.TemporaryDirectory(prefix="commprof-wheel-") as tmp:
                bin_dir, env = install(wheel.resolve(), Path(tmp))
                use(bin_dir, env, args.sample.resolve(), Path(tmp))
    except Failed as err:
        say(f"FAILED: {err}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
