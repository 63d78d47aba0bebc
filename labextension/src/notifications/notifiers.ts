// The notifications as JupyterLab shows them (its Notification): the warnings that stay
// until withdrawn, the notes that go, and an action that failed.

import { Notification } from '@jupyterlab/apputils';

import { toError } from '../model';
import type { MoveNotifier } from './moves';
import type { ReleaseNotifier } from './releases';
import type { RunEndNotifier } from './runends';
import type { Notifier } from './warnings';

/** The idle warnings as JupyterLab's notifications (they stay until withdrawn). */
export const notifier: Notifier = {
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

/** Someone waits for the user's devices: a note that stays until the wait ends. */
export const waiterNotifier: Notifier = {
  warn: message => Notification.info(message, { autoClose: false }),
  update: (id, message) => Notification.update({ id, message, type: 'info' }),
  dismiss: id => Notification.dismiss(id)
};

/** The kernel moves as JupyterLab's notifications (a kernel back on the server: a warning
 * that stays, with its restart; one into its pod, and a restart done: notes that go). */
export const moveNotifier: MoveNotifier = {
  ...notifier,
  info: (message, ms) => {
    Notification.info(message, { autoClose: ms });
  },
  success: message => {
    Notification.success(message, { autoClose: 5000 });
  }
};

/** A release the user did not make: a note that goes after 8 s (a kernel shut down, the
 * server stopped), or a warning that stays (idle, a lease, an admin, ...). */
export const releaseNotifier: ReleaseNotifier = {
  note: message => {
    Notification.info(message, { autoClose: 8000 });
  },
  warn: message => {
    Notification.warning(message, { autoClose: false });
  }
};

/** A run's end: a note (success, cancel; it goes after 15 s, the bell keeps it) or a
 * warning that stays (a failure), each with Output. */
export const runEndNotifier: RunEndNotifier = {
  note: (message, kind, output) => {
    const actions = [{ label: 'Output', caption: "Show the run's last lines", callback: output }];
    if (kind === 'success') {
      Notification.success(message, { autoClose: 15000, actions });
    } else {
      Notification.info(message, { autoClose: 15000, actions });
    }
  },
  warn: (message, output) => {
    Notification.warning(message, {
      autoClose: false,
      actions: [{ label: 'Output', caption: "Show the run's last lines", callback: output }]
    });
  }
};

/** An action that failed (a Keep, a Release, a restart): its message, until closed. */
export function fail(err: unknown): void {
  Notification.error(toError(err).message, { autoClose: false });
}
