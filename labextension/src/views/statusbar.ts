// The status bar item: what the current notebook's kernel holds, e.g.
// `2× H200 · idle in 12:30`, or `waiting in line for 2 GPUs (number 1)` while a cell of it
// waits for devices; nothing when it holds and waits for nothing. A click opens the panel.

import { Widget } from '@lumino/widgets';

import { requestWords, statusText } from '../format';
import type { DraModel } from '../model';
import type { Kernels } from '../tokens';

export class DeviceStatus extends Widget {
  constructor(
    readonly model: DraModel,
    readonly kernels: Kernels,
    onClick: () => void
  ) {
    super();
    this.addClass('dra-DeviceStatus');
    this.addClass('jp-StatusBar-TextItem');
    this.node.title = 'Devices of this notebook’s kernel (click: the Devices panel)';
    this.node.addEventListener('click', onClick);
    model.changed.connect(this.update, this);
    this._ticker = window.setInterval(() => this.update(), 1000);
  }

  /** The text shown now (empty: the item is hidden). */
  text(): string {
    const kernel = this.kernels.current();
    if (!kernel) {
      return '';
    }
    const held = statusText(
      this.model.kernelClaims(kernel),
      this.model.deviceMap,
      this.model.now(),
      this.kernels.busy(kernel)
    );
    const waiting = this.model
      .kernelWaiting(kernel)
      .map(w => `waiting in line for ${requestWords(w.waiter.what)} (number ${w.place})`);
    return [held, ...waiting].filter(Boolean).join(' · ');
  }

  protected onUpdateRequest(): void {
    const text = this.text();
    if (this.node.textContent !== text) {
      this.node.textContent = text;
    }
    this.node.style.display = text ? '' : 'none';
  }

  dispose(): void {
    window.clearInterval(this._ticker);
    super.dispose();
  }

  private _ticker: number;
}
