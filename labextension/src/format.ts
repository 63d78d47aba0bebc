// What the panel and the status bar say: pure functions of the REST answers and the clock.

import type { Claim, ClusterCounts, Device, Joined, ShapeCount, Usage, Waiter } from './wire';

/** `12:30`, `1:02:03`; `0:00` once the time is up. */
export function countdown(seconds: number): string {
  const s = Math.max(0, Math.ceil(seconds));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const rest = String(s % 60).padStart(2, '0');
  return h > 0 ? `${h}:${String(m).padStart(2, '0')}:${rest}` : `${m}:${rest}`;
}

/** The clock time of a moment (seconds since the epoch), in the page's time zone: `14:32:05`. */
export function clockTime(seconds: number): string {
  const d = new Date(seconds * 1000);
  return [d.getHours(), d.getMinutes(), d.getSeconds()]
    .map(n => String(n).padStart(2, '0'))
    .join(':');
}

/** `45 s`, `12 min`, `2 h 5 min`, `3 d 4 h`: how long ago, or how long. */
export function duration(seconds: number): string {
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) {
    return `${s} s`;
  }
  const m = Math.floor(s / 60);
  if (m < 60) {
    return `${m} min`;
  }
  const h = Math.floor(m / 60);
  if (h < 24) {
    return m % 60 ? `${h} h ${m % 60} min` : `${h} h`;
  }
  const d = Math.floor(h / 24);
  return h % 24 ? `${d} d ${h % 24} h` : `${d} d`;
}

/** The device's own name: the last part of driver/pool/device. */
export function deviceName(key: string): string {
  return key.slice(key.lastIndexOf('/') + 1);
}

/** A model as people say it: `H200` for `NVIDIA H200`, `H100 80GB HBM3` as is less the vendor. */
export function shortModel(model: string): string {
  return model.replace(/^(NVIDIA|AMD|Google)\s+/i, '').trim() || model;
}

const MIG_NAME = /^(.+)-mig-/;

/** The key of the GPU a MIG partition is carved from (`.../gpu-3` for `.../gpu-3-mig-1g18gb-19-0`), or null. */
export function migParent(key: string): string | null {
  const slash = key.lastIndexOf('/');
  const match = MIG_NAME.exec(key.slice(slash + 1));
  return match ? key.slice(0, slash + 1) + match[1] : null;
}

/** A GPU (or another whole device) and the MIG partitions carved from it. */
export interface DeviceGroup {
  device: Device;
  partitions: Device[];
}

/** The devices of one node. */
export interface NodeGroup {
  node: string;
  groups: DeviceGroup[];
}

/**
 * The devices by node, then by GPU, with each MIG partition under its parent GPU (a
 * partition whose GPU is not listed stands alone). Nodes and devices keep the order of the
 * answer; a node without a name (devices of this machine) is `''`.
 */
export function groupDevices(devices: readonly Device[]): NodeGroup[] {
  const byKey = new Map<string, DeviceGroup>();
  const nodes = new Map<string, DeviceGroup[]>();
  const later: Device[] = [];
  for (const d of devices) {
    const parent = migParent(d.device);
    if (parent !== null) {
      later.push(d);
      continue;
    }
    const group = { device: d, partitions: [] };
    byKey.set(d.device, group);
    const list = nodes.get(d.node) ?? [];
    list.push(group);
    nodes.set(d.node, list);
  }
  for (const d of later) {
    const parent = byKey.get(migParent(d.device) as string);
    if (parent !== undefined && parent.device.node === d.node) {
      parent.partitions.push(d);
    } else {
      const list = nodes.get(d.node) ?? [];
      list.push({ device: d, partitions: [] });
      nodes.set(d.node, list);
    }
  }
  return [...nodes].map(([node, groups]) => ({ node, groups }));
}

/** A GPU's state as the panel shows it: its own, or `in use` when a partition is held. */
export function groupState(group: DeviceGroup): string {
  const held = group.partitions.filter(p => p.state === 'held' || p.state === 'shared');
  if (group.device.state === 'blocked' && held.length > 0) {
    return `${held.length} MIG held`;
  }
  return group.device.state;
}

/** `2× H200`, `1× H200 + 1× H200 MIG 1g.18gb`, `3 devices` when the models are unknown. */
export function deviceSummary(
  keys: readonly string[],
  devices: ReadonlyMap<string, Device>
): string {
  const counts = new Map<string, number>();
  let unknown = 0;
  for (const key of keys) {
    const d = devices.get(key);
    if (d === undefined || !d.model) {
      unknown += 1;
      continue;
    }
    const label = shortModel(d.model) + (d.mig_profile ? ` MIG ${d.mig_profile}` : '');
    counts.set(label, (counts.get(label) ?? 0) + 1);
  }
  const parts = [...counts].map(([label, n]) => `${n}× ${label}`);
  if (unknown > 0) {
    parts.push(parts.length ? `${unknown} more` : `${unknown} device${unknown > 1 ? 's' : ''}`);
  }
  return parts.join(' + ') || 'no devices yet (pending)';
}

/** Where a claim stands on the clock: the nearer of its idle deadline and lease end. */
export type Countdown =
  | { kind: 'idle'; seconds: number } // released when its kernel executes nothing that long
  | { kind: 'lease'; seconds: number } // released when its lease ends
  | { kind: 'paused' } // subject to idle release, but a cell runs: the countdown is paused
  | { kind: 'none' }; // neither

/** A kernel counts as busy for the countdown once it has been busy this long: a cell of a
 * second does not flash "busy · idle countdown paused" (the server pauses the countdown
 * all the same; what the page says is the same a moment later). */
export const BUSY_SETTLE_MS = 2000;

/**
 * Whether a kernel that reads `busy` now has read busy for `BUSY_SETTLE_MS` (`since`: when
 * each kernel was first seen busy, kept by the caller; cleared when it is not).
 */
export function settledBusy(
  since: Map<string, number>,
  kernelId: string,
  busy: boolean,
  now: number
): boolean {
  if (!busy) {
    since.delete(kernelId);
    return false;
  }
  const start = since.get(kernelId) ?? now;
  since.set(kernelId, start);
  return now - start >= BUSY_SETTLE_MS;
}

/** The claim's countdown; `busy`: its kernel runs a cell (the server does not count idle time then). */
export function claimCountdown(claim: Claim, now: number, busy: boolean): Countdown {
  const lease = claim.lease_expires === null ? null : claim.lease_expires - now;
  const idle = claim.idle_deadline === null || busy ? null : claim.idle_deadline - now;
  if (lease !== null && (idle === null || lease < idle)) {
    return { kind: 'lease', seconds: lease };
  }
  if (idle !== null) {
    return { kind: 'idle', seconds: idle };
  }
  return busy && claim.idle_deadline !== null ? { kind: 'paused' } : { kind: 'none' };
}

export function countdownText(c: Countdown): string {
  switch (c.kind) {
    case 'idle':
      return `idle in ${countdown(c.seconds)}`;
    case 'lease':
      return `lease ends in ${countdown(c.seconds)}`;
    case 'paused':
      return 'busy · idle countdown paused';
    case 'none':
      return '';
  }
}

/** The nearest of several countdowns (a paused one before none). */
export function nearest(countdowns: readonly Countdown[]): Countdown {
  let best: Countdown = { kind: 'none' };
  for (const c of countdowns) {
    if ('seconds' in c) {
      if (!('seconds' in best) || c.seconds < best.seconds) {
        best = c;
      }
    } else if (c.kind === 'paused' && best.kind === 'none') {
      best = c;
    }
  }
  return best;
}

/**
 * The status bar's text for the claims of one kernel: `2× H200 · idle in 12:30`; the
 * nearest countdown of its claims, and first a device taken out of service
 * (`gpu-3 taken out`); empty when the kernel holds nothing.
 */
export function statusText(
  claims: readonly Claim[],
  devices: ReadonlyMap<string, Device>,
  now: number,
  busy: boolean
): string {
  if (claims.length === 0) {
    return '';
  }
  const summary = deviceSummary(
    claims.flatMap(c => c.devices),
    devices
  );
  let tail = countdownText(nearest(claims.map(c => claimCountdown(c, now, busy))));
  if (busy && !tail.startsWith('busy')) {
    tail = tail ? `busy · ${tail}` : 'busy';
  }
  const gpu = gpuText(claims);
  if (gpu) {
    tail = tail ? `${gpu} · ${tail}` : gpu;
  }
  const out = takenOutText(claims, devices);
  if (out) {
    tail = tail ? `${out} · ${tail}` : out;
  }
  return tail ? `${summary} · ${tail}` : summary;
}

/** Whether a device carries the taint `key` (its taints: `key=value:Effect, ...`). */
export function hasTaint(device: Device, key: string): boolean {
  return device.taints
    .split(',')
    .map(t => t.trim())
    .some(t => t.startsWith(`${key}=`) || t.startsWith(`${key}:`));
}

/** Whether a device's taints take it out of service (NoSchedule or NoExecute). */
export function takenOut(device: Device | undefined): boolean {
  return /:(NoSchedule|NoExecute)\b/.test(device?.taints ?? '');
}

/**
 * A claim's devices taken out of service, for its card in the panel: `gpu-3 taken out of
 * service (NoExecute): save your work, the claim will be released`; empty when none is.
 */
export function claimTakenOutText(claim: Claim, devices: ReadonlyMap<string, Device>): string {
  const out = claim.devices.filter(key => takenOut(devices.get(key)));
  if (out.length === 0) {
    return '';
  }
  const noExecute = out.some(key => /:NoExecute\b/.test(devices.get(key)?.taints ?? ''));
  const names = out.map(deviceName).join(', ');
  return noExecute
    ? `${names} taken out of service (NoExecute): save your work, the claim will be released`
    : `${names} taken out of service (NoSchedule): work on it may fail`;
}

/**
 * The held devices taken out of service, in a few words for the status bar: `gpu-3 taken
 * out`, `2 devices taken out`; empty when none is.
 */
export function takenOutText(
  claims: readonly Claim[],
  devices: ReadonlyMap<string, Device>
): string {
  const out = claims.flatMap(c => c.devices).filter(key => takenOut(devices.get(key)));
  if (out.length === 0) {
    return '';
  }
  return out.length === 1
    ? `${out[0].slice(out[0].lastIndexOf('/') + 1)} taken out`
    : `${out.length} devices taken out`;
}

/**
 * What the claims' GPUs do, in a few words: the busiest active one (`GPU busy: 93%`), else
 * an idle one (`GPU idle for 12 min`); empty when no GPU says (no GPU signal) or none is
 * either.
 */
export function gpuText(claims: readonly Claim[]): string {
  const active = claims.filter(c => c.gpu.state === 'active');
  if (active.length > 0) {
    return active.reduce((a, b) => ((b.gpu.utilization ?? 0) > (a.gpu.utilization ?? 0) ? b : a))
      .gpu.text;
  }
  return claims.find(c => c.gpu.state === 'idle')?.gpu.text ?? '';
}

/**
 * Who uses a claim now, for its card: the pods of its `used_by` (a Kubernetes claim's
 * reservedFor: its own kernel's pod, and those of kernels that joined it), at most `shown`
 * by name; empty when none does.
 */
export function usedByText(pods: readonly string[], shown = 3): string {
  if (pods.length === 0) {
    return '';
  }
  const named = pods.slice(0, shown).join(', ');
  const more = pods.length > shown ? ` and ${pods.length - shown} more` : '';
  return pods.length === 1
    ? `used by pod ${named}`
    : `shared by ${pods.length} pods: ${named}${more}`;
}

/**
 * A claim a kernel joined, for the panel: whose it is and who uses it (`team-gpu, bob's claim,
 * joined by Untitled.ipynb · shared by 2 pods: ...`); `kernel`: the kernel's label in this
 * page, null where it is not open here.
 */
export function joinedText(joined: Joined, kernel: string | null): string {
  const whose = joined.user ? `${joined.user}'s claim` : 'a claim that is gone';
  const by = `joined by ${kernel ?? 'a kernel not open in this page'}`;
  const users = usedByText(joined.used_by);
  const more = users ? ` · ${users}` : '';
  return `${joined.claim}, ${whose}, ${by}${more}`;
}

/** Why a claim was released, for its notification (the claim_released event's reasons). */
export function releaseReason(reason: string): string {
  switch (reason) {
    case 'idle':
      return 'its kernel was idle for the idle timeout';
    case 'gpu-idle':
      return 'its GPU was not used for the GPU idle timeout';
    case 'kernel-shutdown':
      return 'its kernel shut down, restarted or died';
    case 'user':
      return 'it was released on request';
    case 'server-stop':
      return 'the Jupyter server stopped';
    case 'moved':
      return 'its kernel moved into a pod with these devices, whose own claim holds them now';
    case 'device-moved':
      return 'its kernel moved to an equivalent device, off one taken out of service';
    case 'device-failed':
      return 'its device was taken out of service and its grace ran out';
    case 'fair-share':
      return 'another user waited for its devices while it was idle (fair share)';
    case 'admin':
      return 'an admin released it';
    case 'deleted':
      return 'it was deleted in the cluster, outside this notebook (kubectl, an admin or a script)';
    case 'limit':
      return 'it was over a per-user limit of the shared machine';
    case 'expired':
      return 'its lease ended';
    case 'reclaimed':
      return 'the process that held it is gone';
    case 'elsewhere':
      return 'it was released outside this page (a terminal, a notebook or the service)';
    default:
      return `reason: ${reason}`;
  }
}

/** How a device class reads: one, and more than one. */
const CLASS_WORDS: Record<string, [string, string]> = {
  'gpu.nvidia.com': ['GPU', 'GPUs'],
  'gpu.amd.com': ['AMD GPU', 'AMD GPUs'],
  'mig.nvidia.com': ['MIG instance', 'MIG instances'],
  'tpu.google.com': ['TPU', 'TPUs']
};

/** A value of a request keyword as Python's repr writes it: an integer or a plain string. */
const VALUE = /^(?:(\d+)|'([^'\\]*)'|"([^"\\]*)")$/;

/** The keywords {@link requestedDevices} puts in words (dra.request's, claimspec.py). */
const WORDED = new Set(['gpu', 'tpu', 'mig', 'count', 'model', 'memory']);

/**
 * A request's keywords as the kernel_moved event gives them, in the words the page uses
 * for devices: `gpu=2, model='NVIDIA H200'` → `2× H200`, `gpu=1` → `1 GPU`,
 * `mig='1g.18gb'` → `1× MIG 1g.18gb`, `memory='80Gi'` → `… (at least 80Gi)`. Keywords
 * beyond those (a selector, alternatives, a constraint), or values that are not plain,
 * leave the text as it is.
 */
export function requestedDevices(said: string): string {
  const keys = new Map<string, string>();
  for (const part of said.split(/,\s*(?=[a-z_]+=)/)) {
    const match = /^([a-z_]+)=(.*)$/.exec(part.trim());
    const value = match ? VALUE.exec(match[2]) : null;
    if (match === null || value === null || !WORDED.has(match[1]) || keys.has(match[1])) {
      return said;
    }
    keys.set(match[1], value[1] ?? value[2] ?? value[3]);
  }
  const mig = keys.get('mig');
  const model = keys.get('model');
  const kind = keys.has('tpu') ? 'tpu' : keys.has('gpu') ? 'gpu' : mig !== undefined ? 'mig' : '';
  if (!kind || (keys.has('gpu') && keys.has('tpu'))) {
    return said; // count alone (of a device class) or both: not ours to put in words
  }
  const n = keys.get(kind === 'mig' ? 'count' : kind) ?? '1';
  const all = n === 'all';
  if (!all && !/^\d+$/.test(n)) {
    return said;
  }
  let words: string;
  if (kind === 'mig' || model !== undefined) {
    const name =
      (model !== undefined ? shortModel(model) : '') +
      (mig !== undefined ? `${model !== undefined ? ' ' : ''}MIG ${mig}` : '');
    words = all ? `every ${name}` : `${n}× ${name}`;
  } else {
    const noun = kind === 'tpu' ? 'TPU' : 'GPU';
    words = all ? `every ${noun}` : `${n} ${noun}${n === '1' ? '' : 's'}`;
  }
  const memory = keys.get('memory');
  return memory !== undefined ? `${words} (at least ${memory})` : words;
}

/** A request as the queue says it, in words: `2 gpu.nvidia.com` → `2 GPUs`. */
export function requestWords(what: string): string {
  if (what.includes('=')) {
    return requestedDevices(what); // the request's own keywords (the embedded ledger's line)
  }
  return what.replace(/(\d+) ([a-z0-9-]+(?:\.[a-z0-9-]+)+)/g, (whole, n: string, cls: string) => {
    const words = CLASS_WORDS[cls];
    return words ? `${n} ${n === '1' ? words[0] : words[1]}` : whole;
  });
}

/**
 * The line, as the panel shows it: one line a waiting request, oldest first, with who waits
 * (`you` for the caller's own: `mine` tells them apart), for what, since how long; the
 * caller's own say their place in line and why there, where the backend says (the
 * service's fair share: `behind carol, who has used less of their share`).
 */
export function queueLines(
  waiting: readonly Waiter[],
  mine: (w: Waiter) => boolean,
  now: number
): string[] {
  return waiting.map((w, i) => {
    const who = mine(w) ? 'you' : w.user;
    const place = mine(w) ? ` (number ${w.position || i + 1} in line)` : '';
    const why = mine(w) && w.why ? `: ${w.why}` : '';
    return `${who}: ${requestWords(w.what)}, waiting ${duration(now - w.since)}${place}${why}`;
  });
}

/**
 * The Usage section's line: `12 GPU-hours in 7 days, idle 25%` (the idle share of the
 * time whose GPU use is known; where none is: `GPU use not known`).
 */
export function usageText(u: Usage): string {
  const days = Math.round(u.since / 86400);
  const window = days >= 1 ? `${days} day${days === 1 ? '' : 's'}` : duration(u.since);
  const idle =
    u.idle_share === null ? 'GPU use not known' : `idle ${Math.round(u.idle_share * 100)}%`;
  return `${gpuTime(u.gpu_hours)} in ${window}, ${idle}`;
}

/** GPU time in the unit that shows it: `12 GPU-hours`, `1.3 GPU-hours`, `8 GPU-minutes`
 * (under an hour: 2 minutes on 4 GPUs is not `0.0 GPU-hours`), `under a GPU-minute`. */
export function gpuTime(hours: number): string {
  if (hours >= 10) {
    return `${hours.toFixed(0)} GPU-hours`;
  }
  if (hours >= 0.95) {
    return `${hours.toFixed(1)} GPU-hours`;
  }
  const minutes = Math.round(hours * 60);
  if (minutes >= 1) {
    return `${minutes} GPU-minute${minutes === 1 ? '' : 's'}`;
  }
  return hours > 0 ? 'under a GPU-minute' : '0 GPU-hours';
}

/** GPU-hours per day as percent of the busiest day (the sparkline's 0-100 scale). */
export function usageSeries(u: Usage): number[] {
  const most = Math.max(0, ...u.daily_gpu_hours);
  return u.daily_gpu_hours.map(h => (most > 0 ? (h / most) * 100 : 0));
}

/** A shape of the cluster's devices as people say it: `H200 141Gi`, `H200 MIG 1g.18gb`. */
export function shapeName(shape: ShapeCount): string {
  const model = shortModel(shape.model) || shape.kind;
  if (shape.mig_profile) {
    return `${model} MIG ${shape.mig_profile}`;
  }
  return shape.memory ? `${model} ${shape.memory}` : model;
}

/**
 * The cluster's devices by shape, as a hub's shared view counts them (GET /devices'
 * `cluster`): `H200 141Gi: 812 free of 1000 · 150 held · 38 taken out`, the most free
 * first; the one line that says why there are none.
 */
export function clusterLines(cluster: ClusterCounts): string[] {
  if (cluster.problem) {
    return [cluster.problem];
  }
  if (cluster.shapes.length === 0) {
    return ['no devices in the cluster'];
  }
  return [...cluster.shapes]
    .sort((a, b) => b.free - a.free || shapeName(a).localeCompare(shapeName(b)))
    .map(s => {
      const parts = [`${s.free} free of ${s.total}`];
      for (const [n, words] of [
        [s.held, 'held'],
        [s.shared, 'shared'],
        [s.blocked, 'blocked by a partition'],
        [s.tainted, 'taken out']
      ] as const) {
        if (n > 0) {
          parts.push(`${n} ${words}`);
        }
      }
      return `${shapeName(s)}: ${parts.join(' · ')}`;
    });
}
