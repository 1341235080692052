"""Metadata lives in pyproject.toml; this only ships alnair_intercept.pth, which pyproject.toml cannot place.

The .pth file sits at the top of site-packages, where Python runs its import line at
start-up: it reads one environment variable and, only when ALNAIR_PYTHON_INTERCEPT is
set, activates the Python intercept (the mechanism coverage.py uses for subprocesses).
Editable installs skip it; alnair-run works without it.
"""
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "alnair_intercept.pth"


class BuildPyWithPth(build_py):
    def run(self):
        super().run()
        self.copy_file(PTH, str(Path(self.build_lib) / PTH))

    def get_outputs(self, include_bytecode=True):
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib) / PTH)]


setup(cmdclass={"build_py": BuildPyWithPth})
