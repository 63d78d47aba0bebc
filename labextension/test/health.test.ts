import assert from 'node:assert/strict';
import { test } from 'node:test';

import type { Requester } from '../src/api';
import { clockTime } from '../src/format';
import { DraModel } from '../src/model';
import {
  DeviceHealth,
  deviceName,
  movedText,
  NOTIFICATION_CHARS,
  unhealthyText
} from '../src/notifications/health';
import { type DeviceUnhealthyEvent, EVENTS } from '../src/tokens';
import { claim, device, GPU, Shown } from './fixtures';

function unhealthy(more: Partial<DeviceUnhealthyEvent> = {}): DeviceUnhealthyEvent {
  return {
    schema_id: EVENTS.deviceUnhealthy,
    claim: 'c1',
    user: 'alice',
    kernel_id: 'k1',
    device: `${GPU}3`,
    key: 'gpu.nvidia.com/xid',
    effect: 'NoExecute',
    reason: 'XID 79: the GPU fell off the bus',
    tainted_by: 'health watcher',
    release_at: 1300,
    message: 'gpu-3 of claim c1 was taken out of service by health watcher: …',
    ...more
  };
}

function setup(answer = true) {
  const calls: string[] = [];
  const taints = { now: '' }; // gpu-3's, as GET /devices says them
  const request = (async (operation: string, parameters?: Record<string, string>) => {
    calls.push(`${operation} ${parameters?.name ?? ''}`.trim());
    switch (operation) {
      case 'POST /claims/{name}/move':
        return { kernel_id: 'k1', env: {}, claims: [claim('c2', { devices: [`${GPU}5`] })] };
      case 'DELETE /claims/{name}':
        return undefined;
      case 'GET /claims':
        return { claims: [] };
      case 'GET /devices':
        return {
          inventory: 'h200-8x',
          simulated: true,
          devices: [device(`${GPU}3`, { state: 'held', taints: taints.now }), device(`${GPU}5`)]
        };
      default:
        throw new Error(`not in the fake: ${operation}`);
    }
  }) as Requester;
  const model = new DraModel({ request, now: () => 1000, hidden: () => false });
  const shown = new Shown();
  const restarted: string[] = [];
  const failed: string[] = [];
  const kernels = {
    label: (id: string) => (id === 'k1' ? 'train.ipynb' : null),
    restarted: async (id: string) => {
      restarted.push(id);
    }
  };
  const asked: (string | null)[] = []; // the notebooks a Move asked about
  const health = new DeviceHealth(
    model,
    shown,
    kernels,
    err => failed.push(String(err)),
    async notebook => {
      asked.push(notebook);
      return answer;
    }
  );
  return { health, shown, calls, restarted, failed, model, taints, asked };
}

async function readDevices(health: DeviceHealth): Promise<void> {
  await health.model.refresh(); // the devices known
}

async function settled(): Promise<void> {
  for (let i = 0; i < 5; i++) {
    await new Promise(resolve => setTimeout(resolve, 0));
  }
}

test('the text says which device, whose, what happened and what it means, first', () => {
  assert.equal(deviceName(`${GPU}3`), 'gpu-3');
  assert.equal(
    unhealthyText(unhealthy(), 'train.ipynb'),
    'gpu-3 of train.ipynb was taken out of service: save your work now, the claim will be ' +
      `released at ${clockTime(1300)} (XID 79: the GPU fell off the bus)`
  );
  assert.equal(
    unhealthyText(unhealthy({ effect: 'NoSchedule', release_at: null, reason: '' }), null),
    'gpu-3 (claim c1) was taken out of service: work on it may fail (gpu.nvidia.com/xid)'
  );
  assert.equal(
    unhealthyText(unhealthy({ release_at: null }), null),
    'gpu-3 (claim c1) was taken out of service: save your work now, its pods are evicted ' +
      '(XID 79: the GPU fell off the bus)'
  );
  const long = unhealthyText(unhealthy(), 'a-long-notebook-name-for-training.ipynb');
  assert.ok(long.length <= NOTIFICATION_CHARS); // JupyterLab cuts there: we cut first
  assert.match(long, /^gpu-3 of a-long-notebook-name-for-training\.ipynb was taken out .*…$/);
  assert.ok(long.includes(`released at ${clockTime(1300)}`)); // the deadline is never cut
});

test('Move makes the claim again, restarts the kernel, says where, and withdraws', async () => {
  const { health, shown, calls, restarted, failed, model } = setup();
  await model.refresh(); // the devices known
  health.show(unhealthy());
  assert.deepEqual(health.claims, ['c1']);
  const [warning] = [...shown.open.values()];
  assert.deepEqual(
    warning.actions.map(a => [a.label, a.kind]),
    [
      ['Move', 'accent'],
      ['Release', 'warn']
    ]
  );
  assert.match(warning.actions[0].caption, /equivalent device.*restart the kernel/);
  warning.actions[0].callback();
  await settled();
  assert.ok(calls.includes('POST /claims/{name}/move c1'));
  assert.deepEqual(restarted, ['k1']);
  assert.deepEqual(failed, []);
  assert.equal(shown.open.size, 0);
  assert.deepEqual(shown.notes, ['success: Kernel restarted on 1× H200; its variables are gone.']);
  assert.equal(
    movedText({ kernel_id: 'k1', env: {}, claims: [] }, model.deviceMap),
    'Kernel restarted on an equivalent device; its variables are gone.'
  );
});

test('Move asks first (the variables go): Cancel moves nothing and keeps the notification', async () => {
  const { health, shown, calls, restarted, asked } = setup(false);
  await readDevices(health);
  health.show(unhealthy());
  const [warning] = [...shown.open.values()];
  warning.actions[0].callback();
  await settled();
  assert.deepEqual(asked, ['train.ipynb']);
  assert.ok(!calls.some(c => c.startsWith('POST /claims/{name}/move')));
  assert.deepEqual(restarted, []);
  assert.deepEqual(health.claims, ['c1']); // still offered
  assert.equal(shown.open.size, 1);
});

test('Release gives the claim back; one notification per claim; none to Move without a kernel', async () => {
  const { health, shown, calls } = setup();
  health.show(unhealthy());
  health.show(unhealthy({ device: `${GPU}4` })); // a second device of the claim: replaces
  assert.equal(shown.open.size, 1);
  const [warning] = [...shown.open.values()];
  warning.actions[1].callback();
  await settled();
  assert.ok(calls.includes('DELETE /claims/{name} c1'));
  assert.equal(shown.open.size, 0);
  health.show(unhealthy({ claim: 'rest', kernel_id: null }));
  const [only] = [...shown.open.values()];
  assert.deepEqual(
    only.actions.map(a => a.label),
    ['Release']
  );
});

test('withdrawn once the taint is gone from its device (untaint), not before', async () => {
  const { health, shown, model, taints, calls } = setup();
  taints.now = 'gpu.nvidia.com/xid=79:NoExecute, other.example.com/x:NoSchedule';
  health.show(unhealthy());
  await model.refresh(); // the devices read after it showed: the taint is there
  assert.equal(shown.open.size, 1);
  taints.now = 'other.example.com/x:NoSchedule'; // untaint of its key; another stays
  await model.refresh(); // while it shows, each refresh reads the devices
  assert.equal(shown.open.size, 0);
  assert.deepEqual(health.claims, []);
  assert.equal(calls.filter(c => c === 'GET /devices').length, 2);
  await model.refresh(); // none shows: the devices are not read for it any more
  assert.equal(calls.filter(c => c === 'GET /devices').length, 2);
});

test("the model passes on the events of the caller's claims only", () => {
  const { model } = setup();
  const seen: string[] = [];
  model.deviceUnhealthy.connect((_, event) => seen.push(event.claim));
  model.handleEvent({ ...unhealthy({ claim: 'theirs', user: 'bob', kernel_id: 'k9' }) });
  assert.deepEqual(seen, []);
});
