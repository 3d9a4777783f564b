// A toolplane tool provider written in Node with @grpc/grpc-js's server, as a Node team would
// write one: it serves toolplane.v1.ToolProviderService (loaded from proto/ by proto-loader),
// registers with toolplane and keeps its lease with heartbeats (registering again when told the
// lease is gone). toolplane calls it with its own HTTP/2 client; tests/polyglot_providers.rs
// invokes its tools through toolplane.
//
//   node node_provider.js TOOLPLANE_ADDRESS PROTO_DIR SERVICE_NAME
//
// Prints "registered SERVICE_NAME PORT" once registered; deregisters and exits when its standard
// input closes. TLS as python_provider.py's (TLS_CERT_FILE, TLS_KEY_FILE, TLS_CLIENT_CA_FILE),
// and INSTANCE_ID too. Its tools are those of python_provider.py but set_health (it serves no
// grpc.health.v1, which toolplane takes as healthy): echo, fail, big, wait, last_wait.
'use strict';

const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const [toolplaneAddress, protoDir, service] = process.argv.slice(2);
const HEARTBEAT_MS = 1000;

const definition = protoLoader.loadSync(
  ['toolplane/v1/provider_service.proto', 'toolplane/v1/discovery_service.proto'],
  {keepCase: true, longs: String, enums: String, defaults: true, oneofs: true, includeDirs: [protoDir]},
);
const v1 = grpc.loadPackageDefinition(definition).toolplane.v1;

const rpc = require('./google_rpc');

/** A failure with a google.rpc.Status (an ErrorInfo among its details) in its trailers. */
function failure(code, message, reason) {
  const ErrorInfo = rpc.lookupType('rpc.ErrorInfo');
  const Status = rpc.lookupType('rpc.Status');
  const info = ErrorInfo.encode(ErrorInfo.create({reason, domain: 'node-provider'})).finish();
  const status = Status.encode(Status.create({code, message, details: [
    {type_url: 'type.googleapis.com/google.rpc.ErrorInfo', value: info}]})).finish();
  const metadata = new grpc.Metadata();
  metadata.set('grpc-status-details-bin', Buffer.from(status));
  return {code, details: message, metadata};
}

// Struct and Value fields are camelCase (protobufjs's bundled well-known types; see README).
const string = (text) => ({stringValue: text});
let lastWait = {};

const tools = {
  echo: (call, done) => done(null, {output: {structValue: call.request.input}}),
  fail: (call, done) => done(failure(grpc.status.FAILED_PRECONDITION,
    "the node provider's quota is spent", 'TOOL_QUOTA_SPENT')),
  big: (call, done) => {
    const bytes = call.request.input.fields.bytes.numberValue;
    done(null, {output: {structValue: {fields: {text: string('x'.repeat(bytes))}}}});
  },
  wait: (call, done) => {
    // A Date or a number of milliseconds since the epoch; Infinity without a deadline.
    const deadline = Number(call.getDeadline());
    const remaining = Number.isFinite(deadline) ? (deadline - Date.now()) / 1000 : -1;
    const started = Date.now();
    const poll = setInterval(() => {
      if (call.cancelled || Date.now() - started > 30000) {
        clearInterval(poll);
        lastWait = {time_remaining: {numberValue: remaining}, cancelled: {boolValue: call.cancelled}};
        done(null, {output: {nullValue: 'NULL_VALUE'}});
      }
    }, 10);
  },
  last_wait: (call, done) => done(null, {output: {structValue: {fields: lastWait}}}),
};

// Closes each connection this long into its life when MAX_CONNECTION_AGE_MS is set, as
// servers behind Kubernetes Services are often told to so that load spreads again.
const maxAge = Number(process.env.MAX_CONNECTION_AGE_MS || 0);
const server = new grpc.Server(maxAge ? {'grpc.max_connection_age_ms': maxAge,
  'grpc.max_connection_age_grace_ms': 5000} : {});
server.addService(v1.ToolProviderService.service, {
  CallTool: (call, done) => {
    const tool = tools[call.request.tool_name];
    if (!tool) return done({code: grpc.status.NOT_FOUND, details: `no tool ${call.request.tool_name}`});
    return tool(call, done);
  },
});

const discovery = new v1.DiscoveryService(toolplaneAddress, grpc.credentials.createInsecure());
const meta = {tenant_id: '0', correlation_id: `${service}-lease`};
const object = {fields: {type: string('object')}};
const schemas = {
  echo: object, fail: object, wait: object, last_wait: object,
  big: {fields: {type: string('object'), required: {listValue: {values: [string('bytes')]}},
    properties: {structValue: {fields: {bytes: {structValue: {fields: {type: string('integer')}}}}}}}},
};

function call(method, request) {
  return new Promise((resolve, reject) => discovery[method](request,
    {deadline: new Date(Date.now() + 10000)}, (error, answer) => (error ? reject(error) : resolve(answer))));
}

/**
 * Plain text, or TLS with TLS_CERT_FILE and TLS_KEY_FILE (Node's OpenSSL), asking callers for a
 * certificate TLS_CLIENT_CA_FILE signed when that is set. Answers the credentials and scheme.
 */
function serverCredentials() {
  const {TLS_CERT_FILE: cert, TLS_KEY_FILE: key, TLS_CLIENT_CA_FILE: clientCa} = process.env;
  if (!cert) return [grpc.ServerCredentials.createInsecure(), 'http'];
  const fs = require('node:fs');
  const credentials = grpc.ServerCredentials.createSsl(clientCa ? fs.readFileSync(clientCa) : null,
    [{private_key: fs.readFileSync(key), cert_chain: fs.readFileSync(cert)}], Boolean(clientCa));
  return [credentials, 'https'];
}

const [credentials, scheme] = serverCredentials();
server.bindAsync('127.0.0.1:0', credentials, async (error, port) => {
  if (error) throw error;
  const registration = {service_name: service, service_version: '1.0.0',
    instance_id: process.env.INSTANCE_ID || '',
    endpoint: `${scheme}://127.0.0.1:${port}`, ttl: {seconds: '10', nanos: 0},
    tools: Object.entries(schemas).map(([name, schema]) =>
      ({tool_name: name, description: `${name} (Node)`, tool_schema: schema}))};
  const register = async () => (await call('RegisterService', {meta, registration})).lease_id;
  let leaseId = await register();
  const heartbeat = setInterval(() => {
    call('Heartbeat', {meta, service_name: service, lease_id: leaseId}).catch(async (failed) => {
      if (failed.code === grpc.status.NOT_FOUND) leaseId = await register();
    });
  }, HEARTBEAT_MS);
  console.log(`registered ${service} ${port}`);
  process.stdin.resume();
  process.stdin.on('end', async () => {
    clearInterval(heartbeat);
    await call('DeregisterService', {meta, service_name: service, lease_id: leaseId});
    server.tryShutdown(() => process.exit(0));
  });
});
