import assert from 'node:assert/strict';
import { test } from 'node:test';

import type { Requester } from '../src/api';
import { clockTime } from '../src/format';
import { DraModel } from '../src/model';
import { IdleWarnings, type Notifier, type WarningAction } from '../src/notifications/warnings';
import { EVENTS, type IdleWarningEvent } from '../src/tokens';
import type { Claim } from '../src/wire';
import { claim, GPU } from './fixtures';

/** The notifications shown, by id: their text and buttons. */
class Shown implements Notifier {
  open = new Map<string, { message: string; actions: WarningAction[] }>();
  count = 0;
  warn(message: string, actions: WarningAction[]): string {
    this.count += 1;
    const id = `n${this.count}`;
    this.open.set(id, { message, actions });
    return id;
  }
  update(id: string, message: string): boolean {
    const n = this.open.get(id);
    if (n === undefined) {
      return false;
    }
    n.message = message;
    return true;
  }
  dismiss(id: string): void {
    this.open.delete(id);
  }
}

function setup(claims: Claim[]) {
  const server = { claims, kept: [] as string[] };
  let now = 1000;
  const request = (async (operation: string, parameters?: Record<string, string>) => {
    switch (operation) {
      case 'GET /claims':
        return { claims: [...server.claims] };
      case 'GET /devices':
        return { inventory: 'h200-8x', simulated: true, devices: [] };
      case 'GET /claims/{name}':
        return {
          ...claim(parameters?.name ?? ''),
          released: { reason: 'user', time: 1, message: '' }
        };
      case 'POST /claims/{name}/keep': {
        server.kept.push(parameters?.name ?? '');
        const c = server.claims.find(x => x.name === parameters?.name) as Claim;
        c.idle_deadline = now + 90;
        return c;
      }
      case 'DELETE /claims/{name}':
        server.claims = server.claims.filter(c => c.name !== parameters?.name);
        return null;
      default:
        throw new Error(`not in the fake: ${operation}`);
    }
  }) as Requester;
  const model = new DraModel({ request, now: () => now, hidden: () => false });
  const shown = new Shown();
  const warnings = new IdleWarnings(
    model,
    shown,
    () => 'idle.ipynb',
    err => {
      throw err;
    }
  );
  const tick = (s: number) => {
    now += s;
  };
  return { server, model, shown, warnings, tick };
}

function warning(name: string, deadline: number): IdleWarningEvent {
  return {
    schema_id: EVENTS.idleWarning,
    claim: name,
    user: 'alice',
    kernel_id: 'k1',
    devices: [`${GPU}0`],
    deadline,
    seconds_left: deadline - 1000
  };
}

test('a warning says the clock time of the deadline, as true later as now', () => {
  const { warnings } = setup([]);
  const text = warnings.text(warning('a', 1045));
  assert.ok(text.includes(`will be released as idle at ${clockTime(1045)}`), text);
  assert.ok(text.includes('of idle.ipynb'), text);
  assert.ok(text.includes('(claim a)'), text);
  assert.match(clockTime(1045), /^\d\d:\d\d:\d\d$/);
});

test('a second deadline of a claim updates its one warning; a Keep withdraws it', async () => {
  const { model, shown, warnings, server, tick } = setup([claim('a', { idle_deadline: 1045 })]);
  await model.refresh();
  warnings.show(warning('a', 1045));
  warnings.show(warning('a', 1140));
  assert.equal(shown.open.size, 1);
  assert.ok([...shown.open.values()][0].message.includes(clockTime(1140)));
  const keep = [...shown.open.values()][0].actions.find(a => a.label === 'Keep');
  keep?.callback();
  assert.equal(shown.open.size, 0); // withdrawn at once, not left with live buttons
  await new Promise(resolve => setTimeout(resolve, 0));
  assert.deepEqual(server.kept, ['a']);
  tick(1);
  warnings.show(warning('a', 1200)); // the next round: one warning again
  assert.equal(shown.open.size, 1);
});

test('a Keep from anywhere, a running cell or a release withdraws the warning', async () => {
  const { model, shown, warnings, server, tick } = setup([
    claim('kept', { idle_deadline: 1045 }),
    claim('busy', { idle_deadline: 1045 }),
    claim('gone', { idle_deadline: 1045 }),
    claim('still', { idle_deadline: 1045 })
  ]);
  await model.refresh();
  for (const name of ['kept', 'busy', 'gone', 'still']) {
    warnings.show(warning(name, 1045));
  }
  assert.equal(shown.open.size, 4);
  tick(2);
  // the card's Keep moved the deadline; a cell runs in another; one was released in a terminal
  server.claims = [
    claim('kept', { idle_deadline: 1092 }),
    claim('busy', { idle_deadline: 1092, busy: true }),
    claim('still', { idle_deadline: 1045 })
  ];
  await model.refresh();
  await new Promise(resolve => setTimeout(resolve, 10));
  assert.deepEqual(warnings.claims, ['still']);
  assert.equal(shown.open.size, 1);
  // past the deadline the API says "now" until the claim goes: still warned of
  tick(60);
  server.claims = [claim('still', { idle_deadline: 1062 })];
  await model.refresh();
  assert.deepEqual(warnings.claims, ['still']);
});
