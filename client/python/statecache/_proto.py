"""The generated stubs (statecache.v1), with a clear error when missing."""

try:
    from .v1 import statecache_pb2 as pb
    from .v1 import statecache_pb2_grpc as pb_grpc
except ImportError as _e:  # pragma: no cover - an unbuilt source tree
    raise ImportError(
        "statecache: the generated gRPC stubs (statecache.v1.statecache_pb2) "
        "are missing; use the package built by CMake (PYTHONPATH="
        "build/python) or install it with pip (see client/python/"
        "pyproject.toml): %s" % _e) from _e

__all__ = ["pb", "pb_grpc"]
