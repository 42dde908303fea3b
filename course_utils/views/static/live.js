/* The live view's front end, inlined into every live view output by
   course_utils/views/live_view.py (the page fetches nothing).

   It reads the JSON next to it (the model's sizes and its float16 weights in base64, the
   vocabulary, the words to show), and runs the course's GPT (course_utils/models/gpt.py) on
   whatever the reader types: token plus position vectors, pre-LN blocks of causal
   multi-head attention and a GELU feed-forward network, a final LayerNorm and the tied
   readout, then a softmax over the vocabulary. The arithmetic of the layers and the
   start-up steps only the live views share are live_common.js's (shared with lesson 15's
   translator view), the text and DOM helpers and softmax view_common.js's (shared with the
   explorer too), both inlined before this script; node's test runner checks the model
   against the Python one (tests/js/live.test.js).

   Two halves, as explorer.js: the logic (pure functions, no DOM), exported for node when
   `module` exists, and the page (start), which runs only where there is a document.
   `window.courseLiveModel(element)` gives the console and the tests the model of a view.
   Plain ES5-style code and typed arrays (every browser has them), no library. */
/* global Float64Array */
(function () {
  "use strict";

  // --- logic: the model, no DOM -------------------------------------------------------------

  // What every view shares (view_common.js) and what the live views share (live_common.js),
  // both inlined before this script.
  var node = typeof module !== 'undefined' && module.exports;
  var V = node ? require('./view_common.js') : window.courseViewCommon;
  var C = node ? require('./live_common.js') : window.courseLiveCommon;
  var fill = V.fill, esc = V.esc, softmax = V.softmax, entropy = V.entropy, el = V.el,
    selector = V.selector, arrowStep = V.arrowStep, pressable = V.pressable, colour = V.colour;
  var linear = C.linear, layerNorm = C.layerNorm, addInPlace = C.addInPlace;

  // The payload's model as {config, vocab, index (character -> id), p (name -> flat array)}.
  function unpackModel(payload) {
    var index = {};
    payload.vocab.forEach(function (c, i) { index[c] = i; });
    return {config: payload.model.config, vocab: payload.vocab, index: index,
            p: C.unpackWeights(payload.model)};
  }

  function characters(text) {  // code points, as Python iterates a str (surrogate pairs joined)
    var out = [];
    for (var i = 0; i < text.length; i++) {
      var c = text.charCodeAt(i);
      if (c >= 0xd800 && c <= 0xdbff && i + 1 < text.length) {
        var d = text.charCodeAt(i + 1);
        if (d >= 0xdc00 && d <= 0xdfff) { out.push(text.slice(i, i + 2)); i++; continue; }
      }
      out.push(text.charAt(i));
    }
    return out;
  }
  // What the model reads of `text`, as course_utils.views.live_view.readable_text: characters the
  // vocabulary lacks are skipped, then the last max_len known ones kept. `chars` lists every
  // character with its fate: 'read', 'unknown' (skipped) or 'cropped' (before the last max_len).
  function tokenize(model, text) {
    var chars = characters(text).map(function (c) {
      var known = Object.prototype.hasOwnProperty.call(model.index, c);
      return {c: c, id: known ? model.index[c] : -1, fate: known ? 'read' : 'unknown'};
    });
    var known = chars.filter(function (x) { return x.id >= 0; });
    var cropped = Math.max(0, known.length - model.config.max_len);
    known.slice(0, cropped).forEach(function (x) { x.fate = 'cropped'; });
    var read = known.slice(cropped);
    return {chars: chars, ids: read.map(function (x) { return x.id; }),
            tokens: read.map(function (x) { return x.c; }), cropped: cropped,
            unknown: chars.filter(function (x) { return x.id < 0; })
              .map(function (x) { return x.c; })};
  }

  // The GPT's forward pass on token ids (at most max_len): {attentions (layers, heads, n, n)
  // as nested arrays, hidden: after the final LayerNorm, one (d_model,) array per position};
  // readout() turns a hidden row into logits. lastOnly: `hidden` holds the last position
  // alone, and the last block works out the rest of its sublayers for it alone (no other
  // position's output is read afterwards): a third less arithmetic for what the view shows.
  function forward(model, ids, lastOnly) {
    var cfg = model.config, p = model.p, d = cfg.d_model, n = ids.length;
    if (!n || n > cfg.max_len) {
      throw new Error('forward reads 1..' + cfg.max_len + ' tokens, got ' + n);
    }
    var x = new Float64Array(n * d), te = p['token_embedding.weight'];
    var pe = p['position_embedding.weight'];
    for (var r = 0; r < n; r++) {  // what each token is, plus where it is
      for (var c = 0; c < d; c++) { x[r * d + c] = te[ids[r] * d + c] + pe[r * d + c]; }
    }
    var attentions = [], rows = n;
    for (var layer = 0; layer < cfg.num_layers; layer++) {
      var b = 'blocks.' + layer + '.', last = lastOnly && layer === cfg.num_layers - 1;
      var a = C.selfAttention(layerNorm(x, n, p[b + 'norm1.weight'], p[b + 'norm1.bias'],
                                        cfg.eps), n, p, b + 'self_attn.', cfg.num_heads, true,
                             last);
      if (last) { x = x.slice((n - 1) * d); rows = 1; }
      addInPlace(x, a.out);
      addInPlace(x, C.feedForward(layerNorm(x, rows, p[b + 'norm2.weight'], p[b + 'norm2.bias'],
                                            cfg.eps), rows, p, b + 'ffn.', C.gelu));
      attentions.push(a.weights);
    }
    var normed = layerNorm(x, rows, p['final_norm.weight'], p['final_norm.bias'], cfg.eps);
    var out = [];
    for (r = 0; r < rows; r++) { out.push(normed.subarray(r * d, (r + 1) * d)); }
    return {attentions: attentions, hidden: out};
  }
  function readout(model, row) {  // tied output: logit of t = row · (t's embedding), a plain array
    var logits = linear(row, 1, model.p['token_embedding.weight'], null, model.config.vocab_size);
    return Array.prototype.slice.call(logits);
  }
  // What the view shows for `text`: {tokens, attentions[layer][head][i][j], next (vocab,),
  // logits (vocab,), unknown, cropped, chars}; next and logits are null when nothing is read.
  function run(model, text) {
    var t = tokenize(model, text), result = {tokens: t.tokens, chars: t.chars,
      unknown: t.unknown, cropped: t.cropped, attentions: [], next: null, logits: null};
    if (!t.ids.length) { return result; }
    var f = forward(model, t.ids, true);
    result.attentions = f.attentions;
    result.logits = readout(model, f.hidden[0]);
    result.next = softmax(result.logits);
    return result;
  }

  function seededRandom(seed) {  // mulberry32: uniform numbers in [0, 1), the same for a seed
    var a = seed >>> 0;
    return function () {
      a = (a + 0x6d2b79f5) >>> 0;
      var t = a;
      t = Math.imul(t ^ (t >>> 15), t | 1);
      t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
      return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
    };
  }
  // One token id from logits: the most likely at temperature 0, else drawn from
  // softmax(logits / temperature) with `random` (inverse of the cumulative distribution).
  function pickToken(logits, temperature, random) {
    var best = C.argmax(logits), i;
    if (temperature === 0) { return best; }
    var w = softmax(logits.map(function (l) { return l / temperature; }));
    var u = random(), total = 0;
    for (i = 0; i < w.length; i++) { total += w[i]; if (u < total) { return i; } }
    return best;  // u beyond a total that rounding left just under 1
  }
  // `count` characters after `text`, one at a time, each from the model's logits on the last
  // max_len characters read (as course_utils.nn.generation.generate with use_cache=False).
  function continueText(model, text, count, temperature, random) {
    var ids = tokenize(model, text).ids.slice(), out = '';
    for (var step = 0; step < count && ids.length; step++) {
      var f = forward(model, ids.slice(-model.config.max_len), true);
      var id = pickToken(readout(model, f.hidden[0]), temperature, random);
      ids.push(id);
      out += model.vocab[id];
    }
    return out;
  }
  function topTokens(probabilities, count) {  // ids of the `count` most likely, most likely first
    var order = probabilities.map(function (_, i) { return i; });
    order.sort(function (a, b) { return probabilities[b] - probabilities[a] || a - b; });
    return order.slice(0, count);
  }
  function shownCharacter(c) {  // as live.py's shown_character: blanks as visible signs
    return c === ' ' ? '␣' : c === '\n' ? '↵' : c === '\t' ? '⇥' : c;
  }

  var logic = {
    unpackModel: unpackModel, characters: characters, tokenize: tokenize,
    forward: forward, readout: readout, run: run,
    seededRandom: seededRandom, pickToken: pickToken, continueText: continueText,
    topTokens: topTokens, shownCharacter: shownCharacter
  };
  if (typeof module !== 'undefined' && module.exports) { module.exports = logic; }
  if (typeof document !== 'undefined') { start(document.currentScript); }

  // --- the page ------------------------------------------------------------------------------

  function start(me) {
    var root = V.claimRoot(me, '[data-live-model]');
    if (!root) { return; }
    var data = V.readPayload(root, 'attn-live-data');
    var model = unpackModel(data), UI = data.ui, cfg = model.config;
    // S: the text, the head shown, the query pinned by a click (null: the last character),
    // the sampler of "continue" (seeded once, so presses go on with the same stream).
    var S = {text: data.text, layer: data.initial.layer, head: data.initial.head, q: null,
             random: seededRandom(data.sampling.seed)};
    var R = null, ui = {};

    C.exposeModel(root, {
      run: function (text) { return run(model, String(text)); },
      continueText: function (text, count, seed) {
        return continueText(model, String(text), count, data.sampling.temperature,
                            seededRandom(seed));
      },
      vocab: model.vocab, config: cfg
    });
    function query() { return S.q !== null && S.q < R.tokens.length ? S.q : R.tokens.length - 1; }

    // --- building (once) --------------------------------------------------------------------
    function build() {
      var app = el('div', 'attn-explorer attn-live-app');
      app.setAttribute('data-ready', 'live');  // styled as an explorer, never started as one
      app.appendChild(el('div', 'attn-explorer-note', UI.text_label));
      ui.text = el('textarea', 'attn-live-text');
      ui.text.rows = 2; ui.text.value = S.text; ui.text.spellcheck = false;
      ui.text.setAttribute('aria-label', UI.text_label);
      ui.text.addEventListener('input', function () { S.text = ui.text.value; update(); });
      app.appendChild(ui.text);
      var controls = el('div', 'attn-explorer-controls');
      ui.layer = selector('attn-live-layer', UI.layer, cfg.num_layers, function (v) {
        S.layer = v; draw();
      });
      ui.head = selector('attn-live-head', UI.head, cfg.num_heads, function (v) {
        S.head = v; draw();
      });
      ui.more = el('button', 'attn-live-continue', fill(UI.continue, data.sampling.tokens));
      ui.more.addEventListener('click', function () {
        S.text += continueText(model, S.text, data.sampling.tokens, data.sampling.temperature,
                               S.random);
        ui.text.value = S.text; S.q = null; update();
      });
      controls.appendChild(ui.layer.parentNode); controls.appendChild(ui.head.parentNode);
      controls.appendChild(ui.more);
      app.appendChild(controls);
      app.appendChild(el('div', 'attn-explorer-note',
        fill(UI.continue_note, data.sampling.tokens, data.sampling.temperature)));
      ui.chars = el('div', 'attn-live-chars');
      // In the tab order: the arrow keys move the query along the characters read.
      ui.chars.setAttribute('tabindex', '0'); ui.chars.setAttribute('role', 'group');
      ui.chars.setAttribute('aria-label', UI.click_note);
      ui.notes = el('div', 'attn-live-notes');
      app.appendChild(ui.chars); app.appendChild(ui.notes);
      app.appendChild(el('div', 'attn-explorer-note', UI.click_note));
      var main = el('div', 'attn-explorer-main');
      ui.heatBox = el('div', 'attn-live-heatbox');
      ui.rowBox = el('div', 'attn-explorer-rowbox');
      ui.nextBox = el('div', 'attn-live-nextbox');
      main.appendChild(ui.heatBox); main.appendChild(ui.rowBox); main.appendChild(ui.nextBox);
      app.appendChild(main);
      app.appendChild(el('div', 'attn-explorer-note', UI.heatmap_note));
      var box = el('div', 'attn-explorer-modelbox');
      box.appendChild(el('div', 'attn-explorer-note', UI.model_note));
      var grid = el('div', 'attn-explorer-model');
      grid.style.gridTemplateColumns = '64px repeat(' + cfg.num_heads + ', 62px)';
      grid.appendChild(el('span'));
      for (var h = 0; h < cfg.num_heads; h++) { grid.appendChild(el('span', null, fill(UI.head_n, h))); }
      ui.thumbs = [];
      for (var l = 0; l < cfg.num_layers; l++) {
        grid.appendChild(el('span', null, fill(UI.layer_n, l)));
        for (h = 0; h < cfg.num_heads; h++) {
          (function (l, h) {
            var c = el('canvas', 'attn-explorer-thumb');
            c.setAttribute('data-layer', l); c.setAttribute('data-head', h);
            c.title = fill(UI.layer_head, l, h);
            pressable(c, c.title, function () { S.layer = l; S.head = h; draw(); });
            grid.appendChild(c); ui.thumbs.push(c);
          })(l, h);
        }
      }
      box.appendChild(grid);
      app.appendChild(box);
      root.appendChild(app);
    }

    // --- updating ---------------------------------------------------------------------------
    function update() {  // the text changed: run the model, then draw everything
      R = run(model, S.text);
      drawChars();
      draw();
      root.setAttribute('data-text', S.text);  // the state the page shows, for the tests
    }
    function drawChars() {
      var html = [], read = 0;
      R.chars.forEach(function (x) {
        var i = x.fate === 'read' ? read++ : -1;
        html.push('<span class="attn-live-char attn-live-' + x.fate + '"' +
          (i >= 0 ? ' data-index="' + i + '"' : '') + '>' + esc(shownCharacter(x.c)) + '</span>');
      });
      ui.chars.innerHTML = html.join('');
      var notes = [];
      if (R.unknown.length) {
        notes.push(fill(esc(UI.unknown_note), '<span class="attn-live-char attn-live-unknown">' +
          esc(R.unknown[0]) + '</span>', cfg.vocab_size));
      }
      if (R.cropped) { notes.push(esc(fill(UI.cropped_note, cfg.max_len, R.cropped))); }
      if (!R.tokens.length) { notes.push(esc(UI.empty_note)); }
      ui.notes.innerHTML = notes.map(function (t) {
        return '<div class="attn-explorer-note">' + t + '</div>';
      }).join('');
    }
    function draw() {  // the head, the query or the text changed
      ui.layer.value = String(S.layer); ui.head.value = String(S.head);
      ui.thumbs.forEach(function (c) {
        var l = Number(c.getAttribute('data-layer')), h = Number(c.getAttribute('data-head'));
        c.classList.toggle('attn-explorer-selected', l === S.layer && h === S.head);
        paintThumb(c, R.attentions.length ? R.attentions[l][h] : []);
      });
      var q = R.tokens.length ? query() : -1;
      Array.prototype.forEach.call(ui.chars.querySelectorAll('.attn-live-read'), function (s) {
        s.classList.toggle('attn-explorer-selected', Number(s.getAttribute('data-index')) === q);
      });
      if (!R.tokens.length) {
        ui.heatBox.innerHTML = ''; ui.rowBox.innerHTML = ''; ui.nextBox.innerHTML = '';
        return;
      }
      var w = R.attentions[S.layer][S.head];
      ui.heatBox.innerHTML = heatmapHtml(w, q);
      ui.rowBox.innerHTML = rowHtml(w, q);
      ui.nextBox.innerHTML = nextHtml();
    }
    function paintThumb(c, w) {  // one pixel per weight, as colour() on white; the future grey
      var n = Math.max(1, w.length);
      c.width = n; c.height = n;
      var g = c.getContext('2d'), image = g.createImageData(n, n), px = image.data;
      for (var i = 0; i < w.length; i++) {
        for (var j = 0; j < w.length; j++) {
          var at = 4 * (i * n + j), a = j > i ? 0 : Math.max(0, Math.min(1, w[i][j]));
          px[at] = j > i ? 228 : Math.round(255 - a * (255 - 192));
          px[at + 1] = j > i ? 228 : Math.round(255 - a * (255 - 57));
          px[at + 2] = j > i ? 228 : Math.round(255 - a * (255 - 43));
          px[at + 3] = 255;
        }
      }
      g.putImageData(image, 0, 0);
    }
    function heatmapHtml(w, q) {
      var shown = R.tokens.map(shownCharacter);
      var html = ['<table class="attn-explorer-heatmap attn-live-heatmap" data-layer="' +
        S.layer + '" data-head="' + S.head + '"><tr><th>' + esc(UI.query_key) + '</th>'];
      shown.forEach(function (c) { html.push('<th class="attn-explorer-key">' + esc(c) + '</th>'); });
      html.push('</tr>');
      for (var i = 0; i < w.length; i++) {
        html.push('<tr data-query="' + i + '"' + (i === q ? ' class="attn-explorer-query-row"' : '') +
          '><th style="text-align: right;">' + esc(shown[i]) + '</th>');
        for (var j = 0; j < w.length; j++) {
          html.push(j > i ? '<td class="attn-live-future" data-key="' + j + '"></td>' :
            '<td data-key="' + j + '" title="' + w[i][j].toFixed(3) + '" style="background: ' +
            colour(w[i][j]) + ';"></td>');
        }
        html.push('</tr>');
      }
      html.push('</table>');
      return html.join('');
    }
    function rowHtml(w, q) {
      var row = w[q], words = R.tokens.map(shownCharacter), best = 0;
      for (var k = 1; k <= q; k++) { if (row[k] > row[best]) { best = k; } }
      var html = ['<div class="attn-explorer-row" data-query="' + q + '" data-layer="' +
        S.layer + '" data-head="' + S.head + '" style="font-family: ' +
        'var(--font-stack--monospace, monospace); line-height: 1.35;">',
        '<div>' + fill(esc(UI.row_title), '<b>' + esc(words[q]) + '</b>',
                       esc(fill(UI.layer_head, S.layer, S.head))) + '</div>'];
      for (var j = 0; j < row.length; j++) {
        var style = (j === best ? 'font-weight: bold;' : '') +
          (j === q ? ' text-decoration: underline;' : '');
        html.push('<div style="display: flex; align-items: center; gap: 8px;">' +
          '<span style="width: 24px; text-align: right; ' + style + '">' + esc(words[j]) +
          '</span><span style="display: inline-block; width: 160px; height: 10px; ' +
          'background: #eee;"><span style="display: block; width: ' + Math.round(row[j] * 160) +
          'px; height: 10px; background: #c0392b;"></span></span>' +
          '<span class="attn-explorer-weight" data-key="' + j + '" style="' + style + '">' +
          row[j].toFixed(3) + '</span><span style="color: #666;">' +
          (j > q ? esc(UI.masked) : '') + '</span></div>');
      }
      html.push('<div>' + fill(esc(UI.summary),
        '<b class="attn-explorer-max">' + row[best].toFixed(3) + '</b>',
        '<b>' + esc(words[best]) + '</b>',
        '<b class="attn-explorer-entropy">' + entropy(row).toFixed(3) + '</b>',
        q + 1, Math.log(q + 1).toFixed(3)) + '</div></div>');
      return html.join('');
    }
    function nextHtml() {
      var top = topTokens(R.next, Math.min(data.top, cfg.vocab_size));
      var last = shownCharacter(R.tokens[R.tokens.length - 1]);
      var html = ['<div class="attn-live-next"><div>' + fill(esc(UI.next_title),
        '<b>' + esc(last) + '</b>', top.length, cfg.vocab_size) + '</div>'];
      top.forEach(function (id) {
        var prob = R.next[id];
        html.push('<div class="attn-live-next-row" data-token="' + id + '">' +
          '<span class="attn-live-next-char">' + esc(shownCharacter(model.vocab[id])) + '</span>' +
          '<span class="attn-live-bar"><span style="width: ' + Math.round(prob * 140) +
          'px;"></span></span><span class="attn-live-prob">' + prob.toFixed(3) + '</span></div>');
      });
      html.push('</div>');
      return html.join('');
    }

    ui.chars = null;
    build();
    ui.chars.addEventListener('click', function (event) {
      var index = event.target.getAttribute && event.target.getAttribute('data-index');
      if (index !== null && index !== undefined) { S.q = Number(index); draw(); }
    });
    ui.chars.addEventListener('keydown', function (event) {
      var to = R.tokens.length ? arrowStep(event.key, query(), R.tokens.length) : null;
      if (to !== null) { event.preventDefault(); S.q = to; draw(); }
    });
    C.onQueryRow(ui.heatBox, function (q) { S.q = q; draw(); });
    V.removeFallback(root, 'attn-live-fallback');
    update();
  }
})();
