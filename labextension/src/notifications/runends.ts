// The end of one of the user's background runs (dra.run), as a notification: how it ended,
// after how long, and for a failure its last line of output, with Output one click away
// (the Devices panel's Your runs, the run's output open). Said once per run, instead of
// the release of its claim (which its launcher makes, for whatever end).

import { duration } from '../format';
import type { DraModel } from '../model';
import type { Run } from '../wire';
import { NOTIFICATION_CHARS } from './health';

/** How a run ended, notified. */
export interface RunEndNotifier {
  /** A run that succeeded or was cancelled: a note. */
  note(message: string, kind: 'success' | 'info', output: () => void): void;
  /** A run that failed: a warning that stays. */
  warn(message: string, output: () => void): void;
}

/** ` after 3 min`; nothing where it did not run or ran under a second. */
function took(run: Run): string {
  if (run.started === null || run.ended === null || run.ended - run.started < 1) {
    return '';
  }
  return ` after ${duration(run.ended - run.started)}`;
}

/** The last line of a run's output that says something, cut to `max` characters. */
export function lastLine(text: string, max = 80): string {
  const lines = text.split('\n').map(l => l.trim());
  const last = lines.filter(Boolean).pop() ?? '';
  return last.length <= max ? last : `${last.slice(0, max - 1).trimEnd()}…`;
}

/**
 * `train-1 finished (exit 0) after 3 min`, `train-1 failed (exit 3) after 2 min: last line
 * …`, `train-1 was cancelled after 1 min`; cut to what JupyterLab shows.
 */
export function runEndText(run: Run, last: string): string {
  let text: string;
  if (run.phase === 'Succeeded') {
    text = `${run.name} finished (exit 0)${took(run)}`;
  } else if (run.phase === 'Cancelled') {
    text = `${run.name} was cancelled${took(run)}`;
  } else {
    const code = run.exit_code !== null ? ` (exit ${run.exit_code})` : '';
    const line = last ? `: last line ${last}` : '';
    text = `${run.name} failed${code}${took(run)}${line}`;
  }
  return text.length <= NOTIFICATION_CHARS
    ? text
    : `${text.slice(0, NOTIFICATION_CHARS - 1).trimEnd()}…`;
}

export class RunEnds {
  constructor(
    readonly model: DraModel,
    readonly notifier: RunEndNotifier,
    /** Show the run's output (the Devices panel's Your runs). */
    readonly output: (name: string) => void
  ) {}

  /** Say how the run ended (a failure with its last line, read now). */
  async show(run: Run): Promise<void> {
    const output = () => this.output(run.name);
    if (run.phase !== 'Failed') {
      const kind = run.phase === 'Succeeded' ? 'success' : 'info';
      this.notifier.note(runEndText(run, ''), kind, output);
      return;
    }
    let last = '';
    try {
      last = lastLine((await this.model.runLogs(run.name, 5)).text);
    } catch {
      // its output cannot be read (gone with its pod, say): the end is said without it
    }
    this.notifier.warn(runEndText(run, last), output);
  }
}
