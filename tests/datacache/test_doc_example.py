"""docs/datacache.md's first example runs as written: its Python block, in a Python of its own, against a real
redis-server (the URL's port replaced by the test server's), prints the output the document shows, within a minute
(it takes under a second on the 2-CPU VM)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "datacache.md"
DOC_URL = "redis://127.0.0.1:6379/0"


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", DOC.read_text(), flags=re.MULTILINE | re.DOTALL)


def test_the_examples_shell_block_installs_the_extra_and_starts_the_redis_its_python_uses():
    shell = blocks("sh")[0]
    assert "pip install 'alnair-gpu[cache]'" in shell
    assert re.search(r"^redis-server --port 6379 --save '' .*&$", shell, flags=re.MULTILINE), shell
    assert blocks("python")[0].count(DOC_URL) == 1


def test_the_example_reads_a_dataset_through_the_cache_and_prints_what_the_document_shows(start_redis, tmp_path):
    server = start_redis()
    code = blocks("python")[0].replace(DOC_URL, server.url)
    script = tmp_path / "example.py"
    script.write_text(code)
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # its origin directory (tempfile.mkdtemp) goes with the test's files
    result = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == blocks("text")[0]
