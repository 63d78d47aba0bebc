// The releases of the user's claims as notifications: only what the user did not do, once.
// Whether a release is news is decided by its reason alone, as the server recorded it (the
// claim_released event's, or GET /dra/api/claims/{name}'s for one found gone by a read),
// never by whether a read happened to see the claim alive:
// - `user`: its own user released it (the panel's Release or Release all, `c.release()` or
//   `%dra release` in a notebook, a cell run again, `dra-jupyter release` in a terminal):
//   not announced, the user knows;
// - `moved`, `device-moved`: its kernel moved (the kernel's move and the Move's answer say
//   so); a run's claim: the run's end says how it went (runends.ts); a reason the server
//   does not know (`elsewhere`: nothing left to say why): not announced either;
// - `kernel-shutdown`, `server-stop`: a note that goes (the kernel shut down, restarted or
//   died; the server stopped: the devices went with it);
// - anything else (idle, GPU idle, lease ended, an admin, a device taken out, fair share, a
//   limit, the holder gone): a warning that stays until closed.
// The releases of one kernel for one reason that come together (an idle release of a
// notebook's 3 claims: 3 events within milliseconds) are one notification.

import { deviceSummary, releaseReason } from '../format';
import type { DraModel, Release } from '../model';
import { GATHER_MS } from './warnings';

/** How a release is told: not at all, a note that goes, a warning that stays. */
export type ReleaseNotice = 'none' | 'note' | 'warning';

/** How a release is told, by its reason; `run`: the claim of a background run. */
export function releaseNotice(reason: string, run = false): ReleaseNotice {
  if (run) {
    return 'none';
  }
  switch (reason) {
    case 'user':
    case 'moved':
    case 'device-moved':
    case 'elsewhere':
      return 'none';
    case 'kernel-shutdown':
    case 'server-stop':
      return 'note';
    default:
      return 'warning';
  }
}

/** How releases are shown (JupyterLab's Notification in the page; a list in tests). */
export interface ReleaseNotifier {
  /** A note that goes by itself. */
  note(message: string): void;
  /** A warning that stays until closed. */
  warn(message: string): void;
}

interface Gathered {
  notice: ReleaseNotice;
  reason: string;
  label: string | null;
  claims: string[];
  devices: string[];
}

/**
 * `Released 2× H200 of train.ipynb (claim a): …`, or for several claims of one kernel
 * `Released 3× H200 of train.ipynb (3 claims): …`.
 */
export function releaseText(
  claims: readonly string[],
  devices: readonly string[],
  label: string | null,
  reason: string,
  deviceMap: DraModel['deviceMap']
): string {
  const what = deviceSummary(devices, deviceMap);
  const where = label ? ` of ${label}` : '';
  const which = claims.length === 1 ? `claim ${claims[0]}` : `${claims.length} claims`;
  return `Released ${what}${where} (${which}): ${releaseReason(reason)}.`;
}

export class ReleaseNotices {
  constructor(
    readonly model: DraModel,
    readonly notifier: ReleaseNotifier,
    /** The notebook of a kernel, or null (read as the release comes: the kernel may go). */
    readonly label: (kernelId: string) => string | null,
    /** How long releases are gathered (ms: those of one kernel and reason within this long
     * of the first are one notification); 0: each is told at once. */
    readonly gatherMs: number = GATHER_MS
  ) {}

  /** Tell a release (the model's `released`: once per release) if it is news. */
  add(release: Release): void {
    const { event, claim } = release;
    const notice = releaseNotice(event.reason, Boolean(claim?.run));
    if (notice === 'none') {
      return;
    }
    const kernel = event.kernel_id ?? claim?.kernel_id ?? null;
    const key = `${kernel === null ? `claim ${event.claim}` : `kernel ${kernel}`}|${event.reason}`;
    let gathered = this._gathered.get(key);
    if (gathered === undefined) {
      gathered = {
        notice,
        reason: event.reason,
        label: kernel ? this.label(kernel) : null,
        claims: [],
        devices: []
      };
      this._gathered.set(key, gathered);
      if (this.gatherMs > 0) {
        setTimeout(() => this._tell(key), this.gatherMs);
      }
    }
    gathered.claims.push(event.claim);
    gathered.devices.push(...event.devices);
    if (this.gatherMs <= 0) {
      this._tell(key);
    }
  }

  /** Tell what is gathered now (tests; the page waits {@link gatherMs}). */
  flush(): void {
    for (const key of [...this._gathered.keys()]) {
      this._tell(key);
    }
  }

  private _tell(key: string): void {
    const gathered = this._gathered.get(key);
    if (gathered === undefined) {
      return; // told already (flushed)
    }
    this._gathered.delete(key);
    const { claims, devices, label, reason } = gathered;
    const text = releaseText(claims, devices, label, reason, this.model.deviceMap);
    if (gathered.notice === 'note') {
      this.notifier.note(text);
    } else {
      this.notifier.warn(text);
    }
  }

  private _gathered = new Map<string, Gathered>();
}
