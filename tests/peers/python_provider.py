"""A toolplane tool provider written in Python with grpcio (gRPC C-core's HTTP/2 server), as a
Python team would write one: it serves toolplane.v1.ToolProviderService and grpc.health.v1,
registers with toolplane and keeps its lease with heartbeats (registering again when told the
lease is gone). It takes at most 8 calls at once on a connection (HTTP/2
SETTINGS_MAX_CONCURRENT_STREAMS) and, when MAX_CONNECTION_AGE_MS is set, closes each connection
that long into its life (grpc.max_connection_age_ms), as servers behind Kubernetes Services are
often told to so that load spreads again. With TLS_CERT_FILE and TLS_KEY_FILE it serves TLS
(BoringSSL, in C-core) and registers an https:// endpoint; with TLS_CLIENT_CA_FILE too, it
takes only callers presenting a certificate that CA signed. With INSTANCE_ID it registers as
that replica of the service. toolplane calls it with its own HTTP/2 client;
tests/polyglot_providers.rs invokes its tools through toolplane.

    python python_provider.py TOOLPLANE_ADDRESS PROTO_DIR SERVICE_NAME

Prints "registered SERVICE_NAME PORT" once registered; deregisters and exits when its standard
input closes. Its tools:

- echo: answers its input.
- fail: fails FAILED_PRECONDITION with an ErrorInfo (reason TOOL_QUOTA_SPENT).
- big: answers {"text": "x" repeated `bytes` times}.
- wait: waits until the call is cancelled (at most 30 s), noting the deadline it was given
  and whether it saw the cancellation; last_wait answers what the last wait noted.
- set_health: reports NOT_SERVING on grpc.health.v1 for `seconds`, then SERVING again.
"""

import os
import sys
import threading
import time
from concurrent import futures

import grpc
from google.protobuf import any_pb2, json_format
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_status import rpc_status

import toolplane_stubs

HEARTBEAT_SECONDS = 1.0
MAX_CONCURRENT_STREAMS = int(os.environ.get("MAX_CONCURRENT_STREAMS", "8"))
TTL_SECONDS = 10
OBJECT = {"type": "object"}
TOOLS = {
    "echo": OBJECT,
    "fail": OBJECT,
    "big": {"type": "object", "required": ["bytes"],
            "properties": {"bytes": {"type": "integer", "minimum": 1, "maximum": 3000000}}},
    "wait": OBJECT,
    "last_wait": OBJECT,
    "set_health": {"type": "object", "required": ["seconds"],
                   "properties": {"seconds": {"type": "number", "minimum": 0}}},
}


class Provider:
    """ToolProviderService's CallTool over the tools above."""

    def __init__(self, stubs, health_servicer):
        self.provider_pb2 = stubs["provider_service_pb2"]
        self.health = health_servicer
        self.last_wait = {}
        self.lock = threading.Lock()

    def CallTool(self, request, context):
        answer = self.provider_pb2.CallToolResponse()
        name = request.tool_name
        if name == "echo":
            answer.output.struct_value.CopyFrom(request.input)
        elif name == "fail":
            info = error_details_pb2.ErrorInfo(reason="TOOL_QUOTA_SPENT", domain="python-provider")
            detail = any_pb2.Any()
            detail.Pack(info)
            context.abort_with_status(rpc_status.to_status(status_pb2.Status(
                code=code_pb2.FAILED_PRECONDITION, message="the python provider's quota is spent",
                details=[detail])))
        elif name == "big":
            answer.output.struct_value.update({"text": "x" * int(request.input["bytes"])})
        elif name == "wait":
            remaining = context.time_remaining()
            started = time.monotonic()
            while context.is_active() and time.monotonic() - started < 30:
                time.sleep(0.01)
            with self.lock:
                self.last_wait = {"time_remaining": remaining if remaining is not None else -1,
                                  "cancelled": not context.is_active()}
        elif name == "last_wait":
            with self.lock:
                answer.output.struct_value.update(self.last_wait)
        elif name == "set_health":
            self.health.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
            threading.Timer(float(request.input["seconds"]), lambda: self.health.set(
                "", health_pb2.HealthCheckResponse.SERVING)).start()
            answer.output.struct_value.update({"serving": False})
        else:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no tool {name}")
        return answer


class Lease:
    """The provider's registration with toolplane, kept alive by heartbeats."""

    def __init__(self, stubs, toolplane_address, service, endpoint):
        self.discovery_pb2 = stubs["discovery_service_pb2"]
        self.meta = stubs["meta_pb2"].Meta(tenant_id=0, correlation_id=f"{service}-lease")
        self.discovery = stubs["discovery_service_pb2_grpc"].DiscoveryServiceStub(
            grpc.insecure_channel(toolplane_address))
        self.registration = self.discovery_pb2.ServiceRegistration(
            service_name=service, service_version="1.0.0", endpoint=endpoint,
            instance_id=os.environ.get("INSTANCE_ID", ""))
        self.registration.ttl.FromSeconds(TTL_SECONDS)
        for name, schema in TOOLS.items():
            tool = self.registration.tools.add(tool_name=name, description=f"{name} (Python)")
            json_format.ParseDict(schema, tool.tool_schema)
        self.lease_id = None
        self.stopped = threading.Event()

    def register(self):
        answer = self.discovery.RegisterService(self.discovery_pb2.RegisterServiceRequest(
            meta=self.meta, registration=self.registration), timeout=10)
        self.lease_id = answer.lease_id

    def keep_alive(self):
        while not self.stopped.wait(HEARTBEAT_SECONDS):
            try:
                self.discovery.Heartbeat(self.discovery_pb2.HeartbeatRequest(
                    meta=self.meta, service_name=self.registration.service_name,
                    lease_id=self.lease_id), timeout=5)
            except grpc.RpcError as error:
                if error.code() == grpc.StatusCode.NOT_FOUND:
                    self.register()

    def deregister(self):
        self.stopped.set()
        self.discovery.DeregisterService(self.discovery_pb2.DeregisterServiceRequest(
            meta=self.meta, service_name=self.registration.service_name,
            lease_id=self.lease_id), timeout=10)


def listen(server):
    """Listens on a free loopback port: over TLS with TLS_CERT_FILE and TLS_KEY_FILE (asking
    callers for a certificate TLS_CLIENT_CA_FILE signed, when that is set), else in plain text.
    Answers the port and the endpoint's scheme."""
    cert_file, key_file = os.environ.get("TLS_CERT_FILE"), os.environ.get("TLS_KEY_FILE")
    if not cert_file:
        return server.add_insecure_port("127.0.0.1:0"), "http"
    read = lambda path: open(path, "rb").read()
    client_ca = os.environ.get("TLS_CLIENT_CA_FILE")
    credentials = grpc.ssl_server_credentials(
        [(read(key_file), read(cert_file))],
        root_certificates=read(client_ca) if client_ca else None,
        require_client_auth=bool(client_ca))
    return server.add_secure_port("127.0.0.1:0", credentials), "https"


def main():
    toolplane_address, proto_dir, service = sys.argv[1:4]
    stubs = toolplane_stubs.generate(proto_dir)
    health_servicer = health.HealthServicer()
    health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    # Few streams at once per connection, as a provider guarding itself would allow: toolplane
    # must queue its calls behind the limit rather than have them refused.
    options = [("grpc.max_concurrent_streams", MAX_CONCURRENT_STREAMS)]
    if os.environ.get("MAX_CONNECTION_AGE_MS"):
        options += [("grpc.max_connection_age_ms", int(os.environ["MAX_CONNECTION_AGE_MS"])),
                    ("grpc.max_connection_age_grace_ms", 5000)]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=64), options=options)
    stubs["provider_service_pb2_grpc"].add_ToolProviderServiceServicer_to_server(
        Provider(stubs, health_servicer), server)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    port, scheme = listen(server)
    server.start()
    lease = Lease(stubs, toolplane_address, service, f"{scheme}://127.0.0.1:{port}")
    lease.register()
    threading.Thread(target=lease.keep_alive, daemon=True).start()
    print(f"registered {service} {port}", flush=True)
    sys.stdin.read()
    lease.deregister()
    server.stop(grace=1).wait()


if __name__ == "__main__":
    main()
