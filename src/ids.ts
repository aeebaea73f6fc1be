import { randomBytes } from 'node:crypto';

// 144 random bits, base64url: unguessable (docs/contract.md, "Settings": at least 128 bits) and safe as a path segment.
const ID_BODY = /^[A-Za-z0-9_-]{24}$/;

export const newRunId = (): string => `r-${randomBytes(18).toString('base64url')}`;
export const newSessionId = (): string => `s-${randomBytes(18).toString('base64url')}`;
export const newSecret = (): string => randomBytes(32).toString('base64url');

/** True only for ids this server could have made; anything else (`../../x`) never reaches a path join. */
export function isRunId(value: string): boolean {
  return value.startsWith('r-') && ID_BODY.test(value.slice(2));
}
export function isSessionIdShape(value: string): boolean {
  return value.length >= 16 && value.length <= 128 && /^[A-Za-z0-9_.:-]+$/.test(value);
}
