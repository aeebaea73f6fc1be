import { Layout } from '../store/layout.js';
import type { CapacityLedger, RunStore, SessionRegistry } from '../store/ports.js';
import { FileRunStore } from '../store/run-store.js';
import { FileSessionRegistry } from '../store/session-registry.js';
import { FileLedger } from './ledger.js';

/** A state home's shared state as its users reach it: the server, the command line and whatever supervises a run. */
export interface StatePorts {
  layout: Layout;
  store: RunStore;
  ledger: CapacityLedger;
  sessions: SessionRegistry;
}

/**
 * The one place the implementations of the ports are chosen: the files of the state home. A second implementation
 * (docs/architecture.md, "Seams") is built here instead, and reaches the manager through its context and a run's
 * supervision through its host.
 */
export function fileStatePorts(home: string): StatePorts {
  const layout = new Layout(home);
  return { layout, store: new FileRunStore(layout), ledger: new FileLedger(layout), sessions: fileSessionRegistry(home) };
}

/** The session registry alone, for a server registering its session while it starts. */
export function fileSessionRegistry(home: string): SessionRegistry {
  return new FileSessionRegistry(home);
}
