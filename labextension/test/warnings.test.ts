import assert from 'node:assert/strict';
import { test } from 'node:test';

import type { Requester } from '../src/api';
import { clockTime } from '../src/format';
import { DraModel } from '../src/model';
import { IdleWarnings, type Notifier, type WarningAction } from '../src/notifications/warnings';
import { EVENTS, type IdleWarningEvent, type KernelMovedEvent } from '../src/tokens';
import type { Claim, Joined } from '../src/wire';
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
  updates = 0;
  update(id: string, message: string): boolean {
    this.updates += 1;
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

/** The warnings of notebook idle.ipynb, gathered for ``gatherMs`` before one opens. */
function idleWarnings(model: DraModel, shown: Shown, gatherMs: number): IdleWarnings {
  return new IdleWarnings(
    model,
    shown,
    () => 'idle.ipynb',
    err => {
      throw err;
    },
    gatherMs
  );
}

function setup(claims: Claim[]) {
  const server = { claims, joined: [] as Joined[], kept: [] as string[], released: [] as string[] };
  let now = 1000;
  const request = (async (operation: string, parameters?: Record<string, string>) => {
    switch (operation) {
      case 'GET /claims':
        return { claims: [...server.claims], joined: [...server.joined] };
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
        server.released.push(parameters?.name ?? '');
        server.claims = server.claims.filter(c => c.name !== parameters?.name);
        return null;
      default:
        throw new Error(`not in the fake: ${operation}`);
    }
  }) as Requester;
  const model = new DraModel({ request, now: () => now, hidden: () => false });
  const shown = new Shown();
  const warnings = idleWarnings(model, shown, 0); // opened at once (the page gathers for GATHER_MS)
  const tick = (s: number) => {
    now += s;
  };
  return { server, model, shown, warnings, tick };
}

function warning(
  name: string,
  deadline: number,
  more: Partial<IdleWarningEvent> = {}
): IdleWarningEvent {
  return {
    schema_id: EVENTS.idleWarning,
    claim: name,
    user: 'alice',
    kernel_id: 'k1',
    devices: [`${GPU}0`],
    deadline,
    seconds_left: deadline - 1000,
    ...more
  };
}

/** The one warning shown, its text and buttons. */
function only(shown: Shown): { message: string; actions: WarningAction[] } {
  assert.equal(shown.open.size, 1, [...shown.open.values()].map(n => n.message).join('\n'));
  return [...shown.open.values()][0];
}

function button(shown: Shown, label: string): WarningAction {
  const found = only(shown).actions.find(a => a.label === label);
  assert.ok(found, `no ${label} button`);
  return found;
}

test('a warning says the clock time of the deadline, as true later as now', () => {
  const { warnings } = setup([]);
  const text = warnings.text('k1', new Map([['a', warning('a', 1045)]]));
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
  // four notebooks, one claim each
  const of = (name: string) => ({ idle_deadline: 1045, kernel_id: `k-${name}` });
  const { model, shown, warnings, server, tick } = setup([
    claim('kept', of('kept')),
    claim('busy', of('busy')),
    claim('gone', of('gone')),
    claim('still', of('still'))
  ]);
  await model.refresh();
  for (const name of ['kept', 'busy', 'gone', 'still']) {
    warnings.show(warning(name, 1045, { kernel_id: `k-${name}` }));
  }
  assert.equal(shown.open.size, 4);
  tick(2);
  // the card's Keep moved the deadline; a cell runs in another; one was released in a terminal
  server.claims = [
    claim('kept', { ...of('kept'), idle_deadline: 1092 }),
    claim('busy', { ...of('busy'), idle_deadline: 1092, busy: true }),
    claim('still', of('still'))
  ];
  await model.refresh();
  await new Promise(resolve => setTimeout(resolve, 10));
  assert.deepEqual(warnings.claims, ['still']);
  assert.equal(shown.open.size, 1);
  // past the deadline the API says "now" until the claim goes: still warned of
  tick(60);
  server.claims = [claim('still', { ...of('still'), idle_deadline: 1062 })];
  await model.refresh();
  assert.deepEqual(warnings.claims, ['still']);
});

test("a kernel's 3 claims get one warning, whose Keep keeps all of its claims", async () => {
  const { model, shown, warnings, server } = setup([
    claim('a', { idle_deadline: 1045, devices: [`${GPU}0`] }),
    claim('b', { idle_deadline: 1045, devices: [`${GPU}1`] }),
    claim('c', { idle_deadline: 1045, devices: [`${GPU}2`] }),
    claim('other', { idle_deadline: 1045, kernel_id: 'k2' })
  ]);
  await model.refresh();
  // the server warns of each claim, one event each, in one check
  for (const [name, i] of [
    ['a', 0],
    ['b', 1],
    ['c', 2]
  ] as const) {
    warnings.show(warning(name, 1045, { devices: [`${GPU}${i}`] }));
  }
  const { message } = only(shown);
  assert.equal(shown.count, 1); // one shown, updated: never three
  assert.ok(message.startsWith('3 claims of idle.ipynb ('), message);
  assert.ok(message.includes(`will be released as idle at ${clockTime(1045)}`), message);
  assert.ok(message.includes('unless a cell runs or you keep them'), message);
  assert.deepEqual(warnings.claims.sort(), ['a', 'b', 'c']);
  button(shown, 'Keep').callback();
  assert.equal(shown.open.size, 0); // withdrawn at once
  await new Promise(resolve => setTimeout(resolve, 10));
  assert.deepEqual(server.kept.sort(), ['a', 'b', 'c']); // the notebook's, not k2's
  assert.deepEqual(warnings.claims, []);
});

test("a notebook's warning says what is left as its claims are kept or released elsewhere", async () => {
  const { model, shown, warnings, server, tick } = setup([
    claim('a', { idle_deadline: 1045 }),
    claim('b', { idle_deadline: 1045 }),
    claim('c', { idle_deadline: 1045 })
  ]);
  await model.refresh();
  for (const name of ['a', 'b', 'c']) {
    warnings.show(warning(name, 1045));
  }
  tick(2);
  // the panel's Keep of a: its deadline moved; b released in a terminal
  server.claims = [claim('a', { idle_deadline: 1092 }), claim('c', { idle_deadline: 1045 })];
  await model.refresh();
  await new Promise(resolve => setTimeout(resolve, 10));
  assert.deepEqual(warnings.claims, ['c']);
  assert.equal(shown.count, 1);
  const { message } = only(shown); // the one warning, of the claim left
  assert.ok(message.includes('(claim c)') && !message.includes('claims'), message);
  // its Release gives back the claims it is of: c, not a (kept)
  button(shown, 'Release').callback();
  await new Promise(resolve => setTimeout(resolve, 10));
  assert.deepEqual(server.released, ['c']);
  assert.equal(shown.open.size, 0);
});

test("a cell of the kernel withdraws its notebook's warning, not another notebook's", async () => {
  const { model, shown, warnings } = setup([
    claim('a', { idle_deadline: 1045 }),
    claim('b', { idle_deadline: 1045 }),
    claim('x', { idle_deadline: 1045, kernel_id: 'k2' })
  ]);
  await model.refresh();
  warnings.show(warning('a', 1045));
  warnings.show(warning('b', 1045));
  warnings.show(warning('x', 1045, { kernel_id: 'k2' }));
  assert.equal(shown.open.size, 2); // one per notebook
  warnings.withdrawKernel('k1');
  assert.deepEqual(warnings.claims, ['x']);
  assert.equal(shown.open.size, 1);
});

test("deadlines of a notebook's claims that differ: the first is said", () => {
  const { warnings } = setup([]);
  const text = warnings.text(
    'k1',
    new Map([
      ['a', warning('a', 1045)],
      ['b', warning('b', 1100)]
    ])
  );
  assert.ok(text.includes(`will be released as idle, the first at ${clockTime(1045)},`), text);
});

test("a notebook's warnings that come together open as one notification, never updated", async () => {
  const { model, shown } = setup([]);
  const gathering = idleWarnings(model, shown, 20);
  for (const name of ['a', 'b', 'c']) {
    gathering.show(warning(name, 1045));
  }
  assert.equal(shown.open.size, 0); // gathered
  await new Promise(resolve => setTimeout(resolve, 60));
  assert.equal(shown.count, 1);
  assert.ok(only(shown).message.startsWith('3 claims of idle.ipynb'), only(shown).message);
  // one withdrawn before it opens: it never shows
  gathering.show(warning('x', 1045, { kernel_id: 'k2' }));
  gathering.withdraw('x');
  await new Promise(resolve => setTimeout(resolve, 60));
  assert.equal(shown.count, 1);
});

test("a notebook's claims released together withdraw its warning without a burst of updates", async () => {
  const { model, shown } = setup([]);
  const gathering = idleWarnings(model, shown, 20);
  for (const name of ['a', 'b', 'c']) {
    gathering.show(warning(name, 1045));
  }
  await new Promise(resolve => setTimeout(resolve, 60));
  assert.equal(shown.open.size, 1);
  for (const name of ['a', 'b', 'c']) {
    gathering.withdraw(name); // their releases, within milliseconds
  }
  assert.equal(shown.open.size, 0);
  await new Promise(resolve => setTimeout(resolve, 60));
  assert.equal(shown.updates, 0); // JupyterLab may show again a toast updated as it goes
  assert.equal(shown.open.size, 0);
  // one of them released: the text says the 2 left, once the burst is in
  for (const name of ['a', 'b', 'c']) {
    gathering.show(warning(name, 1045));
  }
  await new Promise(resolve => setTimeout(resolve, 60));
  gathering.withdraw('a');
  assert.ok(only(shown).message.startsWith('3 claims'));
  await new Promise(resolve => setTimeout(resolve, 60));
  assert.equal(shown.updates, 1);
  assert.ok(only(shown).message.startsWith('2 claims'), only(shown).message);
});

test('a joiner is warned that its pod stops and the claim stays, until a cell, a move or a refresh', async () => {
  const { model, shown, warnings, server, tick } = setup([]);
  model.ownKernel = id => id === 'k1';
  const team: Joined = {
    kernel_id: 'k1',
    claim: 'team-gpu',
    user: 'bob',
    devices: [`${GPU}0`],
    used_by: ['kernel-k1-abc']
  };
  server.joined = [team];
  await model.refresh();
  model.idleWarning.connect((_, event) => warnings.show(event));
  const joined = (deadline: number) =>
    model.handleEvent({ ...warning('team-gpu', deadline, { joined: true, devices: [] }) });
  joined(1045); // the model passes on a warning of its page's kernel, of a claim not its user's
  const { message, actions } = only(shown);
  assert.equal(
    message,
    `idle.ipynb: its pod on the shared claim team-gpu will be stopped as idle at ${clockTime(1045)} ` +
      'unless a cell runs; the claim stays.'
  );
  assert.deepEqual(actions, []); // no Keep or Release: the claim is bob's
  assert.deepEqual(warnings.claims, []);
  joined(1050); // a deadline that moved: its one warning, said again
  assert.ok(only(shown).message.includes(clockTime(1050)));
  assert.equal(shown.open.size, 1);
  tick(1);
  await model.refresh(); // still joined: still warned of
  assert.deepEqual(warnings.joiners, ['k1']);

  warnings.withdrawKernel('k1'); // a cell started
  assert.equal(shown.open.size, 0);

  joined(1100);
  const back: KernelMovedEvent = {
    schema_id: EVENTS.kernelMoved,
    kernel_id: 'k1',
    user: 'alice',
    where: 'server',
    devices: 'team-gpu',
    again: "dra.request(join='team-gpu')",
    message: 'its pod was stopped'
  };
  model.handleEvent({ ...back }); // its pod stopped: the move says so instead
  assert.deepEqual(warnings.joiners, []);
  assert.equal(shown.open.size, 0);

  joined(1200);
  tick(1);
  server.joined = []; // gone from a refresh that started after the warning
  await model.refresh();
  assert.deepEqual(warnings.joiners, []);
  assert.equal(shown.open.size, 0);
});
