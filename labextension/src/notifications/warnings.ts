// The idle warnings as notifications that stay true: one per claim at a time, saying the
// clock time of the deadline (true until the deadline moves: no frozen countdown),
// withdrawn once they no longer hold: the claim released (here or anywhere), kept (a Keep
// from the panel, a notebook's card or the notification), or its kernel running a cell.

import { clockTime, deviceSummary } from '../format';
import type { DraModel } from '../model';
import type { IdleWarningEvent } from '../tokens';

/** A button of a notification. */
export interface WarningAction {
  label: string;
  caption: string;
  kind: 'accent' | 'warn';
  callback: () => void;
}

/** How warnings are shown (JupyterLab's Notification in the page; a table in tests). */
export interface Notifier {
  /** Show a warning; its id. */
  warn(message: string, actions: WarningAction[]): string;
  /** Say something else in a shown warning (false: it is gone). */
  update(id: string, message: string): boolean;
  /** Take a warning away, from the toasts and the notification center. */
  dismiss(id: string): void;
}

/** Notifications that stay, one per key (a claim, a kernel): a new one for a key replaces
 * its last; withdrawn by key. */
export class NoticeSet {
  constructor(readonly notifier: Notifier) {}

  /** The keys with a notification shown now. */
  get keys(): string[] {
    return [...this._ids.keys()];
  }

  show(key: string, message: string, actions: WarningAction[]): void {
    this.withdraw(key);
    this._ids.set(key, this.notifier.warn(message, actions));
  }

  /** Take the key's notification away, if it has one. */
  withdraw(key: string): void {
    const id = this._ids.get(key);
    if (id !== undefined) {
      this._ids.delete(key);
      this.notifier.dismiss(id);
    }
  }

  private _ids = new Map<string, string>();
}

interface Shown {
  id: string;
  deadline: number; // the deadline it warns of
  shown: number; // when, by the model's clock
}

/** A warning is withdrawn once the claim's deadline moved later by more than this (s). */
const MOVED = 1;

export class IdleWarnings {
  constructor(
    readonly model: DraModel,
    readonly notifier: Notifier,
    /** The notebook of a kernel, or null. */
    readonly label: (kernelId: string) => string | null,
    /** What to do with a Keep or Release that failed. */
    readonly fail: (err: unknown) => void
  ) {
    model.changed.connect(this.check, this);
    model.released.connect((_, { event }) => this.withdraw(event.claim));
  }

  /** The claims warned of now. */
  get claims(): string[] {
    return [...this._shown.keys()];
  }

  /** The text of the warning of an idle_warning event. */
  text(event: IdleWarningEvent): string {
    const what = deviceSummary(event.devices, this.model.deviceMap);
    const label = event.kernel_id ? this.label(event.kernel_id) : null;
    const where = label ? ` of ${label}` : '';
    return (
      `${what}${where} will be released as idle at ${clockTime(event.deadline)} ` +
      `(claim ${event.claim}).`
    );
  }

  /** Warn of a claim's idle deadline: the one warning of the claim says it (a second
   * deadline replaces the first's text; never a second warning). */
  show(event: IdleWarningEvent): void {
    const text = this.text(event);
    const now = this.model.now();
    const shown = this._shown.get(event.claim);
    if (shown !== undefined && this.notifier.update(shown.id, text)) {
      shown.deadline = event.deadline;
      shown.shown = now;
      return;
    }
    const name = event.claim;
    const id = this.notifier.warn(text, [
      {
        label: 'Keep',
        caption: 'Start the idle countdown again',
        kind: 'accent',
        callback: () => {
          this.withdraw(name);
          this.model.keep(name).catch(this.fail);
        }
      },
      {
        label: 'Release',
        caption: 'Give the devices back now',
        kind: 'warn',
        callback: () => {
          this.withdraw(name);
          this.model.release(name).catch(this.fail);
        }
      }
    ]);
    this._shown.set(name, { id, deadline: event.deadline, shown: now });
  }

  /** Take the claim's warning away, if it has one. */
  withdraw(claim: string): void {
    const shown = this._shown.get(claim);
    if (shown !== undefined) {
      this._shown.delete(claim);
      this.notifier.dismiss(shown.id);
    }
  }

  /** Withdraw the warnings of a kernel (a cell of it was started: not idle). */
  withdrawKernel(kernelId: string): void {
    for (const c of this.model.kernelClaims(kernelId)) {
      this.withdraw(c.name);
    }
  }

  /**
   * After each refresh: withdraw the warnings that no longer hold. A claim gone from a
   * refresh that started after its warning was released; a claim whose deadline moved
   * later (a Keep from anywhere, a cell ran or runs, a restart) or that has none is not
   * about to go.
   */
  check(): void {
    for (const [name, shown] of [...this._shown]) {
      const claim = this.model.claims.find(c => c.name === name);
      if (claim === undefined) {
        if (this.model.lastRead >= shown.shown) {
          this.withdraw(name);
        }
      } else if (
        claim.busy ||
        claim.idle_deadline === null ||
        this._moved(claim.idle_deadline, shown)
      ) {
        this.withdraw(name);
      }
    }
  }

  /** Whether a deadline as the REST API says it is later than the one warned of (past its
   * deadline, a claim's reported deadline is "now" until it goes: that is no move). */
  private _moved(deadline: number, shown: Shown): boolean {
    return deadline > shown.deadline + MOVED && deadline > this.model.lastRead + MOVED;
  }

  private _shown = new Map<string, Shown>();
}
