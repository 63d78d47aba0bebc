// Builders of REST answers for the unit tests (the shapes of specification/dra-rest-api.yml).

import type { MoveNotifier } from '../src/notifications/moves';
import type { WarningAction } from '../src/notifications/warnings';
import type { Claim, Device, Run } from '../src/wire';

export function device(key: string, more: Partial<Device> = {}): Device {
  return {
    device: key,
    kind: key.includes('-mig-') ? 'mig' : 'gpu',
    model: 'NVIDIA H200',
    memory: '140.4Gi',
    mig_profile: '',
    node: '',
    numa_node: '',
    pcie_root: '',
    state: 'free',
    holder: '',
    taints: '',
    ...more
  };
}

export function claim(name: string, more: Partial<Claim> = {}): Claim {
  return {
    name,
    namespace: 'local',
    user: 'alice',
    kernel_id: 'k1',
    run: null,
    devices: [],
    env: {},
    created: 1000,
    last_activity: 1000,
    lease_expires: null,
    idle_deadline: null,
    busy: false,
    gpu: { state: 'unknown', utilization: null, since: null, text: 'no GPU signal' },
    released: null,
    in_kernel_env: false,
    used_by: [],
    ...more
  };
}

export const GPU = 'gpu.nvidia.com/node-0/gpu-';

/** The notifications shown: warnings by id with their buttons, and the notes. */
export class Shown implements MoveNotifier {
  open = new Map<string, { message: string; actions: WarningAction[] }>();
  notes: string[] = [];
  count = 0;
  warn(message: string, actions: WarningAction[]): string {
    this.count += 1;
    const id = `n${this.count}`;
    this.open.set(id, { message, actions });
    return id;
  }
  update(): boolean {
    return false;
  }
  dismiss(id: string): void {
    this.open.delete(id);
  }
  info(message: string, ms: number): void {
    this.notes.push(`info ${ms}: ${message}`);
  }
  success(message: string): void {
    this.notes.push(`success: ${message}`);
  }
}

export function run(name: string, more: Partial<Run> = {}): Run {
  return {
    name,
    user: 'alice',
    phase: 'Running',
    where: 'this machine',
    launcher: '',
    command: "python -c 'import time; time.sleep(120)'",
    devices: [`${GPU}0`],
    device_count: 1,
    processes: 1,
    created: 1000,
    started: 1010,
    ended: null,
    exit_code: null,
    message: '',
    cancellable: true,
    ...more
  };
}
