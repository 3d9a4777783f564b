"""toolplane's MCP endpoint driven by the official MCP Python SDK (`mcp`), as an MCP client
would use it: once speaking protocol 2026-07-28 (no sessions; change notifications on a
`subscriptions/listen` stream), once through the 2025-11-25 initialize handshake (a session;
notifications on its stream). Services are registered and records read over gRPC, with the
stubs grpcio-tools generates from proto/.

Run by tests/mcp.rs against a running toolplane serving MCP, with the example Structs
provider registered (service "structs", tenant 0):

    python python_mcp_client.py GRPC_ADDRESS PROTO_DIR MCP_URL STRUCTS_ENDPOINT

Prints one line per check and exits 0 when all pass; the first failed check raises, with
what was expected and what came back.
"""

import asyncio
import contextlib
import logging
import sys

import grpc
import httpx2
from google.protobuf import json_format
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

import toolplane_stubs
from peer_checks import CHECKS, check, expect

INVALID_PARAMS = -32602
BULK_TOOLS = 600


class Toolplane:
    """gRPC stubs for registering services and reading records, and the MCP endpoint."""

    def __init__(self, address, proto_dir, mcp_url, structs_endpoint):
        stubs = toolplane_stubs.generate(proto_dir)
        self.discovery_pb2, self.invoke_pb2 = stubs["discovery_service_pb2"], stubs["invoke_service_pb2"]
        self.meta_pb2, self.tool_pb2 = stubs["meta_pb2"], stubs["tool_pb2"]
        self.channel = grpc.insecure_channel(address)
        self.discovery = stubs["discovery_service_pb2_grpc"].DiscoveryServiceStub(self.channel)
        self.invoke = stubs["invoke_service_pb2_grpc"].ToolInvokeServiceStub(self.channel)
        self.mcp_url = mcp_url
        self.structs_endpoint = structs_endpoint

    def register(self, service, tool_names, tenant=0, endpoint="http://127.0.0.1:7001",
                 output_schema=None):
        tools = []
        for name in tool_names:
            tool = self.tool_pb2.ToolRegistration(tool_name=name, description=f"{name} of {service}")
            json_format.ParseDict({"type": "object"}, tool.tool_schema)
            if output_schema is not None:
                json_format.ParseDict(output_schema, tool.output_schema)
            tools.append(tool)
        registration = self.discovery_pb2.ServiceRegistration(
            service_name=service, service_version="1.0.0", endpoint=endpoint, tools=tools)
        registration.ttl.FromSeconds(120)
        self.discovery.RegisterService(self.discovery_pb2.RegisterServiceRequest(
            meta=self.meta_pb2.Meta(tenant_id=tenant), registration=registration), timeout=10)

    def record(self, invocation_id):
        return self.invoke.GetInvocationRecord(self.invoke_pb2.GetInvocationRecordRequest(
            meta=self.meta_pb2.Meta(tenant_id=0), invocation_id=invocation_id), timeout=10).record

    @contextlib.asynccontextmanager
    async def client(self, mode="auto", tenant=None, message_handler=None):
        """A connected MCP client, of `tenant` when given (the toolplane-tenant-id header)."""
        headers = {} if tenant is None else {"toolplane-tenant-id": tenant}
        # The SDK's own timeouts: a response stream may stay open a while.
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http:
            transport = streamable_http_client(self.mcp_url, http_client=http)
            async with Client(transport, mode=mode, message_handler=message_handler) as client:
                yield client


async def all_tools(client):
    """Every listed tool, following nextCursor."""
    tools, cursor, pages = [], None, 0
    while True:
        page = await client.list_tools(cursor=cursor) if cursor else await client.list_tools()
        tools.extend(page.tools)
        pages += 1
        cursor = page.next_cursor
        if not cursor:
            return tools, pages


async def protocol_error(call):
    try:
        answer = await call
    except MCPError as error:
        return error
    raise AssertionError(f"expected a JSON-RPC error, got {answer}")


@check("tools/list pages through every tool (nextCursor), each with toolplane's _meta")
async def listing(tp):
    tp.register("bulk-a", [f"a_{i:04}" for i in range(BULK_TOOLS)])
    tp.register("bulk-b", [f"b_{i:04}" for i in range(BULK_TOOLS)])
    async with tp.client() as client:
        tools, pages = await all_tools(client)
    names = [tool.name for tool in tools]
    expect(len(names) == len(set(names)), "a name listed twice")
    expect(pages >= 2, f"{len(names)} tools came in {pages} page(s)")
    expect({f"a_{i:04}" for i in range(BULK_TOOLS)} <= set(names), "bulk-a's tools missing")
    power = next(tool for tool in tools if tool.name == "structs_calculate_power")
    expect(power.input_schema["required"] == ["alpha_matter", "generator_type"], power.input_schema)
    expect(power.output_schema["type"] == "object", f"output schema: {power.output_schema}")
    expect(power.meta["toolplane/service"] == "structs", f"meta: {power.meta}")
    expect(power.meta["toolplane/capabilities"] == ["caching", "retry"], f"meta: {power.meta}")
    expect(power.meta["toolplane/domains"] == ["structs", "structs.powers"], f"meta: {power.meta}")
    expect(power.meta["toolplane/categories"] == [], f"meta: {power.meta}")
    expect(power.annotations is not None and power.annotations.idempotent_hint is True,
           f"a tool safe to retry is not annotated idempotent: {power.annotations}")
    # The provider's own hints, and its title at both places MCP has one.
    expect(power.annotations.read_only_hint is True and power.annotations.open_world_hint is False,
           f"the provider's hints: {power.annotations}")
    expect(power.annotations.destructive_hint is None, f"a hint never said: {power.annotations}")
    expect(power.title == "Calculate generator power"
           and power.annotations.title == "Calculate generator power",
           f"title: {power.title!r}, {power.annotations}")
    bulk = next(tool for tool in tools if tool.name == "a_0000")
    expect(bulk.annotations is None, f"annotations of a tool without retry: {bulk.annotations}")


@check("tools/call runs the tool through toolplane: structured output and its record")
async def call(tp):
    async with tp.client() as client:
        result = await client.call_tool(
            "structs_calculate_power", {"alpha_matter": 7, "generator_type": "fieldGenerator"})
    expect(not result.is_error, f"failed: {result}")
    expect(result.structured_content["power_generated"] == 14, f"output: {result}")
    expect('"power_generated":14' in result.content[0].text, f"text: {result.content}")
    record = tp.record(result.meta["toolplane/invocation_id"])
    expect(record.tool_name == "structs_calculate_power" and record.service_name == "structs",
           f"record: {record}")
    expect(tp.invoke_pb2.InvocationStatus.Name(record.status) == "INVOCATION_STATUS_SUCCEEDED",
           f"record status: {record.status}")


@check("a large input (past 16 KB, checked off the serving threads) is called and answered")
async def large_input(tp):
    data = list(range(20000))
    async with tp.client() as client:
        result = await client.call_tool(
            "structs_validate_schema", {"data": data, "schema": {"type": "array"}})
    expect(not result.is_error and result.structured_content["valid"], f"answer: {result}")


@check("arguments the schema refuses are a tool error a model can act on, and recorded")
async def bad_arguments(tp):
    async with tp.client() as client:
        result = await client.call_tool("structs_calculate_power", {"alpha_matter": -1})
    expect(result.is_error, f"not an error: {result}")
    text = result.content[0].text
    expect("generator_type" in text and "required" in text, f"text: {text}")
    expect(result.meta["toolplane/error_reason"] == "VALIDATION_INPUT", f"meta: {result.meta}")
    record = tp.record(result.meta["toolplane/invocation_id"])
    expect(tp.invoke_pb2.InvocationStatus.Name(record.status) == "INVOCATION_STATUS_INVALID_INPUT",
           f"record status: {record.status}")


@check("a name two services offer is listed and called as SERVICE.TOOL; plain, it is refused; "
       "a tool named as another service's tool is listed as ITS_SERVICE.NAME")
async def ambiguous(tp):
    tp.register("structs-mirror", ["structs_validate_entity_id"], endpoint=tp.structs_endpoint)
    # Named as structs' own tool reads as SERVICE.TOOL: it must not take that tool's calls.
    tp.register("mimic", ["structs.structs_validate_entity_id"])
    async with tp.client() as client:
        listed = [tool.name for tool in (await all_tools(client))[0]]
        names = set(listed)
        expected = {"structs.structs_validate_entity_id", "structs-mirror.structs_validate_entity_id",
                    "mimic.structs.structs_validate_entity_id"}
        expect(expected <= names and "structs_validate_entity_id" not in names, "names listed")
        expect(len(names) == len(listed), f"a name listed twice: {sorted(listed)}")
        for name in ("structs-mirror.structs_validate_entity_id",
                     "structs.structs_validate_entity_id"):
            result = await client.call_tool(name, {"id": "1-42"})
            expect(not result.is_error and result.structured_content["valid"],
                   f"answer to {name}: {result}")
        error = await protocol_error(client.call_tool("structs_validate_entity_id", {"id": "1-42"}))
        expect(error.code == INVALID_PARAMS, f"code {error.code}")
        expect("structs-mirror.structs_validate_entity_id" in error.message, error.message)
        error = await protocol_error(client.call_tool("no_such_tool", {}))
        expect(error.code == INVALID_PARAMS and "no_such_tool" in error.message, error.message)


@check("the toolplane-tenant-id header scopes the tools; a bad one is refused")
async def tenants(tp):
    tp.register("tenant-seven", ["seventh_tool"], tenant=7)
    async with tp.client(tenant="7") as client:
        names = [tool.name for tool in (await all_tools(client))[0]]
    expect(names == ["seventh_tool"], f"tenant 7 sees {names[:5]}")
    async with tp.client() as client:
        names = {tool.name for tool in (await all_tools(client))[0]}
    expect("seventh_tool" not in names, "tenant 0 sees tenant 7's tool")
    try:
        async with tp.client(tenant="seven") as client:
            error = await protocol_error(client.list_tools())
            expect("toolplane-tenant-id" in error.message, error.message)
    except MCPError as error:
        # Refused already on connecting.
        expect("toolplane-tenant-id" in error.message, error.message)


@check("2026-07-28: a subscriptions/listen stream is told when the tool list changes")
async def listen(tp):
    async with tp.client() as client:
        expect(client.protocol_version == "2026-07-28", client.protocol_version)
        async with client.listen(tools_list_changed=True) as subscription:
            tp.register("listened-to", ["fresh_tool"])
            event = await asyncio.wait_for(anext(aiter(subscription)), timeout=10)
            expect("tool" in type(event).__name__.lower() or "tool" in str(event).lower(), event)
        names = {tool.name for tool in (await all_tools(client))[0]}
        expect("fresh_tool" in names, "the new tool is not listed")


@check("2025-11-25 handshake: one session's calls share a correlation id; list_changed arrives")
async def legacy_session(tp):
    changed = asyncio.Event()

    async def on_message(message):
        if "ToolListChanged" in type(message).__name__ or "tools/list_changed" in str(message):
            changed.set()

    async with tp.client(mode="legacy", message_handler=on_message) as client:
        expect(client.protocol_version == "2025-11-25", client.protocol_version)
        ids = []
        for _ in range(2):
            result = await client.call_tool("structs_calculate_power",
                                            {"alpha_matter": 1, "generator_type": "reactor"})
            expect(not result.is_error, f"failed: {result}")
            ids.append(result.meta["toolplane/invocation_id"])
        first, second = (tp.record(invocation_id) for invocation_id in ids)
        expect(first.correlation_id == second.correlation_id, "calls of one session differ")
        tp.register("legacy-listened", ["legacy_fresh_tool"])
        await asyncio.wait_for(changed.wait(), timeout=10)
    async with tp.client(mode="legacy") as client:
        result = await client.call_tool("structs_calculate_power",
                                        {"alpha_matter": 1, "generator_type": "reactor"})
    other = tp.record(result.meta["toolplane/invocation_id"])
    expect(other.correlation_id != first.correlation_id, "two sessions share a correlation id")


@check("a 2025-11-25 session ends with DELETE, which the SDK takes as ended: nothing logged")
async def session_end(tp):
    logged = []
    handler = logging.Handler(level=logging.WARNING)
    handler.emit = lambda record: logged.append(record.getMessage())
    sdk_log = logging.getLogger("mcp.client.streamable_http")
    sdk_log.addHandler(handler)
    try:
        async with tp.client(mode="legacy") as client:
            expect(client.protocol_version == "2025-11-25", client.protocol_version)
            await client.list_tools()
    finally:
        sdk_log.removeHandler(handler)
    expect(not logged, f"the SDK logged at the session's end: {logged}")


@check("an output its own output schema refuses is a tool error giving the mismatch and output")
async def output_mismatch(tp):
    # Last: it offers a third structs_validate_entity_id.
    tp.register("structs-strict", ["structs_validate_entity_id"], endpoint=tp.structs_endpoint,
                output_schema={"type": "object", "required": ["nonexistent"]})
    async with tp.client() as client:
        tools = (await all_tools(client))[0]
        strict = next(tool for tool in tools
                      if tool.name == "structs-strict.structs_validate_entity_id")
        expect(strict.output_schema["required"] == ["nonexistent"], strict.output_schema)
        result = await client.call_tool(strict.name, {"id": "1-42"})
    expect(result.is_error, f"not an error: {result}")
    expect(result.meta["toolplane/error_reason"] == "VALIDATION_OUTPUT", f"meta: {result.meta}")
    text = result.content[0].text
    expect("does not match its output schema" in text and "nonexistent" in text, text)
    expect('"valid":true' in text, f"the output is not given: {text}")
    record = tp.record(result.meta["toolplane/invocation_id"])
    expect(tp.invoke_pb2.InvocationStatus.Name(record.status) == "INVOCATION_STATUS_SUCCEEDED",
           f"record status: {record.status}")


async def run(tp):
    for name, function in CHECKS:
        await function(tp)
        print(f"ok: {name}", flush=True)
    print(f"python mcp: {len(CHECKS)} checks passed", flush=True)


def main():
    address, proto_dir, mcp_url, structs_endpoint = sys.argv[1:5]
    asyncio.run(run(Toolplane(address, proto_dir, mcp_url, structs_endpoint)))


if __name__ == "__main__":
    main()
