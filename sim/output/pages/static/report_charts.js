/* fleetsim's run report: draws each chart of the page's embedded JSON (made by
   sim/output/pages/chart_data.py) with uPlot, one uPlot per panel; panels of a chart share
   their cursor. Every text is set as text (uPlot sets titles and labels with
   textContent), never parsed as markup. The uPlot objects are kept on
   window.fleetsimCharts (chart name -> one per panel) for tests and the console. */
(function () {
  "use strict";
  var PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                 "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"];
  var GREY = "#999999";
  var RULE = "#404040";
  var PANEL_HEIGHT = 240;
  var spec = JSON.parse(document.getElementById("fleetsim-charts").textContent);
  window.fleetsimCharts = {};

  function colour(i) { return i < 0 ? GREY : PALETTE[i % PALETTE.length]; }

  // a number as plain text: 1,234 or 2.5 or 0.05, never 1e+03
  function plain(v) {
    if (v === null || v === undefined || !isFinite(v)) return "--";
    var a = Math.abs(v);
    if (a === 0) return "0";
    if (a >= 1) return v.toLocaleString("en-US", {maximumFractionDigits: a >= 100 ? 0 : 2});
    return v.toFixed(6).replace(/0+$/, "").replace(/\.$/, "");
  }

  function pad(n) { return (n < 10 ? "0" : "") + n; }

  // seconds since the start as hh:mm (hours past 24 go on counting)
  function hhmm(v) {
    var minutes = Math.round(Math.abs(v) / 60);
    return (v < 0 && minutes ? "-" : "") + pad(Math.floor(minutes / 60)) + ":" + pad(minutes % 60);
  }

  function hhmmss(v) {
    var s = Math.round(Math.abs(v));
    return pad(Math.floor(s / 3600)) + ":" + pad(Math.floor(s / 60) % 60) + ":" + pad(s % 60);
  }

  // a log axis is ticked at 1, 2 and 5 of each decade (a share axis: 1 only)
  function logSplits(subs) {
    return function (u, i, min, max) {
      var out = [];
      for (var e = Math.floor(Math.log10(min)); e <= Math.ceil(Math.log10(max)); e++) {
        subs.forEach(function (m) {
          var v = parseFloat((m * Math.pow(10, e)).toPrecision(6));
          if (v >= min * (1 - 1e-9) && v <= max * (1 + 1e-9)) out.push(v);
        });
      }
      return out;
    };
  }

  function tickText(axis) {
    if (axis.format === "hhmm") return function (u, splits) { return splits.map(hhmm); };
    if (axis.format === "category") {
      return function (u, splits) {
        return splits.map(function (v) {
          var i = Math.round(v);
          return i === v && i >= 0 && i < axis.categories.length ? axis.categories[i] : "";
        });
      };
    }
    return function (u, splits) { return splits.map(plain); };
  }

  function hoverText(axis) {
    if (axis.format === "hhmm") return function (u, v) { return v === null ? "--" : hhmmss(v); };
    if (axis.format === "category") {
      return function (u, v) { return v === null ? "--" : (axis.categories[Math.round(v)] || ""); };
    }
    return function (u, v) { return plain(v); };
  }

  function every(u, splits) { return splits; }     // label every tick (uPlot thins a log axis's)

  function fixedRange(range) { return function () { return [range[0], range[1]]; }; }

  function scale(axis, rules, fromZero) {
    var s = {time: false};
    if (axis.log) { s.distr = 3; s.log = 10; }
    if (axis.range) {
      s.range = fixedRange(axis.range);
    } else {
      s.range = function (u, min, max) {
        var values = rules.map(function (r) { return r.value; });
        var hi = Math.max.apply(null, [max].concat(values).filter(isFinite));
        var lo = fromZero ? 0 : Math.min.apply(null, [min].concat(values).filter(isFinite));
        if (!isFinite(hi)) hi = 1;
        if (!isFinite(lo)) lo = 0;
        if (hi <= lo) hi = lo + 1;
        return [lo, hi + (hi - lo) * 0.05];
      };
    }
    return s;
  }

  function splitsOf(axis, subs) {
    if (axis.log) return logSplits(subs);
    if (axis.format === "hhmm") {
      return function (u, i, min, max) {
        var out = [];
        for (var t = Math.ceil(min / axis.step_s) * axis.step_s; t <= max + 1e-9; t += axis.step_s) out.push(t);
        return out;
      };
    }
    if (axis.format === "category") {
      return function () { return axis.categories.map(function (_, i) { return i; }); };
    }
    return undefined;
  }

  // the series' own (x, y) joined on their x values, nulls where a series has none
  function join(series, logX) {
    var seen = new Map();
    series.forEach(function (s) {
      s.x.forEach(function (x) { if (x !== null && (!logX || x > 0)) seen.set(x, true); });
    });
    var xs = Array.from(seen.keys()).sort(function (a, b) { return a - b; });
    var at = new Map(xs.map(function (x, i) { return [x, i]; }));
    var data = [xs];
    series.forEach(function (s) {
      var y = new Array(xs.length).fill(null);
      s.x.forEach(function (x, i) { if (at.has(x)) y[at.get(x)] = s.y[i]; });
      data.push(y);
    });
    return data;
  }

  function seriesOptions(s, count) {
    var c = colour(s.colour);
    var o = {label: s.label, stroke: c, width: 1.5, spanGaps: true, points: {show: false},
             scale: s.axis === 1 ? "y2" : "y"};
    if (s.dash) o.dash = [6, 4];
    if (s.kind === "step") o.paths = uPlot.paths.stepped({align: 1});
    if (s.kind === "bars") {
      o.paths = uPlot.paths.bars({size: [count > 1 && s.align ? 0.4 : 0.6], align: s.align || 0});
      o.fill = c;
    }
    if (s.fill) o.fill = c + "66";
    var own = s.own;
    o.value = function (u, v, si, i) { return own && i !== null ? plain(own[i]) : plain(v); };
    return o;
  }

  function drawRules(u, rules) {
    if (!rules.length) return;
    var ctx = u.ctx, r = window.devicePixelRatio || 1, box = u.bbox;
    ctx.save();
    ctx.strokeStyle = RULE; ctx.fillStyle = RULE; ctx.lineWidth = r;
    ctx.setLineDash([3 * r, 3 * r]);
    ctx.font = (12 * r) + "px sans-serif";
    rules.forEach(function (rule, k) {
      ctx.beginPath();
      if (rule.axis === "x") {
        var x = u.valToPos(rule.value, "x", true);
        if (!(x >= box.left && x <= box.left + box.width)) return;
        ctx.moveTo(x, box.top); ctx.lineTo(x, box.top + box.height); ctx.stroke();
        ctx.fillText(rule.label, x + 3 * r, box.top + (12 + 13 * k) * r);
      } else {
        var y = u.valToPos(rule.value, "y", true);
        if (!(y >= box.top && y <= box.top + box.height)) return;
        ctx.moveTo(box.left, y); ctx.lineTo(box.left + box.width, y); ctx.stroke();
        ctx.textAlign = "right";
        ctx.fillText(rule.label, box.left + box.width - 4 * r, y - 3 * r);
      }
    });
    ctx.restore();
  }

  function text(tag, cls, value) {
    var el = document.createElement(tag);
    el.className = cls;
    el.textContent = value;
    return el;
  }

  function drawChart(chart, holder) {
    var width = Math.max(320, Math.min(holder.clientWidth || 960, 960));
    var drawn = [];
    if (chart.note) holder.appendChild(text("p", "note", chart.note));
    chart.panels.forEach(function (panel, p) {
      var last = p === chart.panels.length - 1;
      var xSubs = [1, 2, 5], ySubs = chart.name.slice(-5) === "_ccdf" ? [1] : [1, 2, 5];
      if (!panel.series.length) {
        holder.appendChild(text("p", "note", panel.y.label + ": " + (panel.note || chart.note || "no data")));
        return;
      }
      var scales = {x: scale(chart.x, panel.rules.filter(function (r) { return r.axis === "x"; }), false),
                    y: scale(panel.y, panel.rules.filter(function (r) { return r.axis === "y"; }), panel.from_zero)};
      var axes = [
        {scale: "x", label: last ? chart.x.label : null, values: tickText(chart.x),
         splits: splitsOf(chart.x, xSubs), filter: every, space: chart.x.format === "category" ? 10 : 60},
        {scale: "y", label: panel.y.label, values: tickText(panel.y),
         splits: splitsOf(panel.y, ySubs), filter: every, size: 70}
      ];
      var series = [{label: chart.x.label, value: hoverText(chart.x)}];
      panel.series.forEach(function (s) { series.push(seriesOptions(s, panel.series.length)); });
      if (panel.y2) {
        scales.y2 = scale(panel.y2, [], true);
        axes.push({scale: "y2", side: 1, label: panel.y2.label, values: tickText(panel.y2),
                   splits: splitsOf(panel.y2, ySubs), filter: every,
                   grid: {show: false}, size: 70});
      }
      var opts = {
        title: p === 0 ? chart.title : undefined,
        width: width, height: PANEL_HEIGHT + (p === 0 ? 30 : 0) + (last ? 20 : 0),
        scales: scales, axes: axes, series: series,
        cursor: {sync: {key: chart.name}},
        hooks: {draw: [function (u) { drawRules(u, panel.rules); }]}
      };
      var box = document.createElement("div");
      holder.appendChild(box);
      drawn.push(new uPlot(opts, join(panel.series, chart.x.log), box));
      if (panel.rules.length) {
        holder.appendChild(text("p", "note", "dotted: " + panel.rules.map(function (r) { return r.label; }).join("; ")));
      }
    });
    window.fleetsimCharts[chart.name] = drawn;
  }

  spec.charts.forEach(function (chart) {
    drawChart(chart, document.getElementById("chart-" + chart.name));
  });
})();
