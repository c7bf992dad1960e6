"""Build mooncake._pg_ext, the torch plugin, with torch.utils.cpp_extension.

CMake's find_package(Torch) refuses to configure against PyPI's CUDA builds
of torch on a machine without the CUDA toolkit, while a CPU-only
CppExtension needs none (see docs/build.md, "The torch plugin"), so CMakeLists.txt runs
this script:

    python torch_plugin/build_ext.py --lib-dir <dir with libmooncake.so>
        --include-dir <dir with mooncake.h> --out-dir <dir> --build-temp <dir>

It writes <out-dir>/_pg_ext<suffix>.so (linked against libmooncake.so, found
at run time through the RPATH $ORIGIN/lib) and <out-dir>/_pg_build.py, which
records the torch version the plugin was compiled against so that
mooncake.pg can refuse a mismatched torch before loading the plugin.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib-dir", required=True)
    ap.add_argument("--include-dir", required=True)
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--build-temp", required=True)
    a = ap.parse_args()

    try:
        import torch
        from setuptools import setup
        from torch.utils.cpp_extension import BuildExtension, CppExtension
    except ImportError as e:
        print(f"torch plugin: skipped ({e}); mooncake.pg will be unavailable", file=sys.stderr)
        return 0

    os.environ.setdefault("MAX_JOBS", "2")
    out = Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ext = CppExtension(
        name="_pg_ext",
        sources=[
            str(HERE / name)
            for name in (
                "mooncake_backend.cpp",
                "mooncake_process_group.cpp",
                "membership.cpp",
                "reconfigure.cpp",
                "pg_module.cpp",
            )
        ],
        include_dirs=[str(Path(a.include_dir).resolve()), str(HERE)],
        library_dirs=[str(Path(a.lib_dir).resolve())],
        libraries=["mooncake"],
        extra_compile_args=["-O2", "-Wno-unused-parameter"],
        extra_link_args=["-Wl,-rpath,$ORIGIN/lib", "-Wl,--no-as-needed"],
    )
    setup(
        name="mooncake_pg_ext",
        ext_modules=[ext],
        packages=[],
        py_modules=[],
        cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
        script_args=[
            "-q",
            "build_ext",
            "--build-lib",
            str(out),
            "--build-temp",
            a.build_temp,
        ],
    )
    version = torch.__version__.split("+")[0]
    (out / "_pg_build.py").write_text(
        '"""Written by torch_plugin/build_ext.py: the torch the plugin was built against."""\n\n'
        f'TORCH_VERSION = "{version}"\n'
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
