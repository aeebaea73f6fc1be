/**
 * A JSON-RPC error whose message is exactly its text, code first where it has one (docs/clients.md). The SDK's
 * McpError puts `MCP error <code>: ` in front of the message it is given, and that prefixed message is what it sends;
 * the SDK's request handling sends any thrown error's `code` and `message` as they are.
 */
export class RpcError extends Error {
  constructor(readonly code: number, message: string) {
    super(message);
    this.name = 'RpcError';
  }
}
