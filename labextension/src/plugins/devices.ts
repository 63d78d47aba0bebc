// The Devices panel in the left sidebar, and the status bar item of the notebook in front.

import {
  ILayoutRestorer,
  type JupyterFrontEnd,
  type JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { INotebookTracker } from '@jupyterlab/notebook';
import { IStatusBar } from '@jupyterlab/statusbar';

import type { DraModel } from '../model';
import { IDRAKernels, IDRAModel, type Kernels, PLUGIN_ID, RUN_OUTPUT } from '../tokens';
import { DevicesPanel } from '../views/panel';
import { DeviceStatus } from '../views/statusbar';

export const devicesPlugin: JupyterFrontEndPlugin<void> = {
  id: 'dra-jupyter-labextension:devices',
  description: 'The Devices panel and the status bar item of the notebook in front',
  autoStart: true,
  requires: [IDRAModel, IDRAKernels],
  optional: [ILayoutRestorer, INotebookTracker, IStatusBar],
  activate: (
    app: JupyterFrontEnd,
    model: DraModel,
    kernels: Kernels,
    restorer: ILayoutRestorer | null,
    tracker: INotebookTracker | null,
    statusBar: IStatusBar | null
  ) => {
    const panel = new DevicesPanel(model, kernels);
    app.shell.add(panel, 'left', { rank: 850 });
    restorer?.add(panel, panel.id);
    app.commands.addCommand(RUN_OUTPUT, {
      label: 'Show run output',
      caption: "Open the Devices panel on a run's last lines of output",
      execute: args => {
        app.shell.activateById(panel.id);
        panel.showRunOutput(String(args.name ?? ''));
      }
    });

    if (statusBar !== null) {
      // a notebook in front: the status bar says when its kernel waits in line
      model.waitingWanted = () => kernels.current() !== null;
      const status = new DeviceStatus(model, kernels, () => app.shell.activateById(panel.id));
      statusBar.registerStatusItem(`${PLUGIN_ID}:status`, {
        item: status,
        align: 'left',
        rank: 4 // shown by itself: it hides when the kernel holds nothing
      });
      tracker?.currentChanged.connect(() => status.update());
    }
  }
};
