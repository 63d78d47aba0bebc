// The state the panel, the status bar and the notifications show: the caller's claims and
// the inventory, refreshed while the page is visible, and the server's claim events.

import { Poll } from '@lumino/polling';
import { type ISignal, Signal } from '@lumino/signaling';

import { DraRequestError, type Requester } from './api';
import { metricsByDevice, SPARK_SAMPLES } from './metrics';
import { LOG_LINES } from './runs';
import {
  type AllocatedEvent,
  type ChangedEvent,
  type ClaimEvent,
  type DeviceUnhealthyEvent,
  EVENTS,
  type GpuProcessEvent,
  type IdleWarningEvent,
  type KernelMovedEvent,
  type ReclaimWarningEvent,
  type ReleasedEvent
} from './tokens';
import type {
  Claim,
  ClaimRequest,
  Device,
  DeviceMetrics,
  Devices,
  Joined,
  Metrics,
  Restart,
  Run,
  RunLogs,
  Runs,
  Usage,
  Waiter
} from './wire';

/** Seconds between reads of the caller's usage while the panel is shown. */
export const USAGE_EVERY = 60;

/** The poll's interval, at least, where the server pushes its changes (a lost connection's). */
export const PUSHED_POLL_S = 60;

/** A release the page announces: the event, and the claim as last seen (if it was). */
export interface Release {
  event: ReleasedEvent;
  claim: Claim | undefined;
}

export interface ModelOptions {
  /** How the REST API is called (requestAPI in the page). */
  request: Requester;
  /** Seconds between refreshes while the page is visible (default 5). */
  refreshInterval?: number;
  /** The clock, in seconds since the epoch. */
  now?: () => number;
  /** Whether the page is hidden (then nothing is polled); default: document.hidden. */
  hidden?: () => boolean;
}

export class DraModel {
  constructor(options: ModelOptions) {
    this._request = options.request;
    this._interval = options.refreshInterval ?? 5;
    this.now = options.now ?? (() => Date.now() / 1000);
    this._hidden = options.hidden ?? (() => typeof document !== 'undefined' && document.hidden);
  }

  /** The clock, seconds since the epoch. */
  readonly now: () => number;

  /**
   * Whether each refresh reads who waits in line (GET /devices) even while the panel is
   * hidden: the status bar says when the notebook's kernel waits (set by the plugin).
   */
  waitingWanted: () => boolean = () => false;

  /** The requests of a kernel waiting in line, with their place (1: next). */
  kernelWaiting(kernelId: string | null | undefined): { waiter: Waiter; place: number }[] {
    const waiting = this._devices?.waiting ?? [];
    return waiting
      .map((waiter, i) => ({ waiter, place: i + 1 }))
      .filter(w => kernelId && w.waiter.kernel_id === kernelId);
  }

  /** Whether a kernel is one of this page's server (set by the plugin). */
  ownKernel: (kernelId: string) => boolean = () => false;

  /**
   * Whether a request waiting in line is the caller's: of a kernel of this server, or of a
   * user whose claims the answers held.
   */
  isMine(w: Waiter): boolean {
    return (w.kernel_id !== null && this.ownKernel(w.kernel_id)) || this._users.has(w.user);
  }

  /** The claims or devices changed, or an error came or went. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** The server warned that one of the caller's claims is about to be released as idle. */
  get idleWarning(): ISignal<this, IdleWarningEvent> {
    return this._idleWarning;
  }

  /** The server's user has a process on a GPU that none of their claims holds. */
  get gpuProcess(): ISignal<this, GpuProcessEvent> {
    return this._gpuProcess;
  }

  /**
   * A kernel of this server moved, keeping its id (Kubernetes): into a pod of its own with
   * devices, or back onto the server without them.
   */
  /** The service will release one of the caller's idle claims for a waiting user. */
  get reclaimWarning(): ISignal<this, ReclaimWarningEvent> {
    return this._reclaimWarning;
  }

  /** A device of one of the caller's claims was taken out of service. */
  get deviceUnhealthy(): ISignal<this, DeviceUnhealthyEvent> {
    return this._deviceUnhealthy;
  }

  get kernelMoved(): ISignal<this, KernelMovedEvent> {
    return this._kernelMoved;
  }

  /**
   * One of the caller's claims was released (by anyone, for any reason), with the reason
   * the server recorded: said by the server's event (its own releases at once, those of
   * other processes at its next check), or found by a refresh first (then GET
   * /claims/{name} says why): once either way. Whether the user is told is decided by
   * that reason alone (notifications/releases.ts): never a release the user made.
   */
  get released(): ISignal<this, Release> {
    return this._released;
  }

  /**
   * One of the caller's background runs ended (Succeeded, Failed, Cancelled) that this page
   * saw running, or that was made since the page's first refresh and ended before a read
   * saw it run; not one the page cancelled (its answer says so). Once each.
   */
  get runEnded(): ISignal<this, Run> {
    return this._runEnded;
  }

  /** The caller's live claims, as of the last refresh. */
  get claims(): readonly Claim[] {
    return this._claims;
  }

  /** The claims that the server's kernels joined (dra.request(join=...)): not the caller's. */
  get joined(): readonly Joined[] {
    return this._joined;
  }

  /** The inventory, as of the last refresh that read it; null before. */
  get devices(): Devices | null {
    return this._devices;
  }

  /** Each device by its key (driver/pool/device). */
  get deviceMap(): ReadonlyMap<string, Device> {
    return this._deviceMap;
  }

  /**
   * The devices' metrics (GET /metrics, the last {@link SPARK_SAMPLES} samples), read with
   * the inventory while the panel is shown; null before, or when the last read failed.
   */
  get metrics(): Metrics | null {
    return this._metrics;
  }

  /**
   * The caller's GPU usage of the last 7 days (GET /usage), read at most every
   * {@link USAGE_EVERY} seconds while the panel is shown; null before, or when the server
   * keeps no usage book (Kubernetes).
   */
  get usage(): Usage | null {
    return this._usage;
  }

  /**
   * The caller's background runs (GET /runs), read with the inventory while the panel is
   * shown; null before, or when the last read failed ({@link runsError} says why).
   */
  get runs(): Runs | null {
    return this._runs;
  }

  /** Why the last read of the runs failed; null when it went well. */
  get runsError(): DraRequestError | null {
    return this._runsError;
  }

  /** Each device's metrics by its key (none when the server has no metrics source). */
  get metricsMap(): ReadonlyMap<string, DeviceMetrics> {
    return this._metricsMap;
  }

  /** When (by {@link now}) the last refresh that went well started; 0 before. */
  get lastRead(): number {
    return this._lastRead;
  }

  /** The error of the last refresh, null when it went well. */
  get error(): DraRequestError | null {
    return this._error;
  }

  /** When (by {@link now}) the refresh that last read the devices started; 0 before. */
  get devicesRead(): number {
    return this._devicesRead;
  }

  /** Read the devices with the next refresh (their taints, say), not only when needed. */
  readDevicesNext(): void {
    this._devicesStale = true;
  }

  /** Whether the server extension answered at least once. */
  get connected(): boolean {
    return this._connected;
  }

  /** Read the inventory on each refresh (while the panel is shown), not only when needed. */
  get devicesWanted(): boolean {
    return this._devicesWanted;
  }
  set devicesWanted(value: boolean) {
    if (value !== this._devicesWanted) {
      this._devicesWanted = value;
      if (value) {
        void this.refreshSoon();
      }
    }
  }

  get refreshInterval(): number {
    return this._interval;
  }
  set refreshInterval(seconds: number) {
    this._interval = Math.max(1, seconds);
    this._setFrequency();
  }

  /**
   * Whether the server pushes its changes (`changed` events; GET /claims says so): then
   * the model reads when one comes, and the poll, left for a lost connection, is slow
   * (PUSHED_POLL_S at least).
   */
  get pushed(): boolean {
    return this._pushed;
  }

  /** The poll's interval now, in seconds. */
  get pollInterval(): number {
    return this._pushed ? Math.max(this._interval, PUSHED_POLL_S) : this._interval;
  }

  private _setFrequency(): void {
    if (this._poll !== null) {
      this._poll.frequency = { ...this._poll.frequency, interval: this.pollInterval * 1000 };
    }
  }

  /** The claims of one kernel. */
  kernelClaims(kernelId: string | null | undefined): Claim[] {
    return kernelId ? this._claims.filter(c => c.kernel_id === kernelId) : [];
  }

  /**
   * Read the claims (and the inventory when wanted, or when a claim names a device not in
   * it). An error is kept in {@link error} and thrown again (the poll backs off).
   */
  async refresh(): Promise<void> {
    this._reading += 1;
    try {
      await this._read();
    } finally {
      this._reading -= 1;
      if (this._waiting.length > 0 && this._reading === 0) {
        // something changed while the answer was on its way: it may not show it
        const waiting = this._waiting;
        this._waiting = [];
        const wake = () => {
          for (const resolve of waiting) {
            resolve();
          }
        };
        setTimeout(() => void this.refreshSoon().finally(wake), 0);
      }
    }
  }

  /**
   * Refresh now (and let the poll count from here); errors stay in {@link error}. While a
   * refresh is on its way, one more follows it: what changed since it was asked for (a
   * claim made just after a release, say) shows at once, not at the next poll. Resolves
   * once a read asked for after the call is in: what the caller changed (a kernel restarted
   * with its devices, say) shows with the words that say it was done.
   */
  async refreshSoon(): Promise<void> {
    if (this._disposed) {
      return;
    }
    if (this._reading > 0) {
      return new Promise<void>(resolve => this._waiting.push(resolve));
    }
    if (this._poll !== null) {
      // the poll's refresh resolves once the read is scheduled; its next tick, once it is in
      await this._poll.refresh();
      await this._poll.tick.catch(() => undefined);
      return;
    }
    await this.refresh().catch(() => undefined);
  }

  private async _read(): Promise<void> {
    const started = this.now();
    this._since ??= started;
    let vanished: Claim[] = [];
    try {
      const { claims, pushed, joined } = await this._request('GET /claims');
      this._joined = joined;
      if (pushed !== this._pushed) {
        this._pushed = pushed;
        this._setFrequency();
      }
      const missing = claims.some(c => c.devices.some(d => !this._deviceMap.has(d)));
      const stale = this._devicesStale;
      // while the caller holds devices, each refresh reads who waits for them too (the
      // line is in GET /devices: notifications/waiters.ts; none where the server pushes,
      // on Kubernetes)
      const holding = !pushed && claims.some(c => c.devices.length > 0);
      const wanted = this._devicesWanted || this.waitingWanted() || holding;
      if (stale || wanted || missing || !this._devices) {
        this._devicesStale = false;
        this._setDevices(await this._request('GET /devices'));
        this._devicesRead = started;
      }
      if (this._devicesWanted) {
        await this._readMetrics();
        await this._readUsage();
      }
      if (this._devicesWanted || this._runsWatched(claims)) {
        await this._readRuns(); // the panel shows them, or a run of the caller may end
      }
      const live = new Set(claims.map(c => c.name));
      vanished = this._claims.filter(c => !live.has(c.name) && !this._wasAnnounced(c));
      this._claims = claims;
      for (const c of claims) {
        this._known.set(c.name, c);
        this._users.add(c.user);
        if (this._announced.has(c.name) && !this._wasAnnounced(c)) {
          this._announced.delete(c.name); // a name used again, by a new claim
        }
      }
      this._error = null;
      this._connected = true;
      this._lastRead = Math.max(this._lastRead, started);
    } catch (err) {
      this._error = toError(err);
      this._changed.emit();
      throw this._error;
    }
    this._changed.emit();
    for (const claim of vanished) {
      void this._vanished(claim);
    }
  }

  /** Whether the release of this claim (not of an earlier one of its name) was announced. */
  private _wasAnnounced(claim: Claim): boolean {
    const created = this._announced.get(claim.name);
    return created !== undefined && (created === null || created === claim.created);
  }

  /**
   * A claim that was there at the last refresh and is not now, with no release event: it
   * was released elsewhere (a terminal, a kernel, the service). The server says why
   * (GET /claims/{name}: the release it remembers); announced unless its event came
   * meanwhile.
   */
  private async _vanished(claim: Claim): Promise<void> {
    let reason = 'elsewhere';
    try {
      const answer = await this._request('GET /claims/{name}', { name: claim.name });
      if (answer.released === null) {
        return; // live after all (the answers crossed)
      }
      reason = answer.released.reason;
    } catch {
      // forgotten already, or not for us to see: released all the same
    }
    if (this._wasAnnounced(claim) || this._disposed) {
      return;
    }
    this._announced.set(claim.name, claim.created);
    this._known.delete(claim.name);
    const event: ReleasedEvent = {
      schema_id: EVENTS.released,
      claim: claim.name,
      user: claim.user,
      kernel_id: claim.kernel_id,
      devices: claim.devices,
      reason
    };
    this._released.emit({ event, claim });
  }

  /** Poll {@link refresh} every refreshInterval seconds while the page is visible. */
  start(): void {
    if (this._poll !== null) {
      return;
    }
    this._poll = new Poll({
      auto: true,
      factory: () => this.refresh(),
      frequency: {
        interval: this.pollInterval * 1000,
        backoff: true,
        max: Math.max(60_000, this.pollInterval * 1000)
      },
      name: 'dra-jupyter:refresh',
      standby: () => this._hidden()
    });
  }

  /** The idle warning's Keep: the claim's idle countdown starts again. */
  async keep(name: string): Promise<Claim> {
    const claim = await this._request('POST /claims/{name}/keep', { name });
    this._claims = this._claims.map(c => (c.name === name ? claim : c));
    this._changed.emit();
    return claim;
  }

  /** Release one claim (reason `user`). */
  async release(name: string): Promise<void> {
    await this._request('DELETE /claims/{name}', { name });
    this._claims = this._claims.filter(c => c.name !== name);
    this._changed.emit();
  }

  /** Release every claim of the caller; the names of those released. */
  async releaseAll(): Promise<string[]> {
    await this.refresh();
    const names = this._claims.map(c => c.name);
    const problems: string[] = [];
    for (const name of names) {
      try {
        await this.release(name);
      } catch (err) {
        problems.push(toError(err).message);
      }
    }
    if (problems.length > 0) {
      throw new DraRequestError(problems.join('; '), 0);
    }
    return names;
  }

  /** Restart a kernel keeping its claims, which its new process gets in its environment. */
  async restartWithClaims(kernelId: string): Promise<Restart> {
    const answer = await this._request('POST /kernels/{kernel_id}/restart-with-claims', {
      kernel_id: kernelId
    });
    await this.refreshSoon();
    return answer;
  }

  /** Move a claim off a device taken out of service: the same again on an equivalent
   * device, the old claim released, its kernel restarted with the new one. */
  async move(name: string): Promise<Restart> {
    const answer = await this._request('POST /claims/{name}/move', { name });
    await this.refreshSoon();
    return answer;
  }

  /** Cancel one of the caller's runs; answers once it ended, with it as it is then. */
  async cancelRun(name: string): Promise<Run> {
    const run = await this._request('POST /runs/{name}/cancel', { name });
    this._cancelled.add(name); // the caller's own cancel: not news
    if (this._runs !== null) {
      const runs = this._runs.runs.map(r => (r.name === name ? run : r));
      this._runs = { ...this._runs, runs };
    }
    this._changed.emit();
    await this.refreshSoon(); // its claim went: the devices' states changed
    return run;
  }

  /** The last `tail` lines of one of the caller's runs' output. */
  async runLogs(name: string, tail: number = LOG_LINES): Promise<RunLogs> {
    return this._request('GET /runs/{name}/logs', { name, tail });
  }

  /** Allocate devices now (as dra.request with timeout 0). */
  async request(body: ClaimRequest): Promise<Claim> {
    const claim = await this._request('POST /claims', {}, body);
    this._known.set(claim.name, claim);
    await this.refreshSoon();
    return claim;
  }

  /**
   * An event of the server's event bus (any schema; the page gets them all). A claim made
   * or released by anyone makes the model refresh (the devices' states changed; the
   * answers hold only what the caller may see); an idle warning or a release is announced
   * (signals) when it is the caller's: a claim seen in an answer, of a user seen there, or
   * of a kernel of this server. A kernel's move is announced when the kernel is one of
   * this server's or its user's claims were seen; its claims changed too (the one it made
   * went, its pod's came or went).
   */
  handleEvent(event: { schema_id: string; [key: string]: unknown }): void {
    const id = event.schema_id;
    if (id === EVENTS.changed) {
      const { topics } = event as unknown as ChangedEvent;
      if (topics.includes('devices')) {
        this._devicesStale = true; // who holds what, taints: read the devices too
      }
      void this.refreshSoon();
      return;
    }
    if (id === EVENTS.gpuProcess) {
      this._gpuProcess.emit(event as unknown as GpuProcessEvent); // the server's user's only
      return;
    }
    if (id === EVENTS.kernelMoved) {
      const moved = event as unknown as KernelMovedEvent;
      if (this.ownKernel(moved.kernel_id) || this._users.has(moved.user)) {
        this._kernelMoved.emit(moved);
      }
      void this.refreshSoon();
      return;
    }
    if (id === EVENTS.reclaimWarning) {
      const warning = event as unknown as ReclaimWarningEvent;
      if (
        this._known.has(warning.claim) ||
        this._users.has(warning.user) ||
        (warning.kernel_id !== null && this.ownKernel(warning.kernel_id))
      ) {
        this._reclaimWarning.emit(warning);
      }
      return; // nothing changed yet
    }
    if (id === EVENTS.deviceUnhealthy) {
      const unhealthy = event as unknown as DeviceUnhealthyEvent;
      if (
        this._known.has(unhealthy.claim) ||
        this._users.has(unhealthy.user) ||
        (unhealthy.kernel_id !== null && this.ownKernel(unhealthy.kernel_id))
      ) {
        this._deviceUnhealthy.emit(unhealthy);
      }
      this._devicesStale = true; // the device's taints: read them with the next refresh
      void this.refreshSoon();
      return;
    }
    if (id !== EVENTS.allocated && id !== EVENTS.idleWarning && id !== EVENTS.released) {
      return;
    }
    const claimEvent = event as unknown as ClaimEvent;
    const ours =
      this._known.has(claimEvent.claim) ||
      this._users.has(claimEvent.user) ||
      (claimEvent.kernel_id !== null && this.ownKernel(claimEvent.kernel_id));
    if (id === EVENTS.idleWarning) {
      if (ours) {
        this._idleWarning.emit(event as unknown as IdleWarningEvent);
      }
      return; // nothing changed yet
    }
    if (id === EVENTS.allocated) {
      this._announced.delete(claimEvent.claim);
    }
    if (id === EVENTS.released) {
      const claim = this._known.get(claimEvent.claim);
      this._known.delete(claimEvent.claim);
      const before = this._claims.length;
      this._claims = this._claims.filter(c => c.name !== claimEvent.claim);
      if (
        ours &&
        !(claim !== undefined ? this._wasAnnounced(claim) : this._announced.has(claimEvent.claim))
      ) {
        this._announced.set(claimEvent.claim, claim?.created ?? null);
        this._released.emit({ event: event as unknown as ReleasedEvent, claim });
      }
      if (this._claims.length !== before) {
        this._changed.emit();
      }
    }
    void this.refreshSoon();
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    for (const resolve of this._waiting.splice(0)) {
      resolve();
    }
    this._poll?.dispose();
    Signal.clearData(this);
  }

  /** The metrics, while the panel is shown; a failure leaves the panel without them. */
  private async _readMetrics(): Promise<void> {
    try {
      this._metrics = await this._request('GET /metrics', { history: SPARK_SAMPLES });
    } catch {
      this._metrics = null; // no sparklines; the claims and devices still show
    }
    this._metricsMap = metricsByDevice(this._metrics);
  }

  /** The usage, while the panel is shown; a failure leaves the panel without it. */
  private async _readUsage(): Promise<void> {
    const now = this.now();
    if (now - this._usageRead < USAGE_EVERY) {
      return;
    }
    this._usageRead = now;
    try {
      this._usage = await this._request('GET /usage', { since: '7d' });
    } catch {
      this._usage = null; // no Usage section; the rest still shows
    }
  }

  /** The runs, while the panel is shown; a failure says why in the Runs section. */
  /** Whether a run of the caller may end: a run's claim is live, or a run read ran. */
  private _runsWatched(claims: readonly Claim[]): boolean {
    return (
      claims.some(c => c.run) ||
      [...this._runPhases.values()].some(p => p === 'Pending' || p === 'Running')
    );
  }

  /** Note the runs' phases; a run that ended since it was seen running is announced. */
  private _noteRuns(runs: readonly Run[]): void {
    for (const run of runs) {
      const before = this._runPhases.get(run.name);
      this._runPhases.set(run.name, run.phase);
      if (run.phase === 'Pending' || run.phase === 'Running' || this._cancelled.has(run.name)) {
        continue;
      }
      const news =
        before === undefined
          ? this._since !== null && run.created >= this._since
          : before === 'Pending' || before === 'Running';
      if (news) {
        this._runEnded.emit(run);
      }
    }
  }

  private async _readRuns(): Promise<void> {
    try {
      this._runs = await this._request('GET /runs');
      this._runsError = null;
      this._noteRuns(this._runs.runs);
    } catch (err) {
      this._runs = null;
      this._runsError = toError(err);
    }
  }

  private _setDevices(devices: Devices): void {
    this._devices = devices;
    this._deviceMap = new Map(devices.devices.map(d => [d.device, d]));
  }

  private _request: Requester;
  private _interval: number;
  private _pushed = false; // the server pushes its changes (GET /claims)
  private _hidden: () => boolean;
  private _poll: Poll | null = null;
  private _claims: Claim[] = [];
  private _joined: Joined[] = [];
  private _devices: Devices | null = null;
  private _deviceMap = new Map<string, Device>();
  private _metrics: Metrics | null = null;
  private _metricsMap = new Map<string, DeviceMetrics>();
  private _usage: Usage | null = null;
  private _runs: Runs | null = null;
  private _runsError: DraRequestError | null = null;
  private _usageRead = -Infinity; // this.now() of the last read
  private _error: DraRequestError | null = null;
  private _connected = false;
  private _devicesWanted = false;
  private _disposed = false;
  private _reading = 0; // refreshes on their way
  // callers of refreshSoon while a read was on its way: one more read follows it, and
  // resolves them once it is in
  private _waiting: (() => void)[] = [];
  // claims of this caller seen (answers, own requests, events): name -> last seen
  private _known = new Map<string, Claim | undefined>();
  private _users = new Set<string>(); // the users of the claims in the answers
  // claims whose release was announced: name -> when the claim was made (null: unknown)
  private _announced = new Map<string, number | null>();
  private _lastRead = 0;
  private _changed = new Signal<this, void>(this);
  private _idleWarning = new Signal<this, IdleWarningEvent>(this);
  private _released = new Signal<this, Release>(this);
  private _gpuProcess = new Signal<this, GpuProcessEvent>(this);
  private _kernelMoved = new Signal<this, KernelMovedEvent>(this);
  private _deviceUnhealthy = new Signal<this, DeviceUnhealthyEvent>(this);
  private _reclaimWarning = new Signal<this, ReclaimWarningEvent>(this);
  private _devicesStale = false;
  private _devicesRead = 0;
  private _runEnded = new Signal<this, Run>(this);
  private _runPhases = new Map<string, Run['phase']>(); // the runs read: name -> phase
  private _since: number | null = null; // this.now() of the first refresh
  private _cancelled = new Set<string>(); // runs cancelled from this page
}

/** Any failure of a call as a DraRequestError (a bug in the page keeps its message). */
export function toError(err: unknown): DraRequestError {
  if (err instanceof DraRequestError) {
    return err;
  }
  return new DraRequestError(`dra-jupyter: ${String(err)}`, 0);
}

export type { AllocatedEvent };
