"""Writing files so that a crash never leaves half a file under the final name."""

from __future__ import annotations

import datetime as _dt
import gzip
import json
import os
import shutil
from typing import Any

TMP_MARKER = ".tmp-"


def utc_now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def tmp_name(final: str) -> str:
    """A hidden sibling of ``final`` that no reader takes for the real file."""
    head, tail = os.path.split(final)
    return os.path.join(head, f".{tail}{TMP_MARKER}{os.getpid()}")


def atomic_write_bytes(path: str, data: bytes) -> None:
    """On any failure (a full disk) the temporary file is removed and the error raised."""
    tmp = tmp_name(path)
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        _remove(tmp)
        raise


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


def atomic_write_json(path: str, obj: Any) -> None:
    atomic_write_bytes(path, (json.dumps(obj, indent=1, sort_keys=True, default=str) + "\n").encode())


def atomic_gzip_file(src: str, dest: str, level: int = 3) -> int:
    """Compress ``src`` into ``dest`` (written under a temporary name, then renamed); returns the size."""
    tmp = tmp_name(dest)
    try:
        with open(src, "rb") as fin, open(tmp, "wb") as raw:
            # mtime=0: the same trace gives the same bytes
            with gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=level, mtime=0) as fout:
                shutil.copyfileobj(fin, fout, 1 << 20)
        os.replace(tmp, dest)
    except BaseException:
        _remove(tmp)
        raise
    return os.path.getsize(dest)
