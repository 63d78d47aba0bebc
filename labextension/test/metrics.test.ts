import assert from 'node:assert/strict';
import { test } from 'node:test';

import {
  bytes,
  memoryText,
  metricsByDevice,
  SPARK_SAMPLES,
  sparklinePath,
  sparklinePoints,
  utilizationSeries,
  utilizationText
} from '../src/metrics';
import type { DeviceMetrics, Metrics, Sample } from '../src/wire';
import { GPU } from './fixtures';

const GiB = 2 ** 30;

function sample(more: Partial<Sample> = {}): Sample {
  return {
    time: 100,
    memory_used: 644939776,
    memory_total: 150754820096,
    utilization: 0,
    temperature: 35,
    ...more
  };
}

function deviceMetrics(
  utilization: (number | null)[],
  current: Sample | null = null
): DeviceMetrics {
  const time = utilization.map((_, i) => 10 + 2 * i);
  return {
    device: `${GPU}0`,
    current,
    history: {
      time,
      memory_used: utilization.map(() => null),
      utilization,
      temperature: utilization.map(() => null)
    }
  };
}

function metrics(source: Metrics['source'], devices: DeviceMetrics[]): Metrics {
  return {
    source,
    simulated: source === 'simulated',
    problem: '',
    interval: 2,
    length: 900,
    idle_timeout: 0,
    idle_warning: 0,
    devices
  };
}

test('sparkline points: first value at the left, last at the right, 0 % at the bottom', () => {
  assert.deepEqual(sparklinePoints([0, 50, 100], 60, 16), [
    [
      [0, 15],
      [30, 8],
      [60, 1]
    ]
  ]);
});

test('sparkline points: values are clamped to 0-100 %', () => {
  assert.deepEqual(sparklinePoints([-20, 250], 10, 12), [
    [
      [0, 11],
      [10, 1]
    ]
  ]);
});

test('sparkline points: a null (not known then) breaks the line in runs', () => {
  const runs = sparklinePoints([10, 20, null, 30, null, null, 40], 60, 16);
  assert.equal(runs.length, 3);
  assert.deepEqual(
    runs.map(run => run.map(([x]) => x)),
    [[0, 10], [30], [60]]
  );
});

test('sparkline points: one value is a flat line across; none or only nulls is no line', () => {
  assert.deepEqual(sparklinePoints([100], 60, 16), [
    [
      [0, 1],
      [60, 1]
    ]
  ]);
  assert.deepEqual(sparklinePoints([], 60, 16), []);
  assert.deepEqual(sparklinePoints([null, null], 60, 16), []);
  assert.equal(sparklinePath(sparklinePoints([null], 60, 16)), '');
});

test('sparkline path: a move to the start of each run, then lines', () => {
  assert.equal(
    sparklinePath([
      [
        [0, 15],
        [30, 8]
      ],
      [[60, 1]]
    ]),
    'M0 15 L30 8 M60 1'
  );
});

test('the series is the history then a newer current sample, at most SPARK_SAMPLES', () => {
  const m = deviceMetrics([10, 20], sample({ time: 99, utilization: 30 }));
  assert.deepEqual(utilizationSeries(m), [10, 20, 30]);
  const same = deviceMetrics([10, 20], sample({ time: 12, utilization: 20 }));
  assert.deepEqual(utilizationSeries(same), [10, 20]); // current is the last kept sample
  assert.deepEqual(utilizationSeries(deviceMetrics([])), []);
  const long = deviceMetrics(Array.from({ length: SPARK_SAMPLES + 5 }, (_, i) => i));
  const series = utilizationSeries(long);
  assert.equal(series.length, SPARK_SAMPLES);
  assert.equal(series[series.length - 1], SPARK_SAMPLES + 4);
});

test('memory text: used / total when the metrics give both, else the capacity', () => {
  assert.equal(memoryText(sample(), '140.4Gi'), '615Mi / 140.4Gi');
  assert.equal(
    memoryText(sample({ memory_used: 80 * GiB, memory_total: 141 * GiB }), ''),
    '80Gi / 141Gi'
  );
  assert.equal(memoryText(sample({ memory_used: 0 }), '140.4Gi'), '0 B / 140.4Gi');
  assert.equal(memoryText(sample({ memory_used: null }), '140.4Gi'), '140.4Gi');
  assert.equal(memoryText(sample({ memory_total: null }), '140.4Gi'), '140.4Gi');
  assert.equal(memoryText(null, '140.4Gi'), '140.4Gi');
  assert.equal(memoryText(undefined, ''), '');
});

test('bytes: binary units, one decimal rounded down', () => {
  assert.equal(bytes(1.5 * 2 ** 40), '1.5Ti');
  assert.equal(bytes(GiB - 1), '1023.9Mi');
  assert.equal(bytes(512), '512 B');
});

test('utilisation text: a whole percent, empty when not known', () => {
  assert.equal(utilizationText(sample({ utilization: 45.6 })), '46%');
  assert.equal(utilizationText(sample({ utilization: null })), '');
  assert.equal(utilizationText(null), '');
});

test('metrics by device: each device by its key; none from a source of none', () => {
  const m = deviceMetrics([1]);
  assert.deepEqual([...metricsByDevice(metrics('simulated', [m])).keys()], [`${GPU}0`]);
  assert.equal(metricsByDevice(metrics('none', [m])).size, 0);
  assert.equal(metricsByDevice(null).size, 0);
});
