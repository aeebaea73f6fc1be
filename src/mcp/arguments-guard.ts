import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import { invalid, refusal } from './results.js';

/**
 * A tools/call whose `arguments` is not an object (an array, a string, a number, null) fails the SDK's own check of
 * the request before any handler of ours runs, and comes back as a JSON-RPC internal error dumping schema issues. It
 * is answered here instead, as every malformed call is: a refusal, INVALID_INPUT (docs/contract.md, "Tools").
 */
const TASK_METHODS = new Set(['tasks/get', 'tasks/result', 'tasks/cancel']);
/** JSON-RPC's invalid params (the SDK's types module, which names it, is not loaded this early: it costs the cold start). */
const INVALID_PARAMS = -32602;

export function refuseMalformedRequests(transport: Transport): void {
  const next = transport.onmessage;
  if (!next) return;
  transport.onmessage = (message, extra) => {
    if ('method' in message && message.method === 'tools/call' && 'id' in message) {
      const params = message.params as { arguments?: unknown } | undefined;
      const args = params?.arguments;
      if (args !== undefined && (typeof args !== 'object' || args === null || Array.isArray(args))) {
        const text = 'arguments must be a JSON object of the tool\'s fields (see its input schema in tools/list), not an array, a string, a number or null. Call again with an object.';
        void transport.send({ jsonrpc: '2.0', id: message.id, result: refusal(invalid(text), () => {}) }).catch(() => {});
        return;
      }
    }
    // The same for the task requests, whose one field the SDK checks with the same dump: an invalid-params error.
    if ('method' in message && TASK_METHODS.has(message.method) && 'id' in message) {
      const taskId = (message.params as { taskId?: unknown } | undefined)?.taskId;
      if (typeof taskId !== 'string') {
        const text = `INVALID_INPUT: ${message.method} needs params.taskId, a string (the run id launch answered). Call again with it.`;
        void transport.send({ jsonrpc: '2.0', id: message.id, error: { code: INVALID_PARAMS, message: text } }).catch(() => {});
        return;
      }
    }
    next(message, extra);
  };
}
