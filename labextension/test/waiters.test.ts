import assert from 'node:assert/strict';
import { test } from 'node:test';

import type { Requester } from '../src/api';
import { clockTime } from '../src/format';
import { DraModel } from '../src/model';
import { WaiterNotices, waiterText, waitWords } from '../src/notifications/waiters';
import type { Claim, Waiter } from '../src/wire';
import { claim, device, GPU, Shown } from './fixtures';

function waiter(more: Partial<Waiter> = {}): Waiter {
  return {
    user: 'bob',
    kernel_id: 'kb',
    what: 'gpu=4',
    since: 1200,
    position: 1,
    why: 'first in line for this request: it waits for devices to be released',
    holders: ['c1'],
    ...more
  };
}

function setup() {
  const state: { claims: Claim[]; waiting: Waiter[] } = {
    claims: [claim('c1', { devices: [0, 1, 2, 3].map(i => `${GPU}${i}`) })],
    waiting: []
  };
  const calls: string[] = [];
  const request = (async (operation: string) => {
    calls.push(operation);
    switch (operation) {
      case 'GET /claims':
        return { claims: state.claims, joined: [], pushed: false };
      case 'GET /devices':
        return {
          inventory: '8x H200',
          simulated: true,
          devices: [0, 1, 2, 3, 4, 5, 6, 7].map(i => device(`${GPU}${i}`)),
          waiting: state.waiting
        };
      default:
        throw new Error(`not in the fake: ${operation}`);
    }
  }) as Requester;
  const model = new DraModel({ request, now: () => 1300, hidden: () => false });
  const shown = new Shown();
  const label = (id: string) => (id === 'k1' ? 'train.ipynb' : null);
  const notices = new WaiterNotices(model, shown, label);
  return { model, shown, state, calls, notices };
}

const opened = (shown: Shown) => [...shown.open.values()].map(n => n.message);

test('a request in words: 4 GPUs, 1 GPU, with its other keywords', () => {
  assert.equal(waitWords('gpu=4'), '4 GPUs');
  assert.equal(waitWords('gpu=1'), '1 GPU');
  assert.equal(waitWords("gpu=2, memory='80Gi'"), "2 GPUs (memory='80Gi')");
  assert.equal(waitWords('8 gpu.nvidia.com'), '8 GPUs');
  assert.equal(waitWords('1 mig.nvidia.com + selectors'), '1 MIG device (selectors)');
  assert.equal(waitWords("gpu='all'"), "gpu='all'");
});

test('the text says who waits, for what, since when, and which notebooks hold it', async () => {
  const { model } = setup();
  await model.refresh();
  const held = [
    claim('c1', { devices: [0, 1, 2, 3].map(i => `${GPU}${i}`) }),
    claim('c2', { kernel_id: null, devices: [`${GPU}4`] })
  ];
  const label = (id: string) => (id === 'k1' ? 'train.ipynb' : null);
  assert.equal(
    waiterText(waiter(), held, label, model.deviceMap),
    `bob waits for 4 GPUs since ${clockTime(1200)}: your train.ipynb (4× H200) and claim c2 ` +
      '(1× H200) hold what it needs.'
  );
});

test('one notification per waiting request, not repeated on each read', async () => {
  const { model, shown, state } = setup();
  state.waiting = [waiter()];
  for (let i = 0; i < 3; i++) {
    await model.refresh();
  }
  assert.equal(shown.count, 1);
  assert.deepEqual(opened(shown), [
    `bob waits for 4 GPUs since ${clockTime(1200)}: your train.ipynb (4× H200) holds what it needs.`
  ]);
  state.waiting = [waiter(), waiter({ user: 'carol', kernel_id: null, since: 1250 })];
  await model.refresh();
  await model.refresh();
  assert.equal(shown.count, 2); // carol's request is another one
});

test("neither the user's own request nor one that waits on others' claims", async () => {
  const { model, shown, state } = setup();
  state.waiting = [
    waiter({ user: 'alice', kernel_id: 'k9' }), // the user's own (a user of its claims)
    waiter({ holders: ['someone-elses'] })
  ];
  await model.refresh();
  await model.refresh();
  assert.equal(shown.count, 0);
});

test('withdrawn once the request leaves the line, or the claims it waited on are gone', async () => {
  const { model, shown, state } = setup();
  state.waiting = [waiter()];
  await model.refresh();
  assert.equal(shown.open.size, 1);
  state.waiting = []; // served, given up or cancelled
  await model.refresh();
  assert.equal(shown.open.size, 0);
  state.waiting = [waiter({ since: 1290 })]; // a new request: a new notification
  await model.refresh();
  assert.equal(shown.count, 2);
  state.claims = []; // the user released what it waited on
  await model.refresh();
  assert.equal(shown.open.size, 0);
});

test('while the user holds devices each refresh reads who waits (GET /devices)', async () => {
  const { model, state, calls } = setup();
  for (let i = 0; i < 3; i++) {
    await model.refresh();
  }
  assert.equal(calls.filter(c => c === 'GET /devices').length, 3);
  state.claims = [];
  calls.length = 0;
  await model.refresh();
  await model.refresh();
  assert.ok(!calls.includes('GET /devices')); // nothing held: the line is not read
});
