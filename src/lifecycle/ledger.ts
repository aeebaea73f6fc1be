import type { Layout } from '../store/layout.js';
import { peekLedger, withLedgerFile, type Ledger } from '../store/ledger.js';
import type { CapacityLedger } from '../store/ports.js';
import { rebuildLedger } from './ledger-rebuild.js';

/**
 * Read-modify-write of the state home's ledger under its lock (`withLedgerFile`), a damaged ledger rebuilt from the
 * runs that live. Every ledger change of the server, the runner and the command line goes through here.
 */
export function withLedger<T>(layout: Layout, fn: (l: Ledger) => T, options: { durable?: boolean } = {}): Promise<T> {
  return withLedgerFile(layout, rebuildLedger, fn, options);
}

/** A lock-free read; a damaged ledger is rebuilt as a snapshot (the next change under the lock writes the rebuild back). */
export function readLedger(layout: Layout): Ledger {
  return peekLedger(layout) ?? rebuildLedger(layout.ledgerFile);
}

/** The ledger as `ledger.json` of a state home (src/store/ledger.ts), a damaged one rebuilt from the runs that live. */
export class FileLedger implements CapacityLedger {
  constructor(private readonly layout: Layout) {}

  change<T>(fn: (l: Ledger) => T, options: { durable?: boolean } = {}): Promise<T> {
    return withLedger(this.layout, fn, options);
  }

  read(): Ledger {
    return readLedger(this.layout);
  }

  peek(): Ledger | null {
    return peekLedger(this.layout);
  }
}
