"""The wheel's shipped data: the repository's question files and reference tables, copied into the
package at build time (alcheck/paths.py reads them there through importlib.resources). The top-level
folders stay the one source; everything else about the build is in pyproject.toml."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
# package data folder under alcheck/ -> its source here (the same table as alcheck/paths.py's)
SHIPPED_SOURCES = {"data/datasets": "datasets", "data/references": "results/references"}


class BuildPyWithData(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads the sources in place
        for name, source in SHIPPED_SOURCES.items():
            if not (ROOT / source).is_dir():
                raise SystemExit(f"{ROOT / source} not found: build from a full checkout (or its sdist)")
            dest = Path(self.build_lib, "alcheck", *name.split("/"))
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(ROOT / source, dest, ignore=shutil.ignore_patterns(".*", "__pycache__"))


setup(cmdclass={"build_py": BuildPyWithData})
