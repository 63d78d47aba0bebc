// Shared by the dra-jupyter widgets: put in front of each widget's module (no imports, no CDN).
//
// Types are JSDoc, checked by `tsc --strict` (labextension/tsconfig.json, run by
// tests/widgets/test_wire_types.py). The REST answers have the types of
// labextension/src/wire.ts, generated from specification/dra-rest-api.yml: every call of
// the REST API goes through draCall, named by the spec's operation, so reading a field the
// spec does not have fails the check. The typedefs are comments: the browser runs this
// file as it is.

/** @typedef {import("../../labextension/src/wire").Operations} Operations */
/** @typedef {import("../../labextension/src/wire").Error} ApiError */
/** @typedef {import("../../labextension/src/wire").Devices} Devices */
/** @typedef {import("../../labextension/src/wire").Device} Device */
/** @typedef {import("../../labextension/src/wire").Waiter} Waiter */
/** @typedef {import("../../labextension/src/wire").Claims} Claims */
/** @typedef {import("../../labextension/src/wire").Claim} Claim */
/** @typedef {import("../../labextension/src/wire").Metrics} Metrics */
/** @typedef {import("../../labextension/src/wire").DeviceMetrics} DeviceMetrics */

/**
 * The part of an anywidget model the widgets use. Trait values are the kernel's (not the
 * REST API's), hence `any`.
 * @typedef {{
 *   get(name: string): any,
 *   on(event: string, callback: () => void): void,
 *   off(event: string, callback: () => void): void,
 *   send(content: object): void,
 * }} Model
 */

/**
 * An error of a REST call: `status` is the HTTP status, when there was an answer.
 * @typedef {Error & { status?: number }} DraError
 */

/** @typedef {{ recent: (ms: number) => boolean, stop: () => void }} Presence */
/** @typedef {{ now: () => void, stop: () => void }} Poller */
/** @typedef {{ ask: () => void, stop: () => void }} Asker */

// Clock times as the lab's notifications say them: 24-hour, whatever the browser's locale
// (a 12-hour card beside a 24-hour toast reads as two different times).
/** @type {Intl.DateTimeFormatOptions} */
const draClock = { hour: "2-digit", minute: "2-digit", hourCycle: "h23" };

// The Jupyter server of this page: JupyterLab and Notebook 7 publish it in
// #jupyter-config-data, classic pages on <body data-base-url>. Elsewhere (VS Code, Colab,
// a static page) there is none and the widgets ask their kernel instead.
function draConfig() {
  let baseUrl = null;
  let token = "";
  const el = document.getElementById("jupyter-config-data");
  if (el) {
    try {
      const config = JSON.parse(el.textContent || "{}");
      baseUrl = config.baseUrl || null;
      token = config.token || "";
    } catch (e) {
      baseUrl = null;
    }
  }
  if (baseUrl === null && document.body && document.body.dataset.baseUrl) {
    baseUrl = document.body.dataset.baseUrl;
  }
  if (baseUrl !== null && !baseUrl.endsWith("/")) baseUrl += "/";
  return { baseUrl, token };
}

// The notebook of each kernel of this page's server (Jupyter's own GET api/sessions), by
// kernel id: a holder is named by its notebook, not by a kernel id. Empty where there is
// no server or it does not answer.
/** @returns {Promise<Map<string, string>>} */
async function draNotebooks() {
  /** @type {Map<string, string>} */
  const notebooks = new Map();
  const { baseUrl, token } = draConfig();
  if (baseUrl === null) return notebooks;
  /** @type {Record<string, string>} */
  const headers = { Accept: "application/json" };
  if (token) headers.Authorization = "token " + token;
  try {
    const r = await fetch(baseUrl + "api/sessions", { headers, credentials: "same-origin" });
    if (!r.ok) return notebooks;
    /** @type {{ path?: string, kernel?: { id?: string } | null }[]} */
    const sessions = await r.json();
    for (const s of sessions) {
      if (s.kernel && s.kernel.id && s.path) {
        notebooks.set(s.kernel.id, s.path.split("/").pop() || s.path);
      }
    }
  } catch (e) {
    // no names: the holders say "a kernel"
  }
  return notebooks;
}

/** @param {string} name */
function draCookie(name) {
  const m = document.cookie.match("\\b" + name + "=([^;]*)\\b");
  return m ? decodeURIComponent(m[1]) : "";
}

// One operation of the server extension's REST API, named as the spec names it
// ("GET /claims/{name}"): `parameters` fill the path's {placeholders}, the others make the
// query string. The answer has the spec's type; GETs never count as activity.
/**
 * @template {keyof Operations} K
 * @param {K} operation
 * @param {Operations[K]["parameters"]} [parameters]
 * @returns {Promise<Operations[K]["answer"]>}
 */
async function draCall(operation, parameters) {
  const [method, template] = operation.split(" ");
  /** @type {Record<string, string | number | undefined>} */
  const given = { ...parameters };
  const query = new URLSearchParams();
  const path = template.slice(1).replace(/\{(\w+)\}/g, (_, name) => {
    const value = given[name];
    if (value === undefined) throw new Error(operation + ": no " + name);
    delete given[name];
    return encodeURIComponent(String(value));
  });
  for (const [name, value] of Object.entries(given)) {
    if (value !== undefined) query.append(name, String(value));
  }
  const search = query.toString();
  // the spec's answer: checked by the tests against the server, so taken on trust here
  return /** @type {Operations[K]["answer"]} */ (
    await draApi(search ? path + "?" + search : path, method)
  );
}

// One call of the REST API (through draCall): the JSON answer, null for 204.
/**
 * @param {string} path
 * @param {string} method
 * @returns {Promise<unknown>}
 */
async function draApi(path, method) {
  const { baseUrl, token } = draConfig();
  if (baseUrl === null) throw new Error("no Jupyter server behind this page");
  const sep = path.includes("?") ? "&" : "?";
  const url = baseUrl + "dra/api/" + path + (method === "GET" ? sep + "no_track_activity=1" : "");
  /** @type {Record<string, string>} */
  const headers = { Accept: "application/json" };
  if (token) headers.Authorization = "token " + token;
  const xsrf = draCookie("_xsrf");
  if (xsrf) headers["X-XSRFToken"] = xsrf;
  const r = await fetch(url, { method, headers, credentials: "same-origin" });
  if (r.status === 204) return null;
  if (!(r.headers.get("Content-Type") || "").includes("json")) {
    /** @type {DraError} */
    const e = new Error("no dra-jupyter server extension here (HTTP " + r.status + ")");
    e.status = r.status;
    throw e;
  }
  /** @type {unknown} */
  const body = await r.json();
  if (!r.ok) {
    /** @type {DraError} */
    const e = new Error(/** @type {ApiError} */ (body).message || r.statusText);
    e.status = r.status;
    throw e;
  }
  return body;
}

// Whether someone used this page lately (pointer or keys): the kernel fallback polls only
// then, so a forgotten tab does not keep the kernel "active" for a culler.
/** @returns {Presence} */
function draPresence() {
  let last = Date.now();
  const bump = () => {
    last = Date.now();
  };
  const kinds = ["pointermove", "pointerdown", "keydown", "wheel"];
  for (const k of kinds) document.addEventListener(k, bump, { passive: true });
  return {
    recent: (ms) => Date.now() - last < ms,
    stop: () => {
      for (const k of kinds) document.removeEventListener(k, bump);
    },
  };
}

// Calls step() every intervalMs() while the element is on screen and the page visible;
// stop() ends it for good (no timer, observer or listener is left).
/**
 * @param {Element} el
 * @param {() => Promise<void>} step
 * @param {() => number} intervalMs
 * @returns {Poller}
 */
function draPoller(el, step, intervalMs) {
  /** @type {ReturnType<typeof setTimeout> | null} */
  let timer = null;
  let stopped = false;
  let running = false;
  let onScreen = true;
  const visible = () => onScreen && !document.hidden;
  /** @param {number} ms */
  const schedule = (ms) => {
    if (!stopped && timer === null) timer = setTimeout(tick, ms);
  };
  async function tick() {
    timer = null;
    if (stopped || running) return;
    if (visible()) {
      running = true;
      try {
        await step();
      } finally {
        running = false;
      }
    }
    if (visible()) schedule(intervalMs());
  }
  const wake = () => {
    if (visible() && timer === null && !running) schedule(0);
  };
  /** @type {IntersectionObserver | null} */
  let observer = null;
  if (typeof IntersectionObserver !== "undefined") {
    observer = new IntersectionObserver((entries) => {
      onScreen = entries.some((e) => e.isIntersecting);
      wake();
    });
    observer.observe(el);
  }
  document.addEventListener("visibilitychange", wake);
  schedule(0);
  return {
    now: wake,
    stop: () => {
      stopped = true;
      if (timer !== null) clearTimeout(timer);
      timer = null;
      if (observer) observer.disconnect();
      document.removeEventListener("visibilitychange", wake);
    },
  };
}

/**
 * @param {string} tag
 * @param {string} [cls]
 * @param {unknown} [text]
 * @returns {HTMLElement}
 */
function draEl(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

/** @param {number | null | undefined} n */
function draBytes(n) {
  if (n === null || n === undefined) return "";
  /** @type {[string, number][]} */
  const units = [["Ti", 2 ** 40], ["Gi", 2 ** 30], ["Mi", 2 ** 20]];
  for (const [u, size] of units) {
    if (n >= size) return (Math.floor((n / size) * 10) / 10).toString() + u;
  }
  return String(n);
}

/** @param {number} seconds */
function draDuration(seconds) {
  const s = Math.max(0, Math.round(seconds));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const r = s % 60;
  const pad = (/** @type {number} */ x) => String(x).padStart(2, "0");
  return h > 0 ? `${h}:${pad(m)}:${pad(r)}` : `${m}:${pad(r)}`;
}

// The queue, for those who hold devices: who waits, for what, since when (null: nobody).
// Who waits: the user, and the notebook where this server runs the waiting kernel (never
// a kernel id: another server's kernel is the user alone).
/**
 * @param {Waiter[]} waiting
 * @param {Map<string, string>} [notebooks] this server's notebooks by kernel id
 * @returns {HTMLElement | null}
 */
function draQueue(waiting, notebooks) {
  if (!waiting.length) return null;
  const box = draEl("div", "dra-queue");
  box.append(draEl("span", "dra-dim", `waiting in line (${waiting.length}): `));
  waiting.forEach((w, i) => {
    const since = new Date(w.since * 1000);
    const at = since.toLocaleTimeString([], draClock);
    const notebook = w.kernel_id && notebooks ? notebooks.get(w.kernel_id) : undefined;
    const who = w.user + (notebook ? ` (${notebook})` : "");
    const item = draEl("span", "dra-waiter", `${who}: ${w.what}, since ${at}`);
    item.title = since.toLocaleString();
    box.append(i ? "; " : "", item);
  });
  return box;
}

// A bar: fraction in [0, 1] filled, with a label.
/**
 * @param {number | null | undefined} fraction
 * @param {string} label
 * @param {string} [cls]
 */
function draBar(fraction, label, cls) {
  const bar = draEl("div", "dra-bar " + (cls || ""));
  const fill = draEl("div", "dra-bar-fill");
  const f = fraction === null || fraction === undefined ? 0 : Math.max(0, Math.min(1, fraction));
  fill.style.width = (f * 100).toFixed(1) + "%";
  if (f >= 0.9) fill.classList.add("dra-high");
  bar.append(fill, draEl("span", "dra-bar-label", label));
  return bar;
}

// An SVG sparkline of values in [0, 100] (nulls are gaps).
/**
 * @param {(number | null | undefined)[] | null | undefined} values
 * @param {number} [width]
 * @param {number} [height]
 */
function draSparkline(values, width = 80, height = 18) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("class", "dra-spark");
  svg.setAttribute("width", String(width));
  svg.setAttribute("height", String(height));
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  if (!values || values.length < 2) return svg;
  const step = width / (values.length - 1);
  let d = "";
  let pen = false;
  values.forEach((v, i) => {
    if (v === null || v === undefined) {
      pen = false;
      return;
    }
    const y = height - 1 - (Math.max(0, Math.min(100, v)) / 100) * (height - 2);
    d += (pen ? "L" : "M") + (i * step).toFixed(1) + " " + y.toFixed(1) + " ";
    pen = true;
  });
  const path = document.createElementNS(ns, "path");
  path.setAttribute("d", d.trim());
  svg.append(path);
  return svg;
}

// Asks the kernel for a refresh, one request at a time: a busy kernel (a long cell) does
// not pile up messages; the kernel answers by bumping the `revision` trait.
// Everything a view started, stopped when the view goes: no poll, timer or listener is left.
/**
 * @param {Poller} poller
 * @param {Presence} presence
 * @param {Asker} asker
 * @param {ReturnType<typeof setInterval>} ticker
 */
function draStop(poller, presence, asker, ticker) {
  poller.stop();
  presence.stop();
  asker.stop();
  clearInterval(ticker);
}

/**
 * @param {Model} model
 * @returns {Asker}
 */
function draAsker(model) {
  let sent = 0;
  const answered = () => {
    sent = 0;
  };
  model.on("change:revision", answered);
  return {
    ask: () => {
      if (sent && Date.now() - sent < 60 * 1000) return; // an answer is still due
      sent = Date.now();
      draSend(model, { type: "refresh" });
    },
    stop: () => model.off("change:revision", answered),
  };
}

// A message to the kernel; a view restored from a saved notebook has no kernel to tell.
/**
 * @param {Model} model
 * @param {object} content
 */
function draSend(model, content) {
  try {
    model.send(content);
  } catch (e) {
    console.debug("dra-jupyter: no kernel to send to", e);
  }
}
