// The commands (in the palette's Devices category, and in the Kernel menu by
// schema/plugin.json): show the Devices panel, release all my devices, restart the
// kernel with its devices.

import type { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { Dialog, ICommandPalette, Notification, showDialog } from '@jupyterlab/apputils';

import { deviceSummary } from '../format';
import type { DraModel } from '../model';
import { fail } from '../notifications/notifiers';
import { IDRAKernels, IDRAModel, type Kernels } from '../tokens';
import { PANEL_ID } from '../views/panel';

export const COMMANDS = {
  show: 'dra-jupyter:show-devices',
  releaseAll: 'dra-jupyter:release-all',
  restart: 'dra-jupyter:restart-with-devices'
} as const;

const CATEGORY = 'Devices';

export const commandsPlugin: JupyterFrontEndPlugin<void> = {
  id: 'dra-jupyter-labextension:commands',
  description: 'Show devices, release all my devices, restart the kernel with its devices',
  autoStart: true,
  requires: [IDRAModel, IDRAKernels],
  optional: [ICommandPalette],
  activate: (
    app: JupyterFrontEnd,
    model: DraModel,
    kernels: Kernels,
    palette: ICommandPalette | null
  ) => {
    app.commands.addCommand(COMMANDS.show, {
      label: 'Show devices',
      caption: 'Open the Devices panel: your claims and the devices',
      execute: () => app.shell.activateById(PANEL_ID)
    });
    app.commands.addCommand(COMMANDS.releaseAll, {
      label: 'Release all my devices',
      caption: 'Give back every device you hold on this server',
      execute: () => releaseAll(model)
    });
    app.commands.addCommand(COMMANDS.restart, {
      label: 'Restart kernel with its devices',
      caption: 'Restart the current kernel; the new kernel keeps its devices and their environment',
      isEnabled: () => kernels.current() !== null,
      execute: () => restart(model, kernels)
    });
    if (palette !== null) {
      for (const command of Object.values(COMMANDS)) {
        palette.addItem({ command, category: CATEGORY });
      }
    }
  }
};

/** Release every claim of the caller, once they said so. */
async function releaseAll(model: DraModel): Promise<void> {
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

/** Restart the kernel of the notebook in front with its claims. */
async function restart(model: DraModel, kernels: Kernels): Promise<void> {
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
