import assert from 'node:assert/strict';
import { test } from 'node:test';

import type { Requester } from '../src/api';
import { clockTime } from '../src/format';
import { DraModel } from '../src/model';
import { ReclaimWarnings, reclaimText } from '../src/notifications/reclaims';
import { EVENTS, type ReclaimWarningEvent } from '../src/tokens';
import { GPU, Shown } from './fixtures';

function warning(more: Partial<ReclaimWarningEvent> = {}): ReclaimWarningEvent {
  return {
    schema_id: EVENTS.reclaimWarning,
    claim: 'c1',
    user: 'alice',
    kernel_id: 'k1',
    devices: [`${GPU}3`],
    waiter: 'bob',
    what: '1× NVIDIA H200',
    deadline: 1300,
    seconds_left: 300,
    keeps_left: 1,
    message: 'bob is waiting for 1× NVIDIA H200; your c1, idle for 3 h, will be released in 5:00',
    ...more
  };
}

function setup() {
  const calls: string[] = [];
  const request = (async (operation: string, parameters?: Record<string, string>) => {
    calls.push(`${operation} ${parameters?.name ?? ''}`.trim());
    switch (operation) {
      case 'POST /claims/{name}/keep':
        return { name: 'c1' };
      case 'DELETE /claims/{name}':
        return undefined;
      case 'GET /claims':
        return { claims: [] };
      default:
        throw new Error(`not in the fake: ${operation}`);
    }
  }) as Requester;
  const model = new DraModel({ request, now: () => 1000, hidden: () => false });
  const shown = new Shown();
  const failed: string[] = [];
  const label = (id: string) => (id === 'k1' ? 'train.ipynb' : null);
  const reclaims = new ReclaimWarnings(model, shown, label, err => failed.push(String(err)));
  return { reclaims, shown, calls, failed, model };
}

async function settled(): Promise<void> {
  for (let i = 0; i < 5; i++) {
    await new Promise(resolve => setTimeout(resolve, 0));
  }
}

test('the text says who waits for what, whose claim goes at what clock time, the Keeps', () => {
  const { model } = setup();
  const at = clockTime(1300);
  assert.equal(
    reclaimText(warning(), 'train.ipynb', model.deviceMap),
    `bob waits for 1× NVIDIA H200: your idle 1 device of train.ipynb goes at ${at} (Keep once more).`
  );
  assert.match(
    reclaimText(warning({ keeps_left: 0, kernel_id: null }), null, model.deviceMap),
    /\(claim c1\) goes at .* \(no Keep left\)\.$/
  );
});

test('Keep while Keeps are left, Release always; one warning per claim, withdrawn on use', async () => {
  const { reclaims, shown, calls, failed } = setup();
  reclaims.show(warning());
  reclaims.show(warning()); // again: still one
  assert.equal(shown.open.size, 1);
  const [first] = [...shown.open.values()];
  assert.deepEqual(
    first.actions.map(a => a.label),
    ['Keep', 'Release']
  );
  first.actions[0].callback();
  await settled();
  assert.ok(calls.includes('POST /claims/{name}/keep c1'));
  assert.equal(shown.open.size, 0);
  reclaims.show(warning({ keeps_left: 0 }));
  const [second] = [...shown.open.values()];
  assert.deepEqual(
    second.actions.map(a => a.label),
    ['Release']
  );
  second.actions[0].callback();
  await settled();
  assert.ok(calls.includes('DELETE /claims/{name} c1'));
  assert.deepEqual(failed, []);
});

test("the model passes on the warnings of the caller's claims only", () => {
  const { model } = setup();
  const seen: string[] = [];
  model.reclaimWarning.connect((_, event) => seen.push(event.claim));
  model.handleEvent({ ...warning({ claim: 'theirs', user: 'carol', kernel_id: 'k9' }) });
  assert.deepEqual(seen, []);
});
