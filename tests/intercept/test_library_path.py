"""The package tells users where the library to LD_PRELOAD is."""

from __future__ import annotations

import subprocess

import alnair.intercept as intercept


def test_library_path_names_the_built_library(intercept_library):
    path = intercept.library_path()
    assert path == intercept_library and path.is_file()
    exported = subprocess.run(
        ["nm", "-D", "--defined-only", str(path)], capture_output=True, text=True, check=True
    ).stdout
    assert " dlsym" in exported and " cuLaunchKernel" in exported
