import assert from 'node:assert/strict';
import { test } from 'node:test';

import { DraRequestError, type Requester } from '../src/api';
import { SPARK_SAMPLES } from '../src/metrics';
import { DraModel, PUSHED_POLL_S, type Release } from '../src/model';
import { EVENTS, type IdleWarningEvent } from '../src/tokens';
import type { Claim, Joined, Metrics } from '../src/wire';
import { claim, device, GPU } from './fixtures';

/** Wait until ``check`` holds, up to ``ms``. */
async function until(check: () => boolean, ms = 2000): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) {
      throw new Error(`not within ${ms} ms`);
    }
    await new Promise(resolve => setTimeout(resolve, 5));
  }
}

/** A server of the REST API in memory: its claims and devices, and the calls it got. */
class FakeServer {
  claims: Claim[] = [];
  devices = [device(`${GPU}0`), device(`${GPU}1`)];
  calls: string[] = [];
  down: DraRequestError | null = null;
  pushed = false; // GET /claims says the server pushes its changes
  joined: Joined[] = []; // the claims its kernels joined (not the caller's)
  gate: Promise<void> | null = null; // GET claims waits for it (an answer on its way)
  metrics: Metrics | DraRequestError = {
    source: 'simulated',
    simulated: true,
    problem: '',
    interval: 2,
    length: 900,
    idle_timeout: 0,
    idle_warning: 0,
    devices: [
      {
        device: `${GPU}0`,
        current: null,
        history: { time: [1, 3], memory_used: [0, 0], utilization: [5, 50], temperature: [35, 40] }
      }
    ]
  };
  history: unknown[] = []; // the history parameter of each GET metrics
  // claims released elsewhere, as GET /claims/{name} says
  ended = new Map<string, { reason: string; time: number; message: string }>();

  request: Requester = (async (operation: string, parameters?: Record<string, string>) => {
    this.calls.push(operation + (parameters?.name ? ` ${parameters.name}` : ''));
    if (this.down !== null) {
      throw this.down;
    }
    switch (operation) {
      case 'GET /claims': {
        const answer = { claims: [...this.claims], joined: [...this.joined], pushed: this.pushed };
        if (this.gate !== null) {
          await this.gate;
        }
        return answer;
      }
      case 'GET /metrics':
        this.history.push(parameters?.history);
        if (this.metrics instanceof DraRequestError) {
          throw this.metrics;
        }
        return this.metrics;
      case 'GET /devices':
        return { inventory: 'h200-8x', simulated: true, devices: this.devices };
      case 'GET /claims/{name}': {
        const gone = this.ended.get(parameters?.name ?? '');
        if (gone !== undefined) {
          return { ...claim(parameters?.name ?? ''), released: gone };
        }
        throw new DraRequestError(`claim ${parameters?.name}: not found`, 404);
      }
      case 'DELETE /claims/{name}':
        this.claims = this.claims.filter(c => c.name !== parameters?.name);
        return null;
      case 'POST /claims/{name}/keep': {
        const kept = this.claims.find(c => c.name === parameters?.name);
        if (kept === undefined) {
          throw new DraRequestError(`claim ${parameters?.name}: not found`, 404);
        }
        kept.idle_deadline = 9999;
        return kept;
      }
      default:
        throw new Error(`not in the fake: ${operation}`);
    }
  }) as Requester;
}

function model(server: FakeServer): DraModel {
  return new DraModel({ request: server.request, now: () => 1000, hidden: () => false });
}

test('a refresh reads the claims, and the devices the first time', async () => {
  const server = new FakeServer();
  server.claims = [claim('a', { devices: [`${GPU}0`] }), claim('b', { kernel_id: 'k2' })];
  const m = model(server);
  let changes = 0;
  m.changed.connect(() => (changes += 1));
  await m.refresh();
  assert.deepEqual(server.calls, ['GET /claims', 'GET /devices']);
  assert.equal(changes, 1);
  assert.ok(m.connected);
  assert.deepEqual(
    m.kernelClaims('k1').map(c => c.name),
    ['a']
  );
  assert.equal(m.deviceMap.get(`${GPU}0`)?.model, 'NVIDIA H200');
  await m.refresh(); // a claim holds devices: each refresh reads who waits for them
  assert.deepEqual(server.calls.slice(2), ['GET /claims', 'GET /devices']);
  server.claims = [claim('b', { kernel_id: 'k2' })];
  await m.refresh(); // none held: the devices again only when wanted or a claim names an unknown one
  await m.refresh();
  const reads = () => server.calls.filter(c => !c.startsWith('GET /claims/'));
  assert.deepEqual(reads().slice(4), ['GET /claims', 'GET /claims']);
  server.claims.push(claim('c', { devices: [`${GPU}7`] }));
  await m.refresh();
  assert.deepEqual(reads().slice(6), ['GET /claims', 'GET /devices']);
});

test('a failed refresh keeps the error (and the last claims) and throws it', async () => {
  const server = new FakeServer();
  server.claims = [claim('a')];
  const m = model(server);
  await m.refresh();
  server.down = new DraRequestError('ledger: cannot open', 503);
  await assert.rejects(m.refresh(), /ledger: cannot open/);
  assert.equal(m.error?.status, 503);
  assert.equal(m.claims.length, 1);
  server.down = null;
  await m.refresh();
  assert.equal(m.error, null);
});

test("a release event of the caller's claim is announced with the claim and removes it", async () => {
  const server = new FakeServer();
  server.claims = [claim('a', { devices: [`${GPU}0`] })];
  const m = model(server);
  await m.refresh();
  const releases: Release[] = [];
  m.released.connect((_, r) => releases.push(r));
  server.claims = [];
  const event = {
    schema_id: EVENTS.released,
    claim: 'a',
    user: 'alice',
    kernel_id: 'k1',
    devices: [`${GPU}0`],
    reason: 'idle'
  };
  m.handleEvent(event);
  assert.equal(releases.length, 1);
  assert.equal(releases[0].event.reason, 'idle');
  assert.equal(releases[0].claim?.name, 'a');
  assert.equal(m.claims.length, 0);
  // a claim of the same user not seen yet (made and released between two refreshes)
  m.handleEvent({ ...event, claim: 'quick', kernel_id: null });
  assert.deepEqual(
    releases.map(r => [r.event.claim, r.claim?.name]),
    [
      ['a', 'a'],
      ['quick', undefined]
    ]
  );
  // someone else's claim, of a kernel of another server: not announced
  m.handleEvent({ ...event, claim: 'other', user: 'bob', kernel_id: 'elsewhere' });
  // another schema: ignored
  m.handleEvent({
    schema_id: 'https://events.jupyter.org/jupyter_server/kernel_actions/v1',
    claim: 'a'
  });
  assert.equal(releases.length, 2);
});

test('a server that pushes its changes is read on its events and polled only slowly', async () => {
  const server = new FakeServer();
  const m = model(server);
  await m.refresh();
  assert.equal(m.pollInterval, 5); // no push: the refresh interval
  server.pushed = true;
  await m.refresh();
  assert.ok(m.pushed);
  assert.equal(m.pollInterval, PUSHED_POLL_S); // left for a lost connection
  m.refreshInterval = 120;
  assert.equal(m.pollInterval, 120);
  server.calls = [];
  server.claims = [claim('made-by-a-kernel', { devices: [`${GPU}1`] })];
  m.handleEvent({ schema_id: EVENTS.changed, topics: ['claims'] });
  await until(() => m.claims.length === 1);
  assert.deepEqual(server.calls, ['GET /claims']);
  server.calls = [];
  m.handleEvent({ schema_id: EVENTS.changed, topics: ['devices', 'runs'] });
  await until(() => server.calls.length === 2);
  assert.deepEqual(server.calls, ['GET /claims', 'GET /devices']); // who holds what: read
  server.pushed = false; // a server without it again (restarted on another backend)
  await m.refresh();
  assert.equal(m.pollInterval, 120);
});

test("a claim made by anyone makes the model refresh; only the caller's are announced", async () => {
  const server = new FakeServer();
  const m = model(server);
  await m.refresh();
  server.calls = [];
  server.claims = [claim('rest', { kernel_id: null })];
  const allocated = {
    schema_id: EVENTS.allocated,
    claim: 'rest',
    user: 'alice',
    kernel_id: null,
    devices: [],
    source: 'rest'
  };
  m.handleEvent(allocated);
  await new Promise(resolve => setTimeout(resolve, 0));
  assert.deepEqual(server.calls, ['GET /claims']);
  assert.deepEqual(
    m.claims.map(c => c.name),
    ['rest']
  );
  const warnings: unknown[] = [];
  m.idleWarning.connect((_, w) => warnings.push(w));
  m.handleEvent({
    ...allocated,
    schema_id: EVENTS.idleWarning,
    claim: 'x',
    user: 'bob',
    deadline: 1,
    seconds_left: 1
  });
  assert.equal(warnings.length, 0);
});

test("an idle warning of one of this server's kernels is announced; keep resets its deadline", async () => {
  const server = new FakeServer();
  server.claims = [claim('a', { idle_deadline: 1100 })];
  const m = model(server);
  m.ownKernel = id => id === 'k9';
  const warnings: IdleWarningEvent[] = [];
  m.idleWarning.connect((_, w) => warnings.push(w));
  const warning = {
    schema_id: EVENTS.idleWarning,
    claim: 'new',
    user: 'alice',
    kernel_id: 'k9',
    devices: [],
    deadline: 1100,
    seconds_left: 100
  };
  m.handleEvent(warning); // a claim not seen yet, of a kernel of this server
  m.handleEvent({ ...warning, kernel_id: 'k0' }); // neither known nor ours
  assert.deepEqual(
    warnings.map(w => w.claim),
    ['new']
  );
  await m.refresh();
  const kept = await m.keep('a');
  assert.equal(kept.idle_deadline, 9999);
  assert.equal(m.claims[0].idle_deadline, 9999);
  await assert.rejects(
    m.keep('gone'),
    (e: unknown) => e instanceof DraRequestError && e.status === 404
  );
});

test('release all releases every claim of the caller', async () => {
  const server = new FakeServer();
  server.claims = [claim('a'), claim('b', { kernel_id: null })];
  const m = model(server);
  assert.deepEqual(await m.releaseAll(), ['a', 'b']);
  assert.equal(server.claims.length, 0);
  assert.equal(m.claims.length, 0);
  assert.ok(server.calls.includes('DELETE /claims/{name} b'));
});

test('a change announced while a refresh is on its way is read by one more refresh', async () => {
  const server = new FakeServer();
  // the poll's own interval is far away: only the refresh after the event can show it
  const m = new DraModel({ request: server.request, refreshInterval: 600, hidden: () => false });
  m.start();
  await until(() => m.connected);
  let open = () => {};
  server.gate = new Promise(resolve => (open = resolve));
  const asked = server.calls.length;
  const first = m.refreshSoon(); // asked before the claim exists, answered after
  await until(() => server.calls.length > asked); // on its way
  server.claims = [claim('new', { kernel_id: null })];
  m.handleEvent({
    schema_id: EVENTS.allocated,
    claim: 'new',
    user: 'alice',
    kernel_id: null,
    devices: [],
    source: 'rest'
  });
  server.gate = null;
  open();
  await first;
  await until(() => m.claims.some(c => c.name === 'new'));
  m.dispose(); // (a disposed Poll leaves its timer to run out: node --test-force-exit)
});

test("the caller's own change shows by the time refreshSoon resolves, even with a read on its way", async () => {
  // a kernel restarted with its devices: the words "restarted" come after refreshSoon, and
  // the claim's card must say so with them (no restart offered), not at the next read
  const server = new FakeServer();
  server.claims = [claim('held', { in_kernel_env: false })];
  const m = new DraModel({ request: server.request, refreshInterval: 600, hidden: () => false });
  m.start();
  await until(() => m.connected);
  let open = () => {};
  server.gate = new Promise(resolve => (open = resolve));
  const asked = server.calls.length;
  void m.refreshSoon(); // a read of the poll or an event, answered with the old state
  await until(() => server.calls.length > asked);
  server.claims = [claim('held', { in_kernel_env: true })]; // the caller's restart
  const mine = m.refreshSoon();
  server.gate = null;
  open();
  await mine;
  assert.equal(m.claims[0].in_kernel_env, true);
  // and without a read on its way, the same
  server.claims = [claim('held', { in_kernel_env: false })];
  await m.refreshSoon();
  assert.equal(m.claims[0].in_kernel_env, false);
  m.dispose();
});

test('the metrics are read with the devices only while the panel wants them', async () => {
  const server = new FakeServer();
  const m = model(server);
  await m.refresh();
  assert.ok(!server.calls.includes('GET /metrics')); // the panel is not shown
  assert.equal(m.metrics, null);
  m.devicesWanted = true; // shown: a refresh now, and the metrics with each
  await until(() => server.calls.includes('GET /metrics'));
  await until(() => m.metricsMap.size === 1);
  assert.deepEqual(m.metricsMap.get(`${GPU}0`)?.history.utilization, [5, 50]);
  assert.deepEqual(server.history, [SPARK_SAMPLES]);
  m.devicesWanted = false; // hidden: no more metrics
  server.calls = [];
  await m.refresh();
  assert.deepEqual(server.calls, ['GET /claims']);
});

test('metrics that fail leave the panel without them, not in error', async () => {
  const server = new FakeServer();
  server.claims = [claim('a')];
  server.metrics = new DraRequestError('no metrics here', 500);
  const m = model(server);
  m.devicesWanted = true;
  await m.refresh();
  assert.equal(m.error, null);
  assert.equal(m.metrics, null);
  assert.equal(m.metricsMap.size, 0);
  assert.deepEqual(
    m.claims.map(c => c.name),
    ['a']
  );
  assert.equal(m.devices?.devices.length, 2);
});

test('a server without a metrics source (none) gives no device metrics', async () => {
  const server = new FakeServer();
  server.metrics = { ...(server.metrics as Metrics), source: 'none', devices: [] };
  const m = model(server);
  m.devicesWanted = true;
  await m.refresh();
  assert.equal(m.metrics?.source, 'none');
  assert.equal(m.metricsMap.size, 0);
});

test('a claim released elsewhere (no event) is announced once, with the reason the server remembers', async () => {
  const server = new FakeServer();
  server.claims = [claim('cli', { devices: [`${GPU}0`] }), claim('kept')];
  const m = model(server);
  await m.refresh();
  const releases: Release[] = [];
  m.released.connect((_, r) => releases.push(r));
  // `dra-jupyter release cli` in a terminal: the ledger changed, this server emitted nothing
  server.claims = [claim('kept')];
  server.ended.set('cli', { reason: 'user', time: 1000, message: '' });
  await m.refresh();
  await until(() => releases.length === 1);
  assert.equal(releases[0].event.claim, 'cli');
  assert.equal(releases[0].event.reason, 'user');
  assert.deepEqual(releases[0].event.devices, [`${GPU}0`]);
  assert.equal(releases[0].claim?.name, 'cli');
  // its event coming late (or another refresh) announces it no more
  m.handleEvent({ ...releases[0].event, schema_id: EVENTS.released });
  await m.refresh();
  // a release announced by its event first is not found again by a refresh
  m.handleEvent({ ...releases[0].event, schema_id: EVENTS.released, claim: 'kept' });
  server.claims = [];
  await m.refresh();
  await new Promise(resolve => setTimeout(resolve, 20));
  assert.deepEqual(
    releases.map(r => r.event.claim),
    ['cli', 'kept']
  );
});

test('a claim gone that the server no longer knows is announced as released elsewhere', async () => {
  const server = new FakeServer();
  server.claims = [claim('old')];
  const m = model(server);
  await m.refresh();
  const releases: Release[] = [];
  m.released.connect((_, r) => releases.push(r));
  server.claims = [];
  await m.refresh();
  await until(() => releases.length === 1);
  assert.equal(releases[0].event.reason, 'elsewhere');
});

test("a process of the server's user on a GPU no claim holds is announced, once per event", () => {
  const m = model(new FakeServer());
  const said: string[] = [];
  m.gpuProcess.connect((_, e) => said.push(e.message));
  m.handleEvent({
    schema_id: EVENTS.gpuProcess,
    user: 'alice',
    pid: 4242,
    device: `${GPU}1`,
    command: 'python train.py',
    memory_used: 2 ** 30,
    since: 1000,
    action: 'report',
    deadline: null,
    message: 'Your process 4242 (python, 1.0 GiB) uses gpu-1, which none of your claims holds'
  });
  assert.deepEqual(said, [
    'Your process 4242 (python, 1.0 GiB) uses gpu-1, which none of your claims holds'
  ]);
  assert.deepEqual(m.claims, []); // nothing of the claims changed
});

test("the claims the server's kernels joined are the model's, apart from the caller's", async () => {
  const server = new FakeServer();
  const m = model(server);
  await m.refresh();
  assert.deepEqual(m.joined, []);
  const joined = {
    kernel_id: 'k-1',
    claim: 'team-gpu',
    user: 'bob',
    devices: [`${GPU}0`],
    used_by: ['kernel-k-1-x']
  };
  server.joined = [joined];
  await m.refresh();
  assert.deepEqual(m.joined, [joined]);
  assert.deepEqual(m.claims, []); // bob's claim is not the caller's
});
