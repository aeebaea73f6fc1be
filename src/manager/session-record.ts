import type { SessionRegistry } from '../store/ports.js';
import type { SessionRecord } from '../store/session-registry.js';

/**
 * Writes this server's session record, merged with what the file already says (a restarted server with the same
 * SUBAGENTS_SESSION_ID keeps its start time and ancestors) and with its link files. Under the session's lock: servers
 * sharing the id write the same file. Not an acknowledgement (restore's write is): no fsync.
 * Light on purpose: the server registers before it connects, long before the rest of the manager is loaded.
 * `fresh`: the id was just made at random by this process, so no run can carry an adoption marker of it, and a
 * missing record is not a lost one: nothing to rebuild (the rebuild reads every run directory: 10 000 runs in the
 * home added ~140 ms to every server's start).
 */
export function registerSession(registry: SessionRegistry, runsDir: string, own: SessionRecord, client: SessionRecord['client'], o: { fresh?: boolean } = {}): Promise<SessionRecord> {
  return registry.withRecord(own.sessionId, () => {
    const existing = registry.read(own.sessionId);
    const ancestors = new Set([...own.ancestors, ...registry.ancestorsOf(own.sessionId, runsDir, { rebuild: !o.fresh })]);
    const rec: SessionRecord = {
      v: 1, sessionId: own.sessionId, startedAt: existing?.startedAt ?? own.startedAt,
      client: client ?? existing?.client ?? own.client, ancestors: [...ancestors],
    };
    registry.write(rec, { durable: false });
    return rec;
  });
}

export function newSessionRecord(sessionId: string): SessionRecord {
  return { v: 1, sessionId, startedAt: new Date().toISOString(), client: null, ancestors: [] };
}
