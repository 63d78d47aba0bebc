// The dra-jupyter JupyterLab extension: the Devices panel, the status bar item, the
// notifications of idle warnings, releases and kernel moves, and the commands; one plugin
// each, around the model (plugins/model.ts: IDRAModel in tokens.ts).

import type { JupyterFrontEndPlugin } from '@jupyterlab/application';

import { commandsPlugin } from './plugins/commands';
import { devicesPlugin } from './plugins/devices';
import { kernelsPlugin } from './plugins/kernels';
import { modelPlugin } from './plugins/model';
import { notificationsPlugin } from './plugins/notifications';
import { settingsPlugin } from './plugins/settings';

const plugins: JupyterFrontEndPlugin<unknown>[] = [
  settingsPlugin,
  modelPlugin,
  kernelsPlugin,
  devicesPlugin,
  notificationsPlugin,
  commandsPlugin
];

export default plugins;
