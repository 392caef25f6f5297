// Draws the replay report's chart from the JSON in #replay-data. Every string from the data is
// set with textContent or setAttribute, never parsed as HTML.
(function () {
  'use strict';
  var data = JSON.parse(document.getElementById('replay-data').textContent);
  var turns = data.turns || [];
  var sessions = data.sessions || [];
  var multi = sessions.length > 1;
  var svg = document.getElementById('chart');
  var tip = document.getElementById('tip');
  var wrap = document.getElementById('wrap');
  var W = 1200, H = 440, M = { l: 68, r: 64, t: 40, b: 46 };
  var PW = W - M.l - M.r, PH = H - M.t - M.b;
  var view = [];          // indices into turns, in drawing order
  var pos = {};           // turn index -> position in view
  var pinned = -1;        // pinned turn index
  var x = function () { return 0; }, y = x;
  var focusRing, pinRing, guide;
  var shownCall = {};     // turn index -> the model call shown in the context panel

  var R = ctxhostReport;
  var fmt = R.fmt, el = R.el, html = R.html, niceStep = R.niceStep, triangle = R.triangle, cross = R.cross;

  // Legend (static).
  (function legend() {
    var box = document.getElementById('legend');
    function item(label, draw) {
      var s = html('span', '', null, box);
      var g = el('svg', { width: 22, height: 12, viewBox: '0 0 22 12' }, s);
      draw(g);
      html('span', '', label, s);
    }
    item('assembled tokens', function (g) {
      el('line', { x1: 0, y1: 6, x2: 22, y2: 6, stroke: '#2f6fed', 'stroke-width': 2 }, g);
      el('circle', { cx: 11, cy: 6, r: 3, fill: '#fff', stroke: '#2f6fed', 'stroke-width': 1.4 }, g);
    });
    item('budget', function (g) {
      el('line', { x1: 0, y1: 6, x2: 22, y2: 6, stroke: '#e07a1f', 'stroke-width': 1.6, 'stroke-dasharray': '6 4' }, g);
    });
    item('compaction', function (g) { el('path', { d: triangle(11, 5, 4), fill: '#7b4fd6' }, g); });
    item('fallback to legacy', function (g) { el('circle', { cx: 11, cy: 6, r: 4, fill: '#d92d43' }, g); });
    var anyQuarantine = turns.some(function (r) { return r.quarantined; });
    if (anyQuarantine) {
      item('quarantined: legacy answers', function (g) {
        el('rect', { x: 11, y: 0, width: 11, height: 12, fill: 'rgba(217, 45, 67, .08)' }, g);
        el('line', { x1: 11, y1: 0, x2: 11, y2: 12, stroke: '#b4232f', 'stroke-width': 1.6, 'stroke-dasharray': '3 3' }, g);
      });
    }
    if (multi) {
      item('sessions (alternate shading)', function (g) {
        el('rect', { x: 0, y: 1, width: 10, height: 10, fill: '#f3f5f9', stroke: '#e4e8ef' }, g);
        el('rect', { x: 11, y: 1, width: 10, height: 10, fill: '#fff', stroke: '#e4e8ef' }, g);
      });
    }
  })();

  function draw() {
    while (svg.firstChild) { svg.removeChild(svg.firstChild); }
    svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
    var n = view.length;
    pos = {};
    for (var p = 0; p < n; p++) { pos[view[p]] = p; }
    if (n === 0) {
      el('text', { x: W / 2, y: H / 2, 'text-anchor': 'middle' }, svg).textContent = 'no turns to show';
      svg.setAttribute('data-points', '0');
      return;
    }
    var maxY = 1;
    view.forEach(function (i) { maxY = Math.max(maxY, turns[i].assembledTokens, turns[i].tokenBudget); });
    var step = niceStep(maxY * 1.08), top = Math.ceil((maxY * 1.08) / step) * step;
    var band = PW / n;
    x = function (p) { return M.l + (p + 0.5) * band; };
    y = function (v) { return M.t + PH - (v / top) * PH; };

    // Session bands.
    var g = el('g', {}, svg);
    if (multi) {
      var start = 0, k = 0;
      for (var q = 1; q <= n; q++) {
        if (q === n || turns[view[q]].session !== turns[view[start]].session) {
          if (k % 2 === 1) { el('rect', { 'class': 'band', x: M.l + start * band, y: M.t, width: (q - start) * band, height: PH }, g); }
          start = q; k++;
        }
      }
    }
    // Grid and axes.
    for (var v = 0; v <= top + 1e-9; v += step) {
      el('line', { 'class': 'grid', x1: M.l, x2: W - M.r, y1: y(v), y2: y(v) }, g);
      el('text', { x: M.l - 8, y: y(v) + 4, 'text-anchor': 'end' }, g).textContent = fmt(v);
    }
    var every = Math.max(1, Math.ceil(n / 12));
    var nice = [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000];
    for (var ni = 0; ni < nice.length; ni++) { if (nice[ni] >= every) { every = nice[ni]; break; } }
    for (var t = 0; t < n; t++) {
      var label = multi && !isSession() ? t + 1 : turns[view[t]].turn;
      if (label % every === 0 || (n <= 12)) {
        el('text', { x: x(t), y: H - M.b + 18, 'text-anchor': 'middle' }, g).textContent = String(label);
      }
    }
    el('text', { 'class': 'axis-title', x: M.l + PW / 2, y: H - 8, 'text-anchor': 'middle' }, g).textContent =
      multi && !isSession() ? 'turn (replay order, all sessions)' : 'turn';
    el('text', { 'class': 'axis-title', transform: 'translate(16,' + (M.t + PH / 2) + ') rotate(-90)', 'text-anchor': 'middle' }, g)
      .textContent = 'tokens';

    // Budget: a step line, one level per turn.
    var d = '';
    view.forEach(function (i, p) {
      var yy = y(turns[i].tokenBudget);
      d += (p === 0 ? 'M' : 'L') + (x(p) - band / 2) + ',' + yy + 'L' + (x(p) + band / 2) + ',' + yy;
    });
    el('path', { 'class': 'budget', d: d }, svg);
    var lastBudget = turns[view[n - 1]].tokenBudget;
    el('text', { 'class': 'budget-label', x: W - M.r + 8, y: y(lastBudget) - 2 }, svg).textContent = 'budget';
    el('text', { 'class': 'budget-label', x: W - M.r + 8, y: y(lastBudget) + 12 }, svg).textContent = fmt(lastBudget);

    // Assembled tokens: area and line per session run.
    var runs = [], cur = [];
    view.forEach(function (i, p) {
      if (cur.length && turns[view[cur[cur.length - 1]]].session !== turns[i].session) { runs.push(cur); cur = []; }
      cur.push(p);
    });
    if (cur.length) { runs.push(cur); }
    runs.forEach(function (run) {
      var line = '', area = '';
      run.forEach(function (p, j) {
        var pt = x(p) + ',' + y(turns[view[p]].assembledTokens);
        line += (j === 0 ? 'M' : 'L') + pt;
        area += (j === 0 ? 'M' + x(p) + ',' + y(0) + 'L' : 'L') + pt;
      });
      area += 'L' + x(run[run.length - 1]) + ',' + y(0) + 'Z';
      el('path', { 'class': 'area', d: area }, svg);
      if (run.length > 1) { el('path', { 'class': 'series', d: line }, svg); }
    });

    // Markers above the plot: compactions (violet triangles) and fallbacks (red crosses).
    var mg = el('g', {}, svg);
    var quarantineAt = -1;
    view.forEach(function (i, p) {
      var r = turns[i];
      if (r.compactions > 0) {
        el('line', { 'class': 'tick-compaction', x1: x(p), x2: x(p), y1: M.t - 8, y2: y(r.assembledTokens) }, mg);
        el('path', { 'class': 'mark-compaction', d: triangle(x(p), M.t - 24, 4.5), 'data-marker': 'compaction' }, mg);
      }
      if (r.fallback) {
        el('path', { 'class': 'mark-fallback', d: cross(x(p), M.t - 10, Math.min(3.2, band / 2.5 + 0.6)), stroke: '#d92d43', 'stroke-width': 1.5, 'data-marker': 'fallback' }, mg);
      }
      if (r.quarantined && quarantineAt < 0 && (p === 0 || !turns[view[p - 1]].quarantined || turns[view[p - 1]].session !== r.session)) {
        quarantineAt = p;
      }
    });
    if (quarantineAt >= 0) {
      var qx = x(quarantineAt) - band / 2, qe = quarantineAt;
      while (qe + 1 < n && turns[view[qe + 1]].quarantined) { qe++; }
      el('rect', { 'class': 'quarantine-zone', x: qx, y: M.t, width: (qe - quarantineAt + 1) * band, height: PH }, g);
      el('line', { 'class': 'quarantine', x1: qx, x2: qx, y1: M.t - 30, y2: M.t + PH, 'data-marker': 'quarantine' }, svg);
      var qt = el('text', { 'class': 'quarantine-label', x: qx + 6, y: M.t + 14 }, svg);
      qt.textContent = 'quarantined from turn ' + turns[view[quarantineAt]].turn;
    }
    el('line', { 'class': 'grid', x1: M.l, x2: W - M.r, y1: y(0), y2: y(0), stroke: '#98a2b3' }, svg);

    // One point per turn.
    var radius = n <= 120 ? 3.4 : n <= 400 ? 2.4 : 1.7;
    var pg = el('g', {}, svg);
    view.forEach(function (i, p) {
      var r = turns[i];
      var cls = 'pt' + (r.fallback ? ' fallback' : r.assembledTokens > r.tokenBudget ? ' over' : r.compactions > 0 ? ' compaction' : '');
      el('circle', {
        'class': cls, cx: x(p), cy: y(r.assembledTokens), r: radius,
        'data-point': i, 'data-session': r.session, 'data-turn': r.turn
      }, pg);
    });
    guide = el('line', { 'class': 'guide', x1: 0, x2: 0, y1: M.t, y2: M.t + PH, visibility: 'hidden' }, svg);
    pinRing = el('circle', { 'class': 'pinned', r: radius + 4, visibility: 'hidden' }, svg);
    focusRing = el('circle', { 'class': 'focus', r: radius + 3, visibility: 'hidden' }, svg);
    el('rect', { x: M.l, y: 0, width: PW, height: H, fill: 'transparent', 'data-overlay': '' }, svg);
    svg.setAttribute('data-points', String(n));
    showPinned();
    summarizeView();
    if (document.getElementById('table-box').open) { fillTable(); }
  }

  function isSession() { return document.getElementById('session').value !== ''; }

  function summarizeView() {
    var c = 0, f = 0, mx = 0;
    view.forEach(function (i) { c += turns[i].compactions; f += turns[i].fallback ? 1 : 0; mx = Math.max(mx, turns[i].assembledTokens); });
    var scope = isSession() ? 'session ' + document.getElementById('session').value : multi ? sessions.length + ' sessions' : 'this replay';
    document.getElementById('view-summary').textContent =
      scope + ': ' + fmt(view.length) + ' turns, ' + fmt(c) + ' compactions, ' + fmt(f) + ' fallbacks, largest assembly ' + fmt(mx) + ' tokens.';
  }

  function row(box, k, v, cls) {
    var r = html('div', 'row' + (cls ? ' ' + cls : ''), null, box);
    html('span', '', k, r);
    html('span', '', v, r);
  }

  function facts(r) {
    var pct = r.tokenBudget > 0 ? ' (' + Math.round((100 * r.assembledTokens) / r.tokenBudget) + '%)' : '';
    return [
      ['session', r.session, ''],
      ['turn', String(r.turn), ''],
      ['engine', r.engine + (r.manualCompact ? ' · /compact' : ''), r.fallback ? 'bad' : ''],
      ['assembled / budget', fmt(r.assembledTokens) + ' / ' + fmt(r.tokenBudget) + pct, r.assembledTokens > r.tokenBudget ? 'bad' : ''],
      ['engine estimate', fmt(r.estimatedTokens) + ' tokens', ''],
      ['messages seen / in session', fmt(r.assembledMessages) + ' / ' + fmt(r.sessionMessages), ''],
      ['model calls', String(r.modelCalls), ''],
      ['compactions', String(r.compactions), r.compactions > 0 ? 'cmp' : ''],
      ['pairing repairs', String(r.pairingRepairs), ''],
      ['fallback to legacy', r.fallback ? 'yes' : 'no', r.fallback ? 'bad' : ''],
      ['engine quarantined', r.quarantined ? 'yes' : 'no', r.quarantined ? 'bad' : '']
    ];
  }

  function showTip(i, p) {
    var r = turns[i];
    while (tip.firstChild) { tip.removeChild(tip.firstChild); }
    html('div', 'tip-title', (multi ? r.session + ' · ' : '') + 'turn ' + r.turn, tip);
    row(tip, 'engine', r.engine);
    row(tip, 'assembled / budget', fmt(r.assembledTokens) + ' / ' + fmt(r.tokenBudget));
    row(tip, 'messages', fmt(r.assembledMessages) + ' of ' + fmt(r.sessionMessages));
    row(tip, 'model calls', String(r.modelCalls));
    row(tip, 'compactions', String(r.compactions));
    row(tip, 'pairing repairs', String(r.pairingRepairs));
    if (r.fallback) { html('div', 'flag', 'fell back to legacy', tip); }
    if (r.quarantined) { html('div', 'flag', 'engine quarantined', tip); }
    if (r.manualCompact) { html('div', 'flag c', '/compact', tip); }
    tip.hidden = false;
    var box = svg.getBoundingClientRect(), s = box.width / W;
    var px = x(p) * s, py = y(r.assembledTokens) * s;
    var left = px + 14, tw = tip.offsetWidth, th = tip.offsetHeight;
    if (left + tw > box.width) { left = px - 14 - tw; }
    var topPx = Math.max(0, Math.min(py - th / 2, box.height - th));
    tip.style.left = left + 'px';
    tip.style.top = topPx + 'px';
    focusRing.setAttribute('cx', x(p));
    focusRing.setAttribute('cy', y(r.assembledTokens));
    focusRing.setAttribute('visibility', 'visible');
    guide.setAttribute('x1', x(p));
    guide.setAttribute('x2', x(p));
    guide.setAttribute('visibility', 'visible');
  }

  function hideTip() {
    tip.hidden = true;
    if (focusRing) { focusRing.setAttribute('visibility', 'hidden'); guide.setAttribute('visibility', 'hidden'); }
  }

  function showPinned() {
    var dl = document.getElementById('detail');
    while (dl.firstChild) { dl.removeChild(dl.firstChild); }
    var rows = document.querySelectorAll('#turns tbody tr.is-selected');
    for (var k = 0; k < rows.length; k++) { rows[k].classList.remove('is-selected'); }
    if (pinned < 0 || pos[pinned] === undefined) { pinRing.setAttribute('visibility', 'hidden'); return; }
    var r = turns[pinned], p = pos[pinned];
    facts(r).forEach(function (f) {
      var d = html('div', f[2], null, dl);
      html('dt', '', f[0], d);
      html('dd', '', f[1], d);
    });
    pinRing.setAttribute('cx', x(p));
    pinRing.setAttribute('cy', y(r.assembledTokens));
    pinRing.setAttribute('visibility', 'visible');
    var tr = document.querySelector('#turns tbody tr[data-row="' + pinned + '"]');
    if (tr) { tr.classList.add('is-selected'); }
    document.getElementById('details-hint').textContent =
      'Pinned: ' + (multi ? r.session + ', ' : '') + 'turn ' + r.turn + '. Click another point to pin it; ← → step through turns.';
    showContext(pinned);
  }

  // The pinned turn's model calls, and the chosen call's context: each message with its origin,
  // what is new against the call before, and what that call had that this one dropped or
  // summarized.
  function showContext(i) {
    var calls = document.getElementById('calls'), box = document.getElementById('context');
    while (calls.firstChild) { calls.removeChild(calls.firstChild); }
    while (box.firstChild) { box.removeChild(box.firstChild); }
    var r = turns[i], list = r.calls || [];
    if (!list.length) { return; }
    var chosen = shownCall[i] === undefined ? list.length - 1 : shownCall[i];
    list.forEach(function (c, k) {
      var b = html('button', 'call' + (k === chosen ? ' is-selected' : '') + (c.fallback ? ' is-fallback' : ''),
        'call ' + c.call + ' · ' + fmt(c.assembledTokens) + ' tok' + (c.compactions ? ' · compacted' : ''), calls);
      b.type = 'button';
      b.setAttribute('data-call', String(c.call));
      b.addEventListener('click', function () { shownCall[i] = k; showContext(i); });
    });
    var c = list[chosen], v = c.context;
    html('p', 'call-title', 'Turn ' + r.turn + ', model call ' + c.call + ' of ' + list.length + ' (' + c.engine +
      (c.fallback ? ', fell back to legacy' : '') + '): ' + fmt(c.assembledMessages) + ' messages, ' +
      fmt(c.assembledTokens) + ' / ' + fmt(c.tokenBudget) + ' tokens.', box);
    if (!v) { html('p', 'hint', 'This replay did not record contexts.', box); return; }
    var spa = html('div', 'spa', null, box);
    html('span', 'k', 'systemPromptAddition' + (v.systemPromptAddition ? ' (' + fmt(v.systemPromptTokens) + ' tokens)' : ''), spa);
    html('pre', '', v.systemPromptAddition || 'none', spa);
    html('p', 'diff', 'Against the previous call: ' + fmt(v.kept) + ' kept, ' + fmt(v.new) + ' new, ' +
      fmt(v.dropped.length) + ' dropped, ' + fmt(v.summarized.length) + ' summarized.', box);
    var wrapT = html('div', 'table-wrap', null, box);
    var t = html('table', 'ctx', null, wrapT);
    var head = html('tr', '', null, html('thead', '', null, t));
    ['', '#', 'role', 'origin', 'tokens', 'first line'].forEach(function (h) { html('th', '', h, head); });
    var body = html('tbody', '', null, t);
    v.messages.forEach(function (m) {
      var tr = html('tr', 'o-' + m.origin + (m.new ? ' is-new' : ''), null, body);
      tr.setAttribute('data-origin', m.origin);
      if (m.new) { tr.setAttribute('data-new', ''); }
      [m.new ? '+' : '', String(m.index), m.role, m.origin, fmt(m.tokens), m.firstLine].forEach(function (x) { html('td', '', x, tr); });
    });
    [['dropped', v.dropped], ['summarized', v.summarized]].forEach(function (g) {
      g[1].forEach(function (m) {
        var tr = html('tr', 'gone gone-' + g[0], null, body);
        tr.setAttribute('data-gone', g[0]);
        ['−', '', m.role, g[0], fmt(m.tokens), m.firstLine].forEach(function (x) { html('td', '', x, tr); });
      });
    });
    if (c.pipeline) { showPipeline(c.pipeline, box); }
  }

  // What the pipeline's hooks did in the call: contributions by source and placement, what was
  // dropped for the budget, what each prune hook removed or changed, who summarized what.
  function showPipeline(p, box) {
    var sec = html('div', 'pipeline', null, box);
    html('span', 'k', 'Pipeline hooks', sec);
    var wrapP = html('div', 'table-wrap', null, sec);
    var t = html('table', 'ctx pipeline-blocks', null, wrapP);
    var head = html('tr', '', null, html('thead', '', null, t));
    ['', 'source', 'placement', 'id', 'priority', 'tokens'].forEach(function (h) { html('th', '', h, head); });
    var body = html('tbody', '', null, t);
    [['+', p.contributions || [], ''], ['−', p.dropped || [], 'gone gone-dropped']].forEach(function (g) {
      g[1].forEach(function (b) {
        var tr = html('tr', g[2], null, body);
        tr.setAttribute('data-block', g[0] === '+' ? 'placed' : 'dropped');
        [g[0], b.source, b.field, b.id || '', String(b.priority), fmt(b.tokens)].forEach(function (x) { html('td', '', x, tr); });
      });
    });
    var notes = [];
    if ((p.dropped || []).length) { notes.push(p.dropped.length + ' block(s) dropped for the contributions\' share of the budget'); }
    if (p.systemPromptBy) { notes.push('systemPrompt replaced by ' + p.systemPromptBy); }
    (p.pruned || []).forEach(function (r) {
      notes.push('prune by ' + r.hook + ': ' + fmt(r.removed) + ' removed, ' + fmt(r.changed) + ' changed, ' +
        fmt(r.tokensBefore) + ' → ' + fmt(r.tokensAfter) + ' tokens');
    });
    if (p.compactionHandledBy) { notes.push('compaction handled by the prune of ' + p.compactionHandledBy); }
    (p.compactions || []).forEach(function (c) {
      notes.push('summarized by ' + c.summarizedBy + ': ' + fmt(c.summarizedMessages) + ' messages, ' +
        fmt(c.tokensBefore) + ' → ' + fmt(c.tokensAfter || 0) + ' tokens');
    });
    if ((p.quarantined || []).length) { notes.push('quarantined: ' + p.quarantined.join(', ')); }
    notes.forEach(function (n) { html('p', 'diff', n, sec); });
  }

  function nearest(evt) {
    var pt = svg.createSVGPoint();
    pt.x = evt.clientX; pt.y = evt.clientY;
    var m = svg.getScreenCTM();
    if (!m || !view.length) { return -1; }
    var sp = pt.matrixTransform(m.inverse());
    var p = Math.floor(((sp.x - M.l) / PW) * view.length);
    return Math.max(0, Math.min(view.length - 1, p));
  }

  svg.addEventListener('mousemove', function (evt) {
    var p = nearest(evt);
    if (p >= 0) { showTip(view[p], p); }
  });
  svg.addEventListener('mouseleave', hideTip);
  svg.addEventListener('click', function (evt) {
    var p = nearest(evt);
    if (p >= 0) { pinned = view[p]; showPinned(); }
  });
  document.addEventListener('keydown', function (evt) {
    if (evt.target && evt.target.tagName === 'SELECT') { return; }
    if ((evt.key !== 'ArrowLeft' && evt.key !== 'ArrowRight') || !view.length) { return; }
    var p = pos[pinned] === undefined ? 0 : pos[pinned] + (evt.key === 'ArrowRight' ? 1 : -1);
    p = Math.max(0, Math.min(view.length - 1, p));
    pinned = view[p];
    showPinned();
    evt.preventDefault();
  });

  function fillTable() {
    var body = document.querySelector('#turns tbody');
    while (body.firstChild) { body.removeChild(body.firstChild); }
    view.forEach(function (i) {
      var r = turns[i];
      var tr = html('tr', (r.fallback ? 'is-fallback ' : '') + (r.compactions > 0 ? 'is-compaction' : ''), null, body);
      tr.setAttribute('data-row', String(i));
      [r.session, r.turn, r.engine, fmt(r.assembledTokens), fmt(r.tokenBudget),
        fmt(r.assembledMessages) + ' / ' + fmt(r.sessionMessages), r.modelCalls, r.compactions,
        r.pairingRepairs, r.fallback ? 'yes' : ''].forEach(function (v) { html('td', '', String(v), tr); });
      tr.addEventListener('click', function () { pinned = i; showPinned(); });
      if ((r.calls || []).length > 1) {
        r.calls.forEach(function (c, k) {
          var cr = html('tr', 'call-row' + (c.fallback ? ' is-fallback' : ''), null, body);
          cr.setAttribute('data-call-of', String(i));
          ['', '· call ' + c.call, c.engine, fmt(c.assembledTokens), fmt(c.tokenBudget),
            fmt(c.assembledMessages) + ' / ' + fmt(c.contextMessages), '', c.compactions,
            c.pairingRepairs, c.fallback ? 'yes' : ''].forEach(function (v) { html('td', '', String(v), cr); });
          cr.addEventListener('click', function () { pinned = i; shownCall[i] = k; showPinned(); });
        });
      }
    });
    showPinned();
  }
  document.getElementById('table-box').addEventListener('toggle', function () {
    if (this.open) { fillTable(); }
  });

  // Session picker for replays of several conversations.
  var select = document.getElementById('session');
  var all = html('option', '', 'all ' + sessions.length + ' sessions (' + fmt(turns.length) + ' turns)', select);
  all.value = '';
  if (multi) {
    var stats = {};
    turns.forEach(function (r) {
      var s = stats[r.session] || (stats[r.session] = { n: 0, c: 0, f: 0 });
      s.n++; s.c += r.compactions; s.f += r.fallback ? 1 : 0;
    });
    sessions.forEach(function (name) {
      var s = stats[name] || { n: 0, c: 0, f: 0 };
      var o = html('option', '', name + ' — ' + s.n + ' turns' + (s.c ? ', ' + s.c + ' compactions' : '') + (s.f ? ', ' + s.f + ' fallbacks' : ''), select);
      o.value = name;
    });
    document.getElementById('picker').hidden = false;
  }
  select.addEventListener('change', function () {
    var name = select.value;
    view = [];
    turns.forEach(function (r, i) { if (name === '' || r.session === name) { view.push(i); } });
    hideTip();
    draw();
  });

  select.addEventListener('change', function () {
    if (history.replaceState) { history.replaceState(null, '', select.value ? '#session=' + encodeURIComponent(select.value) : '#'); }
  });

  // Start with everything (or the session named by #session=NAME), the largest assembly pinned.
  var wanted = /^#session=(.*)$/.exec(location.hash);
  if (multi && wanted) {
    try { select.value = decodeURIComponent(wanted[1]); } catch (e) { select.value = ''; }
    if (select.selectedIndex < 0) { select.value = ''; }
  }
  view = [];
  turns.forEach(function (r, i) { if (select.value === '' || r.session === select.value) { view.push(i); } });
  view.forEach(function (i) { if (pinned < 0 || turns[i].assembledTokens > turns[pinned].assembledTokens) { pinned = i; } });
  draw();
})();
