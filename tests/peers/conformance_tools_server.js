// An MCP server over stdio, built with the MCP TypeScript SDK's low-level Server, offering the
// test tools the MCP conformance suite's server scenarios call, answering as the suite
// describes them: text, an image, audio, an embedded resource, all three mixed, a tool error,
// progress reports during a call, and a tool whose input schema uses JSON Schema 2020-12
// (`$schema`, `$defs`, `$ref`).
// tests/mcp_conformance.rs has toolplane import it and runs those scenarios against toolplane's
// own MCP endpoint, so what the suite checks is what crossed toolplane.
//
//   NODE_PATH=.tools/node_modules node conformance_tools_server.js
'use strict';

const {Server} = require('@modelcontextprotocol/sdk/server/index.js');
const {StdioServerTransport} = require('@modelcontextprotocol/sdk/server/stdio.js');
const {CallToolRequestSchema, ListToolsRequestSchema} = require('@modelcontextprotocol/sdk/types.js');

// A 1x1 red pixel, PNG.
const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC';
// Eight samples of silence, WAV.
const WAV = 'UklGRiwAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQgAAACAgICAgICAgA==';

const noArguments = {type: 'object', properties: {}};

/** Each tool: its listing, and the result of every call. */
const TOOLS = [
  {
    name: 'test_simple_text',
    description: 'Answers a simple text',
    result: {content: [{type: 'text', text: 'This is a simple text response for testing.'}]},
  },
  {
    name: 'test_image_content',
    description: 'Answers an image',
    result: {content: [{type: 'image', data: PNG, mimeType: 'image/png'}]},
  },
  {
    name: 'test_audio_content',
    description: 'Answers audio',
    result: {content: [{type: 'audio', data: WAV, mimeType: 'audio/wav'}]},
  },
  {
    name: 'test_embedded_resource',
    description: 'Answers an embedded resource',
    result: {
      content: [{
        type: 'resource',
        resource: {uri: 'test://embedded-resource', mimeType: 'text/plain', text: 'This is an embedded resource content.'},
      }],
    },
  },
  {
    name: 'test_multiple_content_types',
    description: 'Answers text, an image and a resource',
    result: {
      content: [
        {type: 'text', text: 'Multiple content types test:'},
        {type: 'image', data: PNG, mimeType: 'image/png'},
        {
          type: 'resource',
          resource: {uri: 'test://mixed-content-resource', mimeType: 'application/json', text: '{"test":"data","value":123}'},
        },
      ],
    },
  },
  {
    name: 'test_error_handling',
    description: 'Always fails',
    result: {isError: true, content: [{type: 'text', text: 'This tool intentionally returns an error for testing'}]},
  },
  {
    name: 'test_tool_with_progress',
    description: 'Reports progress 0, 50 and 100 of 100, 50 ms apart, then answers',
    progress: [0, 50, 100],
    result: {content: [{type: 'text', text: 'done, with progress'}]},
  },
  {
    name: 'json_schema_2020_12_tool',
    description: 'Tool with JSON Schema 2020-12 features',
    inputSchema: {
      $schema: 'https://json-schema.org/draft/2020-12/schema',
      type: 'object',
      $defs: {
        address: {type: 'object', properties: {street: {type: 'string'}, city: {type: 'string'}}},
      },
      properties: {name: {type: 'string'}, address: {$ref: '#/$defs/address'}},
      additionalProperties: false,
    },
    result: {content: [{type: 'text', text: 'accepted'}]},
  },
];

const server = new Server({name: 'conformance-tools', version: '1.0.0'}, {capabilities: {tools: {}}});

server.setRequestHandler(ListToolsRequestSchema, async () => ({
  tools: TOOLS.map(({name, description, inputSchema}) => ({name, description, inputSchema: inputSchema || noArguments})),
}));

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
  const tool = TOOLS.find(({name}) => name === request.params.name);
  if (!tool) {
    throw new Error(`no tool ${request.params.name}`);
  }
  const progressToken = request.params._meta?.progressToken;
  for (const [step, progress] of (tool.progress || []).entries()) {
    if (step > 0) {
      await sleep(50);
    }
    if (progressToken !== undefined) {
      await extra.sendNotification({method: 'notifications/progress', params: {progressToken, progress, total: 100}});
    }
  }
  return tool.result;
});

server.connect(new StdioServerTransport()).catch((error) => {
  console.error(error);
  process.exit(1);
});
