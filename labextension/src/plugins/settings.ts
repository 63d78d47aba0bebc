// The settings plugin (schema/plugin.json is keyed by its id): the user's settings, loaded
// and followed, for the model (the refresh interval) and the notifications (whether to
// show them).

import type { JupyterFrontEndPlugin } from '@jupyterlab/application';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { type ISignal, Signal } from '@lumino/signaling';

import { DEFAULT_SETTINGS, IDRASettings, PLUGIN_ID, type Settings } from '../tokens';

class LiveSettings implements IDRASettings {
  current: Readonly<Settings> = { ...DEFAULT_SETTINGS };

  get changed(): ISignal<IDRASettings, Readonly<Settings>> {
    return this._changed;
  }

  apply(loaded: ISettingRegistry.ISettings): void {
    const composite = loaded.composite as Partial<Settings>;
    this.current = {
      refreshInterval: Number(composite.refreshInterval ?? DEFAULT_SETTINGS.refreshInterval),
      notify: composite.notify !== false
    };
    this._changed.emit(this.current);
  }

  private _changed = new Signal<IDRASettings, Readonly<Settings>>(this);
}

export const settingsPlugin: JupyterFrontEndPlugin<IDRASettings> = {
  id: PLUGIN_ID,
  description: 'The settings of the Devices panel, the status bar item and the notifications',
  autoStart: true,
  provides: IDRASettings,
  optional: [ISettingRegistry],
  activate: (_app, registry: ISettingRegistry | null): IDRASettings => {
    const settings = new LiveSettings();
    registry
      ?.load(PLUGIN_ID)
      .then(loaded => {
        settings.apply(loaded);
        loaded.changed.connect(settings.apply, settings);
      })
      .catch(err => console.warn(`dra-jupyter: settings not loaded: ${String(err)}`));
    return settings;
  }
};
