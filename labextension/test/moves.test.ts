import assert from 'node:assert/strict';
import { test } from 'node:test';

import { DraRequestError, type Requester } from '../src/api';
import { requestedDevices } from '../src/format';
import { DraModel } from '../src/model';
import {
  KernelMoves,
  MOVED_INFO_MS,
  moveNotice,
  POD_RESTART,
  restartedText,
  restartWords
} from '../src/notifications/moves';
import { EVENTS, type KernelMovedEvent } from '../src/tokens';
import { claim, device, GPU, Shown } from './fixtures';

const NOTE =
  "this kernel's pod with gpu=1, model='NVIDIA H200' was stopped and its claim k1-gpu " +
  'released (idle for 40 min), so its variables are gone; ' +
  "dra.request(gpu=1, model='NVIDIA H200', restart=True) starts it again on such devices " +
  '(in JupyterLab: Restart kernel with its devices)';

function moved(more: Partial<KernelMovedEvent> = {}): KernelMovedEvent {
  return {
    schema_id: EVENTS.kernelMoved,
    kernel_id: 'k1',
    user: 'alice',
    where: 'server',
    devices: "gpu=1, model='NVIDIA H200'",
    again: "dra.request(gpu=1, model='NVIDIA H200', restart=True)",
    message: NOTE,
    ...more
  };
}

test('the requested devices in words, or as said when they are not plain keywords', () => {
  const cases: [string, string][] = [
    ["gpu=1, model='NVIDIA H200'", '1× H200'],
    ["gpu=2, model='H100 80GB HBM3'", '2× H100 80GB HBM3'],
    ['gpu=1', '1 GPU'],
    ['gpu=4', '4 GPUs'],
    ["gpu='all'", 'every GPU'],
    ["gpu='all', model='H200'", 'every H200'],
    ['tpu=8', '8 TPUs'],
    ["mig='1g.18gb'", '1× MIG 1g.18gb'],
    ["mig='3g.71gb', count=2", '2× MIG 3g.71gb'],
    ["gpu=2, memory='80Gi'", '2 GPUs (at least 80Gi)'],
    [
      'gpu=1, selector=\'device.attributes["x"].y == 1\'',
      'gpu=1, selector=\'device.attributes["x"].y == 1\''
    ],
    ["gpu=2, same='pcieRoot'", "gpu=2, same='pcieRoot'"],
    ["count=2, device_class='x.example.com'", "count=2, device_class='x.example.com'"],
    ["its claim's devices", "its claim's devices"],
    ['', '']
  ];
  for (const [said, words] of cases) {
    assert.equal(requestedDevices(said), words, said);
  }
});

test('a kernel back on the server: a warning that names its notebook, with the restart on its devices', () => {
  const notice = moveNotice(moved(), 'train.ipynb');
  assert.equal(notice.type, 'warning');
  assert.equal(
    notice.message,
    'Kernel of train.ipynb is back on the server, without devices; its variables are gone. ' +
      `T${NOTE.slice(1)}`
  );
  assert.equal(notice.restart?.label, 'Restart on 1× H200');
  assert.match(notice.restart?.caption ?? '', /in a pod of its own with 1× H200; .*variables/);
  // not one of the page's kernels: no name
  assert.match(moveNotice(moved(), null).message, /^Kernel is back on the server/);
  // words too long for a button, or none: its caption says them
  const long = 'gpu=2, selector=\'device.attributes["gpu.nvidia.com"].architecture == "Hopper"\'';
  const odd = moveNotice(moved({ devices: long }), null).restart;
  assert.equal(odd?.label, 'Restart with its devices');
  assert.ok(odd?.caption.includes(long));
  assert.equal(moveNotice(moved({ devices: '' }), null).restart?.label, 'Restart with its devices');
});

test('a kernel moved into its pod: a note that goes, without buttons', () => {
  const notice = moveNotice(
    moved({ where: 'pod', again: '', message: 'The kernel runs in pod p with gpu=1 now' }),
    'train.ipynb'
  );
  assert.deepEqual(notice, {
    type: 'info',
    message: 'Kernel of train.ipynb moved into a pod with 1× H200; its variables are gone.',
    restart: null
  });
});

test('a restart in a pod says the devices its claims hold, or those asked for', () => {
  const devices = new Map([[`${GPU}0`, device(`${GPU}0`)]]);
  const held = { kernel_id: 'k1', env: {}, claims: [claim('pod-a', { devices: [`${GPU}0`] })] };
  assert.equal(restartedText(held, '1 GPU', devices), 'Kernel restarted in a pod with 1× H200.');
  const unseen = { ...held, claims: [claim('pod-a', { devices: [`${GPU}7`] })] };
  assert.equal(restartedText(unseen, '1 GPU', devices), 'Kernel restarted in a pod with 1 GPU.');
  assert.equal(
    restartedText({ ...held, claims: [] }, '', devices),
    'Kernel restarted in a pod with its devices.'
  );
});

test("the panel's restart of a pending claim moves the kernel into a pod; others keep their words", () => {
  const here = { label: 'Restart kernel with these devices', caption: 'on this machine' };
  assert.deepEqual(restartWords(claim('pending', { devices: [] }), here), POD_RESTART);
  assert.equal(POD_RESTART.label, 'Restart in a pod with these devices');
  assert.match(POD_RESTART.caption, /pod of its own that holds these devices.*variables are lost/);
  assert.deepEqual(restartWords(claim('held', { devices: [`${GPU}0`] }), here), here);
});

function setup(answer: () => unknown) {
  const calls: string[] = [];
  const request = (async (operation: string, parameters?: Record<string, string>) => {
    calls.push(`${operation} ${parameters?.kernel_id ?? ''}`.trim());
    switch (operation) {
      case 'POST /kernels/{kernel_id}/restart-with-claims':
        return answer();
      case 'GET /claims':
        return { claims: [] };
      case 'GET /devices':
        return { inventory: 'kubernetes', simulated: false, devices: [device(`${GPU}0`)] };
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
  const moves = new KernelMoves(model, shown, kernels, err => failed.push(String(err)));
  return { moves, shown, calls, restarted, failed, model };
}

async function settled(): Promise<void> {
  for (let i = 0; i < 5; i++) {
    await new Promise(resolve => setTimeout(resolve, 0));
  }
}

test("the warning's one button restarts the kernel in a pod, says so and withdraws it", async () => {
  const answer = {
    kernel_id: 'k1',
    env: {},
    claims: [claim('pod-a', { devices: [`${GPU}0`] })]
  };
  const { moves, shown, calls, restarted, failed, model } = setup(() => answer);
  await model.refresh(); // the devices known
  moves.show(moved());
  assert.deepEqual(moves.kernelsShown, ['k1']);
  const [warning] = [...shown.open.values()];
  assert.match(warning.message, /^Kernel of train\.ipynb is back on the server/);
  assert.deepEqual(
    warning.actions.map(a => [a.label, a.kind]),
    [['Restart on 1× H200', 'accent']]
  );
  warning.actions[0].callback();
  assert.equal(shown.open.size, 0); // gone at once
  await settled();
  assert.ok(calls.includes('POST /kernels/{kernel_id}/restart-with-claims k1'));
  assert.deepEqual(restarted, ['k1']);
  assert.deepEqual(shown.notes, ['success: Kernel restarted in a pod with 1× H200.']);
  assert.deepEqual(failed, []);
});

test('a restart that fails is said as the other failures are', async () => {
  const { moves, shown, restarted, failed } = setup(() => {
    throw new DraRequestError('kernel k1: it has no devices to restart with; request some', 400);
  });
  moves.show(moved());
  [...shown.open.values()][0].actions[0].callback();
  await settled();
  assert.deepEqual(restarted, []);
  assert.equal(failed.length, 1);
  assert.match(failed[0], /no devices to restart with/);
  assert.deepEqual(shown.notes, []);
});

test("a kernel's move into its pod is a note, and withdraws its warning of the move back", () => {
  const { moves, shown } = setup(() => null);
  moves.show(moved());
  moves.show(moved({ kernel_id: 'k2' }));
  assert.equal(shown.open.size, 2);
  moves.show(moved({ where: 'pod', again: '' }));
  assert.deepEqual(moves.kernelsShown, ['k2']);
  assert.deepEqual(shown.notes, [
    `info ${MOVED_INFO_MS}: Kernel of train.ipynb moved into a pod with 1× H200; ` +
      'its variables are gone.'
  ]);
  moves.show(moved({ kernel_id: 'k2' })); // moved back again: still one warning of it
  assert.equal(shown.open.size, 1);
});

test("the model announces the moves of this server's kernels and refreshes", async () => {
  const { model, calls } = setup(() => null);
  model.ownKernel = id => id === 'k1';
  const said: string[] = [];
  model.kernelMoved.connect((_, e) => said.push(`${e.kernel_id} ${e.where}`));
  model.handleEvent({ ...moved() });
  model.handleEvent({ ...moved({ kernel_id: 'k0', user: 'bob' }) }); // not this page's
  assert.deepEqual(said, ['k1 server']);
  await settled();
  assert.ok(calls.includes('GET /claims')); // its claims changed: read again
});
