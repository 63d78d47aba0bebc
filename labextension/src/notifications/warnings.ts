// The idle warnings as notifications that stay true: one per notebook (its kernel's claims
// together; a claim of no kernel alone) at a time, saying the clock time of the deadline
// (true until the deadline moves: no frozen countdown), whose Keep keeps all that kernel's
// claims; a claim leaves it once its warning no longer holds (released here or anywhere,
// kept from the panel, a notebook's card or `%dra keep`), and it is withdrawn when none is
// left or its kernel runs a cell. A kernel that joined a claim (`dra.request(join=...)`,
// the event's `joined`) is warned apart: its own pod stops, the claim stays (no Keep or
// Release: the claim is its maker's; a cell keeps the pod), withdrawn when a cell runs, the
// kernel moves, or a refresh no longer lists it as joined.

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

/**
 * Warnings of one notebook that come within this long of the first (ms) open as one
 * notification: the server warns of a kernel's claims one event each, in one check, and
 * JupyterLab drops the updates of a toast it is still opening.
 */
export const GATHER_MS = 300;

/** A claim warned of: the deadline it warns of, and when (by the model's clock). */
interface Warned {
  deadline: number;
  shown: number;
  devices: string[];
}

/** The one warning of a notebook (a kernel's claims; or one claim of no kernel). */
interface Shown {
  id: string | null; // null: gathered, not open yet
  kernel: string | null;
  claims: Map<string, Warned>;
  pending?: boolean; // its text is to be said again once a burst of changes is in
  reopen?: boolean; // a new warning among them: open it again if it was closed
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
    readonly fail: (err: unknown) => void,
    /** How long a notebook's first warnings are gathered before it opens (ms); 0: none. */
    readonly gatherMs: number = GATHER_MS
  ) {
    model.changed.connect(this.check, this);
    model.released.connect((_, { event }) => this.withdraw(event.claim));
    model.kernelMoved.connect((_, event) => this._dismissJoiner(event.kernel_id));
  }

  /** The kernels warned now that their pod on a joined claim stops. */
  get joiners(): string[] {
    return [...this._joiners.keys()];
  }

  /** The text of a joiner's warning: `idle.ipynb: its pod on the shared claim team-gpu will
   * be stopped as idle at 14:05:00 unless a cell runs; the claim stays.` */
  joinedText(kernel: string, claim: string, deadline: number): string {
    const label = this.label(kernel) ?? `Kernel ${kernel.slice(0, 8)}`;
    return (
      `${label}: its pod on the shared claim ${claim} will be stopped as idle at ` +
      `${clockTime(deadline)} unless a cell runs; the claim stays.`
    );
  }

  /** Warn that a joiner's pod stops (one warning per kernel: a moved deadline replaces it). */
  private _showJoined(event: IdleWarningEvent): void {
    const kernel = event.kernel_id;
    if (kernel === null) {
      return; // a joiner is always a kernel
    }
    this._dismissJoiner(kernel);
    const id = this.notifier.warn(this.joinedText(kernel, event.claim, event.deadline), []);
    this._joiners.set(kernel, { id, claim: event.claim, shown: this.model.now() });
  }

  private _dismissJoiner(kernel: string): void {
    const warned = this._joiners.get(kernel);
    if (warned !== undefined) {
      this._joiners.delete(kernel);
      this.notifier.dismiss(warned.id);
    }
  }

  /** The claims warned of now. */
  get claims(): string[] {
    return [...this._shown.values()].flatMap(s => [...s.claims.keys()]);
  }

  /** How many warnings show now (one per notebook). */
  get shownCount(): number {
    return this._shown.size;
  }

  /**
   * The text of a notebook's warning: `1× H200 of idle.ipynb will be released as idle at
   * 14:05:00 (claim a).`, and for several claims `3 claims of train.ipynb (3× H200) will be
   * released as idle at 14:05:00 unless a cell runs or you keep them.` (the first deadline,
   * where they differ).
   */
  text(
    kernel: string | null,
    claims: ReadonlyMap<string, { deadline: number; devices: readonly string[] }>
  ): string {
    const label = kernel ? this.label(kernel) : null;
    const where = label ? ` of ${label}` : '';
    const warned = [...claims.values()];
    const what = deviceSummary(
      warned.flatMap(w => w.devices),
      this.model.deviceMap
    );
    const first = Math.min(...warned.map(w => w.deadline));
    const last = Math.max(...warned.map(w => w.deadline));
    if (warned.length === 1) {
      const [name] = claims.keys();
      return `${what}${where} will be released as idle at ${clockTime(first)} (claim ${name}).`;
    }
    const when =
      last - first > MOVED ? `, the first at ${clockTime(first)},` : ` at ${clockTime(first)}`;
    return (
      `${warned.length} claims${where} (${what}) will be released as idle${when} unless a ` +
      'cell runs or you keep them.'
    );
  }

  /** Warn of a claim's idle deadline in its notebook's one warning: a second claim of the
   * kernel, or a second deadline of a claim, changes its text; never a second warning. */
  show(event: IdleWarningEvent): void {
    if (event.joined) {
      this._showJoined(event);
      return;
    }
    const kernel = event.kernel_id;
    const key = kernel ?? `claim ${event.claim}`;
    const now = this.model.now();
    const warned = { deadline: event.deadline, shown: now, devices: event.devices };
    const shown = this._shown.get(key);
    if (shown !== undefined) {
      shown.claims = new Map(shown.claims).set(event.claim, warned);
      if (shown.id !== null) {
        this._say(key, shown, true);
      }
      return;
    }
    const gathered: Shown = { id: null, kernel, claims: new Map([[event.claim, warned]]) };
    this._shown.set(key, gathered);
    if (this.gatherMs > 0) {
      setTimeout(() => this._open(key, gathered), this.gatherMs);
    } else {
      this._open(key, gathered);
    }
  }

  /** Open a notebook's warning with what was gathered (unless withdrawn meanwhile). */
  private _open(key: string, shown: Shown): void {
    if (this._shown.get(key) !== shown || shown.id !== null) {
      return;
    }
    shown.id = this.notifier.warn(this.text(shown.kernel, shown.claims), [
      {
        label: 'Keep',
        caption: shown.kernel
          ? "Start the idle countdown of the notebook's claims again"
          : 'Start the idle countdown again',
        kind: 'accent',
        callback: () => this._keep(key)
      },
      {
        label: 'Release',
        caption: 'Give the devices back now',
        kind: 'warn',
        callback: () => this._release(key)
      }
    ]);
  }

  /** Keep: every claim of the kernel (those warned of, and any other it holds now). */
  private _keep(key: string): void {
    const shown = this._shown.get(key);
    if (shown === undefined) {
      return;
    }
    const names = new Set(shown.claims.keys());
    for (const c of this.model.kernelClaims(shown.kernel)) {
      names.add(c.name);
    }
    this._dismiss(key);
    for (const name of names) {
      this.model.keep(name).catch(this.fail);
    }
  }

  /** Release: the claims the warning is of. */
  private _release(key: string): void {
    const shown = this._shown.get(key);
    if (shown === undefined) {
      return;
    }
    this._dismiss(key);
    for (const name of shown.claims.keys()) {
      this.model.release(name).catch(this.fail);
    }
  }

  private _dismiss(key: string): void {
    const shown = this._shown.get(key);
    if (shown !== undefined) {
      this._shown.delete(key);
      if (shown.id !== null) {
        this.notifier.dismiss(shown.id);
      }
    }
  }

  /** The claim no longer goes at the deadline warned of: it leaves its notebook's warning,
   * which is withdrawn when none is left, else says what is left. */
  withdraw(claim: string): void {
    for (const [key, shown] of [...this._shown]) {
      if (!shown.claims.has(claim)) {
        continue;
      }
      const claims = new Map(shown.claims);
      claims.delete(claim);
      if (claims.size === 0) {
        this._dismiss(key);
        continue;
      }
      shown.claims = claims;
      if (shown.id !== null) {
        this._say(key, shown, false);
      }
    }
  }

  /** Say a warning's claims as they are now: at once, or once a burst of changes is in (a
   * notebook's 3 claims released together: JupyterLab loses the updates of a toast that
   * come within milliseconds of each other, and may show one again after it was
   * withdrawn). */
  private _say(key: string, shown: Shown, reopen: boolean): void {
    shown.reopen = shown.reopen || reopen;
    if (this.gatherMs <= 0) {
      this._update(key, shown);
    } else if (!shown.pending) {
      shown.pending = true;
      setTimeout(() => this._update(key, shown), this.gatherMs);
    }
  }

  private _update(key: string, shown: Shown): void {
    const reopen = shown.reopen;
    shown.pending = false;
    shown.reopen = false;
    if (this._shown.get(key) !== shown || shown.id === null) {
      return; // withdrawn meanwhile
    }
    if (this.notifier.update(shown.id, this.text(shown.kernel, shown.claims))) {
      return;
    }
    this._shown.delete(key); // closed in the notification center
    if (reopen) {
      const again: Shown = { id: null, kernel: shown.kernel, claims: shown.claims };
      this._shown.set(key, again);
      this._open(key, again);
    }
  }

  /** Withdraw the warning of a kernel (a cell of it was started: not idle). */
  withdrawKernel(kernelId: string): void {
    this._dismiss(kernelId);
    this._dismissJoiner(kernelId);
  }

  /**
   * After each refresh: withdraw the warnings that no longer hold. A claim gone from a
   * refresh that started after its warning was released; a claim whose deadline moved
   * later (a Keep from anywhere, a cell ran or runs, a restart) or that has none is not
   * about to go.
   */
  check(): void {
    for (const [kernel, warned] of [...this._joiners]) {
      const joined = (this.model.joined ?? []).some(
        j => j.kernel_id === kernel && j.claim === warned.claim
      );
      if (!joined && this.model.lastRead >= warned.shown) {
        this._dismissJoiner(kernel); // its pod stopped, or it left the claim
      }
    }
    for (const shown of [...this._shown.values()]) {
      for (const [name, warned] of [...shown.claims]) {
        const claim = this.model.claims.find(c => c.name === name);
        const over =
          claim === undefined
            ? this.model.lastRead >= warned.shown
            : claim.busy ||
              claim.idle_deadline === null ||
              this._moved(claim.idle_deadline, warned);
        if (over) {
          this.withdraw(name);
        }
      }
    }
  }

  /** Whether a deadline as the REST API says it is later than the one warned of (past its
   * deadline, a claim's reported deadline is "now" until it goes: that is no move). */
  private _moved(deadline: number, warned: Warned): boolean {
    return deadline > warned.deadline + MOVED && deadline > this.model.lastRead + MOVED;
  }

  private _shown = new Map<string, Shown>(); // by kernel id (or `claim NAME`)
  // by kernel id: the joined claim warned of, and when (by the model's clock)
  private _joiners = new Map<string, { id: string; claim: string; shown: number }>();
}
