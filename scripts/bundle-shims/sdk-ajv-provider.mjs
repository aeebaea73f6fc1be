// The server bundle's stand-in for the SDK's Ajv provider (validation/ajv-provider.js). A server validates JSON
// Schemas only for answers to elicitation requests, which this server never sends, and src/mcp/server.ts passes its
// own validator, so the SDK never builds this one. Ajv and its formats were ~130 KiB of the server's one file, parsed
// at every start. Anything that does reach it fails loudly rather than accepting data unchecked.
export class AjvJsonSchemaValidator {
  constructor() {
    throw new Error('JSON Schema validation is not built into the subagents server bundle (it never sends elicitation requests)');
  }
}
