// The devices' metrics as the panel shows them (GET /metrics): memory used/total,
// utilisation and its sparkline. Pure, so that node's test runner runs it.

import type { DeviceMetrics, Metrics, Sample } from './wire';

/** How many samples a sparkline shows (the history the panel asks for). */
export const SPARK_SAMPLES = 40;
export const SPARK_WIDTH = 60;
export const SPARK_HEIGHT = 16;

/** The metrics of each device by its key; none when the server has no source (`none`). */
export function metricsByDevice(metrics: Metrics | null): Map<string, DeviceMetrics> {
  if (metrics === null || metrics.source === 'none') {
    return new Map();
  }
  return new Map(metrics.devices.map(m => [m.device, m]));
}

/**
 * A device's utilisation over time, oldest first: its history, then its current sample
 * when it is newer than the last one kept (null: not known then).
 */
export function utilizationSeries(m: DeviceMetrics): (number | null)[] {
  const values = [...m.history.utilization];
  const times = m.history.time;
  const last = times.length > 0 ? times[times.length - 1] : -Infinity;
  if (m.current !== null && m.current.time > last) {
    values.push(m.current.utilization);
  }
  return values.slice(-SPARK_SAMPLES);
}

/**
 * The points of a sparkline of percentages in a `width` x `height` box, as runs of
 * [x, y] (a null value breaks the line): the first value at x = 0, the last at x =
 * `width`; 0 % at the bottom (y = height - 1), 100 % at the top (y = 1), clamped. One
 * value alone is a flat line across the box.
 */
export function sparklinePoints(
  values: readonly (number | null)[],
  width = SPARK_WIDTH,
  height = SPARK_HEIGHT
): [number, number][][] {
  const y = (v: number): number => {
    const f = Math.max(0, Math.min(100, v)) / 100;
    return round(height - 1 - f * (height - 2));
  };
  if (values.length === 1) {
    const v = values[0];
    return v === null
      ? []
      : [
          [
            [0, y(v)],
            [width, y(v)]
          ]
        ];
  }
  const step = values.length > 1 ? width / (values.length - 1) : 0;
  const runs: [number, number][][] = [];
  let run: [number, number][] | null = null;
  values.forEach((v, i) => {
    if (v === null || !Number.isFinite(v)) {
      run = null;
      return;
    }
    if (run === null) {
      run = [];
      runs.push(run);
    }
    run.push([round(i * step), y(v)]);
  });
  return runs;
}

/** The SVG path of {@link sparklinePoints}: `M x y L x y ...` a run. */
export function sparklinePath(points: readonly (readonly [number, number])[][]): string {
  return points
    .map(run => run.map(([x, y], i) => `${i === 0 ? 'M' : 'L'}${x} ${y}`).join(' '))
    .join(' ');
}

function round(n: number): number {
  return Math.round(n * 10) / 10;
}

/** `12.3Gi`, `512Mi`, `1.5Ti` (binary units, one decimal, rounded down), as the board. */
export function bytes(n: number): string {
  const units: [string, number][] = [
    ['Ti', 2 ** 40],
    ['Gi', 2 ** 30],
    ['Mi', 2 ** 20]
  ];
  for (const [unit, size] of units) {
    if (n >= size) {
      return `${Math.floor((n / size) * 10) / 10}${unit}`;
    }
  }
  return `${n} B`;
}

/**
 * A device's memory for the panel: `0.6Gi / 140.4Gi` when the metrics give used and
 * total, else the inventory's capacity (`fallback`, e.g. `140.4Gi`).
 */
export function memoryText(sample: Sample | null | undefined, fallback: string): string {
  if (sample?.memory_used == null || !sample.memory_total) {
    return fallback;
  }
  return `${bytes(sample.memory_used)} / ${bytes(sample.memory_total)}`;
}

/** `45%`; empty when not known. */
export function utilizationText(sample: Sample | null | undefined): string {
  const u = sample?.utilization;
  return u == null ? '' : `${Math.round(u)}%`;
}
