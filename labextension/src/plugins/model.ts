// The core plugin: the model of the page (IDRAModel), which the views, the notifications
// and the commands require. It refreshes after a cell ends, follows the server's events,
// and polls once every plugin of the page is active.

import type { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { INotebookTracker } from '@jupyterlab/notebook';
import { Debouncer } from '@lumino/polling';

import { DraModel } from '../model';
import { requestAPI } from '../request';
import { IDRAModel, IDRASettings } from '../tokens';

export const modelPlugin: JupyterFrontEndPlugin<DraModel> = {
  id: 'dra-jupyter-labextension:model',
  description: "The caller's claims and the devices, refreshed, and the server's events",
  autoStart: true,
  provides: IDRAModel,
  requires: [IDRASettings],
  optional: [INotebookTracker],
  activate: (
    app: JupyterFrontEnd,
    settings: IDRASettings,
    tracker: INotebookTracker | null
  ): DraModel => {
    const model = new DraModel({
      request: requestAPI,
      refreshInterval: settings.current.refreshInterval
    });
    model.ownKernel = id => [...app.serviceManager.kernels.running()].some(k => k.id === id);
    settings.changed.connect((_, { refreshInterval }) => {
      model.refreshInterval = refreshInterval;
    });

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

    // once the views and the notifications listen to the model (every plugin is active):
    // the server's events (jupyter_server's event bus, which the page already follows),
    // and the refreshes
    void app.started.then(() => {
      app.serviceManager.events.stream.connect((_, event) => {
        model.handleEvent(event as unknown as { schema_id: string });
      });
      model.start();
    });
    return model;
  }
};
