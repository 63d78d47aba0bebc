// The left sidebar's "Devices" panel: the caller's claims (with Release, Keep and
// "Restart kernel with these devices"), their background runs (runsview.ts), a request
// form, and the devices by node and GPU with MIG partitions under their parent.

import { LabIcon } from '@jupyterlab/ui-components';
import { Widget } from '@lumino/widgets';

import type { DraRequestError } from '../api';
import {
  claimCountdown,
  claimTakenOutText,
  clusterLines,
  countdownText,
  deviceName,
  deviceSummary,
  duration,
  groupDevices,
  groupState,
  joinedText,
  queueLines,
  shortModel,
  takenOut,
  usageSeries,
  usageText,
  usedByText
} from '../format';
import {
  memoryText,
  SPARK_HEIGHT,
  SPARK_WIDTH,
  sparklinePath,
  sparklinePoints,
  utilizationSeries,
  utilizationText
} from '../metrics';
import { type DraModel, toError } from '../model';
import { claimPending, POD_RESTART, restartWords } from '../notifications/moves';
import type { Kernels } from '../tokens';
import type { Claim, ClaimRequest, Device } from '../wire';
import { moveAsked, releaseAsked, restartAsked } from './ask';
import { button, el, sparkline } from './dom';
import { RunsView } from './runsview';

const SVG =
  '<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">' +
  '<path class="jp-icon3" fill="#616161" d="M4 6h16v10H4zM2 18h20v2H2zM7 8v6h2V8zm4 0v6h2V8zm4 0v6h2V8z"/>' +
  '</svg>';

/** The panel's id in the shell (what the Show devices command activates). */
export const PANEL_ID = 'dra-jupyter-devices';

export const devicesIcon = new LabIcon({ name: 'dra-jupyter:devices', svgstr: SVG });

export class DevicesPanel extends Widget {
  constructor(
    readonly model: DraModel,
    readonly kernels: Kernels
  ) {
    super();
    this.id = PANEL_ID;
    this.addClass('dra-DevicesPanel');
    this.title.icon = devicesIcon;
    this.title.caption = 'Devices: your GPU, MIG and TPU claims';
    this._runs = new RunsView(model, () => this.render());
    model.changed.connect(this.render, this);
    this.render();
  }

  protected onAfterShow(): void {
    this.model.devicesWanted = true;
    this._ticker = window.setInterval(() => this.tick(), 1000);
    this.render();
  }

  protected onAfterHide(): void {
    this.model.devicesWanted = false;
    window.clearInterval(this._ticker);
  }

  dispose(): void {
    window.clearInterval(this._ticker);
    super.dispose();
  }

  /** Show a run's output in Your runs (a run's end notification's Output). */
  showRunOutput(name: string): void {
    this._runs.openOutput(name);
    this.render();
    this.node.querySelector(`[data-run="${CSS.escape(name)}"]`)?.scrollIntoView();
  }

  /** Once a second while shown: the countdowns and ages. */
  tick(): void {
    const now = this.model.now();
    for (const row of this.node.querySelectorAll<HTMLElement>('[data-claim]')) {
      const claim = this.model.claims.find(c => c.name === row.dataset.claim);
      if (claim !== undefined) {
        this._fillTimes(row, claim, now);
      }
    }
    this._runs.tick(this.node);
  }

  render(): void {
    if (!this.isVisible && this.node.childElementCount > 0) {
      return; // rendered when shown
    }
    const model = this.model;
    const root = el('div', 'dra-DevicesPanel-content');
    const header = el('div', 'dra-header');
    header.append(el('h2', 'dra-title', 'Devices'));
    header.append(button('↻', 'dra-refresh', 'Refresh now', () => void model.refreshSoon()));
    root.append(header);
    if (model.devices !== null) {
      const sim = model.devices.simulated ? ' (simulated)' : '';
      root.append(el('div', 'dra-dim dra-inventory', model.devices.inventory + sim));
    }
    if (model.error !== null) {
      root.append(this._error(model.error));
    }
    if (model.connected || model.error === null) {
      root.append(this._claims());
      const runs = this._runs.section();
      if (runs !== null) {
        root.append(runs);
      }
      const usage = this._usage();
      if (usage !== null) {
        root.append(usage);
      }
      const queue = this._queue();
      if (queue !== null) {
        root.append(queue);
      }
      root.append(this._form());
      root.append(this._devices());
    }
    this.node.replaceChildren(root);
    if (this._reveal) {
      // the form's answer, where the claims above may have pushed it below the fold
      this._reveal = false;
      root.querySelector('.dra-request .dra-ok, .dra-request .dra-error')?.scrollIntoView({
        block: 'nearest'
      });
    }
  }

  private _error(error: DraRequestError): HTMLElement {
    const box = el('div', 'dra-error jp-RenderedText');
    box.setAttribute('role', 'alert');
    box.textContent = error.message;
    return box;
  }

  private _claims(): HTMLElement {
    const section = el('section', 'dra-claims');
    section.append(el('h3', '', 'Your claims'));
    const claims = this.model.claims;
    const joined = this._joined();
    if (claims.length === 0 && joined === null) {
      section.append(
        el(
          'div',
          'dra-dim dra-empty',
          this.model.connected
            ? 'You hold no devices. Request some below, or run dra.request() in a notebook.'
            : 'Loading…'
        )
      );
      return section;
    }
    if (claims.length > 0) {
      const list = el('ul', 'dra-claim-list');
      for (const claim of claims) {
        list.append(this._claim(claim));
      }
      section.append(list);
    }
    if (joined !== null) {
      section.append(joined); // a teammate's claim that a kernel here uses
    }
    return section;
  }

  /** The claims this server's kernels joined, not the caller's: whose, and who uses them. */
  private _joined(): HTMLElement | null {
    const joined = this.model.joined;
    if (joined.length === 0) {
      return null;
    }
    const list = el('ul', 'dra-joined-list');
    for (const j of joined) {
      const line = el('li', 'dra-joined', joinedText(j, this.kernels.label(j.kernel_id)));
      line.dataset.claim = j.claim;
      line.title = j.used_by.join('\n');
      list.append(line);
    }
    return list;
  }

  /** The caller's GPU-hours this week and their idle share (none: no section). */
  private _usage(): HTMLElement | null {
    const usage = this.model.usage;
    if (usage === null) {
      return null;
    }
    const section = el('section', 'dra-usage');
    section.append(el('h3', '', 'Usage'));
    const line = el('div', 'dra-usage-line', usageText(usage));
    const series = usageSeries(usage);
    const path = sparklinePath(sparklinePoints(series, SPARK_WIDTH, SPARK_HEIGHT));
    const title = `your GPU-hours per day, the last ${series.length} days`;
    line.append(sparkline(path, SPARK_WIDTH, SPARK_HEIGHT, title));
    section.append(line);
    return section;
  }

  /** Who waits in line for devices (none: no section). */
  private _queue(): HTMLElement | null {
    const waiting = this.model.devices?.waiting ?? [];
    if (waiting.length === 0) {
      return null;
    }
    const section = el('section', 'dra-queue');
    section.append(el('h3', '', `Waiting in line (${waiting.length})`));
    const list = el('ul', 'dra-queue-list');
    const now = Date.now() / 1000;
    for (const line of queueLines(waiting, w => this.model.isMine(w), now)) {
      list.append(el('li', 'dra-queue-entry', line));
    }
    section.append(list);
    return section;
  }

  private _claim(claim: Claim): HTMLElement {
    const row = el('li', 'dra-claim');
    row.dataset.claim = claim.name;
    const head = el('div', 'dra-claim-head');
    head.append(
      el('span', 'dra-claim-devices', deviceSummary(claim.devices, this.model.deviceMap))
    );
    head.append(el('span', 'dra-dim dra-claim-name', claim.name));
    row.append(head);
    const kernel = claim.kernel_id;
    const where = kernel
      ? (this.kernels.label(kernel) ?? 'a kernel not open in this page')
      : claim.run
        ? `run ${claim.run} (Your runs)`
        : 'no kernel (REST API)';
    row.append(el('div', 'dra-claim-where', where));
    const users = usedByText(claim.used_by);
    if (users) {
      // who else has its devices: the pods of kernels that joined it (dra.request(join=...))
      const line = el('div', 'dra-dim dra-claim-users', users);
      line.title = claim.used_by.join('\n');
      row.append(line);
    }
    row.append(el('div', 'dra-dim dra-claim-keys', claim.devices.map(deviceName).join(', ')));
    row.append(el('div', 'dra-claim-times'));
    this._fillTimes(row, claim, this.model.now());
    // a device taken out of service: said, and neither Keep nor a restart with it offered
    const outText = claimTakenOutText(claim, this.model.deviceMap);
    if (outText) {
      const line = el('div', 'dra-claim-takenout', outText);
      line.title = claim.devices
        .map(k => this.model.deviceMap.get(k))
        .filter(d => d?.taints)
        .map(d => `${deviceName(d?.device ?? '')}: ${d?.taints}`)
        .join('\n');
      row.append(line);
    }
    const actions = el('div', 'dra-actions');
    actions.append(
      button('Release', 'jp-mod-warn dra-release', releaseCaption(claim), () =>
        this._act(row, async () => {
          const what = deviceSummary(claim.devices, this.model.deviceMap);
          const holder = kernel ? this.kernels.label(kernel) : null;
          if (await releaseAsked(what, claim.devices.length, holder, claim.run)) {
            await this.model.release(claim.name);
          }
        })
      )
    );
    if (outText) {
      if (kernel) {
        actions.append(
          button(
            'Move',
            'jp-mod-accept dra-move',
            'Ask for an equivalent device and restart the kernel on it (its variables are ' +
              'lost); this claim is released',
            () =>
              this._act(row, async () => {
                if (await moveAsked(this.kernels.label(kernel))) {
                  await this.model.move(claim.name);
                  await this.kernels.restarted(kernel);
                }
              })
          )
        );
      }
      row.append(actions);
      return row;
    }
    if (claim.idle_deadline !== null) {
      actions.append(
        button('Keep', 'jp-mod-accept dra-keep', 'Start the idle countdown again', () =>
          this._act(row, () => this.model.keep(claim.name))
        )
      );
    }
    if (kernel && !claim.in_kernel_env) {
      // offered only where the kernel lacks the devices (a claim made for it from here, not
      // by its own dra.request), and asked first: the kernel's variables go
      const words = restartWords(claim, {
        label: 'Restart kernel with these devices',
        caption: 'Restart the kernel; the new kernel keeps these devices in its environment'
      });
      actions.append(
        button(words.label, 'dra-restart', words.caption, () =>
          this._act(row, () =>
            restartAsked(this.kernels.label(kernel), words.label).then(yes =>
              yes
                ? this.model.restartWithClaims(kernel).then(() => this.kernels.restarted(kernel))
                : undefined
            )
          )
        )
      );
    }
    row.append(actions);
    return row;
  }

  private _fillTimes(row: HTMLElement, claim: Claim, now: number): void {
    const times = row.querySelector<HTMLElement>('.dra-claim-times');
    if (times === null) {
      return;
    }
    const busy = claim.kernel_id !== null && this.kernels.busy(claim.kernel_id);
    const parts = [`held ${duration(now - claim.created)}`];
    if (claim.lease_expires !== null) {
      parts.push(`lease ${duration(claim.lease_expires - now)} left`);
    }
    const text = countdownText(claimCountdown(claim, now, busy));
    if (text && !text.startsWith('lease')) {
      parts.push(text);
    } else if (busy) {
      parts.push('busy');
    }
    if (claim.gpu.state !== 'unknown') {
      parts.push(claim.gpu.text); // GPU busy: 93%, GPU idle for 12 min
    }
    times.textContent = parts.join(' · ');
    times.title = claim.gpu.state === 'unknown' ? 'no GPU signal: idle means no cell ran' : '';
    row.classList.toggle('dra-mod-busy', busy);
  }

  private _act(row: HTMLElement, action: () => Promise<unknown>): void {
    for (const b of row.querySelectorAll('button')) {
      b.disabled = true;
    }
    action().then(
      () => this.render(),
      (err: unknown) => {
        for (const b of row.querySelectorAll('button')) {
          b.disabled = false;
        }
        row.querySelector('.dra-error')?.remove();
        row.append(this._error(toError(err)));
      }
    );
  }

  private _form(): HTMLElement {
    const form = el('form', 'dra-request');
    const details = el('details', 'dra-request-details');
    details.open = this._formOpen;
    details.addEventListener('toggle', () => (this._formOpen = details.open));
    const summary = el('summary', '', 'Request devices');
    // kept at the click, not at 'toggle' (a task later): a render in between would make
    // the form again from the state before the click, closed under the user's hand
    summary.addEventListener('click', () => (this._formOpen = !details.open));
    details.append(summary);
    const fields: [keyof ClaimRequest, string, string][] = [
      ['gpu', 'GPUs', 'how many, e.g. 2'],
      ['model', 'Model', 'e.g. H200'],
      ['memory', 'Memory', 'at least, e.g. 80Gi'],
      ['mig', 'MIG profile', 'e.g. 1g.18gb'],
      ['lease', 'Lease', 'e.g. 2h']
    ];
    const grid = el('div', 'dra-request-grid');
    for (const [name, label, hint] of fields) {
      const l = el('label', '', label);
      const input = el('input', 'jp-mod-styled');
      input.name = name;
      input.placeholder = hint;
      input.value = this._formValues[name] ?? '';
      input.addEventListener('input', () => (this._formValues[name] = input.value));
      l.append(input);
      grid.append(l);
    }
    const same = el('label', '', 'Together');
    const select = el('select', 'jp-mod-styled');
    select.name = 'same';
    for (const [value, text] of [
      ['', 'anywhere'],
      ['pcie', 'same PCIe root'],
      ['numa', 'same NUMA node']
    ]) {
      const o = el('option', '', text);
      o.value = value;
      select.append(o);
    }
    select.value = this._formValues.same ?? '';
    select.addEventListener('change', () => (this._formValues.same = select.value));
    same.append(select);
    grid.append(same);
    details.append(grid);
    const attach = el('label', 'dra-attach');
    const box = el('input');
    box.type = 'checkbox';
    box.name = 'attach';
    box.checked = this._attach;
    box.addEventListener('change', () => (this._attach = box.checked));
    // the notebook by its name; unticked, the claim is held for no kernel: no idle
    // release frees it, so it gets a lease (the Lease field's, else the server's default)
    const current = this.kernels.current();
    const path = current === null ? null : this.kernels.label(current);
    attach.append(
      box,
      path === null
        ? ' for the current notebook’s kernel (none in front)'
        : ` for ${path.slice(path.lastIndexOf('/') + 1)}’s kernel`
    );
    attach.title =
      'Unticked: the claim is held for no notebook, until its lease ends (the Lease field, ' +
      'else the server’s default, 8 h) or you release it';
    details.append(attach);
    const submit = el('button', 'jp-Button jp-mod-styled jp-mod-accept dra-submit', 'Request');
    submit.type = 'submit';
    details.append(submit);
    const said = this._formMessage;
    if (said?.claim !== undefined && !this.model.claims.some(c => c.name === said.claim)) {
      this._formMessage = null; // its claim went (released, moved): the words are stale
    }
    if (this._formMessage) {
      const message = this._formMessage;
      const m = el('div', message.error ? 'dra-error' : 'dra-ok', message.text);
      m.setAttribute('role', message.error ? 'alert' : 'status');
      const kernel = message.restart;
      if (kernel !== undefined) {
        // the running kernel's environment was made before the claim: a restart with its
        // devices gives the new kernel CUDA_VISIBLE_DEVICES and friends (Kubernetes: the
        // claim is pending, and the kernel moves into a pod of its own that holds them)
        const words = message.pending
          ? POD_RESTART
          : {
              label: 'Restart kernel with these devices',
              caption:
                'Restart the notebook’s kernel; the new kernel has the devices in its environment'
            };
        const done = message.pending
          ? 'restarted in a pod with its devices'
          : 'restarted with its devices';
        m.append(
          button(words.label, 'jp-mod-accept dra-restart', words.caption, () =>
            this._act(m, async () => {
              if (!(await restartAsked(this.kernels.label(kernel), words.label))) {
                return;
              }
              await this.model.restartWithClaims(kernel);
              await this.kernels.restarted(kernel);
              this._formMessage = {
                error: false,
                claim: message.claim,
                text: `${message.claim}: the kernel ${done}.`
              };
            })
          )
        );
      }
      details.append(m);
    }
    form.append(details);
    form.addEventListener('submit', event => {
      event.preventDefault();
      submit.disabled = true;
      const body = this._requestBody();
      this.model.request(body).then(
        claim => {
          const what = deviceSummary(claim.devices, this.model.deviceMap);
          const kernel = claim.kernel_id ?? undefined;
          const label = kernel ? (this.kernels.label(kernel) ?? 'the notebook') : '';
          const pending = claimPending(claim);
          this._formMessage = kernel
            ? {
                error: false,
                claim: claim.name,
                restart: kernel,
                pending,
                text: pending
                  ? `Claim ${claim.name} for ${label} is pending: its devices go to a pod ` +
                    'that uses it. Restart the kernel in a pod with them to use them.'
                  : `Got ${what} (claim ${claim.name}) for ${label}. Its running kernel ` +
                    'started without them: restart it with them to use them.'
              }
            : { error: false, claim: claim.name, text: `Got ${what} (claim ${claim.name}).` };
          this._reveal = true;
          this.render();
        },
        (err: unknown) => {
          this._formMessage = { error: true, text: toError(err).message };
          this._reveal = true;
          this.render();
        }
      );
    });
    return form;
  }

  private _requestBody(): ClaimRequest {
    const v = this._formValues;
    const body: ClaimRequest = { timeout: 0 };
    const gpu = (v.gpu ?? '').trim();
    if (gpu) {
      body.gpu = gpu === 'all' ? 'all' : Number(gpu);
    }
    for (const key of ['model', 'memory', 'mig', 'lease'] as const) {
      const value = (v[key] ?? '').trim();
      if (value) {
        body[key] = value;
      }
    }
    if (v.same === 'pcie') {
      body.same = 'pcieRoot';
    } else if (v.same === 'numa') {
      body.same = 'numaNode';
    }
    const kernel = this._attach ? this.kernels.current() : null;
    if (kernel) {
      body.kernel_id = kernel;
    }
    return body;
  }

  private _devices(): HTMLElement {
    const section = el('section', 'dra-devices');
    const devices = this.model.devices;
    const cluster = devices?.cluster;
    if (cluster !== undefined) {
      // a hub's shared view counts the cluster's devices; the rows below are the user's
      section.append(el('h3', '', 'The cluster'));
      const list = el('ul', cluster.problem ? 'dra-cluster dra-error' : 'dra-cluster');
      for (const line of clusterLines(cluster)) {
        list.append(el('li', 'dra-cluster-shape', line));
      }
      section.append(list);
    }
    section.append(el('h3', '', cluster !== undefined ? 'Your devices' : 'All devices'));
    if (devices === null) {
      section.append(el('div', 'dra-dim', 'Loading…'));
      return section;
    }
    for (const node of groupDevices(devices.devices)) {
      const box = el('div', 'dra-node');
      const name = el('h4', 'dra-node-name', node.node || 'this machine');
      name.title = name.textContent ?? '';
      box.append(name);
      const table = el('table', 'dra-device-table');
      for (const group of node.groups) {
        table.append(this._deviceRow(group.device, groupState(group), false));
        if (group.partitions.length > 0) {
          const held = group.partitions.filter(p => p.state === 'held' || p.state === 'shared');
          const tr = el('tr', 'dra-mig-row');
          const td = el('td');
          td.colSpan = 5;
          const more = el('details', 'dra-mig');
          more.append(
            el(
              'summary',
              '',
              `${group.partitions.length} MIG partitions` +
                (held.length ? ` · ${held.length} held` : '')
            )
          );
          const inner = el('table', 'dra-device-table');
          for (const p of group.partitions) {
            inner.append(this._deviceRow(p, p.state, true));
          }
          more.append(inner);
          td.append(more);
          tr.append(td);
          table.append(tr);
        }
      }
      box.append(table);
      section.append(box);
    }
    return section;
  }

  private _deviceRow(d: Device, state: string, partition: boolean): HTMLElement {
    const tr = el('tr', `dra-device dra-state-${d.state}`);
    tr.dataset.device = d.device;
    tr.append(
      el(
        'td',
        'dra-device-name',
        partition ? d.mig_profile || deviceName(d.device) : deviceName(d.device)
      )
    );
    const model = el('td', 'dra-device-model', partition ? '' : shortModel(d.model));
    model.title = d.model;
    tr.append(model);
    const metrics = this.model.metricsMap.get(d.device);
    tr.append(el('td', 'dra-dim dra-device-memory', memoryText(metrics?.current, d.memory)));
    const util = el('td', 'dra-device-util');
    if (metrics !== undefined) {
      const series = utilizationSeries(metrics);
      if (series.some(v => v !== null)) {
        const label = utilizationText(metrics.current);
        util.append(el('span', 'dra-num', label));
        const path = sparklinePath(sparklinePoints(series, SPARK_WIDTH, SPARK_HEIGHT));
        util.append(
          sparkline(path, SPARK_WIDTH, SPARK_HEIGHT, `utilisation, last ${series.length} samples`)
        );
      }
    }
    tr.append(util);
    const s = el('td', 'dra-device-state', state);
    if (d.holder) {
      s.title = d.holder;
      s.textContent = `${state}: ${this._holderWords(d)}`;
    }
    if (takenOut(d)) {
      tr.classList.add('dra-taken-out');
      s.textContent = `${s.textContent} · taken out`;
      s.title = [d.holder, `taken out of service: ${d.taints}`].filter(Boolean).join('\n');
    }
    tr.append(s);
    return tr;
  }

  /**
   * Who holds a device, in the caller's words: the notebook whose kernel holds it, or the
   * run, where the claim is the caller's; else the server's `claim (user)`.
   */
  private _holderWords(d: Device): string {
    const mine = this.model.claims.find(c => c.devices.includes(d.device));
    const notebook = mine?.kernel_id ? this.kernels.label(mine.kernel_id) : null;
    if (notebook) {
      return notebook;
    }
    return mine?.run ? `run ${mine.run}` : d.holder;
  }

  private _ticker = 0;
  private _runs: RunsView;
  private _formOpen = false;
  private _attach = true;
  private _formValues: Partial<Record<string, string>> = {};
  private _reveal = false; // scroll the form's new answer into view at the next render
  private _formMessage: {
    error: boolean;
    text: string;
    claim?: string;
    restart?: string; // a kernel to offer the restart with the claim's devices
    pending?: boolean; // the claim's devices go to a pod (Kubernetes): the restart moves it
  } | null = null;
}

/** The Release button's tooltip: a run's claim goes with its run. */
function releaseCaption(claim: Claim): string {
  return claim.run
    ? `Give back ${claim.name} now; run ${claim.run}, which holds it, stops`
    : `Give back ${claim.name} now`;
}
