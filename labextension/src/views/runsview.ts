// The Devices panel's "Your runs" section, under the claims: a row per background run
// (dra.run) with its phase, devices and age, Cancel (asked twice), and its last lines of
// output on demand. What it says comes from runs.ts; this is its DOM and its state, kept
// across the panel's renders (each refresh renders the panel again).

import type { DraRequestError } from '../api';
import { type DraModel, toError } from '../model';
import {
  cancelQuestion,
  LOG_EVERY,
  logsCaption,
  logsText,
  moreRunsText,
  NO_RUNS,
  type RunRow,
  runAgeText,
  runRow
} from '../runs';
import type { Run, RunLogs } from '../wire';
import { button, el } from './dom';

/** Where the page keeps the finished runs cleared from the list (their names). */
const CLEARED_KEY = 'dra-jupyter:cleared-runs';
const CLEARED_MAX = 500; // the newest kept: the list's own runs are fewer

/** A run's output as last read, when, and whether a read is on its way. */
interface Output {
  logs: RunLogs | null;
  error: DraRequestError | null;
  read: number; // model.now() of the last read asked for
}

export class RunsView {
  constructor(
    readonly model: DraModel,
    /** Render the panel again (its content is made anew each time). */
    readonly rerender: () => void
  ) {}

  /** The section, or null before the runs were read (the panel not shown yet). */
  section(): HTMLElement | null {
    const runs = this.model.runs;
    const error = this.model.runsError;
    if (runs === null && error === null) {
      return null;
    }
    const section = el('section', 'dra-runs');
    const shown = (runs?.runs ?? []).filter(r => !this._cleared.has(r.name));
    const count = shown.length;
    const head = el('h3', '', count ? `Your runs (${count})` : 'Your runs');
    const finished = shown.filter(r => r.ended !== null).map(r => r.name);
    if (finished.length > 0) {
      // the list would only grow: finished runs go from it (dra.runs() still lists them)
      head.append(
        button(
          'Clear finished',
          'dra-runs-clear',
          `Take the ${finished.length} finished run${finished.length > 1 ? 's' : ''} off ` +
            'this list (dra.runs() still lists them)',
          () => {
            this._clear(finished);
            this.rerender();
          }
        )
      );
    }
    section.append(head);
    if (error !== null) {
      section.append(errorBox(error));
    }
    if (runs === null) {
      return section;
    }
    if (shown.length === 0) {
      section.append(el('div', 'dra-dim dra-empty', NO_RUNS));
      return section;
    }
    const list = el('ul', 'dra-run-list');
    const now = this.model.now();
    for (const run of [...shown].reverse()) {
      list.append(this._run(run, now)); // the newest first
    }
    section.append(list);
    const more = moreRunsText(runs.more);
    if (more) {
      section.append(el('div', 'dra-dim dra-runs-more', more));
    }
    return section;
  }

  /** Open a run's output (read now), as its Output would. */
  openOutput(name: string): void {
    if (!this._outputs.has(name)) {
      this._read(name);
    }
  }

  /** Once a second while shown: the ages. */
  tick(root: HTMLElement): void {
    const now = this.model.now();
    for (const row of root.querySelectorAll<HTMLElement>('[data-run]')) {
      const run = this.model.runs?.runs.find(r => r.name === row.dataset.run);
      const age = row.querySelector<HTMLElement>('.dra-run-age');
      if (run !== undefined && age !== null) {
        age.textContent = runAgeText(run, now);
      }
    }
  }

  private _run(run: Run, now: number): HTMLElement {
    const row: RunRow = runRow(run, now, this.model.deviceMap);
    const li = el('li', `dra-run dra-phase-${run.phase.toLowerCase()}`);
    li.dataset.run = run.name;
    li.title = row.title;
    const head = el('div', 'dra-run-head');
    head.append(el('span', 'dra-run-name', row.name));
    head.append(el('span', 'dra-run-phase', row.phase));
    li.append(head);
    li.append(el('div', 'dra-run-devices', row.devices));
    li.append(el('div', 'dra-dim dra-run-age', row.age));
    if (row.message) {
      li.append(el('div', 'dra-dim dra-run-message', row.message));
    }
    if (row.cancellable) {
      li.append(this._cancel(li, run.name));
    }
    li.append(this._output(run.name, row.ended, now));
    return li;
  }

  /** Cancel, then the question with its two answers. */
  private _cancel(li: HTMLElement, name: string): HTMLElement {
    const actions = el('div', 'dra-run-actions');
    const problem = this._problems.get(name);
    if (problem !== undefined) {
      actions.append(errorBox(problem));
    }
    if (this._confirming !== name) {
      const ask = el('div', 'dra-actions');
      ask.append(
        button('Cancel', 'jp-mod-warn dra-run-cancel', `Stop run ${name} (asks first)`, () => {
          this._confirming = name;
          this._problems.delete(name);
          this.rerender();
        })
      );
      actions.prepend(ask);
      return actions;
    }
    const confirm = el('div', 'dra-run-confirm');
    confirm.setAttribute('role', 'alertdialog');
    confirm.append(el('div', '', cancelQuestion(name)));
    const yes = button('Cancel run', 'jp-mod-warn dra-run-cancel-yes', `Stop ${name} now`, () => {
      for (const b of li.querySelectorAll('button')) {
        b.disabled = true;
      }
      this.model.cancelRun(name).then(
        () => {
          this._confirming = null;
          this.rerender();
        },
        (err: unknown) => {
          this._confirming = null;
          this._problems.set(name, toError(err));
          this.rerender();
        }
      );
    });
    const no = button('Keep it running', 'dra-run-cancel-no', 'Leave the run as it is', () => {
      this._confirming = null;
      this.rerender();
    });
    const buttons = el('div', 'dra-actions');
    buttons.append(yes, no);
    confirm.append(buttons);
    actions.prepend(confirm);
    return actions;
  }

  /** "Last output", read when opened, and again every LOG_EVERY s while the run runs. */
  private _output(name: string, ended: boolean, now: number): HTMLElement {
    const details = el('details', 'dra-run-output');
    const output = this._outputs.get(name);
    details.open = output !== undefined;
    details.append(
      el('summary', '', output?.logs ? `Output: ${logsCaption(output.logs)}` : 'Output')
    );
    details.addEventListener('toggle', () => {
      if (details.open && !this._outputs.has(name)) {
        this._read(name);
      } else if (!details.open) {
        this._outputs.delete(name);
      }
    });
    if (output === undefined) {
      return details;
    }
    if (output.error !== null) {
      details.append(errorBox(output.error));
    }
    const text = output.logs ? logsText(output.logs) : 'Reading…';
    details.append(el('pre', 'dra-run-log jp-RenderedText', text));
    if (!ended && now - output.read >= LOG_EVERY) {
      this._read(name);
    }
    return details;
  }

  private _read(name: string): void {
    const before = this._outputs.get(name);
    const output: Output = {
      logs: before?.logs ?? null,
      error: before?.error ?? null,
      read: this.model.now()
    };
    this._outputs.set(name, output);
    this.model.runLogs(name).then(
      logs => {
        if (this._outputs.get(name) === output) {
          output.logs = logs;
          output.error = null;
          this.rerender();
        }
      },
      (err: unknown) => {
        if (this._outputs.get(name) === output) {
          output.error = toError(err);
          this.rerender();
        }
      }
    );
    if (before === undefined) {
      this.rerender(); // open, "Reading…"
    }
  }

  /** Take finished runs off the list, for this page and the next (the browser keeps it). */
  private _clear(names: string[]): void {
    for (const name of names) {
      this._cleared.add(name);
    }
    const kept = [...this._cleared].slice(-CLEARED_MAX);
    this._cleared = new Set(kept);
    try {
      window.localStorage.setItem(CLEARED_KEY, JSON.stringify(kept));
    } catch {
      // no storage (private mode, full): cleared for this page only
    }
  }

  private _cleared = readCleared();
  private _confirming: string | null = null; // the run whose cancel is asked
  private _problems = new Map<string, DraRequestError>(); // a failed cancel, by run
  private _outputs = new Map<string, Output>(); // the runs whose output is open
}

/** The runs cleared before, as the browser kept them (none where it cannot). */
function readCleared(): Set<string> {
  try {
    const kept: unknown = JSON.parse(window.localStorage.getItem(CLEARED_KEY) ?? '[]');
    return new Set(Array.isArray(kept) ? kept.filter(n => typeof n === 'string') : []);
  } catch {
    return new Set();
  }
}

function errorBox(error: DraRequestError): HTMLElement {
  const box = el('div', 'dra-error jp-RenderedText', error.message);
  box.setAttribute('role', 'alert');
  return box;
}
