// The page's kernels (IDRAKernels), one for the views, the notifications and the commands:
// busy is settled across them (format.ts's settledBusy keeps when each was first seen busy).

import type { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { INotebookTracker } from '@jupyterlab/notebook';

import { pageKernels } from '../kernels';
import { IDRAKernels, type Kernels } from '../tokens';

export const kernelsPlugin: JupyterFrontEndPlugin<Kernels> = {
  id: 'dra-jupyter-labextension:kernels',
  description: 'The kernels of the page as the Devices panel and the notifications see them',
  autoStart: true,
  provides: IDRAKernels,
  optional: [INotebookTracker],
  activate: (app: JupyterFrontEnd, tracker: INotebookTracker | null): Kernels =>
    pageKernels(app, tracker)
};
