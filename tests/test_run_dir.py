"""Claiming run directories and strict JSON (alcheck/rundir/folder.py, issue 9 items 4 and 5)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading

import pytest

from alcheck.errors import AlcheckError
from alcheck.rundir.folder import LOCK_FILE, claim_run_dir, strict_json, write_json_atomic


def test_a_second_claim_on_a_held_folder_exits_2_naming_the_pid(tmp_path):
    out = tmp_path / "run"
    with claim_run_dir(out) as claim:
        info = json.loads(claim.lock_path.read_text())
        assert info["pid"] == os.getpid() and info["host"] and info["started"]
        with pytest.raises(
            AlcheckError, match=rf"in use by another alcheck run \(pid {os.getpid()} on "
        ) as err:
            claim_run_dir(out)
        assert err.value.exit_code == 2
        assert out.is_dir()  # the losing claim removed nothing
    assert not (out / LOCK_FILE).exists()  # released at the end
    with claim_run_dir(out):  # and free again
        pass


def test_threads_racing_for_one_folder_exactly_one_wins(tmp_path):
    out = tmp_path / "race"
    barrier = threading.Barrier(8)
    won, lost, claims = [], [], []

    def contend():
        barrier.wait()
        try:
            claims.append(claim_run_dir(out))
            won.append(1)
        except AlcheckError:
            lost.append(1)

    threads = [threading.Thread(target=contend) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and len(lost) == 7
    claims[0].release()


def test_a_stale_lock_of_a_dead_process_is_taken_over(tmp_path):
    out = tmp_path / "stale"
    out.mkdir()
    # a process that died (here: exited) while holding the folder leaves its lock file behind
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    pid = int(dead.stdout)
    (out / LOCK_FILE).write_text(json.dumps({"pid": pid, "host": os.uname().nodename, "started": "then"}))
    (out / "keep.txt").write_text("results")
    with claim_run_dir(out) as claim:
        assert json.loads(claim.lock_path.read_text())["pid"] == os.getpid()
    assert (out / "keep.txt").read_text() == "results"


def test_a_lock_held_by_a_live_process_is_respected(tmp_path):
    out = tmp_path / "held"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from alcheck.rundir.folder import claim_run_dir; c = "
            "claim_run_dir(sys.argv[1]); "
            "print('held', flush=True); time.sleep(60)",
            str(out),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(AlcheckError, match=f"pid {holder.pid}"):
            claim_run_dir(out)
    finally:
        holder.kill()
        holder.wait()
    # killed without releasing (as with SIGKILL): the kernel dropped its lock, the file stays
    assert (out / LOCK_FILE).is_file()
    with claim_run_dir(out):
        pass


def test_failure_removes_only_the_empty_folders_the_claim_created(tmp_path):
    out = tmp_path / "a" / "b" / "run"
    with pytest.raises(RuntimeError):
        with claim_run_dir(out):
            raise RuntimeError("load failed")
    assert not (tmp_path / "a").exists()

    existing = tmp_path / "existing"
    existing.mkdir()
    with pytest.raises(KeyboardInterrupt):
        with claim_run_dir(existing):
            raise KeyboardInterrupt
    assert existing.is_dir()  # it was there before: never removed, even empty

    with pytest.raises(RuntimeError):
        with claim_run_dir(tmp_path / "new") as claim:
            (claim.path / "run.json").write_text("{}")
            raise RuntimeError("after results were written")
    assert (tmp_path / "new" / "run.json").is_file()


def test_fresh_default_names_are_unique_within_one_second(tmp_path):
    base = tmp_path / "runs" / "20261201-120000-target-draft"
    claims = [claim_run_dir(base, fresh=True) for _ in range(3)]
    paths = {c.path for c in claims}
    assert len(paths) == 3 and base in paths
    assert all(p.parent == base.parent and p.name.startswith(base.name) for p in paths)
    for c in claims:
        c.release()


def test_unwritable_out_is_a_one_line_error(tmp_path):
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    for out in (blocker / "run", blocker):
        with pytest.raises(AlcheckError) as err:
            claim_run_dir(out)
        assert "--out" in err.value.message and "\n" not in err.value.message
    with pytest.raises(AlcheckError, match="--out"):
        claim_run_dir(blocker / "run", fresh=True)


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_out_is_a_one_line_error(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(AlcheckError, match="pass a writable --out"):
            claim_run_dir(ro / "run")
    finally:
        ro.chmod(0o700)


def test_strict_json_refuses_nan_and_infinity(tmp_path):
    assert json.loads(strict_json({"a": [1.5, None]}, "x")) == {"a": [1.5, None]}
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(AlcheckError, match=r"summary\[0\]\.al_mean is not a finite number"):
            write_json_atomic(tmp_path / "run.json", {"summary": [{"al_mean": bad}]})
    assert not list(tmp_path.iterdir())  # nothing half-written


def test_every_json_writer_in_the_package_is_strict():
    """Each json.dump(s) call in alcheck/ passes allow_nan=False (or goes through strict_json)."""
    import re
    from pathlib import Path

    import alcheck

    loose = []
    for file in Path(alcheck.__file__).parent.rglob("*.py"):
        if (
            "gpu_check" in file.parts
        ):  # a device diagnostic whose raw measurements may be NaN: its owner decides
            continue
        text = file.read_text()
        for m in re.finditer(r"json\.dumps?\(", text):
            depth, i = 1, m.end()
            while depth:
                depth += {"(": 1, ")": -1}.get(text[i], 0)
                i += 1
            if "allow_nan=False" not in text[m.start() : i]:
                loose.append(f"{file.name}:{text.count(chr(10), 0, m.start()) + 1}")
    assert not loose, loose
