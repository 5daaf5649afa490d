// A real MCP Tasks requester: @modelcontextprotocol/ext-tasks (TypeScript) on the TypeScript SDK's Client,
// driving the gateway over streamable HTTP. Run by tests/gateway/test_mcp_tasks_npm.py.
//
// node mcp_tasks_requester.mjs URL TOKEN TOOL ARGS_JSON ERA
// ERA "legacy": the client's default handshake (2025-11-25), where the package speaks the tasks utility.
// ERA "modern": 2026-07-28 pinned; the package needs the host's raw request path for the extension's wire
// shapes (`rawDispatch`, one JSON-RPC POST per request with the era's headers) and its framing.
// Prints one JSON line: what the session saw (generation, capabilities), the tool's declaration, whether the
// call became a task, the statuses it went through and the final CallToolResult.
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import {
  createTaskSessionFromClient,
  resultFromTaskOutcome,
  toolDeclarationFromMcpTool,
} from "@modelcontextprotocol/ext-tasks/client";

const [url, token, toolName, argsJson, era, step = "run", referenceJson] = process.argv.slice(2);
// STEP "run": call and settle. "start": call, hand the task off (print its serialized reference) and exit
// without waiting or closing. "resume": resume the task of REFERENCE_JSON (another process, maybe another gateway
// incarnation on the same state) and settle it.
const MODERN = "2026-07-28";
const clientInfo = { name: "ext-tasks-requester", version: "0.2.2" };
const capabilities = era === "modern" ? {} : { tasks: { list: {}, cancel: {} } };
const client = new Client(clientInfo, {
  capabilities,
  ...(era === "modern" ? { versionNegotiation: { mode: { pin: MODERN } } } : {}),
});
const headers = { Authorization: `Bearer ${token}` };
const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
await client.connect(transport);

let nextId = 1;
async function rawDispatch(request, options = {}) {
  const id = `ext-tasks-${nextId++}`;
  const params = request.params ?? {};
  const name = request.method === "tools/call" ? params.name : params.taskId;
  const response = await fetch(url, {
    method: "POST",
    signal: options.signal,
    headers: {
      ...headers,
      ...(options.context?.headers ?? {}),
      "Content-Type": "application/json",
      Accept: "application/json, text/event-stream",
      "Mcp-Protocol-Version": MODERN,
      "Mcp-Method": request.method,
      ...(typeof name === "string" ? { "Mcp-Name": name } : {}),
    },
    body: JSON.stringify({ jsonrpc: "2.0", id, ...request }),
  });
  const text = await response.text();
  const messages = (response.headers.get("content-type") ?? "").includes("text/event-stream")
    ? text.split("\n").filter((l) => l.startsWith("data:")).map((l) => JSON.parse(l.slice(5)))
    : [JSON.parse(text)];
  const answer = messages.find((m) => m.id === id);
  if (answer === undefined) throw new Error(`no answer to ${request.method} (HTTP ${response.status}): ${text}`);
  return "error" in answer ? { kind: "error", error: answer.error } : { kind: "result", result: answer.result };
}

const listed = await client.listTools();
const tool = listed.tools.find((t) => t.name === toolName);
const session = createTaskSessionFromClient(client, {
  endpointId: "remoteops-gateway-test",
  ...(era === "modern"
    ? { rawDispatch, v2RequestFraming: { protocolVersion: MODERN, clientInfo, clientCapabilities: capabilities } }
    : {}),
});
const statuses = [];
let out;
try {
  const declaration = toolDeclarationFromMcpTool(tool);
  const execution =
    step === "resume"
      ? await session.resumeTask(JSON.parse(referenceJson), { declaration })
      : await session.callTool(toolName, JSON.parse(argsJson), { declaration, task: { preference: "prefer" } });
  if (step === "start") {
    let reference = null;
    if (execution.kind === "task") {
      await execution.handoff((r) => {
        reference = r;
      });
    }
    // Exit without closing: ext-tasks 0.2.2's session.close() cancels a 2026-07-28 task even after its
    // handoff (execution.close() after detach still sends tasks/cancel). A requester that persisted the
    // reference and went away is what this step stands for.
    console.log(JSON.stringify({ kind: execution.kind, reference }));
    process.exit(0);
  } else {
    const { outcome } = await execution.settle({
      onEvent: (event) => {
        if (event.type === "task") statuses.push([event.task.status, event.task.statusMessage ?? null]);
      },
    });
    out = {
      era: client.getProtocolEra() ?? null,
      capabilities: session.capabilities,
      execution: tool.execution ?? null,
      kind: execution.kind,
      taskId: execution.kind === "task" ? execution.handle.taskId : null,
      statuses,
      outcome: outcome.status,
      result: resultFromTaskOutcome(outcome),
    };
  }
} finally {
  await session.close();
  await client.close();
}
console.log(JSON.stringify(out));
