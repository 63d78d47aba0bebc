// The claim card: a waiting request's place in line, then the claim, its idle countdown
// and buttons. The kernel sets the state; the server extension (when it answers) gives
// the idle deadline, notices releases made elsewhere and carries Keep and Release.

/**
 * What a view holds besides the model, and its buttons' actions.
 * @typedef {{
 *   server: boolean | null,
 *   deadline: number | null,
 *   busy: boolean,
 *   gpu: string,
 *   warning: number,
 *   warningNow: boolean,
 *   released: boolean,
 *   why: string,
 *   releasedAt: number,
 *   kernel: string,
 *   restarted: string,
 *   waiting: Waiter[],
 *   steps: number,
 *   release: (button: HTMLButtonElement) => Promise<void>,
 *   keep: (button: HTMLButtonElement) => Promise<void>,
 *   restart: (button: HTMLButtonElement) => Promise<void>,
 * }} CardView
 */

/**
 * @param {HTMLElement} el
 * @param {Model} model
 * @param {CardView} view
 */
function draCardRender(el, model, view) {
  const state = view.released ? "released" : model.get("state");
  const shown = state === "allocated" && view.warningNow ? "warning" : state;
  el.replaceChildren();
  const head = draEl("div", "dra-head");
  head.append(draEl("span", "dra-title", model.get("name") || "request"));
  head.append(draEl("span", "dra-pill dra-pill-" + shown, shown));
  if (model.get("simulated")) {
    const badge = draEl("span", "dra-badge dra-simulated", "simulated");
    badge.title = "a simulated inventory: these devices do not exist";
    head.append(badge);
  }
  el.append(head);
  if (model.get("what")) el.append(draEl("div", "dra-card-line dra-dim", model.get("what")));
  if (state === "waiting") {
    const pos = model.get("position");
    const line = draEl("div", "dra-card-line dra-waiting");
    line.dataset.since = String(model.get("waiting_since"));
    line.dataset.timeout = String(model.get("timeout") || 0);
    line.dataset.place = pos === 1 ? "next in line" : pos > 1 ? `number ${pos} in line` : "";
    el.append(line);
  }
  /** @type {{ name: string, model: string, memory: string }[]} */
  const devices = model.get("devices");
  if (devices.length) {
    const list = draEl("div", "dra-card-line");
    list.append(
      draEl("span", "dra-dim", devices.length === 1 ? "device: " : `${devices.length} devices: `),
    );
    list.append(
      devices.map((d) => `${d.name} (${[d.model, d.memory].filter(Boolean).join(", ")})`).join("; "),
    );
    el.append(list);
  }
  if (state === "released" && view.why) {
    const at = new Date(view.releasedAt * 1000);
    const when = at.toLocaleTimeString([], draClock);
    const line = draEl("div", "dra-card-line dra-released", `released at ${when}: ${view.why}`);
    line.title = at.toLocaleString();
    el.append(line);
  }
  if (model.get("message")) {
    const kind = state === "failed" ? "dra-error" : "dra-dim"; // else: notes, e.g. simulated
    el.append(draEl("div", "dra-card-line " + kind, model.get("message")));
  }
  if (state === "allocated") {
    const info = draEl("div", "dra-card-line");
    if (view.busy) {
      const busy = draEl("span", "dra-busy", "busy: a cell is running");
      busy.title = "a running cell is never idle: the idle countdown starts again when it ends";
      info.append(busy);
    } else if (view.deadline) {
      const c = draEl("span", "dra-countdown");
      c.dataset.deadline = String(view.deadline);
      c.dataset.warning = String(view.warning);
      info.append(c);
    } else if (view.server === false) {
      info.append(draEl("span", "dra-dim", "no idle release here (no dra-jupyter server extension)"));
    }
    if (view.gpu) {
      const gpu = draEl("span", "dra-gpu", ` · ${view.gpu}`);
      gpu.title = "a kernel whose GPU is active is not idle, whether or not a cell runs";
      info.append(gpu);
    }
    if (model.get("lease_expires")) {
      const lease = draEl("span", "dra-dim dra-lease");
      lease.dataset.expires = String(model.get("lease_expires"));
      info.append(" ", lease);
    }
    el.append(info);
    const buttons = draEl("div", "dra-buttons");
    const release = /** @type {HTMLButtonElement} */ (draEl("button", "dra-release", "Release"));
    release.title = "give the devices back now";
    release.onclick = () => view.release(release);
    const keep = /** @type {HTMLButtonElement} */ (draEl("button", "dra-keep", "Keep"));
    if (view.server === true) {
      keep.title = "reset the idle countdown";
      keep.onclick = () => view.keep(keep);
    } else {
      keep.disabled = true;
      keep.title =
        view.server === false
          ? "needs the dra-jupyter server extension (idle release is the server's)"
          : "looking for the dra-jupyter server extension";
    }
    buttons.append(release, keep);
    if (view.server === true && view.kernel) {
      const restart = /** @type {HTMLButtonElement} */ (
        draEl("button", "dra-restart", "Restart kernel with these devices")
      );
      restart.title =
        "restart the kernel keeping this claim, with its devices in the new kernel's " +
        "environment (CUDA_VISIBLE_DEVICES): for a kernel that loaded CUDA before the " +
        "request; a plain restart gives the devices back";
      restart.onclick = () => view.restart(restart);
      buttons.append(restart);
    }
    el.append(buttons);
    if (view.restarted) el.append(draEl("div", "dra-card-line dra-dim", view.restarted));
    const queue = draQueue(view.waiting);
    if (queue) el.append(queue);
  }
  draCardTick(el);
}

/** @param {Element} el */
function draCardTick(el) {
  const now = Date.now() / 1000;
  /** @param {string} selector */
  const all = (selector) => /** @type {NodeListOf<HTMLElement>} */ (el.querySelectorAll(selector));
  for (const e of all(".dra-waiting")) {
    const waited = now - Number(e.dataset.since);
    const limit = Number(e.dataset.timeout);
    const parts = ["waiting"];
    if (e.dataset.place) parts.push(e.dataset.place);
    parts.push(draDuration(waited) + (limit > 0 ? " of " + draDuration(limit) : ""));
    e.textContent = parts.join(" \u00b7 ");
  }
  for (const e of all(".dra-countdown")) {
    const left = Number(e.dataset.deadline) - now;
    e.textContent = left > 0 ? "idle release in " + draDuration(left) : "idle: releasing";
    e.classList.toggle("dra-warn", left <= Number(e.dataset.warning || 0));
  }
  for (const e of all(".dra-lease")) {
    e.textContent = "lease ends in " + draDuration(Number(e.dataset.expires) - now);
  }
}

export default {
  /** @param {{ model: Model, el: HTMLElement }} context */
  render({ model, el }) {
    el.classList.add("dra-widget", "dra-card");
    /** @type {CardView} */
    const view = {
      server: null,
      deadline: null,
      busy: false,
      gpu: "",
      warning: 0,
      warningNow: false,
      released: false,
      why: "",
      releasedAt: 0,
      kernel: "",
      restarted: "",
      waiting: [],
      steps: 0,
      release: async () => {}, // set below, once the helpers they use exist
      keep: async () => {},
      restart: async () => {},
    };
    const presence = draPresence();
    const asker = draAsker(model);
    const redraw = () => draCardRender(el, model, view);
    const named = () => ({ name: String(model.get("name")) }); // the claim, for draCall
    const gone = () => {
      view.released = true;
      draSend(model, { type: "refresh" }); // once: the kernel's claim object learns it too
      redraw();
    };
    view.release = async (button) => {
      button.disabled = true;
      if (view.server === true) {
        try {
          await draCall("DELETE /claims/{name}", named());
        } catch (e) {
          if (/** @type {DraError} */ (e).status !== 404) {
            draSend(model, { type: "release" });
            return;
          }
        }
        gone();
      } else {
        draSend(model, { type: "release" });
      }
    };
    view.keep = async (button) => {
      button.disabled = true;
      try {
        const claim = await draCall("POST /claims/{name}/keep", named());
        view.deadline = claim.idle_deadline;
        view.busy = claim.busy;
        view.gpu = claim.gpu.state === "unknown" ? "" : claim.gpu.text;
      } catch (e) {
        if (/** @type {DraError} */ (e).status === 404) view.released = true;
      }
      redraw();
    };
    view.restart = async (button) => {
      const question =
        "Restart the kernel, keeping these devices? Its variables are lost; it starts " +
        "again with the devices in its environment.";
      if (!window.confirm(question)) return;
      button.disabled = true;
      try {
        const answer = await draCall("POST /kernels/{kernel_id}/restart-with-claims", {
          kernel_id: view.kernel,
        });
        const env = Object.entries(answer.env).map(([k, v]) => `${k}=${v}`);
        view.restarted =
          "kernel restarted with these devices" + (env.length ? ": " + env.join(" ") : "");
      } catch (e) {
        view.restarted = "restart failed: " + (/** @type {DraError} */ (e).message || e);
      }
      redraw();
    };
    async function step() {
      if (model.get("state") !== "allocated" || view.released) return;
      if (view.server !== false) {
        try {
          if (view.server === null) {
            const metrics = await draCall("GET /metrics", { history: 0 });
            view.warning = metrics.idle_warning || 0;
          }
          // a server that does not know the claim (another ledger) is not this card's
          const claim = await draCall("GET /claims/{name}", named());
          if (view.server === null) {
            view.server = true;
            redraw();
          }
          if (claim.kernel_id !== null && claim.kernel_id !== view.kernel) {
            view.kernel = claim.kernel_id;
            redraw();
          }
          if (!claim.released && view.steps++ % 5 === 0) {
            // who waits in line (behind this claim, perhaps): every 5th poll is enough
            const devices = await draCall("GET /devices");
            if (JSON.stringify(devices.waiting) !== JSON.stringify(view.waiting)) {
              view.waiting = devices.waiting;
              redraw();
            }
          }
          if (claim.released) {
            // released by the server (idle, its kernel gone, ...): say why, poll no more
            view.why = claim.released.message;
            view.releasedAt = claim.released.time;
            gone();
            return;
          }
          const warningNow =
            !claim.busy &&
            claim.idle_deadline !== null &&
            claim.idle_deadline - Date.now() / 1000 <= view.warning;
          // while a cell runs the deadline moves with the clock: redraw when busy changes
          const deadline = claim.busy ? view.deadline : claim.idle_deadline;
          const gpu = claim.gpu.state === "unknown" ? "" : claim.gpu.text;
          if (
            deadline !== view.deadline ||
            claim.busy !== view.busy ||
            gpu !== view.gpu ||
            warningNow !== view.warningNow
          ) {
            view.deadline = claim.idle_deadline;
            view.busy = claim.busy;
            view.gpu = gpu;
            view.warningNow = warningNow;
            redraw();
          }
        } catch (e) {
          if (view.server === true) {
            // released by someone or something else
            if (/** @type {DraError} */ (e).status === 404) gone();
            return;
          }
          view.server = false;
          redraw();
        }
        if (view.server === true) return;
      }
      if (presence.recent(5 * 60 * 1000)) asker.ask();
    }
    const poller = draPoller(el, step, () =>
      Math.max(250, 1000 * Math.max(model.get("interval"), view.server === false ? 10 : 0)),
    );
    const ticker = setInterval(() => draCardTick(el), 1000);
    const changed = () => {
      redraw();
      poller.now();
    };
    const traits = ["state", "position", "devices", "message", "name", "lease_expires"];
    for (const t of traits) model.on("change:" + t, changed);
    redraw();
    return () => {
      draStop(poller, presence, asker, ticker);
      for (const t of traits) model.off("change:" + t, changed);
    };
  },
};
