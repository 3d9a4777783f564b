"""toolplane's Python stubs, generated from proto/ by grpcio-tools' bundled protoc into a
temporary directory and imported from there, as a Python team would generate them. The
directory is removed once the modules are imported, so a test run leaves nothing in /tmp."""

import glob
import importlib
import importlib.resources
import os
import shutil
import sys
import tempfile

from grpc_tools import protoc

SERVICES = ("agent_service", "discovery_service", "invoke_service", "provider_service")


def generate(proto_dir):
    """Compiles proto/toolplane/v1/*.proto and answers the generated modules by name:
    `meta_pb2`, `tool_pb2`, and `X_pb2` and `X_pb2_grpc` for each service file X."""
    out = tempfile.mkdtemp(prefix="toolplane-python-stubs-")
    try:
        return _compile_and_import(proto_dir, out)
    finally:
        # Every generated module is imported by now (they import each other while loading),
        # so nothing reads the directory again.
        if out in sys.path:
            sys.path.remove(out)
        shutil.rmtree(out, ignore_errors=True)


def _compile_and_import(proto_dir, out):
    well_known = str(importlib.resources.files("grpc_tools") / "_proto")
    files = sorted(glob.glob(os.path.join(proto_dir, "toolplane", "v1", "*.proto")))
    if not files:
        raise AssertionError(f"no .proto files under {proto_dir}")
    arguments = ["protoc", f"-I{proto_dir}", f"-I{well_known}",
                 f"--python_out={out}", f"--grpc_python_out={out}", *files]
    if protoc.main(arguments) != 0:
        raise AssertionError(f"protoc failed on {files}")
    sys.path.insert(0, out)
    names = ["meta_pb2", "tool_pb2"]
    names += [f"{service}{suffix}" for service in SERVICES for suffix in ("_pb2", "_pb2_grpc")]
    return {name: importlib.import_module(f"toolplane.v1.{name}") for name in names}
