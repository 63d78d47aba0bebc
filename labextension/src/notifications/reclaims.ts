// A warning of reclaim under pressure (the reclaim_warning event of the shared-machine
// service): another user waits for devices that one of the user's idle claims holds, and
// the claim goes at a deadline unless its kernel works or the user keeps it (a bounded
// number of times while someone waits). Shown as a notification that stays, saying who
// waits, for what, and the clock time of the deadline (no frozen countdown), with Keep
// (while Keeps are left) and Release; withdrawn once the claim goes or is kept.

import { clockTime, deviceSummary } from '../format';
import type { DraModel } from '../model';
import type { ReclaimWarningEvent } from '../tokens';
import { NoticeSet, type Notifier, type WarningAction } from './warnings';

/** The notification's text: who waits for what, whose claim goes, when, and the Keeps. */
export function reclaimText(
  event: ReclaimWarningEvent,
  label: string | null,
  devices: DraModel['deviceMap']
): string {
  const what = deviceSummary(event.devices, devices);
  const where = label ? ` of ${label}` : ` (claim ${event.claim})`;
  const keeps =
    event.keeps_left > 0
      ? `Keep ${event.keeps_left === 1 ? 'once' : `${event.keeps_left} times`} more`
      : 'no Keep left';
  return (
    `${event.waiter} waits for ${event.what}: your idle ${what}${where} goes at ` +
    `${clockTime(event.deadline)} (${keeps}).`
  );
}

export class ReclaimWarnings {
  constructor(
    readonly model: DraModel,
    readonly notifier: Notifier,
    /** The notebook of a kernel, or null. */
    readonly label: (kernelId: string) => string | null,
    /** What to do with a Keep or Release that failed. */
    readonly fail: (err: unknown) => void
  ) {
    this._shown = new NoticeSet(notifier);
    model.released.connect((_, { event }) => this.withdraw(event.claim));
  }

  /** The claims warned of now. */
  get claims(): string[] {
    return this._shown.keys;
  }

  show(event: ReclaimWarningEvent): void {
    const name = event.claim; // the latest warning of a claim is the one that holds
    const label = event.kernel_id ? this.label(event.kernel_id) : null;
    const actions: WarningAction[] = [];
    if (event.keeps_left > 0) {
      actions.push({
        label: 'Keep',
        caption: `Keep the devices for now; ${event.waiter} waits on`,
        kind: 'accent',
        callback: () => {
          this.withdraw(name);
          this.model.keep(name).catch(this.fail);
        }
      });
    }
    actions.push({
      label: 'Release',
      caption: `Give the devices back now, to ${event.waiter}`,
      kind: 'warn',
      callback: () => {
        this.withdraw(name);
        this.model.release(name).catch(this.fail);
      }
    });
    this._shown.show(name, reclaimText(event, label, this.model.deviceMap), actions);
  }

  /** Take the claim's warning away, if it has one. */
  withdraw(claim: string): void {
    this._shown.withdraw(claim);
  }

  private _shown: NoticeSet;
}
