/**
 * Cutting UTF-8 text at character boundaries: pages of an output and the head and tail of a bounded view never carry
 * a broken character (which a decoder turns into U+FFFD).
 */

export const isContinuation = (b: number): boolean => (b & 0xc0) === 0x80;

/** The length of a character from its first byte (1 for a byte that cannot start one). */
export const charLength = (b: number): number => (b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 1);

/** How many bytes at the end of `buf` start a UTF-8 character that continues past it (0 when it ends whole). */
export function incompleteTail(buf: Buffer): number {
  for (let back = 1; back <= Math.min(3, buf.length); back++) {
    const b = buf[buf.length - back]!;
    if (isContinuation(b)) continue;
    return charLength(b) > back ? back : 0;
  }
  return 0;
}

/** How many bytes at the start of `buf` continue a character that began before it (at most 3). */
export function strayHead(buf: Buffer): number {
  let n = 0;
  while (n < Math.min(3, buf.length) && isContinuation(buf[n]!)) n++;
  return n;
}
