import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  claimCountdown,
  claimTakenOutText,
  clusterLines,
  countdown,
  deviceSummary,
  duration,
  gpuText,
  gpuTime,
  groupDevices,
  groupState,
  hasTaint,
  joinedText,
  migParent,
  nearest,
  queueLines,
  releaseReason,
  requestWords,
  settledBusy,
  shortModel,
  statusText,
  usageSeries,
  usageText,
  usedByText
} from '../src/format';
import type { ShapeCount, Usage } from '../src/wire';
import { claim, device, GPU } from './fixtures';

test('countdown: minutes and seconds, hours when there are, never below zero', () => {
  assert.equal(countdown(750), '12:30');
  assert.equal(countdown(59.2), '1:00'); // whole seconds left, rounded up
  assert.equal(countdown(5), '0:05');
  assert.equal(countdown(3723), '1:02:03');
  assert.equal(countdown(-5), '0:00');
});

test('duration: seconds, minutes, hours and minutes, days and hours', () => {
  assert.equal(duration(45), '45 s');
  assert.equal(duration(12 * 60 + 5), '12 min');
  assert.equal(duration(2 * 3600 + 5 * 60), '2 h 5 min');
  assert.equal(duration(2 * 3600), '2 h');
  assert.equal(duration(3 * 86400 + 4 * 3600), '3 d 4 h');
  assert.equal(duration(-3), '0 s');
});

test('a MIG partition names its parent GPU; a GPU has none', () => {
  assert.equal(migParent(`${GPU}3-mig-1g18gb-19-0`), `${GPU}3`);
  assert.equal(migParent(`${GPU}3`), null);
  assert.equal(migParent('tpu.google.com/node/tpu-0'), null);
});

test('devices are grouped by node, then GPU, with MIG partitions under their parent', () => {
  const devices = [
    device(`${GPU}0`, { node: 'node-0' }),
    device(`${GPU}0-mig-1g18gb-19-0`, { node: 'node-0', mig_profile: '1g.18gb', state: 'held' }),
    device(`${GPU}1`, { node: 'node-0' }),
    device(`${GPU}0-mig-3g71gb-9-4`, { node: 'node-0', mig_profile: '3g.71gb' }),
    device('gpu.nvidia.com/node-1/gpu-0', { node: 'node-1' }),
    // a partition whose GPU is not listed stands alone
    device(`${GPU}7-mig-1g18gb-19-0`, { node: 'node-0', mig_profile: '1g.18gb' })
  ];
  const nodes = groupDevices(devices);
  assert.deepEqual(
    nodes.map(n => n.node),
    ['node-0', 'node-1']
  );
  const [first] = nodes;
  assert.deepEqual(
    first.groups.map(g => [g.device.device, g.partitions.map(p => p.mig_profile)]),
    [
      [`${GPU}0`, ['1g.18gb', '3g.71gb']],
      [`${GPU}1`, []],
      [`${GPU}7-mig-1g18gb-19-0`, []]
    ]
  );
  assert.equal(nodes[1].groups.length, 1);
});

test('a GPU blocked by its held partitions says so; otherwise its own state', () => {
  const gpu = device(`${GPU}0`, { state: 'blocked' });
  const held = device(`${GPU}0-mig-1g18gb-19-0`, { state: 'held' });
  assert.equal(groupState({ device: gpu, partitions: [held] }), '1 MIG held');
  assert.equal(groupState({ device: device(`${GPU}1`), partitions: [] }), 'free');
});

test('device summaries count by model, MIG profiles apart', () => {
  const map = new Map(
    [
      device(`${GPU}0`),
      device(`${GPU}1`),
      device(`${GPU}2-mig-1g18gb-19-0`, { mig_profile: '1g.18gb' })
    ].map(d => [d.device, d])
  );
  assert.equal(deviceSummary([`${GPU}0`, `${GPU}1`], map), '2× H200');
  assert.equal(
    deviceSummary([`${GPU}0`, `${GPU}2-mig-1g18gb-19-0`], map),
    '1× H200 + 1× H200 MIG 1g.18gb'
  );
  assert.equal(deviceSummary([`${GPU}0`, 'x/y/z'], map), '1× H200 + 1 more');
  assert.equal(deviceSummary(['x/y/z', 'x/y/w'], map), '2 devices');
  assert.equal(deviceSummary([], map), 'no devices yet (pending)');
  assert.equal(shortModel('NVIDIA H100 80GB HBM3'), 'H100 80GB HBM3');
});

test('the idle countdown runs while the kernel is idle and is paused while it is busy', () => {
  const c = claim('c', { idle_deadline: 2000 });
  assert.deepEqual(claimCountdown(c, 1250, false), { kind: 'idle', seconds: 750 });
  assert.deepEqual(claimCountdown(c, 1250, true), { kind: 'paused' });
  assert.deepEqual(claimCountdown(claim('n'), 1250, true), { kind: 'none' });
});

test('a lease that ends first is the countdown, busy or not', () => {
  const c = claim('c', { idle_deadline: 5000, lease_expires: 1300 });
  assert.deepEqual(claimCountdown(c, 1250, false), { kind: 'lease', seconds: 50 });
  assert.deepEqual(claimCountdown(c, 1250, true), { kind: 'lease', seconds: 50 });
  const later = claim('l', { idle_deadline: 1300, lease_expires: 5000 });
  assert.deepEqual(claimCountdown(later, 1250, false), { kind: 'idle', seconds: 50 });
  assert.deepEqual(
    nearest([
      { kind: 'none' },
      { kind: 'paused' },
      { kind: 'idle', seconds: 9 },
      { kind: 'lease', seconds: 3 }
    ]),
    { kind: 'lease', seconds: 3 }
  );
  assert.deepEqual(nearest([{ kind: 'none' }, { kind: 'paused' }]), { kind: 'paused' });
});

test('the status bar: devices and the nearest countdown; busy; nothing when nothing is held', () => {
  const map = new Map([device(`${GPU}0`), device(`${GPU}1`)].map(d => [d.device, d]));
  const c = claim('c', { devices: [`${GPU}0`, `${GPU}1`], idle_deadline: 1750 });
  assert.equal(statusText([c], map, 1000, false), '2× H200 · idle in 12:30');
  assert.equal(statusText([c], map, 1000, true), '2× H200 · busy · idle countdown paused');
  // a held device taken out of service comes first after the devices
  const out = new Map(map);
  const [first] = c.devices;
  const held = out.get(first);
  assert.ok(held);
  out.set(first, { ...held, taints: 'gpu.nvidia.com/xid=79:NoExecute' });
  assert.match(statusText([c], out, 1000, false), /^2× H200 · gpu-\d+ taken out · idle in 12:30$/);
  out.set(first, { ...held, taints: 'example.com/mark:None' }); // marks, takes nothing out
  assert.equal(statusText([c], out, 1000, false), '2× H200 · idle in 12:30');
  const leased = claim('l', { devices: [`${GPU}0`], lease_expires: 1060 });
  assert.equal(statusText([leased], map, 1000, true), '1× H200 · busy · lease ends in 1:00');
  assert.equal(statusText([claim('n', { devices: [`${GPU}0`] })], map, 1000, false), '1× H200');
  assert.equal(statusText([], map, 1000, false), '');
});

test('the status bar says what the GPUs do, where they say it', () => {
  const map = new Map([device(`${GPU}0`), device(`${GPU}1`)].map(d => [d.device, d]));
  const gpu = (state: 'active' | 'idle', utilization: number, text: string) => ({
    gpu: { state, utilization, since: 900, text }
  });
  const busy = claim('b', {
    devices: [`${GPU}0`],
    idle_deadline: 1750,
    ...gpu('active', 93, 'GPU busy: 93%')
  });
  const quiet = claim('q', { devices: [`${GPU}1`], ...gpu('idle', 0, 'GPU idle for 12 min') });
  assert.equal(statusText([busy], map, 1000, false), '1× H200 · GPU busy: 93% · idle in 12:30');
  assert.equal(statusText([quiet], map, 1000, true), '1× H200 · GPU idle for 12 min · busy');
  assert.equal(
    statusText([quiet, busy], map, 1000, false),
    '2× H200 · GPU busy: 93% · idle in 12:30'
  );
  assert.equal(gpuText([claim('u')]), ''); // no GPU signal: nothing said
});

test('gpu-idle has its words', () => {
  assert.equal(releaseReason('gpu-idle'), 'its GPU was not used for the GPU idle timeout');
});

test('every release reason of the claim_released event has its words', () => {
  for (const reason of [
    'idle',
    'kernel-shutdown',
    'user',
    'server-stop',
    'expired',
    'reclaimed',
    'admin',
    'deleted'
  ]) {
    assert.doesNotMatch(releaseReason(reason), /reason:/, reason);
  }
  assert.equal(releaseReason('new-one'), 'reason: new-one');
  assert.match(releaseReason('idle'), /idle/);
});

test('the line: who waits for what and since when; your own say their place', () => {
  const now = 1_000_000;
  const waiting = [
    {
      user: 'bob',
      kernel_id: null,
      what: '2 gpu.nvidia.com',
      since: now - 125,
      position: 0,
      why: '',
      holders: []
    },
    {
      user: 'me',
      kernel_id: 'k-1',
      what: '8 gpu.nvidia.com',
      since: now - 30,
      position: 0,
      why: '',
      holders: []
    }
  ];
  assert.deepEqual(
    queueLines(waiting, w => w.user === 'me', now),
    ['bob: 2 GPUs, waiting 2 min', 'you: 8 GPUs, waiting 30 s (number 2 in line)']
  );
  // the embedded ledger says the request in its keywords
  assert.deepEqual(
    queueLines([{ ...waiting[1], what: "gpu=2, model='NVIDIA H200'" }], () => true, now),
    ['you: 2× H200, waiting 30 s (number 1 in line)']
  );
  // the service's fair share: its order and why, for your own
  const served = [
    { ...waiting[1], position: 1, why: 'first in line' },
    { ...waiting[0], position: 2, why: 'behind me, who has used less of their share' }
  ];
  assert.deepEqual(
    queueLines(served, w => w.user === 'me', now),
    ['you: 8 GPUs, waiting 30 s (number 1 in line): first in line', 'bob: 2 GPUs, waiting 2 min']
  );
  assert.deepEqual(
    queueLines([], () => true, now),
    []
  );
});

test('usage: GPU-hours of the window and the idle share; unknown where no sampler said', () => {
  const u: Usage = {
    user: 'alice',
    since: 7 * 86400,
    gpu_hours: 12.34,
    gpu_seconds: 12.34 * 3600,
    active_gpu_seconds: 30000,
    idle_gpu_seconds: 10000,
    unknown_gpu_seconds: 4424,
    energy_j: 0,
    idle_share: 0.25,
    daily_gpu_hours: [0, 2, 4, 0, 1, 4, 1.34]
  };
  assert.equal(usageText(u), '12 GPU-hours in 7 days, idle 25%');
  assert.equal(
    usageText({ ...u, gpu_hours: 1.25, idle_share: null, since: 86400 }),
    '1.3 GPU-hours in 1 day, GPU use not known'
  );
  // 2 minutes on 4 GPUs: 8 GPU-minutes, not "0.0 GPU-hours" (issue 42, item 7)
  assert.equal(usageText({ ...u, gpu_hours: (4 * 2) / 60 }), '8 GPU-minutes in 7 days, idle 25%');
  assert.equal(gpuTime(1 / 60), '1 GPU-minute');
  assert.equal(gpuTime(0.001), 'under a GPU-minute');
  assert.equal(gpuTime(0), '0 GPU-hours');
  assert.equal(gpuTime(0.96), '1.0 GPU-hours');
  assert.deepEqual(usageSeries(u).slice(0, 3), [0, 50, 100]);
  assert.deepEqual(usageSeries({ ...u, daily_gpu_hours: [0, 0] }), [0, 0]);
});

test('requestWords: device classes in words, one and many; others as they are', () => {
  assert.equal(requestWords('1 gpu.nvidia.com'), '1 GPU');
  assert.equal(requestWords('2 gpu.nvidia.com + 1 mig.nvidia.com'), '2 GPUs + 1 MIG instance');
  assert.equal(requestWords('4 tpu.google.com'), '4 TPUs');
  assert.equal(requestWords('1 example.com/thing'), '1 example.com/thing');
});

test('settledBusy: a kernel busy for less than 2 s does not pause the countdown it shows', () => {
  const since = new Map<string, number>();
  assert.equal(settledBusy(since, 'k', true, 1000), false); // a cell starts
  assert.equal(settledBusy(since, 'k', true, 2500), false); // 1.5 s in: still not said
  assert.equal(settledBusy(since, 'k', false, 2600), false); // it ended: never flashed
  assert.equal(settledBusy(since, 'k', true, 5000), false); // the next cell starts afresh
  assert.equal(settledBusy(since, 'k', true, 7000), true); // 2 s in: "busy" from now on
  assert.equal(settledBusy(since, 'other', true, 7000), false); // each kernel its own
});

test('a claim card says which of its devices are taken out, and what that means', () => {
  const held = claim('c1', { devices: [`${GPU}0`, `${GPU}1`] });
  const map = (t0: string, t1: string) =>
    new Map([
      [`${GPU}0`, device(`${GPU}0`, { taints: t0 })],
      [`${GPU}1`, device(`${GPU}1`, { taints: t1 })]
    ]);
  assert.equal(claimTakenOutText(held, map('', 'marks.example.com/x:None')), '');
  assert.equal(
    claimTakenOutText(held, map('dra-jupyter/admin=fan:NoSchedule', '')),
    'gpu-0 taken out of service (NoSchedule): work on it may fail'
  );
  assert.equal(
    claimTakenOutText(held, map('dra-jupyter/admin=fan:NoSchedule', 'a/b=test:NoExecute')),
    'gpu-0, gpu-1 taken out of service (NoExecute): save your work, the claim will be released'
  );
  assert.ok(hasTaint(device('d', { taints: 'a/b=x:NoExecute, c/d:None' }), 'c/d'));
  assert.ok(!hasTaint(device('d', { taints: 'a/b=x:NoExecute' }), 'a/bc'));
});

test("the cluster's counts from a hub's shared view: by shape, the most free first, only what is there", () => {
  const shape = (more: Partial<ShapeCount>): ShapeCount => ({
    kind: 'gpu',
    model: 'NVIDIA H200',
    memory: '141Gi',
    mig_profile: '',
    total: 0,
    free: 0,
    held: 0,
    shared: 0,
    blocked: 0,
    tainted: 0,
    ...more
  });
  const shapes = [
    shape({ mig_profile: '1g.18gb', memory: '16Gi', total: 7, free: 7 }),
    shape({ total: 1000, free: 812, held: 150, tainted: 38 })
  ];
  assert.deepEqual(
    clusterLines({ source: 'http://hub/services/dra-devices', shapes, problem: '' }),
    ['H200 141Gi: 812 free of 1000 · 150 held · 38 taken out', 'H200 MIG 1g.18gb: 7 free of 7']
  );
  const problem =
    'cluster device counts unavailable: the shared view at http://x cannot be reached';
  assert.deepEqual(clusterLines({ source: 'http://x', shapes: [], problem }), [problem]);
  assert.deepEqual(clusterLines({ source: 'http://x', shapes: [], problem: '' }), [
    'no devices in the cluster'
  ]);
});

test('usedByText: the pods that use a claim, a few by name', () => {
  assert.equal(usedByText([]), '');
  assert.equal(usedByText(['kernel-1a2b-x']), 'used by pod kernel-1a2b-x');
  assert.equal(usedByText(['a', 'b']), 'shared by 2 pods: a, b');
  assert.equal(usedByText(['a', 'b', 'c', 'd', 'e']), 'shared by 5 pods: a, b, c and 2 more');
});

test('joinedText: a claim a kernel joined, whose, by which kernel, who else uses it', () => {
  const joined = {
    kernel_id: 'k-1',
    claim: 'team-gpu',
    user: 'bob',
    devices: [`${GPU}0`],
    used_by: ['kernel-k-1-x', 'kernel-k-2-y']
  };
  assert.equal(
    joinedText(joined, 'Untitled.ipynb'),
    "team-gpu, bob's claim, joined by Untitled.ipynb · shared by 2 pods: kernel-k-1-x, kernel-k-2-y"
  );
  assert.equal(
    joinedText({ ...joined, user: '', used_by: [] }, null),
    'team-gpu, a claim that is gone, joined by a kernel not open in this page'
  );
});
