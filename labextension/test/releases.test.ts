import assert from 'node:assert/strict';
import { test } from 'node:test';

import { DraRequestError, type Requester } from '../src/api';
import { DraModel } from '../src/model';
import {
  ReleaseNotices,
  type ReleaseNotifier,
  releaseNotice,
  releaseText
} from '../src/notifications/releases';
import { EVENTS, type ReleasedEvent } from '../src/tokens';
import type { Claim } from '../src/wire';
import { claim, device, GPU } from './fixtures';

/** The release notifications told: `note: …` and `warn: …`. */
class Told implements ReleaseNotifier {
  said: string[] = [];
  note(message: string): void {
    this.said.push(`note: ${message}`);
  }
  warn(message: string): void {
    this.said.push(`warn: ${message}`);
  }
}

/** A server in memory: its claims, and why each released claim went (GET /claims/{name}). */
function setup(claims: Claim[]) {
  const server = {
    claims,
    ended: new Map<string, string>() // name -> reason, as the server recorded it
  };
  const request = (async (operation: string, parameters?: Record<string, string>) => {
    const name = parameters?.name ?? '';
    switch (operation) {
      case 'GET /claims':
        return { claims: [...server.claims], pushed: false };
      case 'GET /devices':
        return {
          inventory: 'h200-8x',
          simulated: true,
          devices: [0, 1, 2, 3].map(i => device(`${GPU}${i}`))
        };
      case 'GET /claims/{name}': {
        const reason = server.ended.get(name);
        if (reason === undefined) {
          throw new DraRequestError(`claim ${name} does not exist`, 404);
        }
        return { ...claim(name), released: { reason, time: 1000, message: '' } };
      }
      case 'DELETE /claims/{name}':
        server.claims = server.claims.filter(c => c.name !== name);
        server.ended.set(name, 'user');
        return null;
      default:
        throw new Error(`not in the fake: ${operation}`);
    }
  }) as Requester;
  const model = new DraModel({ request, now: () => 1000, hidden: () => false });
  const told = new Told();
  const labels: Record<string, string> = { k1: 'train.ipynb', k2: 'other.ipynb' };
  const notices = new ReleaseNotices(model, told, id => labels[id] ?? null, 0);
  model.released.connect((_, release) => notices.add(release));
  return { server, model, told, notices };
}

function released(name: string, reason: string, more: Partial<ReleasedEvent> = {}) {
  return {
    schema_id: EVENTS.released,
    claim: name,
    user: 'alice',
    kernel_id: 'k1',
    devices: [`${GPU}0`],
    reason,
    ...more
  };
}

/** Let the model's reads of claims found gone come back. */
const settle = () => new Promise(resolve => setTimeout(resolve, 20));

test('a release is told by its reason: what the user did not do, and how', () => {
  assert.equal(releaseNotice('user'), 'none'); // the user released it: anywhere
  assert.equal(releaseNotice('moved'), 'none'); // the kernel's move says it
  assert.equal(releaseNotice('device-moved'), 'none'); // the Move's answer says it
  assert.equal(releaseNotice('elsewhere'), 'none'); // the server does not know why
  assert.equal(releaseNotice('kernel-shutdown'), 'note');
  assert.equal(releaseNotice('server-stop'), 'note');
  for (const reason of [
    'idle',
    'gpu-idle',
    'expired',
    'admin',
    'deleted',
    'device-failed',
    'fair-share',
    'limit',
    'reclaimed'
  ]) {
    assert.equal(releaseNotice(reason), 'warning', reason);
  }
  assert.equal(releaseNotice('idle', true), 'none'); // a run's claim: its end is told
});

test("the panel's Release and Release all are not told, their events or not", async () => {
  const { server, model, told } = setup([
    claim('a', { devices: [`${GPU}0`] }),
    claim('b', { devices: [`${GPU}1`], kernel_id: null })
  ]);
  await model.refresh();
  await model.release('a');
  model.handleEvent(released('a', 'user')); // the server's event of it
  await model.releaseAll();
  model.handleEvent(released('b', 'user', { kernel_id: null, devices: [`${GPU}1`] }));
  await model.refresh();
  await settle();
  assert.deepEqual(server.claims, []);
  assert.deepEqual(told.said, []);
});

test("a notebook's own release is not told, whether or not a read saw the claim alive", async () => {
  // c.release() / %dra release --all in a notebook of this server: the ledger says `user`
  const { server, model, told } = setup([claim('seen', { devices: [`${GPU}0`] })]);
  await model.refresh(); // a read saw `seen` alive
  server.claims = []; // released by its kernel, no event yet: a read finds it gone
  server.ended.set('seen', 'user');
  await model.refresh();
  await settle();
  // made and released between two reads: only the server's event tells the page
  model.handleEvent(released('quick', 'user'));
  model.handleEvent(released('seen', 'user')); // the event of the first, late
  await settle();
  assert.deepEqual(told.said, []);
});

test('a release by someone else is told once, by its event or by a read, whichever is first', async () => {
  const { server, model, told } = setup([
    claim('by-admin', { devices: [`${GPU}0`], kernel_id: null }),
    claim('expired', { devices: [`${GPU}1`], kernel_id: null })
  ]);
  await model.refresh();
  // an admin released one elsewhere: a read finds it gone, the server says why
  server.claims = [server.claims[1]];
  server.ended.set('by-admin', 'admin');
  await model.refresh();
  await settle();
  model.handleEvent(released('by-admin', 'admin', { kernel_id: null })); // late: not again
  // the other's lease ended: its event first, then a read without it
  model.handleEvent(released('expired', 'expired', { kernel_id: null, devices: [`${GPU}1`] }));
  server.claims = [];
  server.ended.set('expired', 'expired');
  await model.refresh();
  await settle();
  assert.deepEqual(told.said, [
    'warn: Released 1× H200 (claim by-admin): an admin released it.',
    'warn: Released 1× H200 (claim expired): its lease ended.'
  ]);
});

test("an idle release of a notebook's 3 claims is one warning; a kernel's end a note", async () => {
  const { model, told, notices } = setup([]);
  const gathering = new ReleaseNotices(model, told, () => 'train.ipynb', 1000); // 1 s
  await model.refresh();
  for (const i of [0, 1, 2]) {
    const release = {
      event: released(`c${i}`, 'idle', { devices: [`${GPU}${i}`] }),
      claim: undefined
    };
    gathering.add(release);
  }
  assert.deepEqual(told.said, []); // gathered
  gathering.flush();
  assert.deepEqual(told.said, [
    'warn: Released 3× H200 of train.ipynb (3 claims): its kernel was idle for the idle timeout.'
  ]);
  told.said = [];
  notices.add({ event: released('k', 'kernel-shutdown', { kernel_id: 'k2' }), claim: undefined });
  assert.deepEqual(told.said, [
    'note: Released 1× H200 of other.ipynb (claim k): its kernel shut down, restarted or died.'
  ]);
});

test("a run's claim, a kernel's move and a Move are not told as releases", async () => {
  const { model, told } = setup([
    claim('run-claim', { run: 'train-1', devices: [`${GPU}0`] }),
    claim('pod-claim', { devices: [`${GPU}1`] }),
    claim('moved-off', { devices: [`${GPU}2`] })
  ]);
  await model.refresh();
  model.handleEvent(released('run-claim', 'expired'));
  model.handleEvent(released('pod-claim', 'moved', { devices: [`${GPU}1`] }));
  model.handleEvent(released('moved-off', 'device-moved', { devices: [`${GPU}2`] }));
  await settle();
  assert.deepEqual(told.said, []);
});

test('the text names the notebook, the devices, the claim or how many, and why', () => {
  const devices = new Map([0, 1].map(i => [`${GPU}${i}`, device(`${GPU}${i}`)]));
  assert.equal(
    releaseText(['a'], [`${GPU}0`], 'train.ipynb', 'expired', devices),
    'Released 1× H200 of train.ipynb (claim a): its lease ended.'
  );
  assert.equal(
    releaseText(['a', 'b'], [`${GPU}0`, `${GPU}1`], null, 'admin', devices),
    'Released 2× H200 (2 claims): an admin released it.'
  );
});
