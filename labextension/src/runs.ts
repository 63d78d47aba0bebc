// What the Devices panel says of the caller's background runs (dra.run, GET /runs): a row
// per run with its phase, devices and age, the question before a cancel, and the last
// lines of its output. Pure: node's test runner runs it.

import { deviceSummary, duration } from './format';
import type { Device, Run, RunLogs } from './wire';

/** Lines of a run's output the panel shows (GET /runs/{name}/logs?tail=). */
export const LOG_LINES = 20;

/** Seconds between reads of an open run's output while it runs (the panel's refresh). */
export const LOG_EVERY = 5;

/** A run's row, in words. */
export interface RunRow {
  name: string;
  /** Running, Failed (exit code 1), ... */
  phase: string;
  /** 1× H200, no devices yet */
  devices: string;
  /** running 5 min, ended 2 min ago after 3 min */
  age: string;
  /** why it is in its phase, one line ('' when there is nothing to say) */
  message: string;
  /** the tooltip: its command, where it runs, by whom */
  title: string;
  cancellable: boolean;
  ended: boolean;
}

/** A run's phase in words: a failure with its exit code. */
export function runPhaseText(run: Run): string {
  if (run.phase === 'Failed' && run.exit_code !== null) {
    return `Failed (exit code ${run.exit_code})`;
  }
  return run.phase;
}

/** Its devices as the claims say theirs ("2× H200"), or none yet while it waits. */
export function runDevicesText(run: Run, devices: ReadonlyMap<string, Device>): string {
  if (run.device_count === 0) {
    return run.phase === 'Pending' ? 'no devices yet' : 'no devices';
  }
  const summary = deviceSummary(run.devices, devices);
  const left = run.device_count - run.devices.length; // beyond the answer's bound
  return left > 0 ? `${summary} + ${left} more` : summary;
}

/** How long it waited, runs or ran: "waiting 30 s", "running 5 min", "ended 2 min ago
 * after 3 min". */
export function runAgeText(run: Run, now: number): string {
  if (run.ended !== null) {
    const took = run.started !== null ? ` after ${duration(run.ended - run.started)}` : '';
    return `ended ${duration(now - run.ended)} ago${took}`;
  }
  if (run.started !== null) {
    return `running ${duration(now - run.started)}`;
  }
  return `waiting ${duration(now - run.created)}`;
}

/** The tooltip of a run's row: its command, where and what runs it, its processes. */
export function runTitle(run: Run): string {
  const launcher = run.launcher ? ` (${run.launcher})` : '';
  const processes = run.processes === 1 ? '1 process' : `${run.processes} processes`;
  return [run.command, `${run.where}${launcher}, ${processes}`, `user ${run.user}`]
    .filter(Boolean)
    .join('\n');
}

export function runRow(run: Run, now: number, devices: ReadonlyMap<string, Device>): RunRow {
  const ended = run.ended !== null || ['Succeeded', 'Failed', 'Cancelled'].includes(run.phase);
  return {
    name: run.name,
    phase: runPhaseText(run),
    devices: runDevicesText(run, devices),
    age: runAgeText(run, now),
    message: run.message,
    title: runTitle(run),
    cancellable: run.cancellable,
    ended
  };
}

/** The question before a cancel, next to its two buttons. */
export function cancelQuestion(name: string): string {
  return `Cancel run ${name}? Its processes are stopped and its devices released.`;
}

/** The output shown under a run: its last lines, or that there are none yet. */
export function logsText(logs: RunLogs): string {
  return logs.lines === 0 ? '(no output yet)' : logs.text;
}

/** What the output shown is: "the last 20 lines" or "all 3 lines". */
export function logsCaption(logs: RunLogs): string {
  const lines = logs.lines === 1 ? '1 line' : `${logs.lines} lines`;
  return logs.truncated ? `the last ${lines}` : `all of it, ${lines}`;
}

/** The line under the list when the answer left older runs out. */
export function moreRunsText(more: number): string {
  return more > 0 ? `${more} older run${more > 1 ? 's' : ''} not shown; dra.runs() lists all` : '';
}

/** The line of an empty Runs section. */
export const NO_RUNS =
  "No runs. dra.run(['python', 'train.py'], gpu=1) in a notebook runs a command in the " +
  'background with devices of its own.';
