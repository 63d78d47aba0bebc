// The dra-jupyter JupyterLab extension: the Devices panel, the status bar item, the
// notifications of idle warnings, releases and kernel moves, and the commands.

import {
  ILayoutRestorer,
  type JupyterFrontEnd,
  type JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { Dialog, ICommandPalette, Notification, showDialog } from '@jupyterlab/apputils';
import { INotebookTracker, NotebookActions } from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { IStatusBar } from '@jupyterlab/statusbar';
import { Debouncer } from '@lumino/polling';

import { deviceSummary, releaseReason, settledBusy } from './format';
import { DraModel, toError } from './model';
import { DeviceHealth } from './notifications/health';
import { KernelMoves, type MoveNotifier } from './notifications/moves';
import { ReclaimWarnings } from './notifications/reclaims';
import { IdleWarnings, type Notifier } from './notifications/warnings';
import { requestAPI } from './request';
import { DEFAULT_SETTINGS, PLUGIN_ID, type Settings } from './tokens';
import { DevicesPanel, type Kernels } from './views/panel';
import { DeviceStatus } from './views/statusbar';

export const COMMANDS = {
  show: 'dra-jupyter:show-devices',
  releaseAll: 'dra-jupyter:release-all',
  restart: 'dra-jupyter:restart-with-devices'
} as const;

const CATEGORY = 'Devices';

/** The idle warnings as JupyterLab's notifications (they stay until withdrawn). */
const notifier: Notifier = {
  warn: (message, actions) =>
    Notification.warning(message, {
      autoClose: false,
      actions: actions.map(a => ({
        label: a.label,
        caption: a.caption,
        displayType: a.kind,
        callback: a.callback
      }))
    }),
  update: (id, message) => Notification.update({ id, message, type: 'warning' }),
  dismiss: id => Notification.dismiss(id)
};

/** The kernel moves as JupyterLab's notifications (a kernel back on the server: a warning
 * that stays, with its restart; one into its pod, and a restart done: notes that go). */
const moveNotifier: MoveNotifier = {
  ...notifier,
  info: (message, ms) => {
    Notification.info(message, { autoClose: ms });
  },
  success: message => {
    Notification.success(message, { autoClose: 5000 });
  }
};

function pageKernels(app: JupyterFrontEnd, tracker: INotebookTracker | null): Kernels {
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

const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description:
    'GPU, MIG and TPU claims of dra-jupyter: a Devices panel, a status bar item and notifications',
  autoStart: true,
  optional: [ICommandPalette, ILayoutRestorer, INotebookTracker, ISettingRegistry, IStatusBar],
  activate: (
    app: JupyterFrontEnd,
    palette: ICommandPalette | null,
    restorer: ILayoutRestorer | null,
    tracker: INotebookTracker | null,
    registry: ISettingRegistry | null,
    statusBar: IStatusBar | null
  ) => {
    const settings: Settings = { ...DEFAULT_SETTINGS };
    const model = new DraModel({ request: requestAPI, refreshInterval: settings.refreshInterval });
    const kernels = pageKernels(app, tracker);
    model.ownKernel = id => [...app.serviceManager.kernels.running()].some(k => k.id === id);
    if (statusBar !== null) {
      // a notebook in front: the status bar says when its kernel waits in line
      model.waitingWanted = () => kernels.current() !== null;
    }

    const panel = new DevicesPanel(model, kernels);
    app.shell.add(panel, 'left', { rank: 850 });
    restorer?.add(panel, panel.id);
    const show = () => app.shell.activateById(panel.id);

    if (statusBar !== null) {
      const status = new DeviceStatus(model, kernels, show);
      statusBar.registerStatusItem(`${PLUGIN_ID}:status`, {
        item: status,
        align: 'left',
        rank: 4 // shown by itself: it hides when the kernel holds nothing
      });
      tracker?.currentChanged.connect(() => status.update());
    }

    // a cell that ends may have made or released a claim: refresh then, not at the next
    // poll (a claim made in a kernel is announced by the server only at its next check)
    const afterCell = new Debouncer(() => model.refreshSoon(), 200);
    tracker?.widgetAdded.connect((_, widget) => {
      widget.sessionContext.statusChanged.connect((_, status) => {
        if (status === 'idle') {
          void afterCell.invoke();
        }
      });
    });

    // the server's events (jupyter_server's event bus, which the page already follows)
    app.serviceManager.events.stream.connect((_, event) => {
      model.handleEvent(event as unknown as { schema_id: string });
    });

    const where = (kernelId: string | null) => {
      const label = kernelId ? kernels.label(kernelId) : null;
      return label ? ` of ${label}` : '';
    };
    const fail = (err: unknown) => {
      Notification.error(toError(err).message, { autoClose: false });
    };
    const warnings = new IdleWarnings(model, notifier, kernels.label, fail);
    model.idleWarning.connect((_, event) => {
      if (settings.notify) {
        warnings.show(event);
      }
    });
    // a cell started: its kernel is not idle (the server moves the deadline when it ends)
    NotebookActions.executionScheduled.connect((_, { notebook }) => {
      const widget = tracker?.find(w => w.content === notebook);
      const kernel = widget?.sessionContext.session?.kernel?.id;
      if (kernel) {
        warnings.withdrawKernel(kernel);
      }
    });
    // a process of the user on a GPU none of their claims holds: until they act on it
    model.gpuProcess.connect((_, event) => {
      if (settings.notify) {
        Notification.warning(event.message, { autoClose: false });
      }
    });
    // a kernel moved (Kubernetes): into its pod, or back here without its devices
    const moves = new KernelMoves(model, moveNotifier, kernels, fail);
    model.kernelMoved.connect((_, event) => {
      if (settings.notify) {
        moves.show(event);
      }
    });
    // another user waits for an idle claim's devices: Keep (bounded) or Release
    const reclaims = new ReclaimWarnings(model, notifier, kernels.label, fail);
    model.reclaimWarning.connect((_, event) => {
      if (settings.notify) {
        reclaims.show(event);
      }
    });
    // a device of the user's claim taken out of service: Move or Release, until done
    const health = new DeviceHealth(model, moveNotifier, kernels, fail);
    model.deviceUnhealthy.connect((_, event) => {
      if (settings.notify) {
        health.show(event);
      }
    });
    model.released.connect((_, { event, claim }) => {
      if (!settings.notify) {
        return;
      }
      const what = deviceSummary(event.devices, model.deviceMap);
      const kernel = event.kernel_id ?? claim?.kernel_id ?? null;
      const text =
        `Released ${what}${where(kernel)} (claim ${event.claim}): ` +
        `${releaseReason(event.reason)}.`;
      if (event.reason === 'user') {
        Notification.info(text, { autoClose: 8000 });
      } else {
        Notification.warning(text, { autoClose: false });
      }
    });

    app.commands.addCommand(COMMANDS.show, {
      label: 'Show devices',
      caption: 'Open the Devices panel: your claims and the devices',
      execute: show
    });
    app.commands.addCommand(COMMANDS.releaseAll, {
      label: 'Release all my devices',
      caption: 'Give back every device you hold on this server',
      execute: async () => {
        await model.refreshSoon();
        const n = model.claims.length;
        if (n === 0) {
          Notification.info('You hold no devices.', { autoClose: 5000 });
          return;
        }
        const answer = await showDialog({
          title: 'Release all my devices',
          body: `Give back ${deviceSummary(
            model.claims.flatMap(c => c.devices),
            model.deviceMap
          )} (${n} claim${n > 1 ? 's' : ''})? Kernels using them lose them.`,
          buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Release' })]
        });
        if (answer.button.accept) {
          await model.releaseAll().catch(fail);
        }
      }
    });
    app.commands.addCommand(COMMANDS.restart, {
      label: 'Restart kernel with its devices',
      caption: 'Restart the current kernel; the new kernel keeps its devices and their environment',
      isEnabled: () => kernels.current() !== null,
      execute: async () => {
        const kernel = kernels.current();
        if (kernel === null) {
          return;
        }
        try {
          const answer = await model.restartWithClaims(kernel);
          await kernels.restarted(kernel);
          const what = deviceSummary(
            answer.claims.flatMap(c => c.devices),
            model.deviceMap
          );
          Notification.success(
            answer.claims.length
              ? `Kernel restarted with ${what}.`
              : 'Kernel restarted; it held no devices.',
            { autoClose: 5000 }
          );
        } catch (err) {
          fail(err);
        }
      }
    });
    if (palette !== null) {
      for (const command of Object.values(COMMANDS)) {
        palette.addItem({ command, category: CATEGORY });
      }
    }

    const apply = (loaded: ISettingRegistry.ISettings) => {
      const composite = loaded.composite as Partial<Settings>;
      settings.refreshInterval = Number(
        composite.refreshInterval ?? DEFAULT_SETTINGS.refreshInterval
      );
      settings.notify = composite.notify !== false;
      model.refreshInterval = settings.refreshInterval;
    };
    if (registry !== null) {
      registry
        .load(PLUGIN_ID)
        .then(loaded => {
          apply(loaded);
          loaded.changed.connect(apply);
        })
        .catch(err => console.warn(`dra-jupyter: settings not loaded: ${String(err)}`));
    }
    model.start();
  }
};

export default plugin;
