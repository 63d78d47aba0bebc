import assert from 'node:assert/strict';
import { test } from 'node:test';

import { DraRequestError, type Requester } from '../src/api';
import { DraModel } from '../src/model';
import {
  cancelQuestion,
  LOG_LINES,
  logsCaption,
  logsText,
  moreRunsText,
  runAgeText,
  runDevicesText,
  runPhaseText,
  runRow,
  runTitle
} from '../src/runs';
import type { Device, Run, RunLogs } from '../src/wire';
import { device, GPU, run } from './fixtures';

const DEVICES = new Map<string, Device>([
  [`${GPU}0`, device(`${GPU}0`)],
  [`${GPU}1`, device(`${GPU}1`)]
]);

test('a run says its phase, a failure with its exit code', () => {
  assert.equal(runPhaseText(run('r')), 'Running');
  assert.equal(runPhaseText(run('r', { phase: 'Failed', exit_code: 2 })), 'Failed (exit code 2)');
  assert.equal(
    runPhaseText(run('r', { phase: 'Failed', exit_code: -15 })),
    'Failed (exit code -15)'
  );
  assert.equal(runPhaseText(run('r', { phase: 'Failed' })), 'Failed'); // killed without one
  assert.equal(runPhaseText(run('r', { phase: 'Succeeded', exit_code: 0 })), 'Succeeded');
});

test('its devices read as the claims do, with those the answer left out counted', () => {
  assert.equal(runDevicesText(run('r'), DEVICES), '1× H200');
  const two = run('r', { devices: [`${GPU}0`, `${GPU}1`], device_count: 2 });
  assert.equal(runDevicesText(two, DEVICES), '2× H200');
  const many = run('r', { devices: [`${GPU}0`], device_count: 65 });
  assert.equal(runDevicesText(many, DEVICES), '1× H200 + 64 more');
  const cluster = run('r', { devices: ['gpu.example.com/node-9/gpu-0'] }); // not in the inventory
  assert.equal(runDevicesText(cluster, DEVICES), '1 device');
  const waiting = run('r', { phase: 'Pending', devices: [], device_count: 0, started: null });
  assert.equal(runDevicesText(waiting, DEVICES), 'no devices yet');
});

test('its age: waiting, running, or when it ended and after how long', () => {
  assert.equal(runAgeText(run('r', { started: null }), 1030), 'waiting 30 s');
  assert.equal(runAgeText(run('r'), 1310), 'running 5 min');
  const ended = run('r', { phase: 'Succeeded', ended: 1190, exit_code: 0 });
  assert.equal(runAgeText(ended, 1310), 'ended 2 min ago after 3 min');
  const never = run('r', { phase: 'Cancelled', started: null, ended: 1010 });
  assert.equal(runAgeText(never, 1020), 'ended 10 s ago');
});

test('its row: the tooltip has the command, where and what runs it, whose', () => {
  const job = run('train', {
    where: 'namespace team-a',
    launcher: 'Job',
    processes: 2,
    command: 'python train.py'
  });
  assert.equal(runTitle(job), 'python train.py\nnamespace team-a (Job), 2 processes\nuser alice');
  const row = runRow(job, 1310, DEVICES);
  assert.deepEqual(
    { ...row, title: '' },
    {
      name: 'train',
      phase: 'Running',
      devices: '1× H200',
      age: 'running 5 min',
      message: '',
      title: '',
      cancellable: true,
      ended: false
    }
  );
  const done = runRow(
    run('r', { phase: 'Cancelled', ended: 1200, cancellable: false }),
    1300,
    DEVICES
  );
  assert.equal(done.ended, true);
  assert.equal(done.cancellable, false);
});

test('the question before a cancel, the output and its caption, the runs left out', () => {
  assert.equal(
    cancelQuestion('train'),
    'Cancel run train? Its processes are stopped and its devices released.'
  );
  const logs = (more: Partial<RunLogs>): RunLogs => ({
    name: 'r',
    text: 'a\nb\n',
    lines: 2,
    truncated: false,
    ...more
  });
  assert.equal(logsText(logs({})), 'a\nb\n');
  assert.equal(logsText(logs({ text: '', lines: 0 })), '(no output yet)');
  assert.equal(logsCaption(logs({})), 'all of it, 2 lines');
  assert.equal(logsCaption(logs({ lines: 20, truncated: true })), 'the last 20 lines');
  assert.equal(moreRunsText(0), '');
  assert.equal(moreRunsText(1), '1 older run not shown; dra.runs() lists all');
  assert.equal(moreRunsText(7), '7 older runs not shown; dra.runs() lists all');
});

/** The REST API of runs in memory, and the calls it got. */
function server(runs: Run[]) {
  const calls: string[] = [];
  let failing: DraRequestError | null = null;
  const request = (async (operation: string, parameters?: Record<string, string | number>) => {
    calls.push(`${operation} ${JSON.stringify(parameters ?? {})}`);
    switch (operation) {
      case 'GET /claims':
        return { claims: [] };
      case 'GET /devices':
        return {
          inventory: 'h200-8x',
          simulated: true,
          devices: [...DEVICES.values()],
          waiting: []
        };
      case 'GET /metrics':
      case 'GET /usage':
        throw new DraRequestError('none here', 400);
      case 'GET /runs':
        if (failing !== null) {
          throw failing;
        }
        return { runs: [...runs], more: 0 };
      case 'POST /runs/{name}/cancel': {
        const i = runs.findIndex(r => r.name === parameters?.name);
        if (i < 0) {
          throw new DraRequestError(`no run ${parameters?.name} of yours`, 404);
        }
        runs[i] = { ...runs[i], phase: 'Cancelled', ended: 2000, cancellable: false };
        return runs[i];
      }
      case 'GET /runs/{name}/logs':
        return { name: parameters?.name, text: 'ready\n', lines: 1, truncated: false };
      default:
        throw new Error(`not in the fake: ${operation}`);
    }
  }) as Requester;
  return {
    calls,
    request,
    fail(err: DraRequestError | null) {
      failing = err;
    }
  };
}

test('the model reads the runs only while the panel is shown, and says why it could not', async () => {
  const api = server([run('train')]);
  const m = new DraModel({ request: api.request, now: () => 1000, hidden: () => false });
  const runs = () => m.runs; // read anew at each call (no narrowing)
  await m.refresh();
  assert.equal(runs(), null); // hidden panel: not read
  assert.ok(!api.calls.some(c => c.startsWith('GET /runs')));
  m.devicesWanted = true;
  await m.refresh();
  assert.deepEqual(
    runs()?.runs.map(r => r.name),
    ['train']
  );
  api.fail(new DraRequestError('dra.runs: listing jobs.batch is forbidden', 503));
  await m.refresh();
  assert.equal(runs(), null);
  assert.equal(m.runsError?.message, 'dra.runs: listing jobs.batch is forbidden');
  assert.equal(m.error, null); // the claims and devices still show
  api.fail(null);
  await m.refresh();
  assert.equal(m.runsError, null);
  m.dispose();
});

test('a cancel shows the run ended at once; the logs ask for the last lines', async () => {
  const api = server([run('train'), run('sweep')]);
  const m = new DraModel({ request: api.request, now: () => 1000, hidden: () => false });
  m.devicesWanted = true;
  await m.refresh();
  let changes = 0;
  m.changed.connect(() => (changes += 1));
  const cancelled = await m.cancelRun('train');
  assert.equal(cancelled.phase, 'Cancelled');
  assert.deepEqual(
    m.runs?.runs.map(r => [r.name, r.phase]),
    [
      ['train', 'Cancelled'],
      ['sweep', 'Running']
    ]
  );
  assert.ok(changes > 0);
  await assert.rejects(m.cancelRun('nope'), /no run nope of yours/);
  const logs = await m.runLogs('sweep');
  assert.equal(logs.text, 'ready\n');
  assert.ok(api.calls.includes(`GET /runs/{name}/logs {"name":"sweep","tail":${LOG_LINES}}`));
  m.dispose();
});
