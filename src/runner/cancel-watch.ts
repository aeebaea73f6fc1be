import { readCancelRequest, type CancelReason } from '../lifecycle/cancel-request.js';
import type { RunStore } from '../store/ports.js';
import { DirWatch } from '../wait.js';
import { isAlive, supervisorOf } from '../process/identity.js';

export { supervisorOf };

export interface CancelWatch {
  store: RunStore;
  runId: string;
  /** Called at the first request seen (again at later ones: the caller keeps the first). */
  onStop: (reason: CancelReason) => void;
  /**
   * Whether this process is the run's own runner: then SIGTERM and SIGINT stop the run too, and SIGHUP (a closed
   * terminal of whoever started it) does not. A host that supervises runs inside a longer-lived process leaves its
   * signals alone.
   */
  processSignals: boolean;
}

/**
 * A cancel request is a file (the runner is the single writer of status): watched, with a slow poll behind it.
 * Returns the function that stops watching.
 */
export function watchForCancel(o: CancelWatch): () => void {
  const supervisor = o.processSignals ? supervisorOf(process.env) : null;
  const check = () => {
    const reason = readCancelRequest(o.store, o.runId);
    if (reason) o.onStop(reason);
    else if (supervisor && !isAlive(supervisor)) o.onStop('CANCELLED');
  };
  const watch = new DirWatch([o.store.paths(o.runId).dir], (name) => name.startsWith('cancel-request'), check);
  const poll = setInterval(check, 500);
  const onSignal = () => o.onStop('CANCELLED');
  const ignore = () => {};
  if (o.processSignals) {
    process.on('SIGTERM', onSignal);
    process.on('SIGINT', onSignal);
    process.on('SIGHUP', ignore);
  }
  check();
  return () => {
    watch.close();
    clearInterval(poll);
    if (o.processSignals) {
      process.off('SIGTERM', onSignal);
      process.off('SIGINT', onSignal);
      process.off('SIGHUP', ignore);
    }
  };
}
