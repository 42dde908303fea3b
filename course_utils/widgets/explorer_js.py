"""The attention explorer's front end: CSS and a script inlined into every explorer output.

Kept as Python strings (not .js files) so that ``pip install`` from the repository, as on
Colab, ships them without any package-data configuration. The script reads the JSON
next to it (built by ``course_utils.widgets.explorer``), draws the explorer into its own
``.attn-explorer`` element and only *switches* between the precomputed states: it does
no attention arithmetic except multiplying a score by the scale to show that step. Every
word it shows comes from the JSON too (``ui``, in the course language of the moment the
explorer was shown), so one script serves both editions.
Plain ES5-style DOM code, no library, nothing loaded from anywhere.
"""

EXPLORER_CSS = """
.attn-explorer { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; font-size: 13px;
  color: #222; background: #fff; padding: 6px; }
.attn-explorer button { font: inherit; border: 1px solid #bbb; border-radius: 4px;
  background: #f4f4f4; color: #222; padding: 2px 8px; margin: 2px; cursor: pointer; }
.attn-explorer button.attn-explorer-on { background: #1f4e79; color: #fff; border-color: #1f4e79; }
.attn-explorer .attn-explorer-token.attn-explorer-selected { background: #2e86c1; color: #fff;
  border-color: #2e86c1; }
.attn-explorer .attn-explorer-controls { display: flex; flex-wrap: wrap; gap: 10px;
  align-items: center; margin: 4px 0; }
.attn-explorer select { font: inherit; }
.attn-explorer .attn-explorer-main { display: flex; flex-wrap: wrap; gap: 18px;
  align-items: flex-start; }
.attn-explorer svg text { font-size: 12px; cursor: pointer; fill: #222; }
.attn-explorer svg text.attn-explorer-hl { font-weight: bold; fill: #1f4e79; }
.attn-explorer table { border-collapse: collapse; margin: 6px 0; }
.attn-explorer td, .attn-explorer th { padding: 1px 4px; font-size: 11px; border: none; }
.attn-explorer .attn-explorer-heatmap td { width: 30px; height: 20px; text-align: center;
  padding: 0; cursor: pointer; }
.attn-explorer .attn-explorer-heatmap th { cursor: pointer; }
.attn-explorer .attn-explorer-heatmap th.attn-explorer-key { writing-mode: vertical-rl;
  height: 56px; }
.attn-explorer .attn-explorer-heatmap tr.attn-explorer-query-row td { box-shadow:
  inset 0 2px 0 #1f4e79, inset 0 -2px 0 #1f4e79; }
.attn-explorer .attn-explorer-heatmap td.attn-explorer-key-col { box-shadow:
  inset 2px 0 0 #117a65, inset -2px 0 0 #117a65; }
.attn-explorer .attn-explorer-steps td, .attn-explorer .attn-explorer-steps th {
  text-align: right; font-family: monospace; padding: 1px 8px; }
.attn-explorer .attn-explorer-steps .attn-explorer-future { color: #ccc; }
.attn-explorer .attn-explorer-stepnames span { margin-right: 8px; color: #888; }
.attn-explorer .attn-explorer-stepnames span.attn-explorer-current { color: #c0392b;
  font-weight: bold; }
.attn-explorer .attn-explorer-model { display: grid; gap: 4px; margin-top: 6px;
  justify-content: start; align-items: center; }
.attn-explorer canvas.attn-explorer-thumb { width: 56px; height: 56px; cursor: pointer;
  border: 2px solid transparent; image-rendering: pixelated; }
.attn-explorer canvas.attn-explorer-thumb.attn-explorer-selected { border-color: #1f4e79; }
.attn-explorer .attn-explorer-note { color: #666; font-style: italic; margin: 2px 0; }
"""

EXPLORER_JS = r"""
(function () {
  "use strict";
  var me = document.currentScript;
  var root = me && me.parentNode && me.parentNode.classList &&
    me.parentNode.classList.contains('attn-explorer') ? me.parentNode : null;
  if (!root) {  // no currentScript: the last explorer on the page not yet started
    var waiting = document.querySelectorAll('.attn-explorer:not([data-ready])');
    root = waiting[waiting.length - 1];
  }
  if (!root || root.getAttribute('data-ready')) { return; }
  root.setAttribute('data-ready', '1');
  var data = JSON.parse(root.querySelector('script.attn-explorer-data').textContent);
  var toy = data.mode === 'toy';
  var init = data.initial || {};
  var S = {s: 0, q: data.sentences[0].query, hq: null, hk: null, hcell: null,
           causal: !!init.causal, scaled: init.scaled !== false, t: init.t || 0,
           layer: init.layer || 0, head: init.head || 0, step: 4, edits: {}};
  var UI = data.ui;  // the page's words, in the course language (see UI_TEXT)
  var STEP_NAMES = UI.step_names;
  var SVG = 'http://www.w3.org/2000/svg';
  var ui = {};

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined && text !== null) { e.textContent = text; }
    return e;
  }
  function svgEl(tag, attrs) {
    var e = document.createElementNS(SVG, tag);
    for (var k in attrs) { e.setAttribute(k, attrs[k]); }
    return e;
  }
  function esc(s) {
    return String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;')
      .replace(/"/g, '&quot;');
  }
  function fill(template) {  // UI text with {0}, {1} ... replaced by the arguments
    var parts = Array.prototype.slice.call(arguments, 1);
    return template.replace(/\{(\d+)\}/g, function (_, i) { return parts[Number(i)]; });
  }
  function sentence() { return data.sentences[S.s]; }
  function tokens() { return sentence().tokens; }
  function current() {  // {w: (n_q, n_k) weights, h: (n_q,) entropies, out: (n_q, d_v)}
    var x = sentence();
    if (!toy) { return {w: x.maps[S.layer][S.head], h: x.h[S.layer][S.head], out: null}; }
    var st = x.states['c' + (+S.causal) + 's' + (+S.scaled)][S.t];
    var edited = Object.keys(S.edits);
    if (!edited.length) { return st; }
    // Rows whose query the reader edited: the only numbers computed in the page.
    var copy = {w: st.w.slice(), h: st.h.slice(), out: st.out.slice()};
    edited.forEach(function (key) {
      var q = Number(key), row = editedRow(q);
      copy.w[q] = row.w; copy.h[q] = row.h; copy.out[q] = row.out;
    });
    return copy;
  }
  function scoreRow(q) {  // q·k for every key: edited query, or the precomputed scores
    var x = sentence(), edited = S.edits[q];
    if (!edited) { return x.scores[q]; }
    return x.keys.map(function (key) {
      var dot = 0;
      for (var d = 0; d < key.length; d++) { dot += key[d] * edited[d]; }
      return dot;
    });
  }
  function editedRow(q) {  // softmax(scores × scale, masked) as the course computes it
    var x = sentence(), c = scale(), logits = scoreRow(q).map(function (s, k) {
      return hidden(q, k) ? -Infinity : s * c;
    });
    var top = Math.max.apply(null, logits), total = 0;
    var e = logits.map(function (l) { var v = Math.exp(l - top); total += v; return v; });
    var w = e.map(function (v) { return v / total; }), h = 0;
    w.forEach(function (v) { if (v > 0) { h -= v * Math.log(v); } });
    var out = x.values[0].map(function (_, d) {
      var sum = 0;
      for (var k = 0; k < w.length; k++) { sum += w[k] * x.values[k][d]; }
      return sum;
    });
    return {w: w, h: h, out: out};
  }
  function query() { return S.hq !== null ? S.hq : S.q; }
  function colour(w) { return 'rgba(192,57,43,' + Math.max(0, Math.min(1, w)).toFixed(3) + ')'; }
  function scale() {
    var base = S.scaled ? 1 / Math.sqrt(sentence().d_k) : 1;
    return base / data.temperatures[S.t];
  }
  function hidden(q, k) { return toy && S.causal && k > q; }

  // --- building (once per sentence) ----------------------------------------------------
  function build() {
    var n = tokens().length;
    var app = ui.app;
    app.textContent = '';
    S.hq = null; S.hk = null; S.hcell = null;
    var controls = el('div', 'attn-explorer-controls');
    if (data.sentences.length > 1) {
      var pick = el('select', 'attn-explorer-sentence');
      data.sentences.forEach(function (x, i) {
        var o = el('option', null, x.label); o.value = String(i); pick.appendChild(o);
      });
      pick.value = String(S.s);
      pick.addEventListener('change', function () {
        S.s = Number(pick.value); S.q = sentence().query; S.edits = {}; build();
      });
      controls.appendChild(pick);
    }
    if (toy) {
      if (data.toggles.indexOf('causal') >= 0) {
        ui.causal = el('button', 'attn-explorer-causal');
        ui.causal.addEventListener('click', function () { S.causal = !S.causal; update(); });
        controls.appendChild(ui.causal);
      }
      if (data.toggles.indexOf('scale') >= 0) {
        ui.scale = el('button', 'attn-explorer-scale');
        ui.scale.addEventListener('click', function () { S.scaled = !S.scaled; update(); });
        controls.appendChild(ui.scale);
      }
      if (data.toggles.indexOf('temperature') >= 0) {
        var label = el('label', null, UI.temperature);
        ui.temp = el('input', 'attn-explorer-temperature');
        ui.temp.type = 'range'; ui.temp.min = '0'; ui.temp.step = '1';
        ui.temp.max = String(data.temperatures.length - 1); ui.temp.value = String(S.t);
        ui.temp.addEventListener('input', function () { S.t = Number(ui.temp.value); update(); });
        ui.tempValue = el('b', 'attn-explorer-temperature-value');
        label.appendChild(ui.temp); label.appendChild(ui.tempValue);
        controls.appendChild(label);
      }
    } else {
      var maps = sentence().maps;
      ui.layer = selector('attn-explorer-layer', UI.layer, maps.length, function (v) {
        S.layer = v; update();
      });
      ui.head = selector('attn-explorer-head', UI.head, maps[0].length, function (v) {
        S.head = v; update();
      });
      controls.appendChild(ui.layer.parentNode); controls.appendChild(ui.head.parentNode);
    }
    app.appendChild(controls);
    app.appendChild(el('div', 'attn-explorer-note', UI.click_note));
    var bar = el('div', 'attn-explorer-tokens');
    ui.tokens = tokens().map(function (word, i) {
      var b = el('button', 'attn-explorer-token', word);
      b.addEventListener('click', function () { S.q = i; S.hq = null; update(); });
      b.addEventListener('mouseenter', function () { S.hq = i; update(); });
      b.addEventListener('mouseleave', function () { S.hq = null; update(); });
      bar.appendChild(b);
      return b;
    });
    app.appendChild(bar);

    var main = el('div', 'attn-explorer-main');
    main.appendChild(buildLines(n));
    ui.rowBox = el('div', 'attn-explorer-rowbox');
    main.appendChild(ui.rowBox);
    app.appendChild(main);
    var lower = el('div', 'attn-explorer-main');
    if (data.heatmap) { lower.appendChild(buildHeatmap(n)); }
    ui.columnBox = el('div', 'attn-explorer-columnbox');
    lower.appendChild(ui.columnBox);
    app.appendChild(lower);
    if (toy && data.steps) { app.appendChild(buildSteps()); }
    if (toy && sentence().value_names) { app.appendChild(buildEditor()); }
    if (!toy) { app.appendChild(buildModelView()); }
    update();
  }

  function selector(cls, name, count, onChange) {
    var label = el('label', null, name + ' ');
    var s = el('select', cls);
    for (var i = 0; i < count; i++) {
      var o = el('option', null, String(i)); o.value = String(i); s.appendChild(o);
    }
    s.addEventListener('change', function () { onChange(Number(s.value)); });
    label.appendChild(s);
    return s;
  }

  function buildLines(n) {
    var rowH = 20, width = 330, height = n * rowH + 24;
    var box = svgEl('svg', {width: width, height: height, 'class': 'attn-explorer-lines',
                            viewBox: '0 0 ' + width + ' ' + height});
    box.appendChild(svgEl('text', {x: 100, y: 12, 'text-anchor': 'end'})).textContent = UI.query;
    box.appendChild(svgEl('text', {x: 230, y: 12})).textContent = UI.key;
    ui.lineGroup = svgEl('g', {});
    box.appendChild(ui.lineGroup);
    ui.left = []; ui.right = [];
    tokens().forEach(function (word, i) {
      var y = 24 + i * rowH + 10;
      var left = svgEl('text', {x: 100, y: y + 4, 'text-anchor': 'end',
                                'class': 'attn-explorer-line-query', 'data-query': i});
      left.textContent = word;
      left.addEventListener('mouseenter', function () { S.hq = i; S.hk = null; update(); });
      left.addEventListener('mouseleave', function () { S.hq = null; update(); });
      left.addEventListener('click', function () { S.q = i; S.hq = null; update(); });
      var right = svgEl('text', {x: 230, y: y + 4, 'class': 'attn-explorer-line-key',
                                 'data-key': i});
      right.textContent = word;
      right.addEventListener('mouseenter', function () { S.hk = i; update(); });
      right.addEventListener('mouseleave', function () { S.hk = null; update(); });
      box.appendChild(left); box.appendChild(right);
      ui.left.push(left); ui.right.push(right);
    });
    ui.lineY = function (i) { return 24 + i * rowH + 10; };
    return box;
  }

  function buildHeatmap(n) {
    var table = el('table', 'attn-explorer-heatmap');
    var head = el('tr');
    head.appendChild(el('th', null, UI.query_key));
    ui.keyHeads = tokens().map(function (word, j) {
      var th = el('th', 'attn-explorer-key', word);
      th.addEventListener('mouseenter', function () { S.hk = j; update(); });
      th.addEventListener('mouseleave', function () { S.hk = null; update(); });
      head.appendChild(th);
      return th;
    });
    table.appendChild(head);
    ui.cells = []; ui.rows = [];
    tokens().forEach(function (word, i) {
      var tr = el('tr');
      var th = el('th', null, word);
      th.style.textAlign = 'right';
      th.addEventListener('mouseenter', function () { S.hq = i; update(); });
      th.addEventListener('mouseleave', function () { S.hq = null; update(); });
      th.addEventListener('click', function () { S.q = i; S.hq = null; update(); });
      tr.appendChild(th);
      var row = [];
      for (var j = 0; j < n; j++) {
        (function (j) {
          var td = el('td');
          td.addEventListener('mouseenter', function () { S.hq = i; S.hk = j; update(); });
          td.addEventListener('mouseleave', function () { S.hq = null; S.hk = null; update(); });
          td.addEventListener('click', function () { S.q = i; S.hq = null; update(); });
          tr.appendChild(td); row.push(td);
        })(j);
      }
      table.appendChild(tr);
      ui.rows.push(tr); ui.cells.push(row);
    });
    return table;
  }

  function buildSteps() {
    var box = el('div', 'attn-explorer-stepsbox');
    var nav = el('div', 'attn-explorer-controls');
    var prev = el('button', 'attn-explorer-step-prev', UI.step_prev);
    var next = el('button', 'attn-explorer-step-next', UI.step_next);
    prev.addEventListener('click', function () { S.step = Math.max(0, S.step - 1); update(); });
    next.addEventListener('click', function () { S.step = Math.min(4, S.step + 1); update(); });
    ui.stepNames = el('span', 'attn-explorer-stepnames');
    nav.appendChild(el('b', null, UI.computation));
    nav.appendChild(prev); nav.appendChild(next); nav.appendChild(ui.stepNames);
    box.appendChild(nav);
    ui.steps = el('div', 'attn-explorer-steps');
    box.appendChild(ui.steps);
    return box;
  }

  function buildEditor() {
    var box = el('div', 'attn-explorer-editorbox');
    box.appendChild(el('b', null, UI.edit));
    ui.editorWord = el('span', 'attn-explorer-editor-word');
    box.appendChild(ui.editorWord);
    var reset = el('button', 'attn-explorer-reset', UI.reset);
    reset.addEventListener('click', function () { S.edits = {}; update(); });
    box.appendChild(reset);
    var grid = el('div', 'attn-explorer-controls');
    ui.features = sentence().value_names.map(function (name, d) {
      var label = el('label', null, name + ' ');
      var input = el('input', 'attn-explorer-feature');
      input.type = 'number'; input.step = '0.5'; input.style.width = '4.5em';
      input.setAttribute('data-feature', name);
      input.addEventListener('input', function () {
        var value = Number(input.value);
        if (input.value === '' || !isFinite(value)) { return; }
        var q = S.q, vector = (S.edits[q] || sentence().queries[q]).slice();
        vector[d] = value;
        S.edits[q] = vector;
        update();
      });
      label.appendChild(input); grid.appendChild(label);
      return input;
    });
    box.appendChild(grid);
    box.appendChild(el('div', 'attn-explorer-note', UI.editor_note));
    return box;
  }

  function buildModelView() {
    var x = sentence(), n = x.tokens.length;
    var box = el('div', 'attn-explorer-modelbox');
    box.appendChild(el('div', 'attn-explorer-note', UI.model_note));
    var grid = el('div', 'attn-explorer-model');
    grid.style.gridTemplateColumns = '64px repeat(' + x.maps[0].length + ', 62px)';
    grid.appendChild(el('span'));
    x.maps[0].forEach(function (_, h) { grid.appendChild(el('span', null, fill(UI.head_n, h))); });
    ui.thumbs = [];
    x.maps.forEach(function (heads, l) {
      grid.appendChild(el('span', null, fill(UI.layer_n, l)));
      heads.forEach(function (map, h) {
        var c = el('canvas', 'attn-explorer-thumb');
        c.width = n; c.height = n;
        c.setAttribute('data-layer', l); c.setAttribute('data-head', h);
        c.title = fill(UI.layer_head, l, h);
        var g = c.getContext('2d');
        for (var i = 0; i < n; i++) {
          for (var j = 0; j < n; j++) { g.fillStyle = colour(map[i][j]); g.fillRect(j, i, 1, 1); }
        }
        c.addEventListener('click', function () { S.layer = l; S.head = h; update(); });
        grid.appendChild(c); ui.thumbs.push(c);
      });
    });
    box.appendChild(grid);
    return box;
  }

  // --- updating (every click, hover and switch) ------------------------------------------
  function update() {
    var st = current(), w = st.w, n = tokens().length, q = query();
    ui.tokens.forEach(function (b, i) {
      b.classList.toggle('attn-explorer-selected', i === S.q);
    });
    if (ui.causal) {
      ui.causal.textContent = fill(UI.causal, S.causal ? UI.on : UI.off);
      ui.causal.classList.toggle('attn-explorer-on', S.causal);
      ui.causal.setAttribute('aria-pressed', String(S.causal));
    }
    if (ui.scale) {
      ui.scale.textContent = fill(UI.scale, sentence().d_k, S.scaled ? UI.on : UI.off);
      ui.scale.classList.toggle('attn-explorer-on', S.scaled);
      ui.scale.setAttribute('aria-pressed', String(S.scaled));
    }
    if (ui.temp) {
      ui.temp.value = String(S.t);
      ui.tempValue.textContent = ' T = ' + data.temperatures[S.t].toFixed(2);
    }
    if (ui.layer) { ui.layer.value = String(S.layer); ui.head.value = String(S.head); }
    ui.rowBox.innerHTML = rowHtml(st, q);
    drawLines(w, q);
    if (ui.cells) { paintHeatmap(w, q); }
    ui.columnBox.innerHTML = columnHtml(w);
    if (ui.steps) { drawSteps(st, q); }
    if (ui.features) {
      var vector = S.edits[S.q] || sentence().queries[S.q];
      ui.editorWord.textContent = fill(UI.edited_word, tokens()[S.q]) +
        (S.edits[S.q] ? UI.edited : '');
      ui.features.forEach(function (input, d) {
        if (document.activeElement !== input) { input.value = String(vector[d]); }
      });
    }
    if (ui.thumbs) {
      ui.thumbs.forEach(function (c) {
        c.classList.toggle('attn-explorer-selected',
          Number(c.getAttribute('data-layer')) === S.layer &&
          Number(c.getAttribute('data-head')) === S.head);
      });
    }
  }

  function settingsText() {
    if (!toy) { return fill(UI.layer_head, S.layer, S.head); }
    // The mask is named only when it is on: lessons before 05 show no mask at all.
    var parts = (S.causal ? [UI.causal_on] : []).concat(
      [S.scaled ? fill(UI.scaled, sentence().d_k) : UI.not_scaled]);
    if (data.temperatures[S.t] !== 1) { parts.push('T = ' + data.temperatures[S.t].toFixed(2)); }
    return parts.join(' · ');
  }

  function rowHtml(st, q) {
    var w = st.w[q], words = tokens(), best = 0;
    for (var k = 1; k < w.length; k++) { if (w[k] > w[best]) { best = k; } }
    var html = ['<div class="attn-explorer-row" data-query="' + q + '" data-causal="' +
      (+S.causal) + '" data-scaled="' + (+S.scaled) + '" data-temperature="' +
      (toy ? data.temperatures[S.t] : 1) + '" data-layer="' + S.layer + '" data-head="' +
      S.head + '" data-sentence="' + S.s + '" style="font-family: monospace; line-height: 1.5;">',
      '<div>' + fill(esc(UI.row_title), '<b>' + esc(words[q]) + '</b>', esc(settingsText())) +
      '</div>'];
    for (var j = 0; j < w.length; j++) {
      var style = (j === best ? 'font-weight: bold;' : '') +
        (j === q ? ' text-decoration: underline;' : '');
      html.push('<div style="display: flex; align-items: center; gap: 8px;">' +
        '<span style="width: 80px; text-align: right; ' + style + '">' + esc(words[j]) +
        '</span><span style="display: inline-block; width: 220px; height: 14px; ' +
        'background: #eee;"><span style="display: block; width: ' + Math.round(w[j] * 220) +
        'px; height: 14px; background: #c0392b;"></span></span>' +
        '<span class="attn-explorer-weight" data-key="' + j + '" style="' + style + '">' +
        w[j].toFixed(3) + '</span><span style="color: #888;">' +
        (hidden(q, j) ? esc(UI.masked) : '') + '</span></div>');
    }
    html.push('<div>' + fill(esc(UI.summary),
      '<b class="attn-explorer-max">' + w[best].toFixed(3) + '</b>',
      '<b>' + esc(words[best]) + '</b>',
      '<b class="attn-explorer-entropy">' + st.h[q].toFixed(3) + '</b>',
      Math.log(w.length).toFixed(3)) + '</div></div>');
    return html.join('');
  }

  function drawLines(w, q) {
    var g = ui.lineGroup, n = w.length;
    while (g.firstChild) { g.removeChild(g.firstChild); }
    var pairs = [];
    if (S.hk !== null && S.hq === null) {
      for (var i = 0; i < n; i++) { pairs.push([i, S.hk, w[i][S.hk]]); }
    } else {
      for (var j = 0; j < n; j++) { pairs.push([q, j, w[q][j]]); }
    }
    pairs.forEach(function (p) {
      if (p[2] <= 0) { return; }
      g.appendChild(svgEl('line', {x1: 106, y1: ui.lineY(p[0]), x2: 224, y2: ui.lineY(p[1]),
        stroke: '#c0392b', 'stroke-opacity': Math.min(1, 0.1 + p[2]).toFixed(3),
        'stroke-width': (1 + 7 * p[2]).toFixed(2), 'class': 'attn-explorer-line',
        'data-query': p[0], 'data-key': p[1]}));
    });
    ui.left.forEach(function (t, i) {
      t.setAttribute('class', 'attn-explorer-line-query' + (i === q && S.hk === null ?
        ' attn-explorer-hl' : ''));
    });
    ui.right.forEach(function (t, j) {
      t.setAttribute('class', 'attn-explorer-line-key' + (j === S.hk ? ' attn-explorer-hl' : ''));
    });
  }

  function paintHeatmap(w, q) {
    for (var i = 0; i < w.length; i++) {
      ui.rows[i].className = i === q ? 'attn-explorer-query-row' : '';
      for (var j = 0; j < w.length; j++) {
        var td = ui.cells[i][j], x = w[i][j];
        td.style.background = colour(x);
        td.style.color = x > 0.5 ? 'white' : 'black';
        td.textContent = x.toFixed(2);
        td.className = j === S.hk ? 'attn-explorer-key-col' : '';
      }
    }
  }

  function columnHtml(w) {
    var words = tokens();
    if (S.hk === null) {
      return '<div class="attn-explorer-note">' + esc(UI.hover_note) + '</div>';
    }
    var k = S.hk, html = ['<div class="attn-explorer-column" data-key="' + k + '">' +
      '<div>' + fill(esc(UI.column), '<b>' + esc(words[k]) + '</b>') + '</div>'];
    for (var i = 0; i < w.length; i++) {
      html.push('<div style="display: flex; gap: 8px; align-items: center;">' +
        '<span style="width: 80px; text-align: right;">' + esc(words[i]) + '</span>' +
        '<span style="display: inline-block; width: 140px; height: 12px; background: #eee;">' +
        '<span style="display: block; height: 12px; background: #117a65; width: ' +
        Math.round(w[i][k] * 140) + 'px;"></span></span><span class="attn-explorer-colweight" ' +
        'data-query="' + i + '">' + w[i][k].toFixed(3) + '</span></div>');
    }
    html.push('</div>');
    return html.join('');
  }

  function num(x) { return x.toFixed(3); }

  function drawSteps(st, q) {
    var x = sentence(), words = x.tokens, n = words.length, c = scale(), step = S.step;
    var names = STEP_NAMES.map(function (name, i) {
      return '<span class="' + (i === step ? 'attn-explorer-current' : '') + '">' +
        (i + 1) + '. ' + name + '</span>';
    });
    ui.stepNames.innerHTML = names.join('');
    var scaleText = (S.scaled ? '1/√' + x.d_k : '1') +
      (data.temperatures[S.t] !== 1 ? ' ÷ T' : '') + ' = ' + c.toFixed(4);
    var head = [UI.key, UI.score_qk, '× ' + scaleText, UI.mask, UI.softmax_weight];
    var html = ['<table class="attn-explorer-steps-table" data-query="' + q + '" data-step="' +
      step + '"><tr>' + head.map(function (h, i) {
        return '<th class="' + (i > step + 1 && i < 5 ? 'attn-explorer-future' : '') + '">' +
          esc(h) + '</th>';
      }).join('') + '</tr>'];
    for (var j = 0; j < n; j++) {
      var s = scoreRow(q)[j], cells = [num(s), num(s * c),
        hidden(q, j) ? '−∞' : num(s * c), st.w[q][j].toFixed(3)];
      var kinds = ['scores', 'scaled', 'masked', 'weights'];
      html.push('<tr><td style="text-align: left;">' + esc(words[j]) + '</td>' +
        cells.map(function (v, i) {
          return '<td class="attn-explorer-step' + (i > step ? ' attn-explorer-future' : '') +
            '" data-step="' + kinds[i] + '" data-key="' + j + '">' + (i > step ? '·' : v) +
            '</td>';
        }).join('') + '</tr>');
    }
    html.push('</table>');
    if (step >= 4) {
      var out = st.out[q], label = x.value_names;
      html.push('<div>' + fill(esc(UI.output), '<b>' + esc(words[q]) + '</b>',
        out.map(function (v, d) {
          return (label ? esc(label[d]) + ' ' : '') + '<span class="attn-explorer-output" ' +
            'data-dim="' + d + '">' + v.toFixed(3) + '</span>';
        }).join(', ')) + '</div>');
    } else {
      html.push('<div class="attn-explorer-note">' + esc(UI.step_on) + '</div>');
    }
    ui.steps.innerHTML = html.join('');
  }

  var fallback = root.querySelector('.attn-explorer-fallback');
  if (fallback) { fallback.parentNode.removeChild(fallback); }
  ui.app = el('div', 'attn-explorer-app');
  root.appendChild(ui.app);
  build();
})();
"""
