"""Builds the CUDA intercept library into the package, so `pip install .` carries it, and ships
alnair_intercept.pth, which pyproject.toml cannot place: at the top of site-packages Python runs its
import line at start-up, which activates the Python intercept only when ALNAIR_PYTHON_INTERCEPT is set
(the mechanism coverage.py uses for subprocesses). An editable install gets the .pth too (the library
stays in intercept/build, where `make -C intercept` puts it); alnair-run needs neither."""

import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

PTH = "alnair_intercept.pth"
GLIBC = "2.17"  # the oldest glibc the library loads on: Zig builds it against this one (intercept/Makefile)


class BuildWithIntercept(build_py):
    def run(self) -> None:
        super().run()
        self.copy_file(PTH, str(Path(self.build_lib) / PTH))
        try:
            subprocess.run(
                ["make", "-s", "-C", "intercept", f"PYTHON={sys.executable}", f"GLIBC={GLIBC}", "build/libalnair.so"],
                check=True,
            )
        except (OSError, subprocess.CalledProcessError) as e:  # the exporter works without it
            print(f"warning: CUDA intercept library not built ({e}); needs make and ziglang", file=sys.stderr)
            return
        self.distribution.glibc_floor = GLIBC
        target = Path(self.build_lib, "alnair", "intercept")
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy2("intercept/build/libalnair.so", target / "libalnair.so")

    def get_outputs(self, include_bytecode=True):
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib) / PTH)]


class NativeLibraryDistribution(Distribution):
    """libalnair.so is built for this machine, so the package is installed as platform-specific."""

    def has_ext_modules(self) -> bool:
        return True


class PlatformWheel(bdist_wheel):
    """A wheel for this processor and any Python 3 (the library does not link Python), never py3-none-any; with the
    library, manylinux for the glibc it was built against (PEP 600, and PEP 599's alias that older pips know)."""

    def get_tag(self) -> tuple[str, str, str]:
        platform = super().get_tag()[2]
        floor = getattr(self.distribution, "glibc_floor", None)
        if floor and platform.startswith("linux_"):
            arch = platform.removeprefix("linux_")
            platform = f"manylinux_{floor.replace('.', '_')}_{arch}.manylinux2014_{arch}"
        return "py3", "none", platform


class EditableWithSwitch(editable_wheel):
    """The .pth beside the editable finder's own: the files of that directory land at the wheel's top."""

    def _install_namespaces(self, installation_dir, pth_prefix):
        super()._install_namespaces(installation_dir, pth_prefix)
        shutil.copy2(PTH, Path(installation_dir) / PTH)


setup(
    distclass=NativeLibraryDistribution,
    cmdclass={"build_py": BuildWithIntercept, "bdist_wheel": PlatformWheel, "editable_wheel": EditableWithSwitch},
)
