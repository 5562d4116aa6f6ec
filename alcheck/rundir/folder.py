"""Run directories: claim one for a single writer, write strict JSON into it atomically.

A run claims its folder before it loads anything, so two runs can never interleave rows in one
questions.csv. The claim is a lock file (`.alcheck.lock`, holding pid, host and start time)
with an exclusive flock on it: the kernel drops the flock when the process dies (even on
SIGKILL), so a stale file left behind is simply taken over, and the pid in it is only there to
name the holder in the error. Releasing removes the lock file, and on failure also removes the
folders this claim created, when they are empty; a folder that existed before is never removed.
"""

from __future__ import annotations

import errno
import json
import math
import os
import secrets
import socket
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from alcheck.errors import AlcheckError

LOCK_FILE = ".alcheck.lock"

try:  # POSIX; elsewhere the lock falls back to exclusive create (no stale-lock takeover)
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None


def _find_non_finite(obj, where: str = "") -> str | None:
    if isinstance(obj, float) and not math.isfinite(obj):
        return where or "(top level)"
    if isinstance(obj, dict):
        for key, value in obj.items():
            found = _find_non_finite(value, f"{where}.{key}" if where else str(key))
            if found:
                return found
    if isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            found = _find_non_finite(value, f"{where}[{i}]")
            if found:
                return found
    return None


def strict_json(obj, what: str) -> str:
    """JSON text with allow_nan=False: NaN/Infinity are not JSON, and a reader must never see one."""
    try:
        return json.dumps(obj, indent=2, allow_nan=False) + "\n"
    except ValueError:
        where = _find_non_finite(obj) or "a value"
        raise AlcheckError(
            f"refusing to write {what}: {where} is not a finite number: "
            "this is an alcheck bug, please report it with the command line"
        ) from None


def write_json_atomic(path, obj, what: str | None = None) -> Path:
    """Strict JSON written to a temp file beside `path`, then renamed over it (never half a file)."""
    path = Path(path)
    text = strict_json(obj, what or path.name)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise AlcheckError(
            f"cannot write {path} ({exc.strerror or type(exc).__name__}): "
            "check that the folder is writable and the disk is not full"
        ) from None
    return path


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by someone else
        return True
    return True


def _describe_holder(lock: Path) -> str:
    try:
        info = json.loads(lock.read_text())
        return f"pid {info['pid']} on {info['host']}, started {info['started']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"


def _mkdirs(path: Path) -> list[Path]:
    """mkdir -p that returns the folders it created, deepest last."""
    missing = []
    probe = path
    while not probe.exists():
        missing.append(probe)
        if probe.parent == probe:
            break
        probe = probe.parent
    created = []
    for folder in reversed(missing):
        try:
            folder.mkdir()
        except FileExistsError:
            if not folder.is_dir():
                raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(folder)) from None
            continue  # someone else made it meanwhile: not ours to remove
        created.append(folder)
    return created


def _remove_empty(folders: list[Path]):
    """rmdir, deepest first: only ever removes empty folders, so results are never deleted."""
    for folder in reversed(folders):
        try:
            folder.rmdir()
        except OSError:
            return


def _os_error(out: Path, exc: OSError) -> AlcheckError:
    reason = exc.strerror or type(exc).__name__
    return AlcheckError(f"--out {out}: cannot create or write it ({reason}): pass a writable --out")


@dataclass
class RunDirClaim:
    """This process's exclusive hold on a run directory; use as a context manager."""

    path: Path
    created: list[Path] = field(default_factory=list)  # folders this claim made, outermost first
    _fd: int | None = None

    @property
    def lock_path(self) -> Path:
        return self.path / LOCK_FILE

    def release(self, failed: bool = False):
        if self._fd is not None:
            # unlink before unlocking: a waiter that opened this inode sees it is gone and retries
            try:
                self.lock_path.unlink(missing_ok=True)
            except OSError:
                pass
            os.close(self._fd)
            self._fd = None
        if failed:
            _remove_empty(self.created)

    def __enter__(self) -> RunDirClaim:
        return self

    def __exit__(self, exc_type, exc, tb):
        self.release(failed=exc_type is not None)
        return False


def _lock(claim: RunDirClaim):
    lock = claim.lock_path
    info = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
    }
    for _ in range(50):
        if fcntl is None:
            fd = _lock_exclusive_create(lock)
        else:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise AlcheckError(
                    f"--out {claim.path} is in use by another alcheck run ({_describe_holder(lock)}): "
                    "wait for it to finish, or pass another --out"
                ) from None
            try:  # the holder may have released (and unlinked) between our open and flock
                same = os.stat(lock).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(info, allow_nan=False).encode())
        claim._fd = fd
        return
    raise AlcheckError(f"--out {claim.path}: could not take its lock file {lock}: pass another --out")


def _lock_exclusive_create(lock: Path) -> int:  # pragma: no cover - only without fcntl
    try:
        return os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        try:
            info = json.loads(lock.read_text())
            stale = info["host"] == socket.gethostname() and not _pid_alive(int(info["pid"]))
        except (OSError, ValueError, KeyError, TypeError):
            stale = False
        if not stale:
            raise AlcheckError(
                f"--out {lock.parent} is in use by another alcheck run "
                f"({_describe_holder(lock)}): wait for it, or pass another --out"
            ) from None
        lock.unlink(missing_ok=True)
        return os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)


def claim_run_dir(out, *, fresh: bool = False) -> RunDirClaim:
    """Create (or reuse) `out` and lock it for this process.

    fresh=True (the default --out): the folder must be new. When the name is taken (two runs
    started in the same second) a short random suffix is added until an exclusive mkdir wins.
    """
    out = Path(out)
    if fresh:
        try:
            created = _mkdirs(out.parent)
        except OSError as exc:
            raise _os_error(out, exc) from None
        candidate = out
        for _ in range(20):
            try:
                candidate.mkdir()
            except FileExistsError:
                candidate = out.with_name(f"{out.name}-{secrets.token_hex(3)}")
                continue
            except OSError as exc:
                _remove_empty(created)
                raise _os_error(candidate, exc) from None
            claim = RunDirClaim(candidate, created + [candidate])
            break
        else:
            _remove_empty(created)
            raise AlcheckError(f"--out: could not create a new folder next to {out}: pass --out")
    else:
        if out.exists() and not out.is_dir():
            raise AlcheckError(f"--out {out} is a file: pass a folder")
        try:
            claim = RunDirClaim(out, _mkdirs(out))
        except OSError as exc:
            raise _os_error(out, exc) from None
    try:
        _lock(claim)
    except OSError as exc:
        claim.release(failed=True)
        raise _os_error(out, exc) from None
    except AlcheckError:
        claim.release(failed=True)
        raise
    return claim


# what each kind of alcheck output leaves at the top of its folder
_KIND_MARKERS = {
    "run": ("run.json", "questions.csv"),  # alcheck run
    "ablation": ("ablation.json", "with-lookahead", "without-lookahead"),  # alcheck ablate kv-lookahead
}
_KIND_NAMES = {"run": "an `alcheck run` run", "ablation": "an `alcheck ablate` ablation"}


def refuse_other_kind(out, kind: str, flag: str = "--out"):
    """A folder that holds another kind of alcheck output is not taken over: its files would be
    mixed with this command's, and `alcheck report` would then replace the other one's report."""
    out = Path(out)
    for other, markers in _KIND_MARKERS.items():
        found = [name for name in markers if (out / name).exists()]
        if other != kind and found:
            raise AlcheckError(
                f"{flag} {out} holds {_KIND_NAMES[other]} ({found[0]}), not {_KIND_NAMES[kind]}: "
                "pass a new folder"
            )


def out_option_value(ctx, param, value):
    """click callback for --out / --resume: an empty string would mean the current folder."""
    if value is not None and not str(value).strip():
        raise AlcheckError(f"{param.opts[0]} {value!r} is empty: pass a folder name")
    return Path(value) if value is not None else None
