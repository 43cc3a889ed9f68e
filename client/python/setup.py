"""The build step: the package, plus gRPC stubs generated from the proto
(and statecache/_stats.py written from them by gen_stats.py).

Everything else is in pyproject.toml. The stubs are generated into the build
tree only (statecache/v1/statecache_pb2.py and statecache_pb2_grpc.py),
never into the source tree, by

    protoc -I PROTO_DIR --python_out=BUILD --grpc_out=BUILD
           --plugin=protoc-gen-grpc=GRPC_PYTHON_PLUGIN
           statecache/v1/statecache.proto

PROTO_DIR: $STATECACHE_PROTO_DIR, else the repository's proto/ (two levels
up). protoc: $PROTOC, else PATH's. The plugin: $GRPC_PYTHON_PLUGIN, else
PATH's grpc_python_plugin. Without protoc or the plugin, grpcio-tools
(python -m grpc_tools.protoc) is used if importable.
"""

import importlib.util
import os
import shutil
import subprocess
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = os.path.join("statecache", "v1", "statecache.proto")


def _proto_dir():
    directory = os.environ.get("STATECACHE_PROTO_DIR") or os.path.join(
        HERE, os.pardir, os.pardir, "proto")
    directory = os.path.abspath(directory)
    if not os.path.isfile(os.path.join(directory, PROTO)):
        sys.exit("statecache: %s not found under %s (set "
                 "STATECACHE_PROTO_DIR to the repository's proto/)"
                 % (PROTO, directory))
    return directory


def _protoc_command(out):
    """protoc with the gRPC plugin, writing both stubs under `out`."""
    protoc = os.environ.get("PROTOC") or shutil.which("protoc")
    plugin = os.environ.get("GRPC_PYTHON_PLUGIN") or shutil.which(
        "grpc_python_plugin")
    if protoc and plugin:
        return [protoc, "--plugin=protoc-gen-grpc=" + plugin,
                "--grpc_out=" + out]
    if importlib.util.find_spec("grpc_tools") is None:
        sys.exit("statecache: need protoc and grpc_python_plugin (Debian: "
                 "protobuf-compiler, protobuf-compiler-grpc; or set PROTOC "
                 "and GRPC_PYTHON_PLUGIN), or grpcio-tools")
    return [sys.executable, "-m", "grpc_tools.protoc",
            "--grpc_python_out=" + out]


class BuildPyWithStubs(build_py):
    """build_py, then the stubs into the build directory's statecache/v1."""

    def run(self):
        super().run()
        out = os.path.abspath(self.build_lib)
        proto_dir = _proto_dir()
        command = _protoc_command(out) + [
            "--proto_path=" + proto_dir, "--python_out=" + out,
            os.path.join(proto_dir, PROTO)]
        self.announce("generating the gRPC stubs: " + " ".join(command), 2)
        subprocess.run(command, check=True)
        # Stats and the messages it carries, written out from the stubs.
        subprocess.run(
            [sys.executable, os.path.join(HERE, "gen_stats.py"),
             os.path.join(out, "statecache", "v1", "statecache_pb2.py"),
             os.path.join(out, "statecache", "_stats.py")], check=True)


setup(cmdclass={"build_py": BuildPyWithStubs})
