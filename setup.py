"""Builds the CUDA intercept library into the package, so `pip install .` carries it."""
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildWithIntercept(build_py):
    def run(self) -> None:
        super().run()
        try:
            subprocess.run(["make", "-s", "-C", "intercept", "build/libalnair.so"], check=True)
        except (OSError, subprocess.CalledProcessError) as e:  # the exporter works without it
            print(f"warning: CUDA intercept library not built ({e}); needs make and gcc", file=sys.stderr)
            return
        target = Path(self.build_lib, "alnair", "intercept")
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy2("intercept/build/libalnair.so", target / "libalnair.so")


setup(cmdclass={"build_py": BuildWithIntercept})
