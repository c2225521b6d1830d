#!/usr/bin/env node
// An MCP server for the conformance suite's *server* scenarios
// (@modelcontextprotocol/conformance 0.1.16: `conformance server --url URL`, driven by
// scripts/mcp-conformance.sh), so the suite can be run against it directly and then
// through airlock, and the two results compared.
//
//   node tests/mcp/conformance-server.mjs http PORT   streamable HTTP at http://127.0.0.1:PORT/mcp
//                                                     (PORT 0: a free port); prints
//                                                     "listening on http://127.0.0.1:PORT/mcp" on stderr once ready
//   node tests/mcp/conformance-server.mjs stdio       the same server over stdio
//
// Run it with Node >= 22 ($AIRLOCK_NODE22). CONFORMANCE_SERVER_DEBUG=1 logs transport errors.
//
// Packages (@modelcontextprotocol/sdk 1.x, express 5) come from $AIRLOCK_TOOLS/node_modules
// (AIRLOCK_TOOLS defaults to $HOME/.cache/airlock/tools, as in scripts/mcp-test-env.sh), loaded
// with a require rooted there, so their CommonJS builds are used. ESM cannot do this cleanly: a
// bare `import` resolves only from this file's directory, ESM ignores NODE_PATH, and Node 22
// takes import.meta.resolve's parent argument only behind a flag.
//
// What each scenario calls, and how it checks (from the suite's bundle):
//   - tools: test_simple_text, test_image_content, test_audio_content (mimeType must be
//     audio/wav), test_embedded_resource, test_multiple_content_types, test_error_handling
//     (a result with isError: true, not a JSON-RPC error), test_tool_with_logging (>= 3
//     notifications/message after logging/setLevel debug), test_tool_with_progress (>= 3
//     non-decreasing progress notifications for _meta.progressToken), test_sampling and
//     test_elicitation (the client's handler must be called), test_elicitation_sep1034_defaults,
//     test_elicitation_sep1330_enums (the requestedSchema's shape is checked field by field),
//     json_schema_2020_12_tool ($schema, $defs and additionalProperties: false listed verbatim),
//     test_reconnection (server-sse-polling);
//   - resources test://static-text, test://static-binary, template test://template/{id}/data
//     (read as test://template/123/data, "123" must appear), subscribe and unsubscribe of
//     test://watched-resource; prompts test_simple_prompt, test_prompt_with_arguments,
//     test_prompt_with_embedded_resource, test_prompt_with_image; completion/complete on
//     test_prompt_with_arguments.arg1; logging/setLevel and ping answer {};
//   - dns-rebinding-protection: an initialize with Host and Origin evil.example.com must get a
//     4xx, the same with the server's own host:port a 2xx.
//
// Design:
//   - The low-level SDK Server, not McpServer: every result goes on the wire exactly as written
//     here (McpServer would rebuild input schemas from zod and lose the 2020-12 keywords).
//   - One Server, transport and event store per HTTP session; nothing is shared between sessions.
//   - Notifications and server->client requests made while handling a request carry its id
//     (relatedRequestId), so they travel on that request's own POST SSE stream: they reach a
//     client (or a proxy) that never opens the standalone GET stream.
//   - The SDK's web-standard transport, behind a small Node bridge, rather than its Node
//     wrapper: the bridge passes the body express already parsed and can adjust one header.
//     That header (see sessionVersionHeaders) is what lets server-sse-polling pass: with the
//     SDK's default handling it gets no priming event and is only a skip.

import { createRequire } from 'node:module';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';

const TOOLS_DIR = process.env.AIRLOCK_TOOLS || path.join(os.homedir(), '.cache', 'airlock', 'tools');
// createRequire wants a file path; the file need not exist, only its directory matters.
const requireTool = createRequire(path.join(TOOLS_DIR, 'package.json'));

const { Server } = requireTool('@modelcontextprotocol/sdk/server/index.js');
const { StdioServerTransport } = requireTool('@modelcontextprotocol/sdk/server/stdio.js');
const { WebStandardStreamableHTTPServerTransport } = requireTool(
    '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js',
);
const { AjvJsonSchemaValidator } = requireTool('@modelcontextprotocol/sdk/validation/ajv');
const {
    CallToolRequestSchema,
    CompleteRequestSchema,
    ErrorCode,
    GetPromptRequestSchema,
    LATEST_PROTOCOL_VERSION,
    ListPromptsRequestSchema,
    ListResourcesRequestSchema,
    ListResourceTemplatesRequestSchema,
    ListToolsRequestSchema,
    ReadResourceRequestSchema,
    SetLevelRequestSchema,
    SubscribeRequestSchema,
    SUPPORTED_PROTOCOL_VERSIONS,
    UnsubscribeRequestSchema,
    isInitializeRequest,
} = requireTool('@modelcontextprotocol/sdk/types.js');
const express = requireTool('express');
const SDK_VERSION = packageVersion(requireTool.resolve('@modelcontextprotocol/sdk/types.js'), '@modelcontextprotocol/sdk');

const SERVER_INFO = { name: 'airlock-conformance-fixture', version: '1.0.0' };
const LOGGER = 'conformance-server';
const DEBUG = process.env.CONFORMANCE_SERVER_DEBUG === '1';
// SSE retry hint (ms) in the priming event; short, so a client that honours it resumes quickly.
const RETRY_MS = 1000;
// The code the spec's resources page gives for an unknown URI.
const RESOURCE_NOT_FOUND = -32002;

// The version of the package that file belongs to. Its package.json is found by walking up,
// because the SDK's export map sends "@modelcontextprotocol/sdk/package.json" to dist/cjs/.
function packageVersion(file, name) {
    for (let dir = path.dirname(file); dir !== path.dirname(dir); dir = path.dirname(dir)) {
        try {
            const pkg = JSON.parse(readFileSync(path.join(dir, 'package.json'), 'utf8'));
            if (pkg.name === name) return pkg.version;
        } catch {
            // No package.json here: keep walking.
        }
    }
    return 'unknown';
}

const note = (msg) => process.stderr.write(`conformance-server: ${msg}\n`);

// A JSON-RPC error to throw from a handler: the SDK sends its code, message and data. Not the
// SDK's McpError, which writes "MCP error <code>: " into the message, so a client that prefixes
// it again shows it twice.
function protocolError(code, message, data) {
    return Object.assign(new Error(message), { code, data });
}

// ------------------------------------------------------------------ fixture data

// A 1x1 PNG (one blue pixel) and a WAV (8 kHz mono 8-bit PCM, 8 samples of silence), both
// generated for this file: tiny, and valid files of their type.
const PNG_BASE64 = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR42mNgSDsDAAGcATPfT7MVAAAAAElFTkSuQmCC';
const WAV_BASE64 = 'UklGRiwAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQgAAACAgICAgICAgA==';

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const textResult = (text) => ({ content: [{ type: 'text', text }] });
const errorResult = (text) => ({ isError: true, content: [{ type: 'text', text }] });
const userText = (text) => ({ role: 'user', content: { type: 'text', text } });

const noArgs = { type: 'object', properties: {} };
const stringArg = (name, description) => ({
    type: 'object',
    properties: { [name]: { type: 'string', description } },
    required: [name],
});

// ------------------------------------------------------------------ tools

// Each tool: name, description, inputSchema (sent as is) and run(args, ctx), where ctx is
// { server, extra, log(level, data) }. run returns a CallToolResult.
const TOOLS = [
    {
        name: 'test_simple_text',
        description: 'Returns one text block',
        inputSchema: noArgs,
        run: () => textResult('This is a simple text response for testing.'),
    },
    {
        name: 'test_image_content',
        description: 'Returns one image block (1x1 PNG)',
        inputSchema: noArgs,
        run: () => ({ content: [{ type: 'image', data: PNG_BASE64, mimeType: 'image/png' }] }),
    },
    {
        name: 'test_audio_content',
        description: 'Returns one audio block (a short WAV)',
        inputSchema: noArgs,
        run: () => ({ content: [{ type: 'audio', data: WAV_BASE64, mimeType: 'audio/wav' }] }),
    },
    {
        name: 'test_embedded_resource',
        description: 'Returns one embedded text resource',
        inputSchema: noArgs,
        run: () => ({
            content: [
                {
                    type: 'resource',
                    resource: {
                        uri: 'test://embedded-resource',
                        mimeType: 'text/plain',
                        text: 'This is an embedded resource content.',
                    },
                },
            ],
        }),
    },
    {
        name: 'test_multiple_content_types',
        description: 'Returns a text, an image and an embedded resource block',
        inputSchema: noArgs,
        run: () => ({
            content: [
                { type: 'text', text: 'Multiple content types test:' },
                { type: 'image', data: PNG_BASE64, mimeType: 'image/png' },
                {
                    type: 'resource',
                    resource: {
                        uri: 'test://mixed-content-resource',
                        mimeType: 'application/json',
                        text: JSON.stringify({ test: 'data', value: 123 }),
                    },
                },
            ],
        }),
    },
    {
        name: 'test_tool_with_logging',
        description: 'Sends three info log messages, 50 ms apart, while it runs',
        inputSchema: noArgs,
        run: async (_args, { log }) => {
            await log('info', 'Tool execution started');
            await sleep(50);
            await log('info', 'Tool processing data');
            await sleep(50);
            await log('info', 'Tool execution completed');
            return textResult('Tool with logging executed successfully');
        },
    },
    {
        name: 'test_tool_with_progress',
        description: 'Reports progress 0, 50 and 100 of 100, 50 ms apart, when given a progress token',
        inputSchema: noArgs,
        run: async (_args, { extra }) => {
            const token = extra._meta?.progressToken;
            for (const progress of [0, 50, 100]) {
                if (progress > 0) await sleep(50);
                if (token !== undefined) {
                    await extra.sendNotification({
                        method: 'notifications/progress',
                        params: { progressToken: token, progress, total: 100, message: `${progress}% done` },
                    });
                }
            }
            return textResult(`Progress reported for token ${JSON.stringify(token ?? null)}`);
        },
    },
    {
        name: 'test_error_handling',
        description: 'Always fails, as a tool error (isError: true)',
        inputSchema: noArgs,
        // A result, not a throw: the low-level Server turns a throw into a JSON-RPC error,
        // and the suite wants a tool result with isError.
        run: () => errorResult('This tool intentionally returns an error for testing'),
    },
    {
        name: 'test_sampling',
        description: 'Asks the client for an LLM completion (sampling/createMessage) of the prompt',
        inputSchema: stringArg('prompt', 'The prompt to send to the LLM'),
        run: async ({ prompt }, { server, extra }) => {
            if (!server.getClientCapabilities()?.sampling) {
                return errorResult('The client does not support sampling');
            }
            const result = await server.createMessage(
                { messages: [userText(prompt)], maxTokens: 100 },
                { relatedRequestId: extra.requestId, signal: extra.signal },
            );
            // content is one block, or an array of blocks once sampling has tools.
            const blocks = Array.isArray(result.content) ? result.content : [result.content];
            const reply = blocks.map((b) => (b.type === 'text' ? b.text : `[${b.type}]`)).join(' ');
            return textResult(`LLM response: ${reply}`);
        },
    },
    {
        name: 'test_elicitation',
        description: 'Asks the user (elicitation/create) for a username and an email address',
        inputSchema: stringArg('message', 'The message to show the user'),
        run: ({ message }, ctx) =>
            elicit(ctx, 'User response', message, {
                type: 'object',
                properties: {
                    username: { type: 'string', description: "User's response" },
                    email: { type: 'string', description: "User's email address" },
                },
                required: ['username', 'email'],
            }),
    },
    {
        name: 'test_elicitation_sep1034_defaults',
        description: 'Elicitation whose fields of every primitive type carry a default (SEP-1034)',
        inputSchema: noArgs,
        run: (_args, ctx) =>
            elicit(ctx, 'Elicitation completed', 'Please review and update the form fields with defaults', {
                type: 'object',
                properties: {
                    name: { type: 'string', description: 'User name', default: 'John Doe' },
                    age: { type: 'integer', description: 'User age', default: 30 },
                    score: { type: 'number', description: 'User score', default: 95.5 },
                    status: {
                        type: 'string',
                        description: 'User status',
                        enum: ['active', 'inactive', 'pending'],
                        default: 'active',
                    },
                    verified: { type: 'boolean', description: 'Verification status', default: true },
                },
                required: [],
            }),
    },
    {
        name: 'test_elicitation_sep1330_enums',
        description: 'Elicitation with the five enum forms of SEP-1330',
        inputSchema: noArgs,
        run: (_args, ctx) => {
            const titled = (prefix, word) =>
                ['First', 'Second', 'Third'].map((ordinal, i) => ({ const: `${prefix}${i + 1}`, title: `${ordinal} ${word}` }));
            return elicit(ctx, 'Elicitation completed', 'Please select options from the enum fields', {
                type: 'object',
                properties: {
                    untitledSingle: {
                        type: 'string',
                        description: 'Pick one',
                        enum: ['option1', 'option2', 'option3'],
                    },
                    titledSingle: { type: 'string', description: 'Pick one (titled)', oneOf: titled('value', 'Option') },
                    // Deprecated form, still to be understood by clients.
                    legacyEnum: {
                        type: 'string',
                        description: 'Pick one (legacy titles)',
                        enum: ['opt1', 'opt2', 'opt3'],
                        enumNames: ['Option One', 'Option Two', 'Option Three'],
                    },
                    untitledMulti: {
                        type: 'array',
                        description: 'Pick some',
                        minItems: 1,
                        maxItems: 3,
                        items: { type: 'string', enum: ['option1', 'option2', 'option3'] },
                    },
                    titledMulti: {
                        type: 'array',
                        description: 'Pick some (titled)',
                        minItems: 1,
                        maxItems: 3,
                        items: { anyOf: titled('value', 'Choice') },
                    },
                },
                required: [],
            });
        },
    },
    {
        name: 'json_schema_2020_12_tool',
        description: 'Tool whose input schema uses JSON Schema 2020-12 keywords (SEP-1613)',
        inputSchema: {
            $schema: 'https://json-schema.org/draft/2020-12/schema',
            type: 'object',
            $defs: {
                address: {
                    type: 'object',
                    properties: { street: { type: 'string' }, city: { type: 'string' } },
                },
            },
            properties: {
                name: { type: 'string' },
                address: { $ref: '#/$defs/address' },
            },
            additionalProperties: false,
        },
        run: (args) => textResult(`json_schema_2020_12_tool called with ${JSON.stringify(args)}`),
    },
    {
        name: 'test_reconnection',
        description:
            'Closes its own SSE stream before answering, so the client must resume with Last-Event-ID (SEP-1699)',
        inputSchema: noArgs,
        run: async (_args, { extra }) => {
            // The transport offers closeSSEStream only when the stream can be resumed (an event
            // store, and a client at 2025-11-25 or later, which got a priming event); elsewhere
            // (stdio, older clients) this is an ordinary call.
            const closed = typeof extra.closeSSEStream === 'function';
            if (closed) extra.closeSSEStream();
            // Answer a little later: the result is stored and reaches the client on the
            // resumed stream, live or replayed, whichever comes first.
            await sleep(250);
            return textResult(
                closed
                    ? 'Reconnection test completed: this result was sent after the stream was closed.'
                    : 'Reconnection test completed (the stream could not be closed early here).',
            );
        },
    },
];

// Argument checks, compiled once: invalid arguments are a tool error, so the caller (a model)
// sees what was wrong.
const argValidator = new AjvJsonSchemaValidator();
for (const tool of TOOLS) tool.validate = argValidator.getValidator(tool.inputSchema);
const TOOLS_BY_NAME = new Map(TOOLS.map((tool) => [tool.name, tool]));

async function elicit({ server, extra }, label, message, requestedSchema) {
    if (!server.getClientCapabilities()?.elicitation) {
        return errorResult('The client does not support elicitation');
    }
    // elicitInput also checks an accepted answer against requestedSchema.
    const result = await server.elicitInput(
        { mode: 'form', message, requestedSchema },
        { relatedRequestId: extra.requestId, signal: extra.signal },
    );
    return textResult(`${label}: action=${result.action}, content=${JSON.stringify(result.content ?? {})}`);
}

// ------------------------------------------------------------------ resources

const RESOURCES = [
    {
        uri: 'test://static-text',
        name: 'static-text',
        description: 'A fixed text resource',
        mimeType: 'text/plain',
        text: 'This is the content of the static text resource.',
    },
    {
        uri: 'test://static-binary',
        name: 'static-binary',
        description: 'A fixed binary resource (1x1 PNG)',
        mimeType: 'image/png',
        blob: PNG_BASE64,
    },
    {
        uri: 'test://watched-resource',
        name: 'watched-resource',
        description: 'A resource to subscribe to',
        mimeType: 'text/plain',
        text: 'Watched resource content',
    },
];
const RESOURCES_BY_URI = new Map(RESOURCES.map((r) => [r.uri, r]));

const TEMPLATE = {
    uriTemplate: 'test://template/{id}/data',
    name: 'template-data',
    description: 'JSON data for any id',
    mimeType: 'application/json',
};
const TEMPLATE_RE = /^test:\/\/template\/([^/]+)\/data$/;

// The contents of uri, or undefined when no resource or template has it.
function readResource(uri) {
    const fixed = RESOURCES_BY_URI.get(uri);
    if (fixed) {
        const { mimeType, text, blob } = fixed;
        return [text !== undefined ? { uri, mimeType, text } : { uri, mimeType, blob }];
    }
    const m = TEMPLATE_RE.exec(uri);
    if (m) {
        const id = decodeURIComponent(m[1]);
        const text = JSON.stringify({ id, templateTest: true, data: `Data for ID: ${id}` });
        return [{ uri, mimeType: TEMPLATE.mimeType, text }];
    }
    return undefined;
}

const resourceNotFound = (uri) => protocolError(RESOURCE_NOT_FOUND, `Resource not found: ${uri}`, { uri });

// ------------------------------------------------------------------ prompts

// Each prompt: name, description, arguments (as listed) and messages(args).
const PROMPTS = [
    {
        name: 'test_simple_prompt',
        description: 'A prompt without arguments',
        arguments: [],
        messages: () => [userText('This is a simple prompt for testing.')],
    },
    {
        name: 'test_prompt_with_arguments',
        description: 'A prompt with two required arguments',
        arguments: [
            { name: 'arg1', description: 'First test argument', required: true },
            { name: 'arg2', description: 'Second test argument', required: true },
        ],
        messages: ({ arg1, arg2 }) => [userText(`Prompt with arguments: arg1='${arg1}', arg2='${arg2}'`)],
    },
    {
        name: 'test_prompt_with_embedded_resource',
        description: 'A prompt that embeds a resource',
        arguments: [{ name: 'resourceUri', description: 'URI of the resource to embed', required: true }],
        messages: ({ resourceUri }) => [
            {
                role: 'user',
                content: {
                    type: 'resource',
                    resource: { uri: resourceUri, mimeType: 'text/plain', text: 'Embedded resource content for testing.' },
                },
            },
            userText('Please process the embedded resource above.'),
        ],
    },
    {
        name: 'test_prompt_with_image',
        description: 'A prompt that includes an image',
        arguments: [],
        messages: () => [
            { role: 'user', content: { type: 'image', data: PNG_BASE64, mimeType: 'image/png' } },
            userText('Please analyze the image above.'),
        ],
    },
];
const PROMPTS_BY_NAME = new Map(PROMPTS.map((p) => [p.name, p]));

// Completion candidates, keyed "<ref/prompt name or ref/resource uri>#<argument>".
const COMPLETIONS = new Map([
    ['test_prompt_with_arguments#arg1', ['paris', 'park', 'party', 'test', 'testValue1']],
    ['test_prompt_with_arguments#arg2', ['world', 'testValue2']],
    [`${TEMPLATE.uriTemplate}#id`, ['1', '2', '123']],
]);

// ------------------------------------------------------------------ server

const LOG_LEVELS = ['debug', 'info', 'notice', 'warning', 'error', 'critical', 'alert', 'emergency'];

// One MCP server: a fresh one per HTTP session (its log level and subscriptions are that
// session's), or the single one on stdio.
function buildServer() {
    const server = new Server(SERVER_INFO, {
        capabilities: {
            tools: {},
            resources: { subscribe: true },
            prompts: {},
            logging: {},
            completions: {},
        },
    });
    // Until logging/setLevel, everything is sent (the spec leaves the default to the server).
    let minLevel = 0;
    // Kept as the spec asks, but no resource here ever changes, so no
    // notifications/resources/updated is ever sent.
    const subscriptions = new Set();

    // Replaces the SDK's own logging/setLevel handler, whose level this file could not read.
    server.setRequestHandler(SetLevelRequestSchema, async ({ params }) => {
        minLevel = LOG_LEVELS.indexOf(params.level);
        return {};
    });

    server.setRequestHandler(ListToolsRequestSchema, async () => ({
        tools: TOOLS.map(({ name, description, inputSchema }) => ({ name, description, inputSchema })),
    }));

    server.setRequestHandler(CallToolRequestSchema, async ({ params }, extra) => {
        const tool = TOOLS_BY_NAME.get(params.name);
        // An unknown tool is a protocol error (not a tool error): nothing was called.
        if (!tool) throw protocolError(ErrorCode.InvalidParams, `Unknown tool: ${params.name}`);
        const args = params.arguments ?? {};
        const check = tool.validate(args);
        if (!check.valid) return errorResult(`Invalid arguments for ${tool.name}: ${check.errorMessage}`);
        const log = async (level, data) => {
            if (LOG_LEVELS.indexOf(level) < minLevel) return;
            await extra.sendNotification({ method: 'notifications/message', params: { level, logger: LOGGER, data } });
        };
        try {
            return await tool.run(args, { server, extra, log });
        } catch (err) {
            // A failed sampling or elicitation round trip is the tool's failure, reported as such.
            return errorResult(`${tool.name} failed: ${err instanceof Error ? err.message : String(err)}`);
        }
    });

    server.setRequestHandler(ListResourcesRequestSchema, async () => ({
        resources: RESOURCES.map(({ uri, name, description, mimeType }) => ({ uri, name, description, mimeType })),
    }));
    server.setRequestHandler(ListResourceTemplatesRequestSchema, async () => ({ resourceTemplates: [TEMPLATE] }));
    server.setRequestHandler(ReadResourceRequestSchema, async ({ params }) => {
        const contents = readResource(params.uri);
        if (!contents) throw resourceNotFound(params.uri);
        return { contents };
    });
    server.setRequestHandler(SubscribeRequestSchema, async ({ params }) => {
        if (!readResource(params.uri)) throw resourceNotFound(params.uri);
        subscriptions.add(params.uri);
        return {};
    });
    server.setRequestHandler(UnsubscribeRequestSchema, async ({ params }) => {
        subscriptions.delete(params.uri);
        return {};
    });

    server.setRequestHandler(ListPromptsRequestSchema, async () => ({
        prompts: PROMPTS.map(({ name, description, arguments: args }) => ({ name, description, arguments: args })),
    }));
    server.setRequestHandler(GetPromptRequestSchema, async ({ params }) => {
        const prompt = PROMPTS_BY_NAME.get(params.name);
        if (!prompt) throw protocolError(ErrorCode.InvalidParams, `Unknown prompt: ${params.name}`);
        const args = params.arguments ?? {};
        const missing = prompt.arguments.filter((a) => a.required && args[a.name] === undefined).map((a) => a.name);
        if (missing.length) {
            throw protocolError(ErrorCode.InvalidParams, `Missing required argument(s): ${missing.join(', ')}`);
        }
        return { description: prompt.description, messages: prompt.messages(args) };
    });

    server.setRequestHandler(CompleteRequestSchema, async ({ params }) => {
        const { ref, argument } = params;
        const target = ref.type === 'ref/prompt' ? ref.name : ref.uri;
        const values = (COMPLETIONS.get(`${target}#${argument.name}`) ?? []).filter((v) =>
            v.startsWith(argument.value),
        );
        return { completion: { values, total: values.length, hasMore: false } };
    });

    return server;
}

// ------------------------------------------------------------------ resumability

// Events of one session, for SSE resumption (SEP-1699): every message the transport sends on
// a stream is stored with an id, and a GET with Last-Event-ID gets the rest of that stream.
// Kept for the session's life: a test fixture's sessions are short.
class MemoryEventStore {
    #events = new Map(); // eventId -> { streamId, seq, message }, in sending order
    #seq = 0;

    async storeEvent(streamId, message) {
        const seq = ++this.#seq;
        const eventId = `${streamId}:${seq}`;
        this.#events.set(eventId, { streamId, seq, message });
        return eventId;
    }

    // Lets the transport answer 400 to an unknown id, and 409 when that stream is still open.
    async getStreamIdForEventId(eventId) {
        return this.#events.get(eventId)?.streamId;
    }

    async replayEventsAfter(lastEventId, { send }) {
        const last = this.#events.get(lastEventId);
        if (!last) throw new Error(`unknown event id ${lastEventId}`);
        for (const [eventId, { streamId, seq, message }] of this.#events) {
            // The priming event is stored as {}: it carries no message to replay.
            if (streamId === last.streamId && seq > last.seq && Object.keys(message).length > 0) {
                await send(eventId, message);
            }
        }
        return last.streamId;
    }
}

// ------------------------------------------------------------------ HTTP

const LOOPBACK_HOSTS = new Set(['localhost', '127.0.0.1', '[::1]']);

function isLoopbackUrl(url) {
    try {
        const u = new URL(url);
        return (u.protocol === 'http:' || u.protocol === 'https:') && LOOPBACK_HOSTS.has(u.hostname);
    } catch {
        return false;
    }
}

function sendJsonRpcError(res, status, code, message) {
    res.status(status).json({ jsonrpc: '2.0', error: { code, message }, id: null });
}

// DNS rebinding protection: a page on evil.example.com whose name resolves to 127.0.0.1 sends
// Host: evil.example.com (and its Origin). Both must name this machine; Origin may be absent
// (non-browser clients send none). Checked before the body is read.
function rejectForeignHosts(req, res, next) {
    const host = req.headers.host;
    if (!host || !isLoopbackUrl(`http://${host}`)) {
        return sendJsonRpcError(res, 403, -32000, `Forbidden: Host ${JSON.stringify(host ?? null)} is not localhost`);
    }
    const origin = req.headers.origin;
    if (origin !== undefined && !isLoopbackUrl(origin)) {
        return sendJsonRpcError(res, 403, -32000, `Forbidden: Origin ${JSON.stringify(origin)} is not localhost`);
    }
    next();
}

// The version a session negotiates: the client's if supported, else the latest (the same rule
// as the SDK's Server, which does not expose the result).
const negotiatedVersion = (requested) =>
    SUPPORTED_PROTOCOL_VERSIONS.includes(requested) ? requested : LATEST_PROTOCOL_VERSION;

// The request's headers for the transport, MCP-Protocol-Version set to the session's version.
// Why: the suite's raw requests in server-sse-polling and server-sse-multiple-streams send
// MCP-Protocol-Version: 2025-03-26 on a session that negotiated 2025-11-25. The SDK transport
// reads that header, per request, to decide whether to write the priming event (an id, retry,
// empty data) and whether a handler may close the stream early; below 2025-11-25 it does
// neither, and server-sse-polling has nothing left to check. The client speaks the version it
// negotiated, so a supported but different header is taken as that; an unsupported one is
// left for the transport to refuse (400).
function sessionVersionHeaders(req, session) {
    const headers = new Headers();
    for (let i = 0; i < req.rawHeaders.length; i += 2) headers.append(req.rawHeaders[i], req.rawHeaders[i + 1]);
    const sent = headers.get('mcp-protocol-version');
    if (sent !== null && sent !== session.protocolVersion && SUPPORTED_PROTOCOL_VERSIONS.includes(sent)) {
        headers.set('mcp-protocol-version', session.protocolVersion);
        if (!session.versionNoted) {
            session.versionNoted = true;
            note(`session ${session.transport.sessionId}: MCP-Protocol-Version ${sent} on a ${session.protocolVersion} session, taken as ${session.protocolVersion}`);
        }
    }
    return headers;
}

// Copies a web Response onto a Node response, streaming the body (SSE) as it comes. When the
// client goes away the body is cancelled, which tells the transport the stream is gone.
async function sendWebResponse(res, response) {
    res.statusCode = response.status;
    response.headers.forEach((value, name) => res.setHeader(name, value));
    if (!response.body) {
        res.end();
        return;
    }
    res.flushHeaders();
    const reader = response.body.getReader();
    res.on('close', () => reader.cancel().catch(() => {}));
    try {
        for (;;) {
            const { done, value } = await reader.read();
            if (done) break;
            res.write(value);
        }
    } catch {
        // Cancelled or failed mid-stream: nothing more to send.
    }
    res.end();
}

async function serveHttp(port) {
    const sessions = new Map(); // Mcp-Session-Id -> { transport, server, protocolVersion }

    async function openSession(initialize) {
        const session = { protocolVersion: negotiatedVersion(initialize.params.protocolVersion) };
        session.transport = new WebStandardStreamableHTTPServerTransport({
            sessionIdGenerator: randomUUID,
            eventStore: new MemoryEventStore(),
            retryInterval: RETRY_MS,
            // Registered only once the initialize request is accepted: a refused one leaves nothing.
            onsessioninitialized: (id) => sessions.set(id, session),
        });
        if (DEBUG) session.transport.onerror = (err) => note(`transport: ${err.message}`);
        session.server = buildServer();
        session.server.onclose = () => sessions.delete(session.transport.sessionId);
        await session.server.connect(session.transport);
        return session;
    }

    async function handleMcp(req, res) {
        const sessionId = req.headers['mcp-session-id'];
        let session;
        if (sessionId !== undefined) {
            session = sessions.get(sessionId);
            if (!session) return sendJsonRpcError(res, 404, -32001, 'Session not found');
        } else if (req.method === 'POST' && isInitializeRequest(req.body)) {
            session = await openSession(req.body);
        } else if (['GET', 'POST', 'DELETE'].includes(req.method)) {
            return sendJsonRpcError(res, 400, -32000, 'Bad Request: Mcp-Session-Id header is required');
        } else {
            res.set('Allow', 'GET, POST, DELETE');
            return sendJsonRpcError(res, 405, -32000, 'Method not allowed');
        }
        const url = `http://${req.headers.host}${req.originalUrl}`;
        const request = new Request(url, { method: req.method, headers: sessionVersionHeaders(req, session) });
        // The body was parsed by express.json (undefined when it was not JSON: the transport
        // then answers 415 on its own).
        const response = await session.transport.handleRequest(request, { parsedBody: req.body });
        await sendWebResponse(res, response);
    }

    const app = express();
    app.disable('x-powered-by');
    app.use(rejectForeignHosts);
    app.use(express.json({ limit: '4mb' }));
    app.all('/mcp', handleMcp);
    // Body parse failures and handler errors, as JSON-RPC errors.
    app.use((err, _req, res, _next) => {
        if (res.headersSent) return res.destroy();
        const parse = err.type === 'entity.parse.failed';
        if (!parse) note(`error: ${err.stack ?? err}`);
        sendJsonRpcError(res, err.status ?? 500, parse ? -32700 : -32603, parse ? 'Parse error' : 'Internal error');
    });

    const httpServer = http.createServer(app);
    httpServer.on('error', (err) => {
        note(`cannot listen on 127.0.0.1:${port}: ${err.message}`);
        process.exit(1);
    });
    httpServer.listen(port, '127.0.0.1', () => {
        const url = `http://127.0.0.1:${httpServer.address().port}/mcp`;
        note(`SDK ${SDK_VERSION}, Node ${process.versions.node}`);
        process.stderr.write(`listening on ${url}\n`);
    });
}

async function serveStdio() {
    // stdout carries the protocol: everything else goes to stderr.
    await buildServer().connect(new StdioServerTransport());
    note(`SDK ${SDK_VERSION}, Node ${process.versions.node}; serving on stdio`);
}

// ------------------------------------------------------------------ main

const USAGE = 'usage: conformance-server.mjs http PORT | conformance-server.mjs stdio';
const [mode, portArg, ...rest] = process.argv.slice(2);
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => process.exit(0));
if (mode === 'http' && /^\d+$/.test(portArg ?? '') && Number(portArg) <= 65535 && rest.length === 0) {
    await serveHttp(Number(portArg));
} else if (mode === 'stdio' && portArg === undefined) {
    await serveStdio();
} else {
    process.stderr.write(`${USAGE}\n`);
    process.exit(2);
}
