// The live device board. Data comes from the dra-jupyter server extension's REST API
// (polled from here, never through the kernel), or, where no extension answers, from the
// kernel: a {type: "refresh"} message that the kernel answers by updating `rows`.

/**
 * A claim of a row: from the REST claims, or the kernel's (dra_jupyter/widgets/rows.py);
 * `notebook`: the name of its kernel's notebook where known.
 * @typedef {{
 *   name: string, user: string, kernel: string, idle_deadline: number | null, busy: boolean,
 *   notebook?: string,
 * }} RowClaim
 */
/**
 * A row of the board: a device with its claims and current metrics, joined here from the
 * REST answers or by the kernel (the `rows` trait, dra_jupyter/widgets/rows.py).
 * @typedef {Device & {
 *   name: string,
 *   claims: RowClaim[],
 *   memory_used: number | null,
 *   memory_total: number | null,
 *   utilization: number | null,
 *   temperature: number | null,
 *   spark: (number | null)[],
 * }} Row
 */
/**
 * What a view holds besides the model.
 * @typedef {{
 *   server: boolean | null,
 *   rows: Row[] | null,
 *   simulated: boolean,
 *   inventory: string,
 *   waiting: Waiter[],
 *   notebooks: Map<string, string>,
 *   warning: number,
 *   error: string,
 * }} BoardView
 */

/**
 * @param {Devices} devices
 * @param {Claims} claims
 * @param {Metrics} metrics
 * @param {Map<string, string>} notebooks the notebook of each kernel, by its id
 * @returns {Row[]}
 */
function draJoin(devices, claims, metrics, notebooks) {
  /** @type {Map<string, DeviceMetrics>} */
  const byDevice = new Map();
  for (const m of metrics.devices) byDevice.set(m.device, m);
  /** @type {Map<string, RowClaim[]>} */
  const claimsOf = new Map();
  for (const c of claims.claims) {
    for (const d of c.devices) {
      const list = claimsOf.get(d) || [];
      claimsOf.set(d, list);
      list.push({
        name: c.name,
        user: c.user,
        kernel: c.kernel_id || "",
        notebook: (c.kernel_id && notebooks.get(c.kernel_id)) || "",
        idle_deadline: c.idle_deadline,
        busy: c.busy,
      });
    }
  }
  return devices.devices.map((d) => {
    const m = byDevice.get(d.device);
    const cur = m?.current;
    return {
      ...d,
      name: d.device.split("/").pop() || "",
      claims: claimsOf.get(d.device) || [],
      memory_used: cur?.memory_used ?? null,
      memory_total: cur?.memory_total ?? null,
      utilization: cur?.utilization ?? null,
      temperature: cur?.temperature ?? null,
      spark: m?.history.utilization || [],
    };
  });
}

/**
 * The holder of a row: each claim's name, user, notebook and idle countdown, the same on
 * every device of the claim; one line each, cut with an ellipsis (the full text on hover).
 * @param {Row} row
 * @param {number} warning
 */
function draHolder(row, warning) {
  const cell = draEl("td", "dra-holder");
  if (!row.claims.length) {
    cell.textContent = row.holder || "";
    cell.title = row.holder || "";
    return cell;
  }
  for (const c of row.claims) {
    const line = draEl("div", "dra-claim");
    const where = c.notebook || (c.kernel ? "a kernel" : "");
    line.append(draEl("span", "dra-claim-name", c.name), " ", draEl("span", "dra-dim", c.user));
    if (where) line.append(" ", draEl("span", "dra-dim dra-where", where));
    line.title = c.name + " held by " + c.user + (where ? ", " + where : "");
    if (c.busy) {
      const busy = draEl("span", "dra-busy", "busy");
      busy.title = "a cell is running: the idle countdown starts again when it ends";
      line.append(" ", busy);
    } else if (c.idle_deadline) {
      const left = draEl("span", "dra-countdown");
      left.dataset.deadline = String(c.idle_deadline);
      left.dataset.warning = String(warning);
      line.append(" ", left);
    }
    cell.append(line);
  }
  return cell;
}

/** @param {Element} root */
function draTick(root) {
  const now = Date.now() / 1000;
  /** @type {NodeListOf<HTMLElement>} */
  const countdowns = root.querySelectorAll(".dra-countdown");
  for (const e of countdowns) {
    const left = Number(e.dataset.deadline) - now;
    e.textContent = left > 0 ? "idle release in " + draDuration(left) : "idle: releasing";
    e.classList.toggle("dra-warn", left <= Number(e.dataset.warning || 0));
  }
}

/**
 * @param {HTMLElement} el
 * @param {Model} model
 * @param {BoardView} view
 */
function draRender(el, model, view) {
  /** @type {Row[]} */
  const rows = view.rows !== null ? view.rows : model.get("rows");
  const simulated = view.rows !== null ? view.simulated : model.get("simulated");
  const title = view.rows !== null ? view.inventory : model.get("inventory");
  el.replaceChildren();
  const head = draEl("div", "dra-head");
  head.append(draEl("span", "dra-title", title || "devices"));
  if (simulated) {
    const badge = draEl("span", "dra-badge dra-simulated", "simulated");
    badge.title = "a simulated inventory: no real devices, made-up metrics";
    head.append(badge);
  }
  const source = view.server === true ? "live" : view.server === false ? "from kernel" : "";
  if (source) head.append(draEl("span", "dra-badge", source));
  const error = view.error || (view.server !== true ? model.get("error") : "");
  if (error) head.append(draEl("span", "dra-error", error));
  el.append(head);
  const table = draEl("table", "dra-table");
  const hr = draEl("tr");
  for (const h of ["device", "model", "memory", "util", "temp", "state", "holder"]) {
    hr.append(draEl("th", "", h));
  }
  const thead = draEl("thead");
  thead.append(hr);
  table.append(thead);
  const body = draEl("tbody");
  for (const row of rows) {
    const tr = draEl("tr", "dra-state-" + row.state);
    const dev = draEl("td", "dra-device");
    dev.append(draEl("div", "", row.name), draEl("div", "dra-dim dra-node", row.node));
    const modelCell = draEl("td");
    modelCell.append(draEl("div", "", row.model));
    if (row.mig_profile) modelCell.append(draEl("div", "dra-dim", "MIG " + row.mig_profile));
    const mem = draEl("td");
    if (row.memory_used !== null && row.memory_total) {
      mem.append(
        draBar(
          row.memory_used / row.memory_total,
          draBytes(row.memory_used) + " / " + draBytes(row.memory_total),
        ),
      );
    } else {
      mem.textContent = row.memory || "";
    }
    const util = draEl("td", "dra-util");
    if (row.utilization !== null && row.utilization !== undefined) {
      util.append(draEl("span", "dra-num", Math.round(row.utilization) + "%"));
      util.append(draSparkline(row.spark));
    }
    const temp = draEl(
      "td",
      "dra-num",
      row.temperature !== null && row.temperature !== undefined
        ? Math.round(row.temperature) + "\u00b0C"
        : "",
    );
    const state = draEl("td");
    state.append(draEl("span", "dra-pill dra-pill-" + row.state, row.state));
    tr.append(dev, modelCell, mem, util, temp, state, draHolder(row, view.warning));
    body.append(tr);
  }
  table.append(body);
  el.append(table);
  const queue = view.rows !== null ? draQueue(view.waiting, view.notebooks) : null;
  if (queue) el.append(queue);
  draTick(el);
}

export default {
  /** @param {{ model: Model, el: HTMLElement }} context */
  render({ model, el }) {
    el.classList.add("dra-widget", "dra-board");
    /** @type {BoardView} */
    const view = {
      server: null, // null: not known yet, true: the REST API answers, false: ask the kernel
      rows: null, // rows from REST, when the server answers
      simulated: false,
      inventory: "",
      waiting: [],
      notebooks: new Map(),
      warning: 0,
      error: "",
    };
    const presence = draPresence();
    const asker = draAsker(model);
    const redraw = () => draRender(el, model, view);
    async function step() {
      if (view.server !== false) {
        try {
          const [devices, claims, metrics, notebooks] = await Promise.all([
            draCall("GET /devices"),
            draCall("GET /claims"),
            draCall("GET /metrics", { history: 40 }),
            draNotebooks(),
          ]);
          if (devices.inventory !== model.get("inventory")) {
            throw new Error("the server shows another inventory than this kernel's");
          }
          view.server = true;
          view.rows = draJoin(devices, claims, metrics, notebooks);
          view.simulated = devices.simulated;
          view.inventory = devices.inventory;
          view.waiting = devices.waiting;
          view.notebooks = notebooks;
          view.warning = metrics.idle_warning || 0;
          view.error = "";
          redraw();
          return;
        } catch (e) {
          if (view.server === true) {
            view.error = "server: " + (/** @type {DraError} */ (e).message || e);
            redraw();
            return;
          }
          view.server = false;
        }
      }
      if (presence.recent(5 * 60 * 1000)) asker.ask();
    }
    const poller = draPoller(el, step, () => Math.max(250, 1000 * model.get("interval")));
    const ticker = setInterval(() => draTick(el), 1000);
    model.on("change:rows", redraw);
    model.on("change:simulated", redraw);
    model.on("change:error", redraw);
    redraw();
    return () => {
      draStop(poller, presence, asker, ticker);
      model.off("change:rows", redraw);
      model.off("change:simulated", redraw);
      model.off("change:error", redraw);
    };
  },
};
