// A release of one of the caller's claims (by anyone, for any reason) as a notification:
// what was released, of which notebook, and why; a note that goes when the user released
// it, a warning that stays when anything else did. A run's claim is not announced: the
// run's end is (runends.ts).

import { Notification } from '@jupyterlab/apputils';

import { deviceSummary, releaseReason } from '../format';
import type { DraModel, Release } from '../model';
import type { Kernels } from '../tokens';

export function announceRelease(model: DraModel, kernels: Kernels, release: Release): void {
  const { event, claim } = release;
  if (claim?.run) {
    return; // its launcher released it as the run ended: the run's end says how
  }
  const what = deviceSummary(event.devices, model.deviceMap);
  const kernel = event.kernel_id ?? claim?.kernel_id ?? null;
  const label = kernel ? kernels.label(kernel) : null;
  const where = label ? ` of ${label}` : '';
  const text =
    `Released ${what}${where} (claim ${event.claim}): ` + `${releaseReason(event.reason)}.`;
  if (event.reason === 'user') {
    Notification.info(text, { autoClose: 8000 });
  } else {
    Notification.warning(text, { autoClose: false });
  }
}
