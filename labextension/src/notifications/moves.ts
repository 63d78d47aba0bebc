// A notebook's kernel that moved, keeping its id (Kubernetes): into a pod of its own with
// devices, or back onto the server without them once its pod's claim was released (idle,
// its user) or its pod could not start. What the page says of it, the one button that
// starts it again in a pod with the devices it had, and the Devices panel's restart
// button for a claim whose devices go to a pod.

import { deviceSummary, requestedDevices } from '../format';
import type { DraModel } from '../model';
import type { KernelMovedEvent } from '../tokens';
import type { Claim, Device, Restart } from '../wire';
import { NoticeSet, type Notifier, type WarningAction } from './warnings';

/** How long the note of a kernel moved into its pod shows (ms): nothing to do about it. */
export const MOVED_INFO_MS = 8000;

/** A restart button's words longer than this read badly in a toast: its caption has them. */
const LABEL_WORDS = 40;

/** A button's words and its tooltip. */
export interface ButtonWords {
  label: string;
  caption: string;
}

/** What the page says of a kernel's move, and the button it offers. */
export interface MoveNotice {
  /** warning: it lost its devices (it stays until dismissed); info: it moved into its pod. */
  type: 'warning' | 'info';
  message: string;
  /** With `server`: the restart in a pod with the devices it had. */
  restart: ButtonWords | null;
}

/**
 * The notification of a kernel_moved event; `label`: the kernel's notebook, as the page
 * names kernels elsewhere (null: none of the page's).
 */
export function moveNotice(event: KernelMovedEvent, label: string | null): MoveNotice {
  const of = label ? ` of ${label}` : '';
  const words = requestedDevices(event.devices);
  if (event.where === 'pod') {
    return {
      type: 'info',
      message: `Kernel${of} moved into a pod with ${words}; its variables are gone.`,
      restart: null
    };
  }
  const button =
    words && words.length <= LABEL_WORDS ? `Restart on ${words}` : 'Restart with its devices';
  return {
    type: 'warning',
    // JupyterLab cuts a notification's text at 140 characters: what matters comes first
    message:
      `Kernel${of} is back on the server, without devices; its variables are gone. ` +
      event.message.charAt(0).toUpperCase() +
      event.message.slice(1),
    restart: {
      label: button,
      caption:
        `Restart the kernel in a pod of its own with ${words || 'the devices it had'}; ` +
        'its variables are lost'
    }
  };
}

/** The success note of a restart in a pod: the devices the kernel's claims hold now, or
 * those it asked for when the page does not know them (yet). */
export function restartedText(
  answer: Restart,
  words: string,
  devices: ReadonlyMap<string, Device>
): string {
  const keys = answer.claims.flatMap(c => c.devices);
  const known = keys.length > 0 && keys.every(k => devices.get(k)?.model);
  const what = known ? deviceSummary(keys, devices) : words || 'its devices';
  return `Kernel restarted in a pod with ${what}.`;
}

/** Whether a claim's devices go to a pod: a Kubernetes claim, pending (no devices yet)
 * until a pod that uses it is scheduled. */
export function claimPending(claim: Claim): boolean {
  return claim.devices.length === 0;
}

/** The restart button of a pending claim: the kernel moves into a pod that holds them. */
export const POD_RESTART: ButtonWords = {
  label: 'Restart in a pod with these devices',
  caption:
    'Restart the kernel in a pod of its own that holds these devices: it moves there, ' +
    'and its variables are lost'
};

/** The Devices panel's restart button for `claim`: in a pod where its devices go to one,
 * else `here` (the kernel restarts on this machine with them in its environment). */
export function restartWords(claim: Claim, here: ButtonWords): ButtonWords {
  return claimPending(claim) ? POD_RESTART : here;
}

/** How kernel moves are shown: the idle warnings' notifier, and two notes that go. */
export interface MoveNotifier extends Notifier {
  /** A note that goes by itself after `ms`. */
  info(message: string, ms: number): void;
  /** An action went well. */
  success(message: string): void;
}

/**
 * The kernel moves as notifications: a kernel back on the server (it lost its devices and
 * its variables) stays, with the button that starts it again in a pod with them, until
 * that is done (its button, or the kernel moves into a pod by any other way); one into its
 * pod is a note that goes.
 */
export class KernelMoves {
  constructor(
    readonly model: DraModel,
    readonly notifier: MoveNotifier,
    /** The page's kernels (tokens.ts's Kernels): a kernel's notebook, and its restart. */
    readonly kernels: {
      label(kernelId: string): string | null;
      restarted(kernelId: string): Promise<void>;
    },
    /** What to do with a restart that failed. */
    readonly fail: (err: unknown) => void
  ) {
    this._shown = new NoticeSet(notifier);
  }

  /** The kernels whose warning shows now. */
  get kernelsShown(): string[] {
    return this._shown.keys;
  }

  show(event: KernelMovedEvent): void {
    const kernel = event.kernel_id;
    this.withdraw(kernel); // the last move of a kernel is the one that holds
    const notice = moveNotice(event, this.kernels.label(kernel));
    if (notice.restart === null) {
      this.notifier.info(notice.message, MOVED_INFO_MS);
      return;
    }
    const words = requestedDevices(event.devices);
    const action: WarningAction = {
      ...notice.restart,
      kind: 'accent',
      callback: () => {
        this.withdraw(kernel);
        void this.restart(kernel, words);
      }
    };
    this._shown.show(kernel, notice.message, [action]);
  }

  /** Start the kernel again in a pod with the devices it had (restart-with-claims). */
  async restart(kernel: string, words: string): Promise<void> {
    try {
      const answer = await this.model.restartWithClaims(kernel);
      await this.kernels.restarted(kernel);
      this.notifier.success(restartedText(answer, words, this.model.deviceMap));
    } catch (err) {
      this.fail(err);
    }
  }

  /** Take the kernel's warning away, if it has one. */
  withdraw(kernel: string): void {
    this._shown.withdraw(kernel);
  }

  private _shown: NoticeSet;
}
