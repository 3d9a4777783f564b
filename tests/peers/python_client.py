"""toolplane driven by grpcio, the Python gRPC implementation, with stubs that grpcio-tools
generates from proto/ here (as a Python team would): registration, listing with paging,
search, pre-flight, invocation (gzip-compressed too), google.rpc error details read with grpcio-status,
grpc.health.v1 Check and Watch through grpcio-health-checking's stubs, an agent's streamed
turn, and urllib's HTTP/1.1 request to the gRPC address answered in words.

Run by tests/polyglot.rs against a running toolplane with the example Structs provider
registered (service "structs", tenant 0):

    python python_client.py ADDRESS PROTO_DIR

Prints one line per check and exits 0 when all pass; the first failed check raises, with
what was expected and what came back.
"""

import queue
import sys
import threading
import urllib.error
import urllib.request

import grpc
from google.protobuf import json_format
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status

import toolplane_stubs
from peer_checks import CHECKS, check, expect

TENANT = 0


class Toolplane:
    """The stubs, the generated modules and a channel to one server."""

    def __init__(self, address, proto_dir):
        stubs = toolplane_stubs.generate(proto_dir)
        self.discovery_pb2, self.invoke_pb2 = stubs["discovery_service_pb2"], stubs["invoke_service_pb2"]
        self.meta_pb2, self.tool_pb2 = stubs["meta_pb2"], stubs["tool_pb2"]
        self.agent_pb2 = stubs["agent_service_pb2"]
        discovery_grpc = stubs["discovery_service_pb2_grpc"]
        invoke_grpc = stubs["invoke_service_pb2_grpc"]
        agent_grpc = stubs["agent_service_pb2_grpc"]
        self.address = address
        self.channel = grpc.insecure_channel(address)
        self.discovery = discovery_grpc.DiscoveryServiceStub(self.channel)
        self.invoke = invoke_grpc.ToolInvokeServiceStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)
        self.agents = agent_grpc.AgentServiceStub(self.channel)

    def meta(self, correlation_id="python-client"):
        return self.meta_pb2.Meta(tenant_id=TENANT, correlation_id=correlation_id)

    def tool(self, name, schema):
        registration = self.tool_pb2.ToolRegistration(tool_name=name,
                                                      description=f"{name} from Python")
        json_format.ParseDict(schema, registration.tool_schema)
        return registration

    def register(self, service, tools):
        registration = self.discovery_pb2.ServiceRegistration(
            service_name=service, service_version="1.0.0",
            endpoint="http://127.0.0.1:7001", tools=tools)
        registration.ttl.FromSeconds(60)
        return self.discovery.RegisterService(self.discovery_pb2.RegisterServiceRequest(
            meta=self.meta(), registration=registration), timeout=10)


def rich_error(error):
    """The google.rpc details of a failed call: (ErrorInfo, [BadRequest field violations])."""
    status = rpc_status.from_call(error)
    expect(status is not None, f"no grpc-status-details-bin on {error.code()}: {error.details()}")
    expect(status.code == error.code().value[0], "details disagree with the status code")
    info, violations = None, []
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
        elif detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad_request = error_details_pb2.BadRequest()
            detail.Unpack(bad_request)
            violations = [(v.field, v.description) for v in bad_request.field_violations]
    expect(info is not None, "no ErrorInfo among the details")
    return info, violations


def failed_call(function):
    """Runs a call expected to fail and returns its grpc.RpcError."""
    try:
        answer = function()
    except grpc.RpcError as error:
        return error
    raise AssertionError(f"expected a failed call, got {answer}")


@check("grpc.health.v1 Check: the server, a registered service, a name never seen")
def health_check(tp):
    answer = tp.health.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
    expect(answer.status == health_pb2.HealthCheckResponse.SERVING, f"server: {answer}")
    answer = tp.health.Check(health_pb2.HealthCheckRequest(service="structs"), timeout=10)
    expect(answer.status == health_pb2.HealthCheckResponse.SERVING, f"structs: {answer}")
    error = failed_call(lambda: tp.health.Check(
        health_pb2.HealthCheckRequest(service="never-registered"), timeout=10))
    expect(error.code() == grpc.StatusCode.NOT_FOUND, f"never seen: {error.code()}")


@check("grpc.health.v1 Watch: SERVICE_UNKNOWN kept open, then SERVING, then SERVICE_UNKNOWN")
def health_watch(tp):
    statuses = queue.Queue()
    stream = tp.health.Watch(health_pb2.HealthCheckRequest(service="python-watched"),
                             timeout=30)

    def read():
        try:
            for answer in stream:
                statuses.put(answer.status)
        except grpc.RpcError as error:
            statuses.put(error.code())

    threading.Thread(target=read, daemon=True).start()
    unknown = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN
    serving = health_pb2.HealthCheckResponse.SERVING
    expect(statuses.get(timeout=10) == unknown, "first status of an unknown name")
    registered = tp.register("python-watched", [tp.tool("noop", {"type": "object"})])
    expect(statuses.get(timeout=10) == serving, "status once registered")
    tp.discovery.DeregisterService(tp.discovery_pb2.DeregisterServiceRequest(
        meta=tp.meta(), service_name="python-watched", lease_id=registered.lease_id),
        timeout=10)
    expect(statuses.get(timeout=10) == unknown, "status once deregistered")
    stream.cancel()


@check("RegisterService: tools come back with their definition hashes")
def register(tp):
    tools = [tp.tool(f"py_tool_{index:02}", {
        "type": "object", "properties": {"n": {"type": "integer", "minimum": index}},
        "required": ["n"]}) for index in range(25)]
    answer = tp.register("python-tools", tools)
    expect(answer.lease_id, "no lease id")
    expect(len(answer.tools) == 25, f"{len(answer.tools)} tools answered")
    for tool in answer.tools:
        expect(len(tool.definition_sha256) == 64, f"hash of {tool.tool_name}")
    expect(answer.meta.correlation_id == "python-client", f"correlation id: {answer.meta}")


@check("ListTools: pages of 10 give every tool once; GetTool gives back the schema")
def list_and_get(tp):
    seen, token, pages = [], "", 0
    while True:
        page = tp.discovery.ListTools(tp.discovery_pb2.ListToolsRequest(
            meta=tp.meta(), service_name="python-tools", page_size=10, page_token=token),
            timeout=10)
        seen += [tool.tool_name for tool in page.tools]
        pages += 1
        token = page.next_page_token
        if not token:
            break
    expect(pages == 3, f"{pages} pages")
    expect(seen == [f"py_tool_{index:02}" for index in range(25)], f"listed {seen}")
    got = tp.discovery.GetTool(tp.discovery_pb2.GetToolRequest(
        meta=tp.meta(), tool_name="py_tool_07", service_name="python-tools"), timeout=10)
    schema = json_format.MessageToDict(got.tool.tool_schema)
    expect(schema["properties"]["n"] == {"type": "integer", "minimum": 7}, f"schema {schema}")


@check("SearchTools: the best match first, with its score; an empty query names the field")
def search(tp):
    found = tp.discovery.SearchTools(tp.discovery_pb2.SearchToolsRequest(
        meta=tp.meta(), query="validate a JSON schema"), timeout=10)
    names = [match.tool.tool_name for match in found.matches]
    expect(names == ["structs_validate_schema", "structs_validate_entity_id"], f"ranked {names}")
    expect(found.total_matches == 2, f"{found.total_matches} matches")
    scores = [match.score for match in found.matches]
    expect(scores[0] > scores[1] > 0, f"scores {scores}")
    found = tp.discovery.SearchTools(tp.discovery_pb2.SearchToolsRequest(
        meta=tp.meta(), query="calculate", max_results=1), timeout=10)
    expect(len(found.matches) == 1 and found.total_matches == 3, f"{found}")
    expect(found.matches[0].tool.tool_schema.fields, "the match carries its schema")
    error = failed_call(lambda: tp.discovery.SearchTools(tp.discovery_pb2.SearchToolsRequest(
        meta=tp.meta(), query="  "), timeout=10))
    expect(error.code() == grpc.StatusCode.INVALID_ARGUMENT, f"code {error.code()}")
    info, violations = rich_error(error)
    expect(info.reason == "VALIDATION_FIELD", f"reason {info.reason}")
    expect(violations and violations[0][0] == "query", f"violations {violations}")


@check("Domains, categories and annotations: declared or inferred, read back, filtering ListTools and SearchTools")
def labels(tp):
    declared = tp.tool("py_ledger", {"type": "object"})
    declared.domains.extend(["finance", "finance.ledgers"])
    declared.categories.append("crud.read")
    deleting = tp.tool("py_delete_invoice", {"type": "object"})
    deleting.annotations.title = "Delete an invoice"
    deleting.annotations.destructive_hint = True
    tp.register("python-labels", [declared, deleting])
    page = tp.discovery.ListTools(tp.discovery_pb2.ListToolsRequest(
        meta=tp.meta(), domain="finance"), timeout=10)
    expect([tool.tool_name for tool in page.tools] == ["py_ledger"], f"{page}")
    expect(list(page.tools[0].categories) == ["crud.read"], f"{page.tools[0]}")
    page = tp.discovery.ListTools(tp.discovery_pb2.ListToolsRequest(
        meta=tp.meta(), service_name="python-labels", category="crud"), timeout=10)
    expect([tool.tool_name for tool in page.tools] == ["py_delete_invoice", "py_ledger"], f"{page}")
    inferred = page.tools[0]
    expect(list(inferred.domains) == ["python-labels", "python-labels.invoices"], f"{inferred}")
    expect(list(inferred.categories) == ["crud.delete"], f"{inferred}")
    # Annotations come back as declared: a hint never set stays unset (proto3 optional).
    hints = inferred.annotations
    expect(hints.title == "Delete an invoice" and hints.destructive_hint, f"{hints}")
    expect(not hints.HasField("read_only_hint"), f"a hint never set: {hints}")
    expect(not page.tools[1].HasField("annotations"), f"{page.tools[1]}")
    found = tp.discovery.SearchTools(tp.discovery_pb2.SearchToolsRequest(
        meta=tp.meta(), query="calculate power", domain="structs.powers"), timeout=10)
    expect([match.tool.tool_name for match in found.matches] == ["structs_calculate_power"],
           f"{found}")
    error = failed_call(lambda: tp.discovery.ListTools(tp.discovery_pb2.ListToolsRequest(
        meta=tp.meta(), category="CRUD"), timeout=10))
    expect(error.code() == grpc.StatusCode.INVALID_ARGUMENT, f"code {error.code()}")
    info, violations = rich_error(error)
    expect(violations and violations[0][0] == "category", f"violations {violations}")


@check("RegisterService with a bad schema: INVALID_ARGUMENT, VALIDATION_SCHEMA, the field")
def bad_registration(tp):
    error = failed_call(lambda: tp.register("python-bad", [
        tp.tool("fine", {"type": "object"}), tp.tool("broken", {"type": "no-such-type"})]))
    expect(error.code() == grpc.StatusCode.INVALID_ARGUMENT, f"code {error.code()}")
    info, violations = rich_error(error)
    expect(info.reason == "VALIDATION_SCHEMA", f"reason {info.reason}")
    expect(info.domain == "toolplane", f"domain {info.domain}")
    expect(violations and violations[0][0] == "registration.tools[1].tool_schema",
           f"violations {violations}")
    error = failed_call(lambda: tp.discovery.GetService(tp.discovery_pb2.GetServiceRequest(
        meta=tp.meta(), service_name="python-bad"), timeout=10))
    expect(error.code() == grpc.StatusCode.NOT_FOUND, "part of a bad registration was kept")


@check("Preflight: a missing required tool makes ok false and names it")
def preflight(tp):
    requirement = tp.discovery_pb2.ServiceRequirement
    answer = tp.discovery.Preflight(tp.discovery_pb2.PreflightRequest(meta=tp.meta(), requirements=[
        requirement(service_name="structs", tool_names=["structs_calculate_power"]),
        requirement(service_name="structs", tool_names=["no_such_tool"]),
        requirement(service_name="python-absent", tool_names=["x"], optional=True),
    ]), timeout=10)
    expect(not answer.ok, "ok with a missing required tool")
    missing = [(m.service_name, m.tool_name) for m in answer.missing_required]
    expect(missing == [("structs", "no_such_tool")], f"missing required {missing}")
    expect([m.service_name for m in answer.missing_optional] == ["python-absent"],
           f"missing optional {answer.missing_optional}")


@check("InvokeTool: the provider's answer and the record, plain and gzip-compressed")
def invoke(tp):
    request = tp.invoke_pb2.InvokeToolRequest(meta=tp.meta("python-invoke"),
                                              tool_name="structs_calculate_power")
    json_format.ParseDict({"alpha_matter": 100, "generator_type": "fieldGenerator"},
                          request.input)
    for compression in (grpc.Compression.NoCompression, grpc.Compression.Gzip):
        answer = tp.invoke.InvokeTool(request, timeout=10, compression=compression)
        output = json_format.MessageToDict(answer.output)
        expect(output["power_generated"] == 200, f"{compression}: output {output}")
        record = answer.record
        expect(record.status == tp.invoke_pb2.INVOCATION_STATUS_SUCCEEDED, f"{record}")
        expect(record.service_name == "structs", f"record service {record.service_name}")
        expect(record.correlation_id == "python-invoke", f"record {record.correlation_id}")
        expect(len(record.record_sha256) == 64, "record hash")


@check("InvokeTool with input the schema refuses: INVALID_ARGUMENT, VALIDATION_INPUT, the field")
def invalid_input(tp):
    request = tp.invoke_pb2.InvokeToolRequest(meta=tp.meta(), tool_name="structs_calculate_power")
    json_format.ParseDict({"alpha_matter": -1, "generator_type": "reactor"}, request.input)
    error = failed_call(lambda: tp.invoke.InvokeTool(request, timeout=10))
    expect(error.code() == grpc.StatusCode.INVALID_ARGUMENT, f"code {error.code()}")
    info, violations = rich_error(error)
    expect(info.reason == "VALIDATION_INPUT", f"reason {info.reason}")
    expect([field for field, _ in violations] == ["input/alpha_matter"], f"{violations}")


@check("Refusals of large bad input fit gRPC core's trailer limit: INVALID_ARGUMENT, not RESOURCE_EXHAUSTED")
def large_refusals(tp):
    request = tp.invoke_pb2.InvokeToolRequest(meta=tp.meta(), tool_name="structs_calculate_power")
    json_format.ParseDict({"alpha_matter": "9" * 200_000, "generator_type": "r" * 200_000},
                          request.input)
    error = failed_call(lambda: tp.invoke.InvokeTool(request, timeout=10))
    expect(error.code() == grpc.StatusCode.INVALID_ARGUMENT, f"code {error.code()}: {error.details()}")
    info, violations = rich_error(error)
    expect(info.reason == "VALIDATION_INPUT", f"reason {info.reason}")
    # The first violation alone (toolplane reports an input's first schema error).
    expect([field for field, _ in violations] in (["input/alpha_matter"], ["input/generator_type"]),
           f"{[field for field, _ in violations]}")
    expect(len(error.details()) < 2048, f"message of {len(error.details())} bytes")
    # A registration with a thousand bad tools: each is named among the violations as far as
    # they fit, and ErrorInfo counts them all.
    tools = [tp.tool(f"bad name {index}", {"type": "object"}) for index in range(1000)]
    error = failed_call(lambda: tp.register("python-many-bad", tools))
    expect(error.code() == grpc.StatusCode.INVALID_ARGUMENT, f"code {error.code()}: {error.details()}")
    info, violations = rich_error(error)
    expect(int(info.metadata["violations"]) >= 1000, f"{info.metadata}")
    expect(0 < len(violations) == int(info.metadata["violations_shown"]) < 1000,
           f"{len(violations)} shown, {info.metadata}")


@check("InvokeTool of a tool nobody offers: NOT_FOUND, RESOURCE_NOT_FOUND")
def unknown_tool(tp):
    request = tp.invoke_pb2.InvokeToolRequest(meta=tp.meta(), tool_name="python_no_such_tool")
    error = failed_call(lambda: tp.invoke.InvokeTool(request, timeout=10))
    expect(error.code() == grpc.StatusCode.NOT_FOUND, f"code {error.code()}")
    info, _ = rich_error(error)
    expect(info.reason == "RESOURCE_NOT_FOUND", f"reason {info.reason}")


@check("A request over 4 MiB: RESOURCE_EXHAUSTED, RESOURCE_MESSAGE_TOO_LARGE, its size and the limit")
def too_large(tp):
    request = tp.invoke_pb2.InvokeToolRequest(meta=tp.meta(), tool_name="structs_calculate_power")
    json_format.ParseDict({"padding": "x" * (5 * 1024 * 1024)}, request.input)
    error = failed_call(lambda: tp.invoke.InvokeTool(request, timeout=10))
    expect(error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, f"code {error.code()}")
    info, _ = rich_error(error)
    expect(info.reason == "RESOURCE_MESSAGE_TOO_LARGE", f"reason {info.reason}")
    expect(info.metadata["limit_bytes"] == "4194304", f"{info.metadata}")
    expect(int(info.metadata["message_bytes"]) > 5 * 1024 * 1024, f"{info.metadata}")


@check("A method the server does not serve (stubs of other protos): UNIMPLEMENTED naming it")
def unknown_methods(tp):
    for path, said in [
        ("/toolplane.v2.DiscoveryService/ListTools", "unknown service toolplane.v2.DiscoveryService"),
        ("/toolplane.v1.DiscoveryService/ListToolz",
         "unknown method ListToolz for service toolplane.v1.DiscoveryService"),
    ]:
        call = tp.channel.unary_unary(path, request_serializer=lambda raw: raw,
                                      response_deserializer=lambda raw: raw)
        error = failed_call(lambda: call(b"", timeout=10))
        expect(error.code() == grpc.StatusCode.UNIMPLEMENTED, f"{path}: code {error.code()}")
        expect(error.details().startswith(said), f"{path}: {error.details()!r}")


@check("An HTTP/1.1 request to the gRPC address (urllib): 505, saying it serves gRPC and how to call it")
def http1_request(tp):
    try:
        urllib.request.urlopen(f"http://{tp.address}/metrics", timeout=10)
    except urllib.error.HTTPError as error:
        body = error.read().decode()
        expect(error.code == 505, f"HTTP status {error.code}: {body}")
        expect(f"grpcurl -plaintext {tp.address} list" in body, body)
    else:
        raise AssertionError("an HTTP/1.1 request was answered as if it were served")


@check("WatchServices: a snapshot of the live services, then SYNCED")
def watch_services(tp):
    stream = tp.discovery.WatchServices(tp.discovery_pb2.WatchServicesRequest(meta=tp.meta()),
                                        timeout=30)
    added = []
    for answer in stream:
        kind = answer.event.type
        if kind == tp.discovery_pb2.SERVICE_EVENT_TYPE_SYNCED:
            break
        expect(kind == tp.discovery_pb2.SERVICE_EVENT_TYPE_ADDED, f"before SYNCED: {kind}")
        added.append(answer.event.service_name)
    stream.cancel()
    expect(sorted(added) == ["python-labels", "python-tools", "structs"], f"snapshot {added}")


@check("StreamComplete: an agent's turn streams its states, its tool call and the answer")
def agent_turn(tp):
    agent_pb2 = tp.agent_pb2
    tp.agents.CreateAgent(agent_pb2.CreateAgentRequest(meta=tp.meta(), name="python-agent"),
                          timeout=10)
    # The built-in model calls the tool a user message names, then reports its result.
    text = 'call structs_calculate_power {"alpha_matter": 7, "generator_type": "fieldGenerator"}'
    request = agent_pb2.StreamCompleteRequest(
        meta=tp.meta("python-agent-turn"), agent_id="python-agent",
        request=agent_pb2.ChatCompletionRequest(stream=True, messages=[
            agent_pb2.CanonicalMessage(role=agent_pb2.ROLE_USER, content=text)]))
    words, states, calls, completion = "", [], [], None
    for answer in tp.agents.StreamComplete(request, timeout=30):
        expect(completion is None, "an event after the completion")
        kind = answer.WhichOneof("event")
        if kind == "content_delta":
            words += answer.content_delta
        elif kind == "transition":
            states.append(agent_pb2.AgentState.Name(answer.transition.to))
        elif kind == "tool_call":
            calls.append(answer.tool_call)
        else:
            completion = answer.completion
    expect(states == ["AGENT_STATE_THINKING", "AGENT_STATE_TOOL_CALL",
                      "AGENT_STATE_REFLECTING", "AGENT_STATE_IDLE"], f"states {states}")
    expect([(c.tool_name, c.service_name) for c in calls]
           == [("structs_calculate_power", "structs")], f"tool calls {calls}")
    expect(calls[0].status == tp.invoke_pb2.INVOCATION_STATUS_SUCCEEDED, f"{calls[0]}")
    expect(completion is not None, "no completion")
    expect(words == completion.message.content, "the deltas do not add up to the answer")
    expect('"power_generated":14' in words, f"answer {words!r}")
    records = tp.invoke.ListInvocationRecords(tp.invoke_pb2.ListInvocationRecordsRequest(
        meta=tp.meta(), correlation_id="python-agent-turn"), timeout=10).records
    expect([r.invocation_id for r in records] == [calls[0].invocation_id],
           f"records of the turn {records}")


def main():
    address, proto_dir = sys.argv[1], sys.argv[2]
    tp = Toolplane(address, proto_dir)
    for name, function in CHECKS:
        function(tp)
        print(f"ok: {name}", flush=True)
    print(f"python grpcio: {len(CHECKS)} checks passed", flush=True)


if __name__ == "__main__":
    main()
