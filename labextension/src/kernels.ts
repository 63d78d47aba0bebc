// The page's kernels as the views and the notifications see them: whether one runs a cell,
// its notebook, the one in front, and its restart, from the notebooks open in the page and
// the server's sessions.

import type { JupyterFrontEnd } from '@jupyterlab/application';
import type { INotebookTracker } from '@jupyterlab/notebook';

import { settledBusy } from './format';
import type { Kernels } from './tokens';

/** The page's kernels: the notebooks open in it (none without the tracker), then the server's
 * kernels and sessions. */
export function pageKernels(app: JupyterFrontEnd, tracker: INotebookTracker | null): Kernels {
  const services = app.serviceManager;
  const busySince = new Map<string, number>(); // kernel -> when first seen busy
  const status = (kernelId: string): boolean => {
    for (const widget of tracker ? [...iterate(tracker)] : []) {
      const kernel = widget.sessionContext.session?.kernel;
      if (kernel?.id === kernelId) {
        return kernel.status === 'busy';
      }
    }
    for (const model of services.kernels.running()) {
      if (model.id === kernelId) {
        return model.execution_state === 'busy';
      }
    }
    return false;
  };
  return {
    busy(kernelId) {
      return settledBusy(busySince, kernelId, status(kernelId), Date.now());
    },
    label(kernelId) {
      for (const widget of tracker ? [...iterate(tracker)] : []) {
        if (widget.sessionContext.session?.kernel?.id === kernelId) {
          return widget.context.path;
        }
      }
      for (const session of services.sessions.running()) {
        if (session.kernel?.id === kernelId) {
          return session.path;
        }
      }
      return null;
    },
    current() {
      return tracker?.currentWidget?.sessionContext.session?.kernel?.id ?? null;
    },
    async restarted(kernelId) {
      // the page's connection saw the old kernel go: a new connection asks the new one
      // for its state, and JupyterLab reads it (Idle) at once
      for (const widget of tracker ? [...iterate(tracker)] : []) {
        const kernel = widget.sessionContext.session?.kernel;
        if (kernel?.id === kernelId && !kernel.isDisposed) {
          await kernel.reconnect();
        }
      }
    }
  };
}

function* iterate(
  tracker: INotebookTracker
): Generator<NonNullable<INotebookTracker['currentWidget']>> {
  const all: NonNullable<INotebookTracker['currentWidget']>[] = [];
  tracker.forEach(w => {
    all.push(w);
  });
  yield* all;
}
