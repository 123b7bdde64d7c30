// The fleet heatmap: every GPU of the payload (frontend/fleet_heatmap.py) as one cell of a canvas,
// hosts as blocks in name order, grouped by rack or source. The cell size is the largest that fits
// the whole fleet in the window's height. Hover (or arrow keys) shows a GPU's detail; a click (or
// Enter) opens its host's page at the GPU. Every 5 s the page asks for what changed since its
// version and repaints only those cells.
(function () {
  "use strict";
  const root = document.getElementById("heatmap");
  if (!root) return;
  const canvas = root.querySelector("canvas");
  const tip = document.getElementById("heat-tip");
  const count = document.getElementById("heat-count");
  const legend = document.getElementById("heat-legend");
  const STATE = { free: "#1f7a3a", leased: "#1c5fb0", cordoned: "#c98a1a", offline: "#8a9099",
                  unhealthy: "#b42318", foreign: "#6b3fc9" };
  const NO_DATA = "#d0d4da";
  const LABEL_H = 14;
  let data = null, mode = "state", group = root.dataset.group || "host";
  let layout = null, focus = -1, timer = null;

  // Utilisation 0–100 on a light-to-dark ramp (sequential, readable with colour-blindness).
  function utilColour(u) {
    if (u < 0) return NO_DATA;
    const stops = [[0, [255, 247, 188]], [40, [254, 196, 79]], [70, [236, 112, 20]], [100, [140, 45, 4]]];
    for (let i = 1; i < stops.length; i++) {
      if (u <= stops[i][0]) {
        const [a, ca] = stops[i - 1], [b, cb] = stops[i], t = (u - a) / (b - a);
        return "rgb(" + ca.map((v, k) => Math.round(v + (cb[k] - v) * t)).join(",") + ")";
      }
    }
    return "rgb(140,45,4)";
  }

  function colour(i) {
    const c = data.cells;
    return mode === "util" ? utilColour(c.u[i]) : (STATE[data.states[c.s[i]]] || NO_DATA);
  }

  function url(extra) {
    const qs = new URLSearchParams(root.dataset.qs || "");
    qs.set("group", group);
    for (const [k, v] of Object.entries(extra || {})) qs.set(k, v);
    return root.dataset.src + "?" + qs.toString();
  }

  // Where each cell goes: hosts as blocks of up to 8 columns, flowed in rows, a label line
  // above each group. Tries cell sizes from 12 px down until all of it fits the height.
  function place(width, height) {
    const n = data.cells.n, hosts = data.hosts, grouped = data.group !== "host";
    let best = null;
    for (let s = 12; s >= 2; s--) {
      const g = s >= 5 ? 1 : 0, gap = Math.max(2, Math.round(s / 2));
      const cellX = new Float32Array(data.cells.s.length), cellY = new Float32Array(data.cells.s.length);
      const labels = [];
      let x = 0, y = 0, lineH = 0, pos = 0, last = -1;
      for (let h = 0; h < hosts.length; h++) {
        const cols = Math.min(n[h], 8), rows = Math.ceil(n[h] / 8);
        const bw = cols * s + (cols - 1) * g, bh = rows * s + (rows - 1) * g;
        if (grouped && hosts[h][2] !== last) {
          if (h > 0) { y += lineH + gap; }
          x = 0; lineH = 0;
          labels.push([data.groups[hosts[h][2]], y]);
          y += LABEL_H;
          last = hosts[h][2];
        }
        if (x > 0 && x + bw > width) { x = 0; y += lineH + gap; lineH = 0; }
        for (let k = 0; k < n[h]; k++, pos++) {
          cellX[pos] = x + (k % 8) * (s + g);
          cellY[pos] = y + Math.floor(k / 8) * (s + g);
        }
        x += bw + gap;
        lineH = Math.max(lineH, bh);
      }
      const total = y + lineH;
      best = { s: s, cellX: cellX, cellY: cellY, labels: labels, height: Math.ceil(total), width: width };
      if (total <= height) break;
    }
    return best;
  }

  function hostOfCells() {
    const owner = new Int32Array(data.cells.s.length);
    let pos = 0;
    data.cells.n.forEach((k, h) => { for (let j = 0; j < k; j++) owner[pos++] = h; });
    return owner;
  }

  function draw() {
    const width = Math.max(200, root.clientWidth - 12);
    const height = Math.max(240, window.innerHeight - 40);
    layout = place(width, height);
    layout.owner = hostOfCells();
    const dpr = window.devicePixelRatio || 1;
    canvas.width = Math.round(width * dpr);
    canvas.height = Math.round(layout.height * dpr);
    canvas.style.width = width + "px";
    canvas.style.height = layout.height + "px";
    const ctx = canvas.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, layout.height);
    ctx.fillStyle = "#4b525b";
    ctx.font = "600 11px system-ui, sans-serif";
    for (const [label, y] of layout.labels) ctx.fillText(label, 0, y + 11);
    const cells = data.cells.s.length;
    for (let i = 0; i < cells; i++) paint(ctx, i);
    canvas.dataset.cells = String(cells);
    canvas.dataset.width = String(width);
    canvas.dataset.cell = String(layout.s);
    canvas.dataset.version = data.version;
    drawLegend();
    count.textContent = cells.toLocaleString() + " GPUs on " + data.hosts.length.toLocaleString() + " hosts";
  }

  function paint(ctx, i) {
    ctx.fillStyle = colour(i);
    ctx.fillRect(layout.cellX[i], layout.cellY[i], layout.s, layout.s);
  }

  function drawLegend() {
    const items = mode === "util"
      ? [["no data", NO_DATA], ["0 %", utilColour(0)], ["40 %", utilColour(40)], ["70 %", utilColour(70)], ["100 %", utilColour(100)]]
      : data.states.map((s) => [s, STATE[s] || NO_DATA]);
    legend.replaceChildren(...items.map(([label, c]) => {
      const span = document.createElement("span");
      const sw = document.createElement("i");
      sw.className = "sw";
      sw.style.background = c;
      span.append(sw, label);
      return span;
    }));
  }

  // The cell under a point of the canvas (CSS pixels), or -1: the grid is regular inside a
  // host block, so a scan of the cells' corners is enough (16,000 comparisons, under a ms).
  function cellAt(x, y) {
    if (!layout) return -1;
    const s = layout.s;
    for (let i = 0; i < layout.cellX.length; i++) {
      const cx = layout.cellX[i], cy = layout.cellY[i];
      if (x >= cx && x < cx + s && y >= cy && y < cy + s) return i;
    }
    return -1;
  }

  function detail(i) {
    const h = data.hosts[layout.owner[i]], c = data.cells;
    const team = data.teams[c.t[i]];
    return h[1] + " · GPU " + c.i[i] + "\n" + data.models[c.m[i]] + "\n" + data.states[c.s[i]] +
      " · util " + (c.u[i] < 0 ? "–" : c.u[i] + " %") + (team ? "\nheld by " + team : "") +
      (h[3] !== "ready" ? "\nhost " + h[3] : "");
  }

  function show(i, x, y) {
    if (i < 0) { tip.hidden = true; return; }
    tip.textContent = detail(i);
    tip.hidden = false;
    const left = Math.min(x + 14, root.clientWidth - tip.offsetWidth - 4);
    tip.style.left = Math.max(0, left) + "px";
    tip.style.top = (y + 14) + "px";
  }

  function open(i) {
    const h = data.hosts[layout.owner[i]];
    window.location.href = root.dataset.hostUrl + h[0] + "/#gpu-" + h[0] + "-" + data.cells.i[i];
  }

  function point(ev) {
    const r = canvas.getBoundingClientRect();
    return [ev.clientX - r.left, ev.clientY - r.top];
  }

  canvas.addEventListener("mousemove", (ev) => {
    const [x, y] = point(ev);
    show(cellAt(x, y), x + canvas.offsetLeft, y + canvas.offsetTop);
  });
  canvas.addEventListener("mouseleave", () => { tip.hidden = true; });
  canvas.addEventListener("click", (ev) => {
    const [x, y] = point(ev);
    const i = cellAt(x, y);
    if (i >= 0) open(i);
  });
  canvas.addEventListener("keydown", (ev) => {
    if (!data) return;
    const last = data.cells.s.length - 1;
    const step = { ArrowRight: 1, ArrowLeft: -1, ArrowDown: 8, ArrowUp: -8 }[ev.key];
    if (step) {
      focus = Math.min(last, Math.max(0, (focus < 0 ? 0 : focus + step)));
      show(focus, layout.cellX[focus] + layout.s, layout.cellY[focus] + layout.s);
      ev.preventDefault();
    } else if (ev.key === "Enter" && focus >= 0) {
      open(focus);
    }
  });

  async function load(since) {
    const response = await fetch(url(since ? { since: since } : {}), { headers: { Accept: "application/json" } });
    if (response.status === 304) return;
    if (!response.ok) throw new Error("heatmap: HTTP " + response.status);
    const body = await response.json();
    if (body.changed && data) {
      data.teams = body.teams;
      data.models = body.models;
      data.version = body.version;
      for (const [h, state] of body.host_states || []) data.hosts[h][3] = state;
      const c = data.cells, ctx = canvas.getContext("2d");
      for (const [i, s, u, t, m] of body.changed) {
        c.s[i] = s; c.u[i] = u; c.t[i] = t; c.m[i] = m;
        paint(ctx, i);
      }
      canvas.dataset.version = data.version;
      canvas.dataset.changed = String(body.changed.length);
    } else {
      data = body;
      if (!data.cells.i) {  // left out: every host numbers its GPUs 0, 1, 2…
        data.cells.i = [];
        data.cells.n.forEach((k) => { for (let j = 0; j < k; j++) data.cells.i.push(j); });
      }
      draw();
    }
  }

  function poll() {
    clearTimeout(timer);
    timer = setTimeout(async () => {
      if (document.visibilityState === "visible" && data) {
        try { await load(data.version); } catch (e) { /* the next poll tries again */ }
      }
      poll();
    }, 5000);
  }

  document.querySelectorAll("input[name=heat-colour]").forEach((el) => el.addEventListener("change", () => {
    mode = el.value;
    if (data) draw();
  }));
  document.getElementById("heat-group").addEventListener("change", (ev) => {
    group = ev.target.value;
    const here = new URL(window.location.href);
    here.searchParams.set("group", group);
    history.replaceState(null, "", here);
    load("").catch(() => {});
  });
  // Redrawn at the next frame after a resize (a phone turned, a window narrowed): at most once a frame.
  let resized = false;
  window.addEventListener("resize", () => {
    if (resized) return;
    resized = true;
    requestAnimationFrame(() => { resized = false; if (data) draw(); });
  });

  // For tests and scripts: where a GPU's cell is on the screen (client pixels), by host and index.
  window.gpupoolHeatmap = {
    cellRect(hostName, index) {
      const h = data.hosts.findIndex((x) => x[1] === hostName);
      if (h < 0) return null;
      for (let i = 0; i < layout.owner.length; i++) {
        if (layout.owner[i] === h && data.cells.i[i] === index) {
          const r = canvas.getBoundingClientRect();
          return { x: r.left + layout.cellX[i], y: r.top + layout.cellY[i], size: layout.s };
        }
      }
      return null;
    },
  };

  load("").then(poll, (e) => { count.textContent = "Could not load the heatmap: " + e.message; poll(); });
})();
