// toolplane driven by @grpc/grpc-js, the Node.js gRPC implementation, with the contracts loaded
// from proto/ at run time by @grpc/proto-loader (as a Node team would): registration with
// google.protobuf.Struct schemas, listing with paging, search, invocation, the google.rpc error details
// (decoded with protobufjs, which proto-loader is built on), deadlines, and a server stream.
//
// Run by tests/polyglot.rs against a running toolplane with the example Structs provider
// registered (service "structs", tenant 0):
//
//   node node_client.js ADDRESS PROTO_DIR
//
// Prints one line per check and exits 0 when all pass; the first failed check exits 1 with what
// was expected and what came back.
'use strict';

const assert = require('node:assert/strict');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const [address, protoDir] = process.argv.slice(2);
const TENANT = '0';

const definition = protoLoader.loadSync(
  ['discovery_service', 'invoke_service', 'health_service'].map((name) => `toolplane/v1/${name}.proto`),
  {keepCase: true, longs: String, enums: String, defaults: true, oneofs: true, includeDirs: [protoDir]},
);
const v1 = grpc.loadPackageDefinition(definition).toolplane.v1;
const credentials = grpc.credentials.createInsecure();
const discovery = new v1.DiscoveryService(address, credentials);
const invoke = new v1.ToolInvokeService(address, credentials);
const health = new v1.HealthService(address, credentials);

const rpc = require('./google_rpc');

/**
 * A JSON value as a google.protobuf.Value, the form proto-loader takes. The well-known types
 * come from protobufjs's bundled definitions, whose fields are camelCase whatever `keepCase`
 * says (structValue, not struct_value): a snake_case member is dropped without an error.
 */
function toValue(value) {
  if (value === null) return {nullValue: 'NULL_VALUE'};
  if (Array.isArray(value)) return {listValue: {values: value.map(toValue)}};
  switch (typeof value) {
    case 'number': return {numberValue: value};
    case 'string': return {stringValue: value};
    case 'boolean': return {boolValue: value};
    default: return {structValue: toStruct(value)};
  }
}

/** A JSON object as a google.protobuf.Struct. */
function toStruct(object) {
  return {fields: Object.fromEntries(Object.entries(object).map(([k, v]) => [k, toValue(v)]))};
}

/** A google.protobuf.Value as proto-loader gives it (`kind` names the member set), back to JSON. */
function fromValue(value) {
  switch (value.kind) {
    case 'structValue': return fromStruct(value.structValue);
    case 'listValue': return value.listValue.values.map(fromValue);
    case 'nullValue': return null;
    default: return value[value.kind];
  }
}

/** A google.protobuf.Struct as proto-loader gives it, back to JSON. */
function fromStruct(struct) {
  return Object.fromEntries(Object.entries(struct.fields).map(([k, v]) => [k, fromValue(v)]));
}

function meta(correlationId = 'node-client') {
  return {tenant_id: TENANT, correlation_id: correlationId};
}

function deadline(seconds = 10) {
  return new Date(Date.now() + seconds * 1000);
}

/** Calls a unary method and resolves with its answer (or rejects with its error). */
function call(client, method, request, options = {}) {
  return new Promise((resolve, reject) => {
    client[method](request, {deadline: deadline(), ...options}, (error, answer) =>
      (error ? reject(error) : resolve(answer)));
  });
}

/** Calls a unary method expected to fail and resolves with its error. */
async function failedCall(client, method, request, options) {
  try {
    const answer = await call(client, method, request, options);
    assert.fail(`expected ${method} to fail, got ${JSON.stringify(answer)}`);
  } catch (error) {
    if (error instanceof assert.AssertionError) throw error;
    return error;
  }
}

/** The ErrorInfo and BadRequest violations of a failed call's grpc-status-details-bin. */
function richError(error) {
  const [bytes] = error.metadata.get('grpc-status-details-bin');
  assert.ok(bytes, `no grpc-status-details-bin on code ${error.code}: ${error.details}`);
  const status = rpc.lookupType('rpc.Status').decode(bytes);
  assert.equal(status.code, error.code, 'details disagree with the status code');
  let info = null;
  let violations = [];
  for (const detail of status.details) {
    const name = detail.type_url.split('/').pop();
    if (name === 'google.rpc.ErrorInfo') info = rpc.lookupType('rpc.ErrorInfo').decode(detail.value);
    if (name === 'google.rpc.BadRequest') {
      violations = rpc.lookupType('rpc.BadRequest').decode(detail.value).field_violations
        .map((violation) => violation.field);
    }
  }
  assert.ok(info, 'no ErrorInfo among the details');
  return {info, violations};
}

function tool(name, schema) {
  return {tool_name: name, description: `${name} from Node`, tool_schema: toStruct(schema)};
}

function register(service, tools) {
  return call(discovery, 'RegisterService', {meta: meta(), registration: {
    service_name: service, service_version: '1.0.0', endpoint: 'http://127.0.0.1:7001',
    tools, ttl: {seconds: '60', nanos: 0}}});
}

const checks = [
  ['toolplane.v1.HealthService: the control plane and the Structs provider are healthy', async () => {
    const server = await call(health, 'GetServiceHealth', {meta: meta(), service_name: ''});
    assert.equal(server.status, 'HEALTH_STATE_HEALTHY');
    const structs = await call(health, 'GetServiceHealth', {meta: meta(), service_name: 'structs'});
    assert.equal(structs.status, 'HEALTH_STATE_HEALTHY');
    assert.ok(structs.tools.includes('structs_calculate_power'), structs.tools.join());
  }],
  ['RegisterService with Struct schemas; ListTools pages; GetTool gives the schema back', async () => {
    const schema = {type: 'object', required: ['city'],
      properties: {city: {type: 'string', minLength: 2}, days: {type: 'integer', maximum: 14}}};
    const tools = Array.from({length: 12}, (_, i) => tool(`node_tool_${String(i).padStart(2, '0')}`, schema));
    const registered = await register('node-tools', tools);
    assert.ok(registered.lease_id);
    assert.equal(registered.meta.correlation_id, 'node-client');
    assert.ok(registered.tools.every((t) => /^[0-9a-f]{64}$/.test(t.definition_sha256)));
    const seen = [];
    let token = '';
    do {
      const page = await call(discovery, 'ListTools',
        {meta: meta(), service_name: 'node-tools', page_size: 5, page_token: token});
      seen.push(...page.tools.map((t) => t.tool_name));
      token = page.next_page_token;
    } while (token);
    assert.deepEqual(seen, tools.map((t) => t.tool_name));
    const got = await call(discovery, 'GetTool',
      {meta: meta(), tool_name: 'node_tool_03', service_name: 'node-tools'});
    assert.deepEqual(fromStruct(got.tool.tool_schema), schema);
  }],
  ['SearchTools: the best match first with its score; over 100 results is refused', async () => {
    const found = await call(discovery, 'SearchTools',
      {meta: meta(), query: 'calculate the power of a generator', max_results: 2});
    assert.equal(found.matches[0].tool.tool_name, 'structs_calculate_power');
    assert.equal(found.matches.length, 2);
    assert.ok(found.total_matches >= 3, `${found.total_matches} matches`);
    assert.ok(found.matches[0].score > found.matches[1].score && found.matches[1].score > 0);
    const error = await failedCall(discovery, 'SearchTools',
      {meta: meta(), query: 'power', max_results: 101});
    assert.equal(error.code, grpc.status.INVALID_ARGUMENT);
    const {info, violations} = richError(error);
    assert.equal(info.reason, 'VALIDATION_FIELD');
    assert.deepEqual(violations, ['max_results']);
  }],
  ['Domains, categories and annotations: inferred and declared, filtering ListTools', async () => {
    const declared = {...tool('node_ledger', {type: 'object'}), categories: ['crud.read'],
      domains: ['finance'], annotations: {title: 'Ledger', read_only_hint: true}};
    await register('node-labels', [declared, tool('node_list_invoices', {type: 'object'})]);
    const page = await call(discovery, 'ListTools',
      {meta: meta(), service_name: 'node-labels', category: 'crud.read'});
    assert.deepEqual(page.tools.map((t) => [t.tool_name, t.domains, t.categories]), [
      ['node_ledger', ['finance'], ['crud.read']],
      ['node_list_invoices', ['node-labels', 'node-labels.invoices'], ['crud.read']],
    ]);
    // proto3 optional hints: the one set comes back, the others stay unset.
    const hints = page.tools[0].annotations;
    assert.equal(hints.title, 'Ledger');
    assert.equal(hints.read_only_hint, true);
    assert.equal(hints.destructive_hint, undefined);
    assert.equal(page.tools[1].annotations, null);
    const badTitle = await failedCall(discovery, 'RegisterService', {meta: meta(), registration: {
      service_name: 'node-labels', service_version: '1.0.0', endpoint: 'http://127.0.0.1:7001',
      tools: [{...declared, annotations: {title: 'two\nlines'}}]}});
    assert.equal(badTitle.code, grpc.status.INVALID_ARGUMENT);
    assert.deepEqual(richError(badTitle).violations, ['registration.tools[0].annotations.title']);
    const error = await failedCall(discovery, 'RegisterService', {meta: meta(), registration: {
      service_name: 'node-labels', service_version: '1.0.0', endpoint: 'http://127.0.0.1:7001',
      tools: [{...declared, domains: ['Finance']}]}});
    assert.equal(error.code, grpc.status.INVALID_ARGUMENT);
    assert.deepEqual(richError(error).violations, ['registration.tools[0].domains']);
  }],
  ['RegisterService with a bad tool name: INVALID_ARGUMENT, VALIDATION_NAME, the field', async () => {
    const error = await failedCall(discovery, 'RegisterService', {meta: meta(), registration: {
      service_name: 'node-bad', service_version: '1.0.0', endpoint: 'http://127.0.0.1:7001',
      tools: [tool('has spaces', {type: 'object'})]}});
    assert.equal(error.code, grpc.status.INVALID_ARGUMENT);
    const {info, violations} = richError(error);
    assert.equal(info.reason, 'VALIDATION_NAME');
    assert.equal(info.domain, 'toolplane');
    assert.deepEqual(violations, ['registration.tools[0].tool_name']);
  }],
  ['InvokeTool: the provider answer through toolplane, and its record', async () => {
    const answer = await call(invoke, 'InvokeTool', {meta: meta('node-invoke'),
      tool_name: 'structs_calculate_power',
      input: toStruct({alpha_matter: 3, generator_type: 'worldEngine'})});
    const output = fromValue(answer.output);
    assert.equal(output.power_generated, 30, JSON.stringify(output));
    assert.equal(answer.record.status, 'INVOCATION_STATUS_SUCCEEDED');
    assert.equal(answer.record.correlation_id, 'node-invoke');
    assert.match(answer.record.record_sha256, /^[0-9a-f]{64}$/);
  }],
  ['InvokeTool with input the schema refuses: INVALID_ARGUMENT, VALIDATION_INPUT, the field', async () => {
    const error = await failedCall(invoke, 'InvokeTool', {meta: meta(),
      tool_name: 'structs_calculate_power',
      input: toStruct({alpha_matter: 3, generator_type: 'candle'})});
    assert.equal(error.code, grpc.status.INVALID_ARGUMENT);
    const {info, violations} = richError(error);
    assert.equal(info.reason, 'VALIDATION_INPUT');
    assert.deepEqual(violations, ['input/generator_type']);
  }],
  ["The caller's deadline bounds the provider's work: DEADLINE_EXCEEDED, recorded as a timeout", async () => {
    // At age 1 the proof of work needs 64 leading zeros: it runs until it is cancelled.
    const error = await failedCall(invoke, 'InvokeTool', {meta: meta('node-deadline'),
      tool_name: 'structs_calculate_proof_of_work',
      input: toStruct({action_type: 'struct_build_complete', entity_id: '1-1', age: 1, difficulty: 2})},
    {deadline: deadline(0.5)});
    assert.equal(error.code, grpc.status.DEADLINE_EXCEEDED);
    let records = [];
    for (let tries = 0; records.length === 0 && tries < 50; tries++) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      ({records} = await call(invoke, 'ListInvocationRecords', {meta: meta(), correlation_id: 'node-deadline'}));
    }
    assert.equal(records.length, 1, 'no record of the call');
    // toolplane answers 50 ms before the caller's deadline, so the answer arrives; on a machine
    // busy enough to hold the request up longer than that, the caller's own timer fires first
    // and cancels the call, which is recorded CANCELLED. Either way the work was cut short.
    const [{status, error_reason: reason}] = records;
    assert.ok(status === 'INVOCATION_STATUS_TIMED_OUT' || status === 'INVOCATION_STATUS_CANCELLED', status);
    if (status === 'INVOCATION_STATUS_TIMED_OUT') assert.equal(reason, 'TOOL_TIMEOUT');
    assert.ok(Number(records[0].duration.seconds) < 5, `ran for ${records[0].duration.seconds} s`);
  }],
  ['WatchServices: the live services, then SYNCED, then a registration as it happens', async () => {
    const stream = discovery.WatchServices({meta: meta()}, {deadline: deadline(30)});
    const events = [];
    let registered = false;
    await new Promise((resolve, reject) => {
      stream.on('data', (answer) => {
        events.push(`${answer.event.type}:${answer.event.service_name}`);
        if (answer.event.type === 'SERVICE_EVENT_TYPE_SYNCED' && !registered) {
          registered = true;
          register('node-watched', [tool('noop', {type: 'object'})]).catch(reject);
        }
        if (answer.event.service_name === 'node-watched') resolve();
      });
      stream.on('error', reject);
    });
    stream.cancel();
    const snapshot = events.slice(0, -2).sort();
    assert.deepEqual(snapshot, ['SERVICE_EVENT_TYPE_ADDED:node-labels',
      'SERVICE_EVENT_TYPE_ADDED:node-tools', 'SERVICE_EVENT_TYPE_ADDED:structs']);
    assert.deepEqual(events.slice(-2), ['SERVICE_EVENT_TYPE_SYNCED:', 'SERVICE_EVENT_TYPE_ADDED:node-watched']);
  }],
];

(async () => {
  for (const [name, check] of checks) {
    try {
      await check();
    } catch (error) {
      console.error(`FAILED: ${name}\n${error.stack || error}`);
      process.exit(1);
    }
    console.log(`ok: ${name}`);
  }
  console.log(`node grpc-js: ${checks.length} checks passed`);
  [discovery, invoke, health].forEach((client) => client.close());
})();
