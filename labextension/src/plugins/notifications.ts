// The notifications (while the settings' notify is on): idle warnings (one per notebook),
// a process on a GPU none of the user's claims holds, kernel moves, reclaims, who waits in
// line for the user's devices, devices taken out of service, and the releases of the
// user's devices that the user did not make, with their reason (docs/labextension.md, "The
// notification rules").

import type { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { Notification } from '@jupyterlab/apputils';
import { INotebookTracker, NotebookActions } from '@jupyterlab/notebook';

import type { DraModel } from '../model';
import { DeviceHealth } from '../notifications/health';
import { KernelMoves } from '../notifications/moves';
import {
  fail,
  moveNotifier,
  notifier,
  releaseNotifier,
  runEndNotifier,
  waiterNotifier
} from '../notifications/notifiers';
import { ReclaimWarnings } from '../notifications/reclaims';
import { ReleaseNotices } from '../notifications/releases';
import { RunEnds } from '../notifications/runends';
import { WaiterNotices } from '../notifications/waiters';
import { IdleWarnings } from '../notifications/warnings';
import { IDRAKernels, IDRAModel, IDRASettings, type Kernels, RUN_OUTPUT } from '../tokens';
import { moveAsked } from '../views/ask';

export const notificationsPlugin: JupyterFrontEndPlugin<void> = {
  id: 'dra-jupyter-labextension:notifications',
  description:
    'Idle warnings, releases, kernel moves, reclaims, unhealthy devices and ends of runs',
  autoStart: true,
  requires: [IDRAModel, IDRAKernels, IDRASettings],
  optional: [INotebookTracker],
  activate: (
    app: JupyterFrontEnd,
    model: DraModel,
    kernels: Kernels,
    settings: IDRASettings,
    tracker: INotebookTracker | null
  ) => {
    // an event of the model, shown while the settings say so
    const shown =
      <T>(show: (event: T) => void) =>
      (_: unknown, event: T) => {
        if (settings.current.notify) {
          show(event);
        }
      };

    const warnings = new IdleWarnings(model, notifier, kernels.label, fail);
    model.idleWarning.connect(shown(event => warnings.show(event)));
    // a cell started: its kernel is not idle (the server moves the deadline when it ends)
    NotebookActions.executionScheduled.connect((_, { notebook }) => {
      const widget = tracker?.find(w => w.content === notebook);
      const kernel = widget?.sessionContext.session?.kernel?.id;
      if (kernel) {
        warnings.withdrawKernel(kernel);
      }
    });
    // a process of the user on a GPU none of their claims holds: until they act on it
    model.gpuProcess.connect(
      shown(event => Notification.warning(event.message, { autoClose: false }))
    );
    // a kernel moved (Kubernetes): into its pod, or back here without its devices
    const moves = new KernelMoves(model, moveNotifier, kernels, fail);
    model.kernelMoved.connect(shown(event => moves.show(event)));
    // another user waits for an idle claim's devices: Keep (bounded) or Release
    const reclaims = new ReclaimWarnings(model, notifier, kernels.label, fail);
    model.reclaimWarning.connect(shown(event => reclaims.show(event)));
    // a device of the user's claim taken out of service: Move or Release, until done
    const health = new DeviceHealth(model, moveNotifier, kernels, fail, moveAsked);
    model.deviceUnhealthy.connect(shown(event => health.show(event)));
    // another user waits in line for devices the user's claims hold: until the wait ends
    new WaiterNotices(model, waiterNotifier, kernels.label, () => settings.current.notify);
    // a release the user did not make (idle, a lease, an admin, ...): once, one per kernel
    const releases = new ReleaseNotices(model, releaseNotifier, kernels.label);
    model.released.connect(shown(release => releases.add(release)));
    // a background run ended: how, with Output (the panel's command opens it)
    const runEnds = new RunEnds(model, runEndNotifier, name => {
      void app.commands.execute(RUN_OUTPUT, { name });
    });
    model.runEnded.connect(shown(run => void runEnds.show(run)));
  }
};
