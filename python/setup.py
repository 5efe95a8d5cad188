"""Generates the gRPC stubs from the repository's proto/ before the package is built.

`BATON_PROTO_DIR` names another proto root (the directory holding `baton/v1/baton.proto`).
"""

import os
import pathlib

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = pathlib.Path(__file__).resolve().parent
PROTO_ROOT = pathlib.Path(os.environ.get("BATON_PROTO_DIR", HERE.parent / "proto" / "proto"))
PROTO = "baton/v1/baton.proto"


class BuildWithStubs(build_py):
    def run(self):
        from grpc_tools import protoc
        import grpc_tools

        source = PROTO_ROOT / PROTO
        if not source.exists():
            raise SystemExit(f"{source} not found: build from a baton checkout, or set BATON_PROTO_DIR")
        includes = pathlib.Path(grpc_tools.__file__).parent / "_proto"
        out = HERE / "src"
        code = protoc.main(
            [
                "grpc_tools.protoc",
                f"-I{PROTO_ROOT}",
                f"-I{includes}",
                f"--python_out={out}",
                f"--pyi_out={out}",
                f"--grpc_python_out={out}",
                str(source),
            ]
        )
        if code != 0:
            raise SystemExit(f"protoc failed on {source} ({code})")
        super().run()


setup(cmdclass={"build_py": BuildWithStubs})
