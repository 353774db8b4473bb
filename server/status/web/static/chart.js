// Live chart of a resource's capacity, Σ has and Σ wants: polls the
// resource's JSON every second and redraws an SVG. No library.
(function () {
  "use strict";
  const svg = document.getElementById("chart");
  if (!svg) return;
  const id = svg.dataset.id;
  const W = 900, H = 260, L = 50, R = 10, T = 10, B = 25;
  const NS = "http://www.w3.org/2000/svg";
  const note = document.getElementById("chart-note");

  function el(name, attrs, text) {
    const e = document.createElementNS(NS, name);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function draw(points) {
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    if (points.length === 0) {
      svg.appendChild(el("text", { x: L, y: H / 2 }, "no samples yet"));
      return;
    }
    const t0 = points[0].t, t1 = Math.max(points[points.length - 1].t, t0 + 1);
    let ymax = 1;
    for (const p of points) {
      ymax = Math.max(ymax, p.has, p.wants, p.capacity === null ? 0 : p.capacity);
    }
    ymax *= 1.1;
    const x = (t) => L + (W - L - R) * (t - t0) / (t1 - t0);
    const y = (v) => H - B - (H - T - B) * v / ymax;
    svg.appendChild(el("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#999" }));
    svg.appendChild(el("line", { x1: L, y1: T, x2: L, y2: H - B, stroke: "#999" }));
    for (let i = 0; i <= 4; i++) {
      const v = ymax * i / 4;
      svg.appendChild(el("text", { x: 4, y: y(v) + 4, "font-size": 11 }, v.toFixed(v < 10 ? 1 : 0)));
    }
    svg.appendChild(el("text", { x: L, y: H - 6, "font-size": 11 }, new Date(t0 * 1000).toLocaleTimeString()));
    svg.appendChild(el("text", { x: W - R - 60, y: H - 6, "font-size": 11 }, new Date(t1 * 1000).toLocaleTimeString()));
    // Capacity last and dashed, so that it shows where Σ has reaches it.
    const series = [["wants", "#e80", ""], ["has", "#06c", ""], ["capacity", "#c00", "6 4"]];
    for (const [key, color, dash] of series) {
      const pts = points.filter((p) => p[key] !== null).map((p) => x(p.t).toFixed(1) + "," + y(p[key]).toFixed(1));
      if (pts.length > 0) {
        svg.appendChild(el("polyline", { points: pts.join(" "), fill: "none", stroke: color, "stroke-width": 1.5, "stroke-dasharray": dash, "class": "series-" + key }));
      }
    }
    note.textContent = points.length + " samples";
  }

  async function update() {
    try {
      const resp = await fetch("/debug/status/resource?format=json&id=" + encodeURIComponent(id), { headers: { Accept: "application/json" } });
      if (resp.ok) {
        const page = await resp.json();
        draw(page.history);
        const r = page.resource;
        const fmt = (v) => (v === null ? "∞" : String(Math.round(v * 1000) / 1000));
        document.getElementById("capacity").textContent = fmt(r.capacity);
        document.getElementById("sum-has").textContent = fmt(r.sum_has);
        document.getElementById("sum-wants").textContent = fmt(r.sum_wants);
        document.getElementById("clients").textContent = r.clients;
      }
    } catch (e) {
      note.textContent = "update failed: " + e;
    }
  }
  update();
  setInterval(update, 1000);
})();
