// The contract of the extension with the server extension: the REST answers (wire.ts,
// generated from specification/dra-rest-api.yml) and the events the server emits on
// jupyter_server's event bus (dra_jupyter/server/events/*.json), as the page receives
// them from /api/events/subscribe. And what the extension's plugins share: the tokens of
// the model, the page's kernels and the settings (plugins/).

import { Token } from '@lumino/coreutils';
import type { ISignal } from '@lumino/signaling';

import type { DraModel } from './model';

export type {
  Claim,
  ClaimRequest,
  Claims,
  Device,
  Devices,
  Error as ApiError,
  Metrics,
  Operations,
  Restart
} from './wire';

/** The settings plugin's id; also the settings' id (schema/plugin.json). */
export const PLUGIN_ID = 'dra-jupyter-labextension:plugin';

/** The command that opens the Devices panel on a run's output (args: `{ name }`). */
export const RUN_OUTPUT = 'dra-jupyter:show-run-output';

const EVENT_BASE = 'https://events.dra-jupyter.dev/dra_jupyter';
export const EVENTS = {
  allocated: `${EVENT_BASE}/claim_allocated/v1`,
  idleWarning: `${EVENT_BASE}/idle_warning/v1`,
  released: `${EVENT_BASE}/claim_released/v1`,
  gpuProcess: `${EVENT_BASE}/gpu_process/v1`,
  kernelMoved: `${EVENT_BASE}/kernel_moved/v1`,
  deviceUnhealthy: `${EVENT_BASE}/device_unhealthy/v1`,
  reclaimWarning: `${EVENT_BASE}/reclaim_warning/v1`,
  changed: `${EVENT_BASE}/changed/v1`
} as const;

/** dra_jupyter/server/events/changed.json: what the server's watched views heard change
 * (Kubernetes); topics only: the model reads the rest again. */
export interface ChangedEvent {
  schema_id: string;
  topics: ('claims' | 'runs' | 'devices')[];
}

/** What every event of a claim carries (the schemas' common fields). */
export interface ClaimEvent {
  schema_id: string;
  claim: string;
  user: string;
  kernel_id: string | null;
  devices: string[];
}

/** dra_jupyter/server/events/idle_warning.json */
export interface IdleWarningEvent extends ClaimEvent {
  deadline: number;
  seconds_left: number;
  /** true: the kernel joined the claim; its own pod stops at the deadline, the claim stays */
  joined?: boolean;
}

/** dra_jupyter/server/events/claim_released.json */
export interface ReleasedEvent extends ClaimEvent {
  reason: string;
}

/** dra_jupyter/server/events/gpu_process.json: a process of this server's user on a GPU
 * that none of the user's claims holds (the server emits only its own user's). */
export interface GpuProcessEvent {
  schema_id: string;
  user: string;
  pid: number;
  device: string;
  command: string | null;
  memory_used: number | null;
  since: number | null;
  action: 'report' | 'terminate';
  deadline: number | null;
  message: string;
}

/** dra_jupyter/server/events/kernel_moved.json: a kernel of this server moved, keeping its
 * id (Kubernetes): into a pod of its own with devices, or back onto the server without
 * them (its pod's claim was released, or its pod could not start). */
export interface KernelMovedEvent {
  schema_id: string;
  kernel_id: string;
  user: string;
  /** pod: it runs in a pod with devices now; server: on the server, without devices */
  where: 'pod' | 'server';
  /** the devices as requested: `gpu=1, model='NVIDIA H200'` (or `its claim's devices`) */
  devices: string;
  /** with server: the Python command that starts it again on such devices ('' if unknown) */
  again: string;
  /** one line to show */
  message: string;
}

/** dra_jupyter/server/events/device_unhealthy.json: a device of a claim of this server's
 * kernels was taken out of service (a NoSchedule or NoExecute taint: an admin's, or the
 * health watcher's after a GPU error); once per claim, device and taint key. */
export interface DeviceUnhealthyEvent {
  schema_id: string;
  claim: string;
  user: string;
  kernel_id: string | null;
  /** driver/pool/device */
  device: string;
  key: string;
  effect: 'NoSchedule' | 'NoExecute';
  /** what happened, in the taint's words ('' when none was given) */
  reason: string;
  tainted_by: string;
  /**
   * NoExecute on this machine: when the claim is released (seconds since the epoch), unless
   * moved or released before; null: NoSchedule (the claim keeps it), or a cluster (its
   * pods are evicted)
   */
  release_at: number | null;
  /** the server's one line: which device, what happened, what it means, what to do */
  message: string;
}

/** dra_jupyter/server/events/reclaim_warning.json: the shared-machine service will release
 * one of the user's idle claims at `deadline` because another user waits for its devices,
 * unless its kernel works or the user keeps it (`keeps_left` more times). */
export interface ReclaimWarningEvent extends ClaimEvent {
  waiter: string;
  /** what the waiter asks for, in words: `1× NVIDIA H200` */
  what: string;
  deadline: number;
  seconds_left: number;
  keeps_left: number;
  message: string;
}

/** dra_jupyter/server/events/claim_allocated.json */
export interface AllocatedEvent extends ClaimEvent {
  source: string;
}

/** The extension's settings (schema/plugin.json). */
export interface Settings {
  /** Seconds between refreshes of the panel and the status bar while they are shown. */
  refreshInterval: number;
  /** Whether idle warnings, releases and kernel moves are shown as notifications. */
  notify: boolean;
}

export const DEFAULT_SETTINGS: Settings = { refreshInterval: 5, notify: true };

/** The extension's settings as they are now, and their changes (plugins/settings.ts). */
export interface IDRASettings {
  /** The settings now: the defaults until the user's are loaded. */
  readonly current: Readonly<Settings>;
  /** The user's settings were loaded, or changed. */
  readonly changed: ISignal<IDRASettings, Readonly<Settings>>;
}

export const IDRASettings = new Token<IDRASettings>(
  'dra-jupyter-labextension:IDRASettings',
  'The settings of the Devices panel, the status bar item and the notifications.'
);

/** What the views and the notifications need to know of the page's kernels. */
export interface Kernels {
  /** Whether the kernel runs a cell now. */
  busy(kernelId: string): boolean;
  /** The notebook (or console) of a kernel, or null when none of the page's sessions has it. */
  label(kernelId: string): string | null;
  /** The kernel of the notebook in front, or null. */
  current(): string | null;
  /** The server restarted the kernel (with its devices): let the page's connection know. */
  restarted(kernelId: string): Promise<void>;
}

/** The page's kernels (plugins/kernels.ts; kernels.ts reads them off the page). */
export const IDRAKernels = new Token<Kernels>(
  'dra-jupyter-labextension:IDRAKernels',
  'The kernels of the page: whether one runs a cell, its notebook, the one in front.'
);

/** The model of the page (plugins/model.ts, the core plugin): the caller's claims, the
 * devices and the server's events, which the views and the notifications show. */
export const IDRAModel = new Token<DraModel>(
  'dra-jupyter-labextension:IDRAModel',
  "The caller's claims and the devices, refreshed, and the server's events of them."
);
