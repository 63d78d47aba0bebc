// Shared by the dra-jupyter widgets: put in front of each widget's module (no imports, no CDN).

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

function draCookie(name) {
  const m = document.cookie.match("\\b" + name + "=([^;]*)\\b");
  return m ? decodeURIComponent(m[1]) : "";
}

// One call of the server extension's REST API; GETs never count as activity.
async function draApi(path, method = "GET") {
  const { baseUrl, token } = draConfig();
  if (baseUrl === null) throw new Error("no Jupyter server behind this page");
  const sep = path.includes("?") ? "&" : "?";
  const url = baseUrl + "dra/api/" + path + (method === "GET" ? sep + "no_track_activity=1" : "");
  const headers = { Accept: "application/json" };
  if (token) headers.Authorization = "token " + token;
  const xsrf = draCookie("_xsrf");
  if (xsrf) headers["X-XSRFToken"] = xsrf;
  const r = await fetch(url, { method, headers, credentials: "same-origin" });
  if (r.status === 204) return null;
  if (!(r.headers.get("Content-Type") || "").includes("json")) {
    const e = new Error("no dra-jupyter server extension here (HTTP " + r.status + ")");
    e.status = r.status;
    throw e;
  }
  const body = await r.json();
  if (!r.ok) {
    const e = new Error(body.message || r.statusText);
    e.status = r.status;
    throw e;
  }
  return body;
}

// Whether someone used this page lately (pointer or keys): the kernel fallback polls only
// then, so a forgotten tab does not keep the kernel "active" for a culler.
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
function draPoller(el, step, intervalMs) {
  let timer = null;
  let stopped = false;
  let running = false;
  let onScreen = true;
  const visible = () => onScreen && !document.hidden;
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

function draEl(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

function draBytes(n) {
  if (n === null || n === undefined) return "";
  const units = [["Ti", 2 ** 40], ["Gi", 2 ** 30], ["Mi", 2 ** 20]];
  for (const [u, size] of units) {
    if (n >= size) return (Math.floor((n / size) * 10) / 10).toString() + u;
  }
  return String(n);
}

function draDuration(seconds) {
  const s = Math.max(0, Math.round(seconds));
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const r = s % 60;
  const pad = (x) => String(x).padStart(2, "0");
  return h > 0 ? `${h}:${pad(m)}:${pad(r)}` : `${m}:${pad(r)}`;
}

// A bar: fraction in [0, 1] filled, with a label.
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
function draStop(poller, presence, asker, ticker) {
  poller.stop();
  presence.stop();
  asker.stop();
  clearInterval(ticker);
}

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
function draSend(model, content) {
  try {
    model.send(content);
  } catch (e) {
    console.debug("dra-jupyter: no kernel to send to", e);
  }
}
