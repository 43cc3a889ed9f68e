#!/usr/bin/python3
"""`pip install` of client/python, offline, as pyproject.toml documents it.

Copies the package directory to a scratch directory (pip builds in place;
the source tree stays clean), makes a venv with --system-site-packages
(Debian's grpcio and protobuf), runs
    VENV/bin/pip install --no-build-isolation --no-index PACKAGE
with STATECACHE_PROTO_DIR, PROTOC and GRPC_PYTHON_PLUGIN set, and then, from
a directory with no statecache sources, imports the installed package
(whose gRPC stubs the build generated), checks that it ships py.typed,
and pings a real statecached ($STATECACHED) through it.

Usage: pip_install_check.py --package-dir client/python --proto-dir proto
           [--protoc protoc] [--grpc-plugin grpc_python_plugin]
Exit code 0 when it worked.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

CHECK = """
import os, statecache
from statecache.testing import Daemon
from statecache.v1 import statecache_pb2
assert statecache.__file__.startswith(os.environ["VIRTUAL_ENV"]), \\
    statecache.__file__
# PEP 561: the type hints are for type checkers (pyproject's package-data).
assert os.path.isfile(os.path.join(os.path.dirname(statecache.__file__),
                                   "py.typed")), "py.typed not installed"
with Daemon(["--model_id=m"]) as daemon:
    with statecache.Client.connect(daemon.address) as client:
        client.ping()
        with client.attach("m", 64) as session:
            assert session.step().begin_pass().send()[0].ok
print("installed", statecache.__version__, "at",
      os.path.dirname(statecache.__file__))
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--package-dir", required=True)
    parser.add_argument("--proto-dir", required=True)
    parser.add_argument("--protoc", default="protoc")
    parser.add_argument("--grpc-plugin", default="grpc_python_plugin")
    args = parser.parse_args()

    scratch = tempfile.mkdtemp(prefix="statecache-pip-")
    try:
        package = os.path.join(scratch, "python")
        shutil.copytree(args.package_dir, package,
                        ignore=shutil.ignore_patterns(
                            "build", "*.egg-info", "__pycache__", "*_pb2.py",
                            "*_pb2_grpc.py"))
        venv = os.path.join(scratch, "venv")
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages",
                        venv], check=True)
        env = dict(os.environ,
                   STATECACHE_PROTO_DIR=os.path.abspath(args.proto_dir),
                   PROTOC=shutil.which(args.protoc) or args.protoc,
                   GRPC_PYTHON_PLUGIN=(shutil.which(args.grpc_plugin)
                                       or args.grpc_plugin),
                   PIP_DISABLE_PIP_VERSION_CHECK="1")
        subprocess.run([os.path.join(venv, "bin", "pip"), "install", "-q",
                        "--no-build-isolation", "--no-index", package],
                       check=True, env=env)
        env = dict(os.environ, VIRTUAL_ENV=venv)
        env.pop("PYTHONPATH", None)
        elsewhere = os.path.join(scratch, "elsewhere")
        os.mkdir(elsewhere)
        subprocess.run([os.path.join(venv, "bin", "python"), "-c", CHECK],
                       check=True, env=env, cwd=elsewhere)
        return 0
    except subprocess.CalledProcessError as e:
        print("pip_install_check: FAILED: %s" % e, file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
