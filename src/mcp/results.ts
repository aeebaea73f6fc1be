import { randomBytes } from 'node:crypto';
import { ErrorCode, McpError, type CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import type * as z from 'zod';
import { SubagentError } from '../errors.js';
import { peopleCommand } from '../invocation.js';
import { RpcError } from './rpc-error.js';

/** A success: everything in structuredContent (some clients show the model only that), and the same as text. */
export function success(value: Record<string, unknown>, text?: string): CallToolResult {
  return { content: [{ type: 'text', text: text ?? JSON.stringify(value, null, 2) }], structuredContent: value };
}

/**
 * The one place an error becomes a tool result: `isError`, no structured content, text starting with the code.
 * Anything that is not a SubagentError is INTERNAL with a reference; its details go to stderr, never to the model.
 */
export function refusal(e: unknown, log: (line: string) => void): CallToolResult {
  return { isError: true, content: [{ type: 'text', text: coded(e, log).text }] };
}

/**
 * The same for the protocol's other requests (resources/read, subscribe, completion): a JSON-RPC error whose message
 * starts with the code. The protocol's own errors (a resource not found, a bad cursor) pass as they are.
 */
export function protocolError(e: unknown, log: (line: string) => void): Error {
  if (e instanceof RpcError || e instanceof McpError) return e;
  const err = coded(e, log);
  return new RpcError(err.code === 'INTERNAL' ? ErrorCode.InternalError : ErrorCode.InvalidParams, err.text);
}


function coded(e: unknown, log: (line: string) => void): SubagentError {
  if (e instanceof SubagentError) return e;
  const ref = randomBytes(4).toString('hex');
  // Only the error's class and code: an error message may quote a command line or a path with user text in it.
  const kind = e instanceof Error ? `${e.name}${(e as NodeJS.ErrnoException).code ? ` ${(e as NodeJS.ErrnoException).code}` : ''}` : typeof e;
  log(`internal error ref=${ref}: ${kind}`);
  return new SubagentError('INTERNAL', `an internal error occurred (ref ${ref}); the server keeps serving. Retry, and if it repeats run \`${peopleCommand('doctor')}\`.`);
}

/** Validates tool arguments; a failure names the fields and rules, never the values. */
export function parseInput<S extends z.ZodType>(schema: S, args: unknown): z.output<S> {
  const r = schema.safeParse(args ?? {});
  if (r.success) return r.data;
  const problems = r.error.issues.slice(0, 5).map((i) => {
    const where = i.path.length ? i.path.join('.') : 'arguments';
    if (i.code === 'unrecognized_keys') return `${where}: unknown field(s) ${(i as { keys: string[] }).keys.slice(0, 5).join(', ')}`;
    if (i.code === 'too_big') return `${where}: too large (max ${String((i as { maximum: unknown }).maximum)})`;
    if (i.code === 'too_small') return `${where}: too small (min ${String((i as { minimum: unknown }).minimum)})`;
    if (i.code === 'invalid_type') return `${where}: expected ${(i as { expected: string }).expected}`;
    return `${where}: ${i.message}`;
  });
  throw new SubagentError('INVALID_INPUT', `${problems.join('; ')}. Check the tool's input schema and call again.`);
}

export function invalid(message: string): SubagentError {
  return new SubagentError('INVALID_INPUT', message);
}
