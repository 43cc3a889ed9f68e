"""The gRPC stubs generated from proto/statecache/v1/statecache.proto.

``statecache_pb2`` (the messages) and ``statecache_pb2_grpc`` (the
StateCache and StateCacheAdmin stubs) are generated into this package by the
build (CMake: build/python/statecache/v1/; pip: setup.py's build step), by
``protoc -I proto --python_out --grpc_out`` on statecache/v1/statecache.proto,
so their own imports (``from statecache.v1 import statecache_pb2``) name this
package. They are never committed.
"""
