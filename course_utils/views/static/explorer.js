/* The attention explorer's front end, inlined into every explorer output by
   course_utils/views/explorer.py (the page fetches nothing).

   It reads the JSON next to it, draws the explorer into its own .attn-explorer element
   and mostly *switches* between states Python precomputed. The one computation it does:
   a row whose query the reader edited is recomputed here (q·k, scale, mask, softmax,
   entropy, weighted sum of the values), as the course's attention computes it.
   Every word it shows comes from the JSON too (data.ui, in the course language of the
   moment the explorer was shown), so one script serves every edition. What it shares with
   the live views (the text helpers, softmax, entropy, the DOM helpers, the start-up steps)
   is view_common.js's, inlined before this script.

   Two halves: the logic (pure functions of the data and the state S, no DOM), exported
   for node's test runner when `module` exists (tests/js/), and the page (start), which
   runs only where there is a document. Plain ES5-style code, no library. */
(function () {
  "use strict";

  // --- logic: numbers and state changes, no DOM ------------------------------------------

  // What every view shares (view_common.js, inlined before this script).
  var V = typeof module !== 'undefined' && module.exports ? require('./view_common.js') :
    window.courseViewCommon;
  var fill = V.fill, esc = V.esc, softmax = V.softmax, entropy = V.entropy;

  function isToy(data) { return data.mode === 'toy'; }
  function sentenceOf(data, S) { return data.sentences[S.s]; }

  // The opening state: sentence s, chosen query q, hovered query hq and key hk, the
  // switches, temperature index t, layer and head (model view), step of the computation
  // shown (0..4) and the reader's edited queries ({query index: vector}).
  function initialState(data) {
    var init = data.initial || {};
    return {s: 0, q: data.sentences[0].query, hq: null, hk: null,
            causal: !!init.causal, scaled: init.scaled !== false, t: init.t || 0,
            layer: init.layer || 0, head: init.head || 0, step: 4, edits: {}};
  }
  function shownQuery(S) { return S.hq !== null ? S.hq : S.q; }  // hovered, else chosen

  function scale(data, S) {  // 1/sqrt(d_k) (1 when off), then ÷ T
    var base = S.scaled ? 1 / Math.sqrt(sentenceOf(data, S).d_k) : 1;
    return base / data.temperatures[S.t];
  }
  function hidden(data, S, q, k) { return isToy(data) && S.causal && k > q; }

  function dot(a, b) {
    var sum = 0;
    for (var d = 0; d < a.length; d++) { sum += a[d] * b[d]; }
    return sum;
  }
  function scoreRow(data, S, q) {  // q·k for every key: edited query, or the precomputed scores
    var x = sentenceOf(data, S), edited = S.edits[q];
    if (!edited) { return x.scores[q]; }
    return x.keys.map(function (key) { return dot(key, edited); });
  }
  function weightedSum(w, values) {  // Σ_k w[k] values[k]: (n_k,) × (n_k, d_v) -> (d_v,)
    return values[0].map(function (_, d) {
      var sum = 0;
      for (var k = 0; k < w.length; k++) { sum += w[k] * values[k][d]; }
      return sum;
    });
  }
  function editedRow(data, S, q) {  // softmax(scores × scale, masked) as the course computes it
    var x = sentenceOf(data, S), c = scale(data, S);
    var logits = scoreRow(data, S, q).map(function (s, k) {
      return hidden(data, S, q, k) ? -Infinity : s * c;
    });
    var w = softmax(logits);
    return {w: w, h: entropy(w), out: weightedSum(w, x.values)};
  }
  // What is shown: {w: (n_q, n_k) weights, h: (n_q,) entropies, out: (n_q, d_v) or null}.
  function current(data, S) {
    var x = sentenceOf(data, S);
    if (!isToy(data)) { return {w: x.maps[S.layer][S.head], h: x.h[S.layer][S.head], out: null}; }
    var st = x.states['c' + (+S.causal) + 's' + (+S.scaled)][S.t];
    var edited = Object.keys(S.edits);
    if (!edited.length) { return st; }
    // Rows whose query the reader edited: the only numbers computed in the page.
    var copy = {w: st.w.slice(), h: st.h.slice(), out: st.out.slice()};
    edited.forEach(function (key) {
      var q = Number(key), row = editedRow(data, S, q);
      copy.w[q] = row.w; copy.h[q] = row.h; copy.out[q] = row.out;
    });
    return copy;
  }
  function settingsText(data, S) {
    var UI = data.ui;
    if (!isToy(data)) { return fill(UI.layer_head, S.layer, S.head); }
    // The mask is named only when it is on: lessons before 05 show no mask at all.
    var parts = (S.causal ? [UI.causal_on] : []).concat(
      [S.scaled ? fill(UI.scaled, sentenceOf(data, S).d_k) : UI.not_scaled]);
    if (data.temperatures[S.t] !== 1) { parts.push('T = ' + data.temperatures[S.t].toFixed(2)); }
    return parts.join(' · ');
  }

  // State changes (each changes S in place; the page redraws after it).
  function pickSentence(data, S, s) {  // another sentence: its own opening query, no edits
    S.s = s; S.q = sentenceOf(data, S).query; S.edits = {};
  }
  function clearHover(S) { S.hq = null; S.hk = null; }
  function pickQuery(S, q) { S.q = q; S.hq = null; }
  function toggleCausal(S) { S.causal = !S.causal; }
  function toggleScale(S) { S.scaled = !S.scaled; }
  function setTemperature(data, S, index) {  // index into data.temperatures, as the slider
    S.t = Math.max(0, Math.min(data.temperatures.length - 1, Number(index)));
  }
  function moveStep(S, delta) { S.step = Math.max(0, Math.min(4, S.step + delta)); }
  // The reader typed `text` into feature d of the chosen query; false if it is no number.
  function editFeature(data, S, d, text) {
    var value = Number(text);
    if (text === '' || !isFinite(value)) { return false; }
    var q = S.q, vector = (S.edits[q] || sentenceOf(data, S).queries[q]).slice();
    vector[d] = value;
    S.edits[q] = vector;
    return true;
  }
  function resetEdits(S) { S.edits = {}; }
  function pickLayerHead(S, layer, head) { S.layer = layer; S.head = head; }
  // A weight above this is written in white on its red cell, at or below it in black: the
  // switch where both keep WCAG AA's 4.5:1 contrast on rgba(192,57,43,w) over white.
  var INK_SWITCH = 0.89;

  var logic = {
    initialState: initialState, shownQuery: shownQuery, scale: scale,
    hidden: hidden, dot: dot, scoreRow: scoreRow, weightedSum: weightedSum, editedRow: editedRow, current: current,
    settingsText: settingsText, pickSentence: pickSentence, clearHover: clearHover,
    pickQuery: pickQuery, toggleCausal: toggleCausal, toggleScale: toggleScale,
    setTemperature: setTemperature, moveStep: moveStep,
    editFeature: editFeature, resetEdits: resetEdits, pickLayerHead: pickLayerHead,
    INK_SWITCH: INK_SWITCH
  };
  if (typeof module !== 'undefined' && module.exports) { module.exports = logic; }
  if (typeof document !== 'undefined') { start(document.currentScript); }

  // --- the page ----------------------------------------------------------------------------

  function start(me) {
    var root = V.claimRoot(me, '.attn-explorer');
    if (!root) { return; }
    var data = V.readPayload(root, 'attn-explorer-data');
    var toy = isToy(data);
    var S = initialState(data);
    var UI = data.ui;  // the page's words, in the course language (see UI_TEXT)
    var STEP_NAMES = UI.step_names;
    var SVG = 'http://www.w3.org/2000/svg';
    var ui = {};

    var el = V.el, selector = V.selector, pressable = V.pressable, colour = V.colour;
    var arrowStep = V.arrowStep;
    function svgEl(tag, attrs) {
      var e = document.createElementNS(SVG, tag);
      for (var k in attrs) { e.setAttribute(k, attrs[k]); }
      return e;
    }
    function sentence() { return sentenceOf(data, S); }
    function tokens() { return sentence().tokens; }
    // The text on colour(w): white only where the red is dark enough for it (WCAG AA 4.5:1
    // either side of the switch; render_heatmap_html uses the same INK_SWITCH).
    function ink(w) { return w > INK_SWITCH ? 'white' : 'black'; }

    // --- building (once per sentence) --------------------------------------------------
    function build() {
      var n = tokens().length;
      var app = ui.app;
      app.textContent = '';
      clearHover(S);
      var controls = el('div', 'attn-explorer-controls');
      if (data.sentences.length > 1) {
        var pick = el('select', 'attn-explorer-sentence');
        pick.setAttribute('aria-label', UI.sentence);
        data.sentences.forEach(function (x, i) {
          var o = el('option', null, x.label); o.value = String(i); pick.appendChild(o);
        });
        pick.value = String(S.s);
        pick.addEventListener('change', function () {
          pickSentence(data, S, Number(pick.value)); build();
        });
        controls.appendChild(pick);
      }
      if (toy) {
        if (data.toggles.indexOf('causal') >= 0) {
          ui.causal = el('button', 'attn-explorer-causal');
          ui.causal.addEventListener('click', function () { toggleCausal(S); update(); });
          controls.appendChild(ui.causal);
        }
        if (data.toggles.indexOf('scale') >= 0) {
          ui.scale = el('button', 'attn-explorer-scale');
          ui.scale.addEventListener('click', function () { toggleScale(S); update(); });
          controls.appendChild(ui.scale);
        }
        if (data.toggles.indexOf('temperature') >= 0) {
          var label = el('label', null, UI.temperature);
          ui.temp = el('input', 'attn-explorer-temperature');
          ui.temp.type = 'range'; ui.temp.min = '0'; ui.temp.step = '1';
          ui.temp.max = String(data.temperatures.length - 1); ui.temp.value = String(S.t);
          ui.temp.addEventListener('input', function () {
            setTemperature(data, S, ui.temp.value); update();
          });
          ui.tempValue = el('b', 'attn-explorer-temperature-value');
          label.appendChild(ui.temp); label.appendChild(ui.tempValue);
          controls.appendChild(label);
        }
      } else {
        var maps = sentence().maps;
        ui.layer = selector('attn-explorer-layer', UI.layer, maps.length, function (v) {
          pickLayerHead(S, v, S.head); update();
        });
        ui.head = selector('attn-explorer-head', UI.head, maps[0].length, function (v) {
          pickLayerHead(S, S.layer, v); update();
        });
        controls.appendChild(ui.layer.parentNode); controls.appendChild(ui.head.parentNode);
      }
      app.appendChild(controls);
      app.appendChild(el('div', 'attn-explorer-note', UI.click_note));
      var bar = el('div', 'attn-explorer-tokens');
      bar.setAttribute('role', 'group');
      bar.setAttribute('aria-label', UI.click_note);
      bar.addEventListener('keydown', function (event) {  // the arrow keys move the query
        var to = arrowStep(event.key, S.q, n);
        if (to === null) { return; }
        event.preventDefault();
        pickQuery(S, to); update(); ui.tokens[to].focus();
      });
      ui.tokens = tokens().map(function (word, i) {
        var b = el('button', 'attn-explorer-token', word);
        b.addEventListener('click', function () { pickQuery(S, i); update(); });
        b.addEventListener('mouseenter', function () { S.hq = i; update(); });
        b.addEventListener('mouseleave', function () { S.hq = null; update(); });
        bar.appendChild(b);
        return b;
      });
      app.appendChild(bar);

      var main = el('div', 'attn-explorer-main');
      main.appendChild(buildLines());
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

    function buildLines() {
      var n = tokens().length, rowH = 20, width = 330, height = n * rowH + 24;
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
        left.addEventListener('click', function () { pickQuery(S, i); update(); });
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
        th.addEventListener('click', function () { pickQuery(S, i); update(); });
        tr.appendChild(th);
        var row = [];
        for (var j = 0; j < n; j++) {
          (function (j) {
            var td = el('td');
            td.addEventListener('mouseenter', function () { S.hq = i; S.hk = j; update(); });
            td.addEventListener('mouseleave', function () { clearHover(S); update(); });
            td.addEventListener('click', function () { pickQuery(S, i); update(); });
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
      prev.addEventListener('click', function () { moveStep(S, -1); update(); });
      next.addEventListener('click', function () { moveStep(S, 1); update(); });
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
      reset.addEventListener('click', function () { resetEdits(S); update(); });
      box.appendChild(reset);
      var grid = el('div', 'attn-explorer-controls');
      ui.features = sentence().value_names.map(function (name, d) {
        var label = el('label', null, name + ' ');
        var input = el('input', 'attn-explorer-feature');
        input.type = 'number'; input.step = '0.5'; input.style.width = '4.5em';
        input.setAttribute('data-feature', name);
        input.addEventListener('input', function () {
          if (editFeature(data, S, d, input.value)) { update(); }
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
          pressable(c, c.title, function () { pickLayerHead(S, l, h); update(); });
          var g = c.getContext('2d');
          for (var i = 0; i < n; i++) {
            for (var j = 0; j < n; j++) { g.fillStyle = colour(map[i][j]); g.fillRect(j, i, 1, 1); }
          }
          grid.appendChild(c); ui.thumbs.push(c);
        });
      });
      box.appendChild(grid);
      return box;
    }

    // --- updating (every click, hover and switch) --------------------------------------
    function update() {
      var st = current(data, S), w = st.w, q = shownQuery(S);
      ui.tokens.forEach(function (b, i) {
        b.classList.toggle('attn-explorer-selected', i === S.q);
        b.setAttribute('aria-pressed', String(i === S.q));
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

    function rowHtml(st, q) {
      var w = st.w[q], words = tokens(), best = 0;
      for (var k = 1; k < w.length; k++) { if (w[k] > w[best]) { best = k; } }
      var html = ['<div class="attn-explorer-row" data-query="' + q + '" data-causal="' +
        (+S.causal) + '" data-scaled="' + (+S.scaled) + '" data-temperature="' +
        (toy ? data.temperatures[S.t] : 1) + '" data-layer="' + S.layer + '" data-head="' +
        S.head + '" data-sentence="' + S.s +
        '" style="font-family: var(--font-stack--monospace, monospace); line-height: 1.5;">',
        '<div>' + fill(esc(UI.row_title), '<b>' + esc(words[q]) + '</b>',
                       esc(settingsText(data, S))) + '</div>'];
      for (var j = 0; j < w.length; j++) {
        var style = (j === best ? 'font-weight: bold;' : '') +
          (j === q ? ' text-decoration: underline;' : '');
        html.push('<div style="display: flex; align-items: center; gap: 8px;">' +
          '<span style="width: 80px; text-align: right; ' + style + '">' + esc(words[j]) +
          '</span><span style="display: inline-block; width: 220px; height: 14px; ' +
          'background: #eee;"><span style="display: block; width: ' + Math.round(w[j] * 220) +
          'px; height: 14px; background: #c0392b;"></span></span>' +
          '<span class="attn-explorer-weight" data-key="' + j + '" style="' + style + '">' +
          w[j].toFixed(3) + '</span><span style="color: #666;">' +
          (hidden(data, S, q, j) ? esc(UI.masked) : '') + '</span></div>');
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
          td.style.color = ink(x);
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
      var x = sentence(), words = x.tokens, n = words.length, c = scale(data, S), step = S.step;
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
      var scores = scoreRow(data, S, q);
      var kinds = ['scores', 'scaled', 'masked', 'weights'];
      for (var j = 0; j < n; j++) {
        var s = scores[j], cells = [num(s), num(s * c),
          hidden(data, S, q, j) ? '−∞' : num(s * c), st.w[q][j].toFixed(3)];
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

    V.removeFallback(root, 'attn-explorer-fallback');
    ui.app = el('div', 'attn-explorer-app');
    root.appendChild(ui.app);
    build();
  }
})();
