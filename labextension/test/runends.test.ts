import assert from 'node:assert/strict';
import { test } from 'node:test';

import type { Requester } from '../src/api';
import { DraModel } from '../src/model';
import { lastLine, RunEnds, runEndText } from '../src/notifications/runends';
import type { Claim, Run } from '../src/wire';
import { claim, run } from './fixtures';

test("a run's end says how it ended, after how long, and a failure's last line", () => {
  const ended = { started: 1000, ended: 1180 };
  assert.equal(
    runEndText(run('train-1', { ...ended, phase: 'Succeeded', exit_code: 0 }), ''),
    'train-1 finished (exit 0) after 3 min'
  );
  assert.equal(
    runEndText(run('train-1', { ...ended, phase: 'Failed', exit_code: 3 }), 'ValueError: nan'),
    'train-1 failed (exit 3) after 3 min: last line ValueError: nan'
  );
  assert.equal(
    runEndText(run('train-1', { ...ended, phase: 'Cancelled', exit_code: -15 }), ''),
    'train-1 was cancelled after 3 min'
  );
  // under a second: no "after 0 s"; killed without an exit code, no output
  assert.equal(
    runEndText(run('quick', { started: 1000, ended: 1000.4, phase: 'Failed' }), ''),
    'quick failed'
  );
  assert.equal(lastLine('epoch 1\nTraceback …\nValueError: nan\n\n'), 'ValueError: nan');
  assert.equal(lastLine('x'.repeat(100), 10), `${'x'.repeat(9)}…`);
});

function setup(answers: { claims: Claim[]; runs: Run[] }) {
  const calls: string[] = [];
  const request = (async (operation: string, parameters?: Record<string, unknown>) => {
    calls.push(`${operation} ${String(parameters?.name ?? '')}`.trim());
    switch (operation) {
      case 'GET /claims':
        return { claims: answers.claims };
      case 'GET /devices':
        return { inventory: 'h200-8x', simulated: true, devices: [] };
      case 'GET /runs':
        return { runs: answers.runs, more: 0 };
      case 'GET /runs/{name}/logs':
        return { name: 'train-1', text: 'epoch 1\nValueError: nan\n', lines: 2, truncated: false };
      case 'POST /runs/{name}/cancel':
        return run('mine', { phase: 'Cancelled', ended: 1100, exit_code: -15 });
      default:
        throw new Error(`not in the fake: ${operation}`);
    }
  }) as Requester;
  const model = new DraModel({ request, now: () => 1000, hidden: () => false });
  const ended: Run[] = [];
  model.runEnded.connect((_, r) => ended.push(r));
  return { model, calls, ended };
}

test('the runs are read while a run of the caller may end; its end is told once', async () => {
  const answers = { claims: [] as Claim[], runs: [] as Run[] };
  const { model, calls, ended } = setup(answers);
  await model.refresh(); // no run's claim, no run seen: the runs are not read
  assert.ok(!calls.includes('GET /runs'));
  answers.claims = [claim('root-3', { run: 'train-1' })];
  answers.runs = [run('train-1', { created: 1001 })];
  await model.refresh(); // a run's claim: read
  assert.equal(ended.length, 0);
  answers.claims = [];
  answers.runs = [run('train-1', { phase: 'Succeeded', ended: 1180, exit_code: 0 })];
  await model.refresh(); // its claim gone, but it was seen running: read
  assert.deepEqual(
    ended.map(r => [r.name, r.phase]),
    [['train-1', 'Succeeded']]
  );
  const reads = calls.filter(c => c === 'GET /runs').length;
  await model.refresh(); // none runs: not read any more, not told again
  assert.equal(calls.filter(c => c === 'GET /runs').length, reads);
  assert.equal(ended.length, 1);
});

test('a short run made since the page loaded is told; older ends and own cancels are not', async () => {
  const answers = { claims: [] as Claim[], runs: [] as Run[] };
  const { model, ended } = setup(answers);
  await model.refresh(); // the page's first refresh, at 1000
  answers.claims = [claim('root-4', { run: 'mine' })];
  answers.runs = [
    run('old', { created: 900, phase: 'Succeeded', ended: 950, exit_code: 0 }),
    run('quick', { created: 1000, phase: 'Failed', ended: 1000, exit_code: 3 }),
    run('mine', { created: 1000 })
  ];
  await model.refresh();
  assert.deepEqual(
    ended.map(r => r.name),
    ['quick']
  );
  await model.cancelRun('mine'); // the user's own cancel: they know
  answers.runs = [run('mine', { phase: 'Cancelled', ended: 1100, exit_code: -15 })];
  await model.refresh();
  assert.deepEqual(
    ended.map(r => r.name),
    ['quick']
  );
});

test("a failure's notification reads its last line; Output opens the run's output", async () => {
  const { model, calls } = setup({ claims: [], runs: [] });
  const said: string[] = [];
  const opened: string[] = [];
  let output = (): void => undefined;
  const ends = new RunEnds(
    model,
    {
      note: (message, kind, out) => {
        said.push(`${kind}: ${message}`);
        output = out;
      },
      warn: (message, out) => {
        said.push(`warning: ${message}`);
        output = out;
      }
    },
    name => opened.push(name)
  );
  await ends.show(run('train-1', { phase: 'Failed', started: 1000, ended: 1120, exit_code: 3 }));
  assert.deepEqual(said, [
    'warning: train-1 failed (exit 3) after 2 min: last line ValueError: nan'
  ]);
  assert.ok(calls.includes('GET /runs/{name}/logs train-1'));
  output();
  assert.deepEqual(opened, ['train-1']);
  await ends.show(run('train-2', { phase: 'Succeeded', started: 1000, ended: 1060, exit_code: 0 }));
  assert.equal(said[1], 'success: train-2 finished (exit 0) after 1 min');
});
