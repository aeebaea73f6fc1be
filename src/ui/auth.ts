import { randomBytes, timingSafeEqual } from 'node:crypto';
import type { IncomingMessage } from 'node:http';

/**
 * The dashboard's access rules (docs/watch-and-ui.md): it is a way into the user's agents, so every request must
 * come to the loopback address by its own name (no DNS rebinding), carry the secret token, and an action must also
 * come from the dashboard's own origin.
 */

/** 192 random bits, URL-safe. */
export const newUiToken = (): string => randomBytes(24).toString('base64url');

/** The cookie is per port: two dashboards on one machine must not overwrite each other's. */
export const cookieName = (port: number): string => `subagents_ui_${port}`;

/**
 * The secret path the page lives under (`/s/<96 random bits>/`), the only path its cookie is sent to. Browsers send a
 * host's cookies to every port of it: with `Path=/`, any other service on 127.0.0.1 the user visits (another user's,
 * on a shared machine) would receive the token. No page elsewhere can name this path.
 */
export const newUiBasePath = (): string => `/s/${randomBytes(12).toString('base64url')}/`;

/** Only `127.0.0.1:<port>` and `localhost:<port>`: a page of another site whose name resolves here sends its own name. */
export function hostAllowed(host: string | undefined, port: number): boolean {
  return host === `127.0.0.1:${port}` || host === `localhost:${port}`;
}

/** The exact origins of the dashboard; an action without an Origin header is refused too. */
export function originAllowed(origin: string | undefined, port: number): boolean {
  return origin === `http://127.0.0.1:${port}` || origin === `http://localhost:${port}`;
}

export function sameSecret(given: string | undefined | null, token: string): boolean {
  if (typeof given !== 'string') return false;
  const a = Buffer.from(given);
  const b = Buffer.from(token);
  return a.length === b.length && timingSafeEqual(a, b);
}

/** The value of one cookie of the request, if present. */
export function cookieValue(req: IncomingMessage, name: string): string | undefined {
  const header = req.headers.cookie;
  if (!header) return undefined;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

export function sessionCookie(port: number, token: string, basePath: string): string {
  return `${cookieName(port)}=${token}; HttpOnly; SameSite=Strict; Path=${basePath}`;
}
