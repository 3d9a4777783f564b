"""Tenant access seen from grpcio, the Python gRPC implementation: a client presenting a client
certificate (mutual TLS) acts for the tenants its identity is granted, a bearer token sent as
call metadata adds its entry's tenants, and the refusals carry their status code and
google.rpc ErrorInfo (read with grpcio-status).

Run by tests/tenant_access.rs against a toolplane serving TLS whose rules grant the
certificate tenant 1 and the token tenant 2:

    python python_tenant_access.py ADDRESS PROTO_DIR CA_FILE CERT_FILE KEY_FILE TOKEN

Prints one line per check and exits 0 when all pass; the first failed check raises, with
what was expected and what came back.
"""

import sys

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

import toolplane_stubs
from peer_checks import CHECKS, check, expect


class Caller:
    """A channel presenting the client certificate, and the discovery stub over it."""

    def __init__(self, address, proto_dir, ca_file, cert_file, key_file, token):
        stubs = toolplane_stubs.generate(proto_dir)
        self.discovery_pb2, self.meta_pb2 = stubs["discovery_service_pb2"], stubs["meta_pb2"]
        read = lambda path: open(path, "rb").read()
        credentials = grpc.ssl_channel_credentials(
            root_certificates=read(ca_file),
            private_key=read(key_file),
            certificate_chain=read(cert_file))
        self.channel = grpc.secure_channel(address, credentials)
        self.discovery = stubs["discovery_service_pb2_grpc"].DiscoveryServiceStub(self.channel)
        self.token = token

    def list_services(self, tenant, token=None):
        metadata = [("authorization", f"Bearer {token}")] if token else None
        request = self.discovery_pb2.ListServicesRequest(
            meta=self.meta_pb2.Meta(tenant_id=tenant, correlation_id="python-tenant-access"))
        return self.discovery.ListServices(request, metadata=metadata, timeout=10)


def refusal(function):
    """Runs a call expected to fail: its code and its ErrorInfo."""
    try:
        answer = function()
    except grpc.RpcError as error:
        status = rpc_status.from_call(error)
        expect(status is not None, f"no grpc-status-details-bin on {error.code()}")
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                return error, info
        raise AssertionError(f"no ErrorInfo on {error.code()}: {error.details()}")
    raise AssertionError(f"expected a refusal, got {answer}")


@check("the certificate's tenant is listed; another is PERMISSION_DENIED with ErrorInfo")
def certificate_tenants(caller):
    caller.list_services(1)
    error, info = refusal(lambda: caller.list_services(2))
    expect(error.code() == grpc.StatusCode.PERMISSION_DENIED, f"code {error.code()}")
    expect(info.reason == "RESOURCE_ACCESS_DENIED", f"reason {info.reason}")
    expect(info.metadata["tenant"] == "2", f"metadata {dict(info.metadata)}")
    expect("may not act for tenant 2" in error.details(), error.details())


@check("a bearer token in the call's metadata adds its tenant to the certificate's")
def token_tenants(caller):
    caller.list_services(2, token=caller.token)
    caller.list_services(1, token=caller.token)
    error, info = refusal(lambda: caller.list_services(3, token=caller.token))
    expect(error.code() == grpc.StatusCode.PERMISSION_DENIED, f"code {error.code()}")
    expect("the bearer token of" in info.metadata["caller"], f"metadata {dict(info.metadata)}")


@check("a token no entry holds is UNAUTHENTICATED")
def unknown_token(caller):
    error, info = refusal(lambda: caller.list_services(1, token="guessed"))
    expect(error.code() == grpc.StatusCode.UNAUTHENTICATED, f"code {error.code()}")
    expect(info.reason == "RESOURCE_ACCESS_DENIED", f"reason {info.reason}")


def main():
    caller = Caller(*sys.argv[1:7])
    for name, function in CHECKS:
        function(caller)
        print(f"ok: {name}", flush=True)
    print(f"python grpcio tenant access: {len(CHECKS)} checks passed", flush=True)


if __name__ == "__main__":
    main()
