// Someone waits in line for devices that the user's claims hold (one machine: the embedded
// ledger, the shared-machine service; GET /devices's `waiting`, each request with the
// claims it waits on). One notification per waiting request that is not the user's own,
// saying who waits, for what, since when (the clock time) and which of the user's
// notebooks hold what it waits on; said again (updated, never a second one) when that
// changes, and withdrawn once the request is served, gives up or is cancelled (it leaves
// the line) or the user's claims it waited on are gone. Not repeated on each read: a
// request is known by who asked, from which kernel, for what and since when.

import { clockTime, deviceSummary } from '../format';
import type { DraModel } from '../model';
import type { Claim, Waiter } from '../wire';
import type { Notifier } from './warnings';

/** A request as the user reads it: `gpu=4` (dra.request's words) or `4 gpu.nvidia.com`
 * (the service's) as `4 GPUs`; anything else as the server says it. */
export function waitWords(what: string): string {
  const words = /^(gpu|tpu|mig)=(\d+)(?:, (.*))?$/.exec(what);
  const service = /^(\d+) (gpu|tpu|mig)\.[a-z.]+?\.com(?: \+ (selectors))?$/.exec(what);
  const [count, kind, rest] = words
    ? [words[2], words[1], words[3]]
    : service
      ? [service[1], service[2], service[3]]
      : [null, null, null];
  if (count === null || kind === null) {
    return what;
  }
  const n = Number(count);
  const noun = kind === 'mig' ? 'MIG device' : kind.toUpperCase();
  return `${n} ${noun}${n === 1 ? '' : 's'}${rest ? ` (${rest})` : ''}`;
}

/** Which of the user's claims it waits on, by notebook, and the verb: `train.ipynb (4× H200)
 * holds`, `train.ipynb (4× H200) and claim c2 (1× H200) hold`. */
export function heldWords(
  claims: readonly Claim[],
  label: (kernelId: string) => string | null,
  devices: DraModel['deviceMap']
): string {
  const groups = new Map<string, string[]>();
  for (const c of claims) {
    const name = (c.kernel_id ? label(c.kernel_id) : null) ?? `claim ${c.name}`;
    groups.set(name, [...(groups.get(name) ?? []), ...c.devices]);
  }
  const parts = [...groups].map(([name, keys]) => `${name} (${deviceSummary(keys, devices)})`);
  return parts.length > 1
    ? `${parts.slice(0, -1).join(', ')} and ${parts.at(-1)} hold`
    : `${parts[0]} holds`;
}

/** The notification's text: who waits, for what, since when, on which of your notebooks. */
export function waiterText(
  waiter: Waiter,
  held: readonly Claim[],
  label: (kernelId: string) => string | null,
  devices: DraModel['deviceMap']
): string {
  return (
    `${waiter.user} waits for ${waitWords(waiter.what)} since ${clockTime(waiter.since)}: ` +
    `your ${heldWords(held, label, devices)} what it needs.`
  );
}

/** A request's identity across reads (the answer gives it no id). */
export function waiterKey(w: Waiter): string {
  return JSON.stringify([w.user, w.kernel_id, w.what, w.since]);
}

export class WaiterNotices {
  constructor(
    readonly model: DraModel,
    readonly notifier: Notifier,
    /** The notebook of a kernel, or null. */
    readonly label: (kernelId: string) => string | null,
    /** Whether to notify (the settings' notify): off withdraws those shown. */
    readonly enabled: () => boolean = () => true
  ) {
    model.changed.connect(() => this.update());
  }

  /** The requests with a notification now (shown, or closed by the user and not yet over). */
  get keys(): string[] {
    return [...this._shown.keys()];
  }

  /** Say what the model's last reads say: new waiters, changed texts, ended waits. */
  update(): void {
    const devices = this.model.devices;
    if (devices === null) {
      return;
    }
    const mine = new Map(this.model.claims.map(c => [c.name, c]));
    const now = new Map<string, string>();
    for (const w of this.enabled() ? devices.waiting : []) {
      const held = w.holders.flatMap(name => mine.get(name) ?? []);
      if (held.length === 0 || this.model.isMine(w)) {
        continue; // not on this user's devices, or the user's own request
      }
      now.set(waiterKey(w), waiterText(w, held, this.label, this.model.deviceMap));
    }
    for (const [key, shown] of this._shown) {
      if (!now.has(key)) {
        this._shown.delete(key); // served, given up, cancelled, or not on this user's now
        if (shown.id !== null) {
          this.notifier.dismiss(shown.id);
        }
      }
    }
    for (const [key, text] of now) {
      const shown = this._shown.get(key);
      if (shown === undefined) {
        this._shown.set(key, { id: this.notifier.warn(text, []), text });
      } else if (shown.text !== text && shown.id !== null) {
        shown.text = text;
        if (!this.notifier.update(shown.id, text)) {
          shown.id = null; // closed by the user: not shown again for this request
        }
      }
    }
  }

  private _shown = new Map<string, { id: string | null; text: string }>();
}
