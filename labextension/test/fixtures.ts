// Builders of REST answers for the unit tests (the shapes of specification/dra-rest-api.yml).

import type { Claim, Device } from '../src/wire';

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
    ...more
  };
}

export function claim(name: string, more: Partial<Claim> = {}): Claim {
  return {
    name,
    namespace: 'local',
    user: 'alice',
    kernel_id: 'k1',
    devices: [],
    env: {},
    created: 1000,
    last_activity: 1000,
    lease_expires: null,
    idle_deadline: null,
    busy: false,
    gpu: { state: 'unknown', utilization: null, since: null, text: 'no GPU signal' },
    released: null,
    ...more
  };
}

export const GPU = 'gpu.nvidia.com/node-0/gpu-';
