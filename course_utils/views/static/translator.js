/* The translator view's front end, inlined into every translator view output by
   course_utils/views/translator_view.py (the page fetches nothing).

   It reads the JSON next to it (the translator's sizes and its float16 weights in base64, the
   source and target vocabularies, the words to show) and runs lesson 15's translator
   (course_utils/models/translator.py) on the English number words the reader types: the
   encoder once (source token plus position vectors, pre-LN blocks of self-attention with no
   mask and a ReLU feed-forward network, a final LayerNorm), then greedy decoding (pre-LN
   blocks of causal self-attention, cross-attention whose queries come from the decoder and
   whose keys and values come from the encoder's output, the FFN; a final LayerNorm and the
   readout), one character at a time until the end token. The layers' arithmetic and the
   start-up steps only the live views share are live_common.js's (shared with lesson 12's
   live view), the text and DOM helpers view_common.js's (shared with the explorer too), both
   inlined before this script; node's test runner checks the model against the Python one
   (tests/js/translator.test.js).

   Two halves, as live.js: the logic (pure functions, no DOM), exported for node when `module`
   exists, and the page (start), which runs only where there is a document.
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
  var fill = V.fill, esc = V.esc, el = V.el, selector = V.selector, arrowStep = V.arrowStep,
    colour = V.colour;
  var layerNorm = C.layerNorm, addInPlace = C.addInPlace;

  // As translator_view.WORD_PATTERN, on the lower-cased text: words, "-" and ",", and any
  // other run of visible characters (marked unknown).
  var WORD_PATTERN = /[a-z]+|[,-]|[^\sa-z,-]+/g;

  // The payload's model as {config, sourceVocab, targetVocab, index (word -> source id),
  // p (name -> flat array)}.
  function unpackTranslator(payload) {
    var index = {}, cfg = payload.model.config;
    payload.source_vocab.forEach(function (w, i) { if (i !== cfg.pad) { index[w] = i; } });
    return {config: cfg, sourceVocab: payload.source_vocab, targetVocab: payload.target_vocab,
            index: index, p: C.unpackWeights(payload.model)};
  }

  // What the translator reads of `text`, as translator_view.readable_words: tokens the
  // vocabulary lacks are skipped, then the first max_src_len known ones kept. `words` lists
  // every token with its fate: 'read', 'unknown' (skipped) or 'cropped' (after max_src_len).
  function readWords(model, text) {
    var found = text.toLowerCase().match(WORD_PATTERN) || [], known = 0;
    var words = found.map(function (w) {
      var id = Object.prototype.hasOwnProperty.call(model.index, w) ? model.index[w] : -1;
      var fate = id < 0 ? 'unknown' : known++ < model.config.max_src_len ? 'read' : 'cropped';
      return {w: w, id: id, fate: fate};
    });
    function having(fate) { return words.filter(function (x) { return x.fate === fate; }); }
    var read = having('read');
    return {words: words, ids: read.map(function (x) { return x.id; }),
            tokens: read.map(function (x) { return x.w; }),
            unknown: having('unknown').map(function (x) { return x.w; }),
            cropped: having('cropped').length};
  }

  // Token vectors plus position vectors: ids (n,) -> (n, d_model).
  function embed(tokens, positions, ids, d) {
    var x = new Float64Array(ids.length * d);
    for (var r = 0; r < ids.length; r++) {
      for (var c = 0; c < d; c++) { x[r * d + c] = tokens[ids[r] * d + c] + positions[r * d + c]; }
    }
    return x;
  }
  function norm(model, x, n, name) {
    return layerNorm(x, n, model.p[name + '.weight'], model.p[name + '.bias'], model.config.eps);
  }

  // The encoder on source ids (1..max_src_len, one sentence: no padding): {n, keysValues:
  // per decoder layer, the keys and values (n, d_model) its cross-attention reads, made of
  // the memory once (course_utils.nn.cross_attention.memory_keys_values)}.
  function encode(model, ids) {
    var cfg = model.config, p = model.p, n = ids.length;
    if (!n || n > cfg.max_src_len) {
      throw new Error('encode reads 1..' + cfg.max_src_len + ' tokens, got ' + n);
    }
    var x = embed(p['src_embedding.weight'], p['src_positions.weight'], ids, cfg.d_model);
    for (var layer = 0; layer < cfg.num_layers; layer++) {
      var b = 'encoder.' + layer + '.';  // pre-LN EncoderBlock, every token reads every token
      addInPlace(x, C.selfAttention(norm(model, x, n, b + 'norm1'), n, p, b + 'self_attn.',
                                    cfg.num_heads, false, false).out);
      addInPlace(x, C.feedForward(norm(model, x, n, b + 'norm2'), n, p, b + 'ffn.', C.relu));
    }
    var memory = norm(model, x, n, 'encoder_norm'), keysValues = [];
    for (layer = 0; layer < cfg.num_layers; layer++) {
      var cross = 'decoder.' + layer + '.cross_attn.';
      keysValues.push({k: C.project(memory, n, p, cross, 'w_k'),
                       v: C.project(memory, n, p, cross, 'w_v')});
    }
    return {n: n, keysValues: keysValues};
  }

  // The decoder on target ids (the start token, then the characters so far; at most
  // max_tgt_len), reading the encoded source: {logits of the last position (target vocab,),
  // cross: every layer's cross-attention weights (layers, heads, n_tgt, n_src)}.
  function decode(model, encoded, ids) {
    var cfg = model.config, p = model.p, d = cfg.d_model, n = ids.length, cross = [];
    var x = embed(p['tgt_embedding.weight'], p['tgt_positions.weight'], ids, d);
    for (var layer = 0; layer < cfg.num_layers; layer++) {
      var b = 'decoder.' + layer + '.', kv = encoded.keysValues[layer];
      addInPlace(x, C.selfAttention(norm(model, x, n, b + 'norm1'), n, p, b + 'self_attn.',
                                    cfg.num_heads, true, false).out);
      var q = C.project(norm(model, x, n, b + 'norm2'), n, p, b + 'cross_attn.', 'w_q');
      var read = C.attendHeads(q, n, kv.k, kv.v, encoded.n, cfg.num_heads, false);
      addInPlace(x, C.project(read.merged, n, p, b + 'cross_attn.', 'w_o'));
      addInPlace(x, C.feedForward(norm(model, x, n, b + 'norm3'), n, p, b + 'ffn.', C.relu));
      cross.push(read.weights);
    }
    var last = norm(model, x.subarray((n - 1) * d), 1, 'decoder_norm');
    var logits = C.linear(last, 1, p['readout.weight'], p['readout.bias'],
                          model.targetVocab.length);
    return {logits: Array.prototype.slice.call(logits), cross: cross};
  }

  // Greedy decoding (Translator.translate): at each step the most likely target token after
  // the start token and the tokens written so far, until the end token or max_tgt_len steps.
  // {ids written before the end token, finished (the end token was written), cross: the
  // cross-attention rows of the written tokens (layers, heads, n_out, n_src)}.
  function translate(model, sourceIds) {
    var cfg = model.config, encoded = encode(model, sourceIds), target = [cfg.bos];
    var written = [], finished = false, last = null;
    for (var step = 0; step < cfg.max_tgt_len && !finished; step++) {
      last = decode(model, encoded, target);
      var id = C.argmax(last.logits);
      finished = id === cfg.eos;
      if (!finished) { written.push(id); target.push(id); }
    }
    var cross = last.cross.map(function (heads) {  // row t is the query that wrote token t
      return heads.map(function (rows) { return rows.slice(0, written.length); });
    });
    return {ids: written, finished: finished, cross: cross};
  }

  // What the view shows for `text`: {tokens, output (the target tokens written),
  // crossAttentions[layer][head][t][j], finished, words, unknown, cropped}; output and
  // crossAttentions are empty when nothing is read.
  function run(model, text) {
    var t = readWords(model, text), result = {tokens: t.tokens, words: t.words,
      unknown: t.unknown, cropped: t.cropped, output: [], crossAttentions: [], finished: false};
    if (!t.ids.length) { return result; }
    var g = translate(model, t.ids);
    result.output = g.ids.map(function (id) { return model.targetVocab[id]; });
    result.crossAttentions = g.cross;
    result.finished = g.finished;
    return result;
  }

  var logic = {
    unpackTranslator: unpackTranslator, readWords: readWords, encode: encode, decode: decode,
    translate: translate, run: run
  };
  if (typeof module !== 'undefined' && module.exports) { module.exports = logic; }
  if (typeof document !== 'undefined') { start(document.currentScript); }

  // --- the page ------------------------------------------------------------------------------

  function start(me) {
    var root = V.claimRoot(me, '[data-live-translator]');
    if (!root) { return; }
    var data = V.readPayload(root, 'attn-live-data');
    var model = unpackTranslator(data), UI = data.ui, cfg = model.config;
    // S: the text, the head shown, the character written whose row is shown.
    var S = {text: data.text, layer: data.initial.layer, head: data.initial.head, q: 0};
    var R = null, ui = {};

    C.exposeModel(root, {
      run: function (text) { return run(model, String(text)); },
      sourceVocab: model.sourceVocab, targetVocab: model.targetVocab, config: cfg
    });

    // --- building (once) --------------------------------------------------------------------
    function build() {
      var app = el('div', 'attn-explorer attn-live-app attn-translator-app');
      app.setAttribute('data-ready', 'translator');  // styled as an explorer, never started as one
      ui.text = el('input', 'attn-live-text');
      ui.text.type = 'text'; ui.text.id = root.id + '-text'; ui.text.value = S.text;
      ui.text.spellcheck = false; ui.text.autocomplete = 'off';
      var label = el('label', 'attn-explorer-note attn-translator-label', UI.text_label);
      label.htmlFor = ui.text.id;
      ui.text.addEventListener('input', function () { S.text = ui.text.value; update(); });
      app.appendChild(label); app.appendChild(ui.text);
      ui.words = el('div', 'attn-live-chars attn-translator-line attn-translator-words');
      ui.notes = el('div', 'attn-live-notes');
      ui.output = el('div', 'attn-translator-line attn-translator-output');
      ui.output.setAttribute('aria-live', 'polite');
      app.appendChild(ui.words); app.appendChild(ui.output); app.appendChild(ui.notes);
      var controls = el('div', 'attn-explorer-controls');
      ui.layer = selector('attn-live-layer', UI.layer, cfg.num_layers, function (v) {
        S.layer = v; draw();
      });
      ui.head = selector('attn-live-head', UI.head, cfg.num_heads, function (v) {
        S.head = v; draw();
      });
      controls.appendChild(ui.layer.parentNode); controls.appendChild(ui.head.parentNode);
      app.appendChild(controls);
      app.appendChild(el('div', 'attn-explorer-note', UI.pick_note));
      var main = el('div', 'attn-explorer-main');
      ui.heatBox = el('div', 'attn-live-heatbox');
      ui.rowBox = el('div', 'attn-explorer-rowbox');
      main.appendChild(ui.heatBox); main.appendChild(ui.rowBox);
      app.appendChild(main);
      app.appendChild(el('div', 'attn-explorer-note', UI.heatmap_note));
      root.appendChild(app);
    }

    // --- updating ---------------------------------------------------------------------------
    function update() {  // the text changed: translate, then draw everything
      R = run(model, S.text);
      if (S.q >= R.output.length) { S.q = 0; }
      drawText();
      draw();
      root.setAttribute('data-output', R.output.join(''));
      root.setAttribute('data-text', S.text);  // the state the page shows, for the tests
    }
    function drawText() {  // the words read, the characters written (buttons), the notes
      var read = 0;
      ui.words.innerHTML = '<span class="attn-explorer-note">' + esc(UI.reads) + '</span> ' +
        R.words.map(function (x) {
          var i = x.fate === 'read' ? read++ : -1;
          return '<span class="attn-live-char attn-live-' + x.fate + '"' +
            (i >= 0 ? ' data-index="' + i + '"' : '') + '>' + esc(x.w) + '</span>';
        }).join('');
      ui.output.innerHTML = '<span class="attn-explorer-note">' + esc(UI.writes) + '</span> ' +
        (R.tokens.length && !R.output.length ? esc(UI.nothing_written) : '') +
        R.output.map(function (c, i) {
          return '<button type="button" class="attn-translator-out" data-index="' + i +
            '" aria-pressed="false">' + esc(c) + '</button>';
        }).join('');
      var notes = [];
      if (R.unknown.length) {
        notes.push(fill(esc(UI.unknown_note), '<span class="attn-live-char attn-live-unknown">' +
          esc(R.unknown[0]) + '</span>', model.sourceVocab.length - 1));
      }
      if (R.cropped) { notes.push(esc(fill(UI.cropped_note, cfg.max_src_len, R.cropped))); }
      if (!R.tokens.length) { notes.push(esc(UI.empty_note)); }
      if (R.output.length && !R.finished) {
        notes.push(esc(fill(UI.unfinished_note, R.output.length)));
      }
      ui.notes.innerHTML = notes.map(function (t) {
        return '<div class="attn-explorer-note">' + t + '</div>';
      }).join('');
    }
    function draw() {  // the head, the character or the text changed
      ui.layer.value = String(S.layer); ui.head.value = String(S.head);
      Array.prototype.forEach.call(ui.output.querySelectorAll('.attn-translator-out'),
        function (b) {
          b.setAttribute('aria-pressed', String(Number(b.getAttribute('data-index')) === S.q));
        });
      if (!R.output.length) { ui.heatBox.innerHTML = ''; ui.rowBox.innerHTML = ''; return; }
      var w = R.crossAttentions[S.layer][S.head];
      ui.heatBox.innerHTML = heatmapHtml(w);
      ui.rowBox.innerHTML = rowHtml(w[S.q]);
    }
    function heatmapHtml(w) {
      var html = ['<table class="attn-explorer-heatmap attn-translator-heatmap" data-layer="' +
        S.layer + '" data-head="' + S.head + '"><tr><th>' + esc(UI.character_word) + '</th>'];
      R.tokens.forEach(function (t) {
        html.push('<th class="attn-explorer-key">' + esc(t) + '</th>');
      });
      html.push('</tr>');
      w.forEach(function (row, i) {
        html.push('<tr data-query="' + i + '"' + (i === S.q ? ' class="attn-explorer-query-row"' :
          '') + '><th style="text-align: right;">' + esc(R.output[i]) + '</th>');
        row.forEach(function (v, j) {
          html.push('<td data-key="' + j + '" title="' + v.toFixed(3) + '" style="background: ' +
            colour(v) + ';"></td>');
        });
        html.push('</tr>');
      });
      html.push('</table>');
      return html.join('');
    }
    function rowHtml(row) {
      var best = C.argmax(row);
      var html = ['<div class="attn-explorer-row" data-query="' + S.q + '" data-layer="' +
        S.layer + '" data-head="' + S.head + '" style="font-family: ' +
        'var(--font-stack--monospace, monospace); line-height: 1.35;">',
        '<div>' + fill(esc(UI.row_title), '<b>' + esc(R.output[S.q]) + '</b>',
                       esc(fill(UI.layer_head, S.layer, S.head))) + '</div>'];
      row.forEach(function (v, j) {
        var style = j === best ? 'font-weight: bold;' : '';
        html.push('<div style="display: flex; align-items: center; gap: 8px;">' +
          '<span style="width: 80px; text-align: right; ' + style + '">' + esc(R.tokens[j]) +
          '</span><span style="display: inline-block; width: 160px; height: 10px; ' +
          'background: #eee;"><span style="display: block; width: ' + Math.round(v * 160) +
          'px; height: 10px; background: #c0392b;"></span></span>' +
          '<span class="attn-explorer-weight" data-key="' + j + '" style="' + style + '">' +
          v.toFixed(3) + '</span></div>');
      });
      html.push('<div>' + fill(esc(UI.summary),
        '<b class="attn-explorer-max">' + row[best].toFixed(3) + '</b>',
        '<b>' + esc(R.tokens[best]) + '</b>',
        '<b class="attn-explorer-entropy">' + V.entropy(row).toFixed(3) + '</b>',
        row.length, Math.log(row.length).toFixed(3)) + '</div></div>');
      return html.join('');
    }

    build();
    ui.output.addEventListener('click', function (event) {  // Enter and Space click a button too
      var button = event.target.closest ? event.target.closest('button[data-index]') : null;
      if (button) { S.q = Number(button.getAttribute('data-index')); draw(); }
    });
    ui.output.addEventListener('keydown', function (event) {  // arrows: the next character
      var to = R.output.length ? arrowStep(event.key, S.q, R.output.length) : null;
      if (to === null || !event.target.closest || !event.target.closest('button')) { return; }
      event.preventDefault(); S.q = to; draw();
      ui.output.querySelectorAll('.attn-translator-out')[to].focus();
    });
    C.onQueryRow(ui.heatBox, function (q) { S.q = q; draw(); });
    V.removeFallback(root, 'attn-live-fallback');
    update();
  }
})();
