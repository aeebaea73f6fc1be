/**
 * The umask the server was started with. The server itself runs under 077 (its state home is private), but agents
 * get the user's own, so the files they create are what the user expects.
 */
let umaskAtStart: number | null = null;

export function setOriginalUmask(mask: number): void { umaskAtStart = mask; }
export function originalUmask(): number { return umaskAtStart ?? 0o022; }
