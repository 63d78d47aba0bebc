// A device of one of the user's claims taken out of service (the device_unhealthy event:
// an admin's taint, or the health watcher's after a GPU error): a notification that
// stays, saying which device, what happened and what it means for the work (NoExecute:
// the clock time the claim is released, as the server's log, the notebook and the CLI
// say it), with its two actions: Move (the same again on an equivalent device, the kernel
// restarted on it) and Release. Withdrawn once the claim goes (here or anywhere), an
// action is taken, or the taint is gone (`untaint`: read with the devices after it was
// shown, which are read on every refresh while one shows).

import { clockTime, deviceSummary, hasTaint } from '../format';
import type { DraModel } from '../model';
import type { DeviceUnhealthyEvent, Restart } from '../tokens';
import type { MoveNotifier } from './moves';
import { NoticeSet, type WarningAction } from './warnings';

/** The device's short name: `gpu-3` of `gpu.nvidia.com/node-1/gpu-3`. */
export function deviceName(key: string): string {
  return key.slice(key.lastIndexOf('/') + 1);
}

/** JupyterLab shows this many characters of a notification. */
export const NOTIFICATION_CHARS = 140;

/**
 * The notification's text: the device, whose it is, what it means for the work (NoExecute:
 * the clock time the claim is released, in the page's time zone), then what happened, cut
 * to what JupyterLab shows (the actions' captions say the rest).
 */
export function unhealthyText(event: DeviceUnhealthyEvent, label: string | null): string {
  const of = label ? ` of ${label}` : ` (claim ${event.claim})`;
  let means = 'work on it may fail';
  if (event.effect === 'NoExecute') {
    means =
      event.release_at === null
        ? 'save your work now, its pods are evicted'
        : `save your work now, the claim will be released at ${clockTime(event.release_at)}`;
  }
  const text = `${deviceName(event.device)}${of} was taken out of service: ${means} (${
    event.reason || event.key
  })`;
  return text.length <= NOTIFICATION_CHARS
    ? text
    : `${text.slice(0, NOTIFICATION_CHARS - 1).trimEnd()}…`;
}

/** The success note of a Move: the devices the kernel's claims hold now. */
export function movedText(answer: Restart, devices: DraModel['deviceMap']): string {
  const keys = answer.claims.flatMap(c => c.devices);
  const what = keys.length > 0 ? deviceSummary(keys, devices) : 'an equivalent device';
  return `Kernel restarted on ${what}; its variables are gone.`;
}

export class DeviceHealth {
  constructor(
    readonly model: DraModel,
    readonly notifier: MoveNotifier,
    /** The page's kernels: a kernel's notebook, and its restart. */
    readonly kernels: {
      label(kernelId: string): string | null;
      restarted(kernelId: string): Promise<void>;
    },
    /** What to do with a Move or Release that failed. */
    readonly fail: (err: unknown) => void,
    /** Asked before a Move (the kernel's variables go): true, move (the page: a dialog). */
    readonly moveAsked: (notebook: string | null) => Promise<boolean> = async () => true
  ) {
    this._shown = new NoticeSet(notifier);
    model.released.connect((_, { event }) => this.withdraw(event.claim));
    model.changed.connect(this.check, this);
  }

  /** The taint a claim's notification is of (the latest of its devices'). */
  taintOf(claim: string): { device: string; key: string; releaseAt: number | null } | null {
    const shown = this._taints.get(claim);
    return shown ? { device: shown.device, key: shown.key, releaseAt: shown.releaseAt } : null;
  }

  /**
   * After each refresh: withdraw the notifications whose taint is gone from its device, by
   * devices read after it was shown; while any shows, the next refresh reads the devices.
   */
  check(): void {
    for (const [name, shown] of [...this._taints]) {
      const device = this.model.deviceMap.get(shown.device);
      if (this.model.devicesRead >= shown.shown && device && !hasTaint(device, shown.key)) {
        this.withdraw(name);
      }
    }
    if (this._taints.size > 0) {
      this.model.readDevicesNext();
    }
  }

  /** The claims with a notification shown now. */
  get claims(): string[] {
    return this._shown.keys;
  }

  show(event: DeviceUnhealthyEvent): void {
    const name = event.claim; // the latest of a claim's devices is the one that shows
    const kernel = event.kernel_id;
    const label = kernel ? this.kernels.label(kernel) : null;
    const actions: WarningAction[] = [];
    if (kernel !== null) {
      actions.push({
        label: 'Move',
        caption:
          'Ask for an equivalent device and restart the kernel on it (its variables are ' +
          'lost); the claim with the failed device is released',
        kind: 'accent',
        callback: () => {
          void this.moveAsked(label).then(yes => {
            if (yes) {
              this.withdraw(name);
              void this.move(name, kernel);
            } else {
              this._shown.show(name, unhealthyText(event, label), actions); // as it was
            }
          });
        }
      });
    }
    actions.push({
      label: 'Release',
      caption: 'Give the claim back now',
      kind: 'warn',
      callback: () => {
        this.withdraw(name);
        this.model.release(name).catch(this.fail);
      }
    });
    this._shown.show(name, unhealthyText(event, label), actions);
    this._taints.set(name, {
      device: event.device,
      key: event.key,
      releaseAt: event.release_at,
      shown: this.model.now()
    });
    this.model.readDevicesNext();
  }

  /** Move: the server makes the same claim again and restarts the kernel with it. */
  async move(name: string, kernel: string): Promise<void> {
    try {
      const answer = await this.model.move(name);
      await this.kernels.restarted(kernel);
      this.notifier.success(movedText(answer, this.model.deviceMap));
    } catch (err) {
      this.fail(err);
    }
  }

  /** Take the claim's notification away, if it has one. */
  withdraw(claim: string): void {
    this._shown.withdraw(claim);
    this._taints.delete(claim);
  }

  private _shown: NoticeSet;
  // the taint of each claim's notification, and when it was shown (by the model's clock)
  private _taints = new Map<
    string,
    { device: string; key: string; releaseAt: number | null; shown: number }
  >();
}
