"""The hook table agrees with the library's exports and with the toolkit's cuda.h."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INTERCEPT = ROOT / "intercept"
TOOLKIT_INCLUDE = Path("/usr/local/cuda/include")

STRUCT_FIELDS = {
    "CUmemAllocationProp": ["type", "location.type", "location.id", "win32HandleMetaData"],
    "CUDA_ARRAY_DESCRIPTOR": ["Width", "Height", "Format", "NumChannels"],
    "CUlaunchConfig": ["gridDimX", "sharedMemBytes", "hStream", "attrs", "numAttrs"],
    "CUDA_LAUNCH_PARAMS": ["function", "sharedMemBytes", "hStream", "kernelParams"],
    "CUuuid": ["bytes"],
    "CUDA_MEMCPY2D": [
        "srcMemoryType",
        "srcDevice",
        "srcArray",
        "dstMemoryType",
        "dstDevice",
        "dstArray",
        "WidthInBytes",
        "Height",
    ],
    "CUDA_MEMCPY3D": ["srcMemoryType", "srcDevice", "dstMemoryType", "dstDevice", "WidthInBytes", "Height", "Depth"],
    "CUDA_MEMCPY3D_PEER": [
        "srcMemoryType",
        "srcDevice",
        "srcContext",
        "dstMemoryType",
        "dstDevice",
        "dstContext",
        "WidthInBytes",
        "Height",
        "Depth",
    ],
    "CUDA_MEMCPY3D_BATCH_OP": [
        "src",
        "dst",
        "extent",
        "extent.width",
        "extent.height",
        "extent.depth",
        "srcAccessOrder",
        "flags",
    ],
    "CUmemcpy3DOperand": ["type", "op.ptr.ptr", "op.array.array"],
    "CUDA_ARRAY3D_DESCRIPTOR": ["Width", "Height", "Depth", "Format", "NumChannels", "Flags"],
    "CUmemPoolProps": [
        "allocType",
        "handleTypes",
        "location.type",
        "location.id",
        "win32SecurityAttributes",
        "maxSize",
        "usage",
        "reserved",
    ],
}


def hook_names() -> list[str]:
    """The table's rows, as the preprocessor expands them."""
    out = subprocess.run(
        ["gcc", "-E", "-P", f"-I{INTERCEPT}", "-"],
        input='#include "cuda_driver.h"\n#define X(n, p, a) HOOK n\nALNAIR_HOOKS(X)\n',
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return re.findall(r"HOOK (\w+)", out)


def compile_and_run(tmp_path: Path, source: str, *flags: str) -> str:
    (tmp_path / "probe.c").write_text(source)
    subprocess.run(
        [
            "gcc",
            "-std=gnu11",
            "-Werror",
            "-Wall",
            f"-I{INTERCEPT}",
            *flags,
            "-o",
            str(tmp_path / "probe"),
            str(tmp_path / "probe.c"),
        ],
        check=True,
    )
    return subprocess.run([str(tmp_path / "probe")], capture_output=True, text=True, check=True).stdout


def test_every_hooked_name_is_exported_by_the_library_and_nothing_else_is(intercept_library):
    exported = subprocess.run(
        ["nm", "-D", "--defined-only", str(intercept_library)], capture_output=True, text=True, check=True
    ).stdout
    symbols = {line.split()[-1] for line in exported.splitlines()}
    names = hook_names()
    assert len(names) == len(set(names)) >= 37
    assert {s for s in symbols if s.startswith("cu")} == set(names)
    assert symbols - set(names) == {"dlsym"}


def require_toolkit() -> None:
    if not (TOOLKIT_INCLUDE / "cuda.h").exists():
        pytest.skip("no CUDA toolkit headers in /usr/local/cuda/include to check against")


def test_every_hook_signature_matches_the_toolkit_declaration(tmp_path):
    """Legacy names (v1 cuGetProcAddress, cuCtxCreate_v2, the multi-device launch)
    are declared by cuda.h only for __CUDA_API_VERSION_INTERNAL."""
    require_toolkit()
    source = (
        '#define __CUDA_API_VERSION_INTERNAL\n#include <cuda.h>\n#include "cuda_driver.h"\n'
        "#define CHECK(name, params, args) CUresult (*check_##name) params = &name;\nALNAIR_HOOKS(CHECK)\n"
    )
    (tmp_path / "signatures.c").write_text(source)
    subprocess.run(
        [
            "gcc",
            "-std=gnu11",
            "-c",
            "-Werror",
            f"-I{INTERCEPT}",
            f"-I{TOOLKIT_INCLUDE}",
            "-o",
            str(tmp_path / "signatures.o"),
            str(tmp_path / "signatures.c"),
        ],
        check=True,
    )


def layout_probe() -> str:
    lines = ["#include <stdio.h>", "#include <stddef.h>", '#include "cuda_driver.h"', "int main(void) {"]
    for struct, fields in STRUCT_FIELDS.items():
        lines.append(f'printf("{struct} size %zu\\n", sizeof({struct}));')
        for field in fields:
            lines.append(f'printf("{struct} {field} %zu\\n", offsetof({struct}, {field}));')
    return "\n".join(lines + ["return 0; }"])


def test_struct_layouts_we_read_match_the_toolkit(tmp_path):
    require_toolkit()
    ours = compile_and_run(tmp_path, layout_probe())
    toolkit = compile_and_run(tmp_path, "#include <cuda.h>\n" + layout_probe(), f"-I{TOOLKIT_INCLUDE}")
    assert ours == toolkit
    assert "CUlaunchConfig hStream 32" in ours


def test_pool_attribute_values_match_the_toolkit(tmp_path):
    """cuda_driver.h spells the pool attributes the library reads as numbers; they are the toolkit's enum's."""
    require_toolkit()
    names = [
        "CU_MEMPOOL_ATTR_RELEASE_THRESHOLD",
        "CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT",
        "CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH",
        "CU_MEMPOOL_ATTR_USED_MEM_CURRENT",
        "CU_MEMPOOL_ATTR_USED_MEM_HIGH",
    ]
    probe = "\n".join(
        ["#include <stdio.h>", '#include "cuda_driver.h"', "int main(void) {"]
        + [f'printf("{n} %d\\n", (int){n});' for n in names]
        + ["return 0; }"]
    )
    ours = compile_and_run(tmp_path, probe)
    toolkit = compile_and_run(tmp_path, "#include <cuda.h>\n" + probe, f"-I{TOOLKIT_INCLUDE}")
    assert ours == toolkit and len(ours.splitlines()) == len(names)
