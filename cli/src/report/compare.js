// Draws the compare report from the JSON in #compare-data: per transcript and window, a chart of
// cumulative input cost and one of cache hit rate (a series per engine, a point per model call,
// compaction markers), and the drill-down of one call's contexts in two engines side by side.
// Every string from the data is set with textContent or setAttribute, never parsed as HTML.
(function () {
  'use strict';
  var R = ctxhostReport;
  var fmt = R.fmt, el = R.el, html = R.html, niceStep = R.niceStep, triangle = R.triangle;
  var data = JSON.parse(document.getElementById('compare-data').textContent);
  var engines = data.engines || [], blocks = data.blocks || [], runs = data.runs || [];
  var COLORS = ['#2f6fed', '#e07a1f', '#0e7a55', '#d92d43', '#7b4fd6', '#b26a00', '#0891b2', '#6b7280'];
  var W = 1200, H = 280, M = { l: 72, r: 24, t: 30, b: 40 };
  var PW = W - M.l - M.r, PH = H - M.t - M.b;

  function color(e) { return COLORS[e % COLORS.length]; }

  // A group is one transcript at one window: its runs, one per engine.
  var groups = [], byKey = {};
  runs.forEach(function (run) {
    var key = run.transcript + '@' + run.window;
    if (byKey[key] === undefined) {
      byKey[key] = groups.length;
      groups.push({ transcript: run.transcript, window: run.window, runs: {} });
    }
    groups[byKey[key]].runs[run.engine] = run;
  });
  groups.sort(function (a, b) { return a.window - b.window || a.transcript - b.transcript; });

  // Each call's context, decoded from the previous call's shared leading blocks plus the rest.
  runs.forEach(function (run) {
    var prev = [];
    run.calls.forEach(function (c) {
      c.context = prev.slice(0, c.k).concat(c.a);
      prev = c.context;
    });
  });

  function title(g) { return data.transcripts[g.transcript] + ' · ' + fmt(g.window) + ' tokens'; }

  (function legend() {
    var box = document.getElementById('engine-legend');
    engines.forEach(function (name, e) {
      var s = html('span', '', null, box);
      var g = el('svg', { width: 22, height: 12, viewBox: '0 0 22 12' }, s);
      el('line', { x1: 0, y1: 6, x2: 22, y2: 6, stroke: color(e), 'stroke-width': 2 }, g);
      el('circle', { cx: 11, cy: 6, r: 3, fill: '#fff', stroke: color(e), 'stroke-width': 1.4 }, g);
      html('span', '', name, s);
    });
  })();

  // One chart: a series per engine of `value(call, i)`, a point per call, and, when `marks`,
  // a compaction marker per engine above the plot at each compacted call.
  function chart(box, g, name, label, value, yText, top, marks) {
    var svg = el('svg', { viewBox: '0 0 ' + W + ' ' + H, role: 'img', 'class': 'cmp-chart',
      'data-chart': name, 'data-group': groups.indexOf(g), 'data-transcript': data.transcripts[g.transcript],
      'data-window': g.window, 'aria-label': label }, box);
    var n = 0, maxY = 0;
    Object.keys(g.runs).forEach(function (e) {
      var calls = g.runs[e].calls;
      n = Math.max(n, calls.length);
      calls.forEach(function (c, i) { maxY = Math.max(maxY, value(c, i, calls)); });
    });
    if (n === 0) { el('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle' }, svg).textContent = 'no model calls'; return; }
    if (top === undefined) {
      var step0 = niceStep(Math.max(maxY, 1e-9) * 1.08);
      top = Math.ceil((Math.max(maxY, 1e-9) * 1.08) / step0) * step0;
    }
    var step = niceStep(top);
    var x = function (i) { return M.l + (n === 1 ? PW / 2 : (i / (n - 1)) * PW); };
    var y = function (v) { return M.t + PH - (v / top) * PH; };
    var axes = el('g', {}, svg);
    for (var v = 0; v <= top + 1e-12; v += step) {
      el('line', { 'class': 'grid', x1: M.l, x2: W - M.r, y1: y(v), y2: y(v) }, axes);
      el('text', { x: M.l - 8, y: y(v) + 4, 'text-anchor': 'end' }, axes).textContent = yText(v);
    }
    var every = Math.max(1, Math.ceil(n / 12));
    for (var t = 0; t < n; t += every) {
      el('text', { x: x(t), y: H - M.b + 18, 'text-anchor': 'middle' }, axes).textContent = String(t + 1);
    }
    el('text', { 'class': 'axis-title', x: M.l + PW / 2, y: H - 6, 'text-anchor': 'middle' }, axes).textContent = 'model call';
    el('text', { 'class': 'axis-title', x: M.l, y: 16 }, axes).textContent = label;
    var radius = n <= 120 ? 3 : n <= 400 ? 2.2 : 1.5;
    Object.keys(g.runs).forEach(function (key) {
      var e = Number(key), calls = g.runs[key].calls, d = '';
      calls.forEach(function (c, i) { d += (i === 0 ? 'M' : 'L') + x(i) + ',' + y(value(c, i, calls)); });
      el('path', { d: d, fill: 'none', stroke: color(e), 'stroke-width': 1.6, 'stroke-linejoin': 'round', 'data-series': e }, svg);
    });
    Object.keys(g.runs).forEach(function (key) {
      var e = Number(key), calls = g.runs[key].calls, pg = el('g', {}, svg);
      calls.forEach(function (c, i) {
        var pt = el('circle', { cx: x(i), cy: y(value(c, i, calls)), r: radius, fill: c.fb ? '#d92d43' : '#fff',
          stroke: color(e), 'stroke-width': 1.2, 'data-point': i, 'data-engine': e }, pg);
        pt.addEventListener('click', function () { drill(groups.indexOf(g), i, e); });
      });
      if (marks) {
        var lane = M.t - 6 - 7 * (e % 4);
        calls.forEach(function (c, i) {
          if (c.cp) {
            el('path', { d: triangle(x(i), lane, 3.2), fill: color(e), 'data-marker': 'compaction', 'data-engine': e, 'data-call': i }, svg);
          }
        });
      }
    });
    el('line', { 'class': 'grid', x1: M.l, x2: W - M.r, y1: y(0), y2: y(0), stroke: '#98a2b3' }, svg);
    svg.setAttribute('data-calls', String(n));
  }

  // Cumulative input cost per run (fresh and cached input at the page's prices), computed once.
  var prices = data.prices || { input: 0, cachedInput: 0 };
  runs.forEach(function (run) {
    var sum = 0;
    run.calls.forEach(function (c) { sum += ((c.n - c.ca) * prices.input + c.ca * prices.cachedInput) / 1e6; c.costSoFar = sum; });
  });
  function money(v) { return '$' + (v >= 1 ? v.toFixed(2) : v >= 0.01 ? v.toFixed(3) : v.toFixed(4)); }

  var box = document.getElementById('runs');
  groups.forEach(function (g, gi) {
    var card = html('div', 'run-group', null, box);
    card.setAttribute('data-group', String(gi));
    html('h3', '', title(g), card);
    var facts = [];
    Object.keys(g.runs).forEach(function (key) {
      var calls = g.runs[key].calls, input = 0, cached = 0, comp = 0;
      calls.forEach(function (c) { input += c.n; cached += c.ca; comp += c.cp ? 1 : 0; });
      facts.push(engines[Number(key)] + ': ' + money(calls.length ? calls[calls.length - 1].costSoFar : 0) + ', ' +
        (input ? Math.round((1000 * cached) / input) / 10 : 0) + '% cached, ' + comp + ' compacting calls');
    });
    html('p', 'hint', facts.join(' · '), card);
    chart(card, g, 'cost', 'input cost so far', function (c) { return c.costSoFar; }, money, undefined, true);
    chart(card, g, 'hit', 'cache hit rate of the call', function (c) { return c.n ? c.ca / c.n : 0; },
      function (v) { return Math.round(v * 100) + '%'; }, 1, false);
  });

  // The drill-down: one call of one group, two engines' contexts side by side.
  var gSel = document.getElementById('drill-group'), lSel = document.getElementById('drill-left'),
    rSel = document.getElementById('drill-right'), callIn = document.getElementById('drill-call');
  groups.forEach(function (g, gi) { html('option', '', title(g), gSel).value = String(gi); });
  engines.forEach(function (name, e) {
    html('option', '', name, lSel).value = String(e);
    html('option', '', name, rSel).value = String(e);
  });
  var state = { group: 0, call: 0, left: 0, right: engines.length > 1 ? 1 : 0 };

  function callOf(g, e, i) { var run = g && g.runs[e]; return run ? run.calls[i] : undefined; }
  function differing(a, b) {
    var inB = {}, n = 0;
    (b ? b.context : []).forEach(function (i) { inB[i] = true; });
    (a ? a.context : []).forEach(function (i) { if (!inB[i]) { n++; } });
    return n;
  }
  function callCount(g) {
    var n = 0;
    Object.keys(g.runs).forEach(function (e) { n = Math.max(n, g.runs[e].calls.length); });
    return n;
  }

  function side(boxEl, which, e, c, other) {
    while (boxEl.firstChild) { boxEl.removeChild(boxEl.firstChild); }
    boxEl.setAttribute('data-engine', String(e));
    var head = html('p', 'call-title', null, boxEl);
    head.appendChild(el('svg', { width: 12, height: 12, viewBox: '0 0 12 12' })).appendChild(el('circle', { cx: 6, cy: 6, r: 5, fill: color(e) }));
    html('span', '', ' ' + engines[e], head);
    if (!c) { html('p', 'hint', 'no such call in this run', boxEl); return; }
    var inOther = {};
    (other ? other.context : []).forEach(function (i) { inOther[i] = true; });
    var diff = 0;
    c.context.forEach(function (i) { if (!inOther[i]) { diff++; } });
    html('p', 'hint', 'conversation ' + c.cv + ', turn ' + c.t + (c.fb ? ', legacy answered' : '') + ': ' +
      fmt(c.context.length) + ' blocks, ' + fmt(c.n) + ' tokens, ' + fmt(c.ca) + ' cached' +
      (c.br ? ', cache break (' + c.br + ')' : '') + (c.cp ? ', compacted' : '') + '; ' +
      diff + ' not in the other context.', boxEl);
    var wrap = html('div', 'table-wrap', null, boxEl);
    var t = html('table', 'ctx side-ctx', null, wrap);
    var hr = html('tr', '', null, html('thead', '', null, t));
    ['', '#', 'role', 'tokens', 'text'].forEach(function (h) { html('th', '', h, hr); });
    var body = html('tbody', '', null, t);
    c.context.forEach(function (i, k) {
      var b = blocks[i] || { role: '?', tokens: 0, preview: '' }, differs = !inOther[i];
      var tr = html('tr', differs ? 'differs' : '', null, body);
      tr.setAttribute('data-side', which);
      tr.setAttribute('data-block', String(i));
      if (differs) { tr.setAttribute('data-differs', ''); }
      [differs ? '≠' : '', String(k + 1), b.role, fmt(b.tokens), b.preview].forEach(function (v) { html('td', '', v, tr); });
    });
  }

  function show() {
    var g = groups[state.group], n = g ? callCount(g) : 0;
    state.call = Math.max(0, Math.min(n - 1, state.call));
    gSel.value = String(state.group); lSel.value = String(state.left); rSel.value = String(state.right);
    callIn.max = String(Math.max(1, n));
    callIn.value = String(state.call + 1);
    var d = document.getElementById('drill');
    d.setAttribute('data-group', String(state.group));
    d.setAttribute('data-transcript', g ? data.transcripts[g.transcript] : '');
    d.setAttribute('data-window', g ? String(g.window) : '');
    d.setAttribute('data-call', String(state.call));
    d.setAttribute('data-left', String(state.left));
    d.setAttribute('data-right', String(state.right));
    var a = callOf(g, state.left, state.call), b = callOf(g, state.right, state.call);
    document.getElementById('drill-summary').textContent = g ? title(g) + ', model call ' + (state.call + 1) + ' of ' + n +
      ': ≠ marks a block the other engine did not send in the same call.' : 'nothing to show';
    side(document.getElementById('side-left'), 'left', state.left, a, b);
    side(document.getElementById('side-right'), 'right', state.right, b, a);
    if (history.replaceState) {
      history.replaceState(null, '', '#group=' + state.group + '&call=' + (state.call + 1) + '&left=' + state.left + '&right=' + state.right);
    }
  }
  function drill(gi, i, e) {
    state.group = gi; state.call = i;
    if (e !== undefined && e !== state.left && e !== state.right) { state.right = e; }
    show();
    document.getElementById('drill').scrollIntoView({ block: 'nearest' });
  }
  gSel.addEventListener('change', function () { state.group = Number(gSel.value); show(); });
  lSel.addEventListener('change', function () { state.left = Number(lSel.value); show(); });
  rSel.addEventListener('change', function () { state.right = Number(rSel.value); show(); });
  callIn.addEventListener('change', function () { state.call = Number(callIn.value) - 1; show(); });
  document.getElementById('drill-prev').addEventListener('click', function () { state.call--; show(); });
  document.getElementById('drill-next').addEventListener('click', function () { state.call++; show(); });

  // Start at #group=G&call=K&left=A&right=B when given; else the first group's call where the
  // first two engines' contexts differ most.
  var wanted = {};
  location.hash.replace(/^#/, '').split('&').forEach(function (kv) {
    var p = kv.split('=');
    if (p.length === 2 && /^\d+$/.test(p[1])) { wanted[p[0]] = Number(p[1]); }
  });
  if (wanted.group !== undefined && wanted.group < groups.length) { state.group = wanted.group; }
  if (wanted.left !== undefined && wanted.left < engines.length) { state.left = wanted.left; }
  if (wanted.right !== undefined && wanted.right < engines.length) { state.right = wanted.right; }
  if (wanted.call !== undefined) {
    state.call = wanted.call - 1;
  } else if (groups.length) {
    var g0 = groups[state.group], most = -1;
    for (var i = 0; i < callCount(g0); i++) {
      var a = callOf(g0, state.left, i), b = callOf(g0, state.right, i);
      var d = differing(a, b) + differing(b, a);
      if (d > most) { most = d; state.call = i; }
    }
  }
  show();
})();
