// The questions asked before an action that cannot be undone, as JupyterLab's own Restart
// and Shut Down ask: a restart with devices (the kernel's variables go), a Move (the same,
// on an equivalent device), the release of several devices or of a run's (getting them
// back may mean waiting in line; the run stops).

import { Dialog, showDialog } from '@jupyterlab/apputils';

/** Ask with `title` and `body`; `label` is the button that does it. True: do it. */
export async function asked(title: string, body: string, label: string): Promise<boolean> {
  const answer = await showDialog({
    title,
    body,
    buttons: [Dialog.cancelButton(), Dialog.warnButton({ label })]
  });
  return answer.button.accept;
}

/** Before a restart with devices: true, restart. */
export function restartAsked(notebook: string | null, label: string): Promise<boolean> {
  return asked(
    `${label}?`,
    `The kernel${notebook ? ` of ${notebook}` : ''} restarts with the devices in its ` +
      'environment; its variables are lost.',
    'Restart'
  );
}

/** Before a Move off a device taken out of service: true, move. */
export function moveAsked(notebook: string | null): Promise<boolean> {
  return asked(
    'Move to an equivalent device?',
    `The kernel${notebook ? ` of ${notebook}` : ''} restarts on an equivalent device; its ` +
      'variables are lost. The claim with the device taken out of service is released.',
    'Move'
  );
}

/**
 * Before the release of `what` (`2× H200`): asked where more than one device goes or a
 * run stops (`run`); a single device of a notebook goes at once. True: release.
 */
export function releaseAsked(
  what: string,
  devices: number,
  holder: string | null,
  run: string | null
): Promise<boolean> {
  if (devices < 2 && !run) {
    return Promise.resolve(true);
  }
  const whose = run ? `run ${run}` : holder;
  return asked(
    `Release ${what}?`,
    `${whose ? `${whose} loses them` : 'They go back'} now` +
      (run ? ', and the run stops' : '') +
      '; getting them back may mean waiting in line.',
    'Release'
  );
}
