// google.rpc.Status and the error details the Node test peers read and write, field for field
// as googleapis defines them (protobufjs, which proto-loader is built on, has no copy of them).
'use strict';

const protobuf = require('protobufjs');

module.exports = protobuf.Root.fromJSON({nested: {rpc: {nested: {
  Any: {fields: {type_url: {type: 'string', id: 1}, value: {type: 'bytes', id: 2}}},
  Status: {fields: {
    code: {type: 'int32', id: 1}, message: {type: 'string', id: 2},
    details: {rule: 'repeated', type: 'Any', id: 3}}},
  ErrorInfo: {fields: {
    reason: {type: 'string', id: 1}, domain: {type: 'string', id: 2},
    metadata: {keyType: 'string', type: 'string', id: 3}}},
  FieldViolation: {fields: {field: {type: 'string', id: 1}, description: {type: 'string', id: 2}}},
  BadRequest: {fields: {field_violations: {rule: 'repeated', type: 'FieldViolation', id: 1}}},
}}}});
