// The attention explorer's logic (course_utils/views/static/explorer.js) under node's
// test runner, against numbers Python computed with the course's attention.
// The fixture is written by tests/test_explorer_js.py, which passes its path in
// EXPLORER_FIXTURE: run `pytest tests/test_explorer_js.py`, not this file alone.
"use strict";
const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const explorer = require("../../course_utils/views/static/explorer.js");
// The helpers the explorer shares with the live views (tested in view_common.test.js).
const common = require("../../course_utils/views/static/view_common.js");

if (!process.env.EXPLORER_FIXTURE) {
  throw new Error("EXPLORER_FIXTURE is not set: run `pytest tests/test_explorer_js.py`, " +
                  "which writes Python's numbers to a fixture and runs these tests");
}
const FIXTURE = JSON.parse(fs.readFileSync(process.env.EXPLORER_FIXTURE, "utf8"));
const EDITIONS = Object.keys(FIXTURE.editions);
const TOY = FIXTURE.editions.en.toy;  // the pronoun sentence and the "round" one
const MODEL = FIXTURE.editions.en.model;  // synthetic maps (2 layers, 3 heads, 5 tokens)

function close(actual, expected, tolerance, what) {
  if (Array.isArray(expected)) {
    assert.equal(actual.length, expected.length, what + ": length");
    expected.forEach(function (e, i) { close(actual[i], e, tolerance, what + "[" + i + "]"); });
    return;
  }
  assert.ok(Math.abs(actual - expected) <= tolerance,
            what + ": " + actual + " differs from Python's " + expected + " by more than " +
            tolerance);
}

function stateFor(data, settings) {  // a fresh state with the given fields changed
  return Object.assign(explorer.initialState(data), settings);
}

test("softmax and entropy match torch on masked and unmasked rows", function () {
  assert.ok(FIXTURE.softmax.length >= 12);
  FIXTURE.softmax.forEach(function (row, i) {
    const logits = row.logits.map(function (l) { return l === null ? -Infinity : l; });
    const weights = common.softmax(logits);
    close(weights, row.weights, 1e-12, "softmax case " + i);
    logits.forEach(function (l, k) { if (l === -Infinity) { assert.equal(weights[k], 0); } });
    close(common.entropy(weights), row.entropy, 1e-12, "entropy case " + i);
  });
});

test("an edited row is computed as the course computes it, in every setting", function () {
  assert.ok(FIXTURE.edits.length >= 100);
  FIXTURE.edits.forEach(function (edit, i) {
    const S = stateFor(TOY, {s: edit.sentence, causal: edit.causal, scaled: edit.scaled,
                             t: edit.t, edits: edit.edits});
    const what = "edit " + i + " (causal " + edit.causal + ", scaled " + edit.scaled +
      ", T = " + TOY.temperatures[edit.t] + ")";
    close(explorer.scale(TOY, S), Object.values(edit.rows)[0].scale, 1e-15, what + " scale");
    Object.keys(edit.rows).forEach(function (key) {
      const q = Number(key), python = edit.rows[key], row = explorer.editedRow(TOY, S, q);
      close(explorer.scoreRow(TOY, S, q), python.scores, 1e-9, what + " scores of " + q);
      close(row.w, python.weights, 1e-9, what + " weights of " + q);
      close(row.h, python.entropy, 1e-6, what + " entropy of " + q);  // Python's is float32
      close(row.out, python.output, 1e-9, what + " output of " + q);
    });
  });
});

test("current() recomputes exactly the edited rows and keeps every other one", function () {
  const withTwo = FIXTURE.edits.filter(function (e) { return Object.keys(e.edits).length > 1; });
  assert.ok(withTwo.length > 0);
  withTwo.forEach(function (edit) {
    const S = stateFor(TOY, {s: edit.sentence, causal: edit.causal, scaled: edit.scaled,
                             t: edit.t, edits: edit.edits});
    const stored = TOY.sentences[edit.sentence]
      .states["c" + (+edit.causal) + "s" + (+edit.scaled)][edit.t];
    const shown = explorer.current(TOY, S);
    stored.w.forEach(function (row, q) {
      const python = edit.rows[String(q)];
      if (python) {
        close(shown.w[q], python.weights, 1e-9, "edited row " + q);
        close(shown.h[q], python.entropy, 1e-6, "edited entropy " + q);
        close(shown.out[q], python.output, 1e-9, "edited output " + q);
      } else {
        assert.equal(shown.w[q], row); assert.equal(shown.h[q], stored.h[q]);
        assert.equal(shown.out[q], stored.out[q]);
      }
    });
    assert.notEqual(shown.w, stored.w, "the stored state must not be changed in place");
  });
});

test("editing a row back to its hand-set query gives Python's precomputed row", function () {
  TOY.sentences.forEach(function (sentence, s) {
    Object.keys(sentence.states).forEach(function (key) {
      sentence.states[key].forEach(function (stored, t) {
        sentence.tokens.forEach(function (_, q) {
          const S = stateFor(TOY, {s: s, causal: key[1] === "1", scaled: key[3] === "1", t: t});
          S.edits[q] = sentence.queries[q].slice();
          const row = explorer.editedRow(TOY, S, q), what = key + " T#" + t + " query " + q;
          close(row.w, stored.w[q], 6e-5, what + " weights");  // the page's data: 4 decimals
          close(row.h, stored.h[q], 6e-5, what + " entropy");
          close(row.out, stored.out[q], 6e-5, what + " output");
        });
      });
    });
  });
});

test("with no edit, current() is the precomputed state of the switches", function () {
  const S = explorer.initialState(TOY);
  [[false, true], [true, true], [true, false], [false, false]].forEach(function (pair) {
    S.causal = pair[0]; S.scaled = pair[1];
    TOY.temperatures.forEach(function (_, t) {
      explorer.setTemperature(TOY, S, t);
      assert.equal(explorer.current(TOY, S), TOY.sentences[0].states[
        "c" + (+pair[0]) + "s" + (+pair[1])][t]);
    });
  });
});

test("the mask hides exactly the keys right of the query, and only with the mask on", function () {
  const S = stateFor(TOY, {causal: true}), n = TOY.sentences[0].tokens.length;
  for (let q = 0; q < n; q++) {
    for (let k = 0; k < n; k++) {
      assert.equal(explorer.hidden(TOY, S, q, k), k > q);
      assert.equal(explorer.hidden(TOY, stateFor(TOY, {causal: false}), q, k), false);
      assert.equal(explorer.hidden(MODEL, stateFor(MODEL, {causal: true}), q, k), false);
    }
  }
});

test("the opening state is the one Python asked for", function () {
  const S = explorer.initialState(TOY);
  assert.equal(S.q, TOY.sentences[0].query);
  assert.equal(S.causal, TOY.initial.causal);
  assert.equal(S.scaled, TOY.initial.scaled);
  assert.equal(TOY.temperatures[S.t], 1);
  assert.deepEqual([S.s, S.hq, S.hk, S.step, S.edits], [0, null, null, 4, {}]);
  const M = explorer.initialState(MODEL);
  assert.deepEqual([M.layer, M.head], [MODEL.initial.layer, MODEL.initial.head]);
  assert.deepEqual(explorer.initialState({sentences: [{query: 2}]}),
                   {s: 0, q: 2, hq: null, hk: null, causal: false, scaled: true, t: 0,
                    layer: 0, head: 0, step: 4, edits: {}});
});

test("picking and hovering a query; hovering wins while it lasts", function () {
  const S = explorer.initialState(TOY);
  S.hq = 3;
  assert.equal(explorer.shownQuery(S), 3);
  explorer.pickQuery(S, 1);
  assert.deepEqual([S.q, S.hq, explorer.shownQuery(S)], [1, null, 1]);
  S.hq = 4; S.hk = 2;
  explorer.clearHover(S);
  assert.deepEqual([S.hq, S.hk, explorer.shownQuery(S)], [null, null, 1]);
});

test("switches flip and pick their precomputed state; temperature and step stay in range",
     function () {
  const S = explorer.initialState(TOY), causal = S.causal, scaled = S.scaled;
  explorer.toggleCausal(S); explorer.toggleScale(S);
  assert.deepEqual([S.causal, S.scaled], [!causal, !scaled]);
  assert.equal(explorer.current(TOY, S),
               TOY.sentences[0].states["c" + (+!causal) + "s" + (+!scaled)][S.t]);
  explorer.toggleCausal(S); explorer.toggleScale(S);
  assert.deepEqual([S.causal, S.scaled], [causal, scaled]);
  explorer.setTemperature(TOY, S, "3");  // the slider's value is a string
  assert.equal(S.t, 3);
  explorer.setTemperature(TOY, S, 99);
  assert.equal(S.t, TOY.temperatures.length - 1);
  explorer.setTemperature(TOY, S, -1);
  assert.equal(S.t, 0);
  explorer.moveStep(S, 1);
  assert.equal(S.step, 4);
  for (let i = 0; i < 6; i++) { explorer.moveStep(S, -1); }
  assert.equal(S.step, 0);
  explorer.moveStep(S, 1);
  assert.equal(S.step, 1);
});

test("the scale is 1/sqrt(d_k) (or 1) divided by the temperature", function () {
  const d_k = TOY.sentences[0].d_k;
  TOY.temperatures.forEach(function (T, t) {
    close(explorer.scale(TOY, stateFor(TOY, {scaled: true, t: t})), 1 / Math.sqrt(d_k) / T,
          1e-15, "scaled, T = " + T);
    close(explorer.scale(TOY, stateFor(TOY, {scaled: false, t: t})), 1 / T, 1e-15,
          "not scaled, T = " + T);
  });
});

test("editing a feature: numbers only, a copy of the hand-set query, undone by reset",
     function () {
  const S = explorer.initialState(TOY), q = S.q, handSet = TOY.sentences[0].queries[q].slice();
  ["", "abc", "Infinity", "-Infinity", "NaN"].forEach(function (text) {
    assert.equal(explorer.editFeature(TOY, S, 0, text), false, JSON.stringify(text));
  });
  assert.deepEqual(S.edits, {});
  assert.equal(explorer.editFeature(TOY, S, 1, "1.5"), true);
  assert.equal(explorer.editFeature(TOY, S, 2, "-0.5"), true);  // builds on the first edit
  const expected = handSet.slice(); expected[1] = 1.5; expected[2] = -0.5;
  assert.deepEqual(S.edits, {[q]: expected});
  assert.deepEqual(TOY.sentences[0].queries[q], handSet, "the page's data must not change");
  const stored = TOY.sentences[0].states["c" + (+S.causal) + "s" + (+S.scaled)][S.t];
  assert.notDeepEqual(explorer.current(TOY, S).w[q], stored.w[q]);
  explorer.resetEdits(S);
  assert.deepEqual(S.edits, {});
  assert.equal(explorer.current(TOY, S), stored);
});

test("picking another sentence opens on its query and drops the edits", function () {
  const S = explorer.initialState(TOY);
  explorer.editFeature(TOY, S, 0, "2");
  explorer.pickSentence(TOY, S, 1);
  assert.deepEqual([S.s, S.q, S.edits], [1, TOY.sentences[1].query, {}]);
  assert.equal(explorer.current(TOY, S),
               TOY.sentences[1].states["c" + (+S.causal) + "s" + (+S.scaled)][S.t]);
});

test("the model view shows the picked layer and head", function () {
  const S = explorer.initialState(MODEL), x = MODEL.sentences[0];
  for (let layer = 0; layer < x.maps.length; layer++) {
    for (let head = 0; head < x.maps[0].length; head++) {
      explorer.pickLayerHead(S, layer, head);
      const shown = explorer.current(MODEL, S);
      assert.equal(shown.w, x.maps[layer][head]);
      assert.equal(shown.h, x.h[layer][head]);
      assert.equal(shown.out, null);
    }
  }
});

test("the row's title reads as Python's no-script row, in every edition", function () {
  EDITIONS.forEach(function (edition) {
    const data = FIXTURE.editions[edition].toy, ui = data.ui, sentence = data.sentences[0];
    const one = data.temperatures.indexOf(1);
    FIXTURE.editions[edition].settings_shown.forEach(function (python) {
      const S = stateFor(data, {causal: python.causal, scaled: python.scaled, t: one});
      const title = "<div>" + common.fill(common.esc(ui.row_title),
        "<b>" + common.esc(sentence.tokens[S.q]) + "</b>",
        common.esc(explorer.settingsText(data, S))) + "</div>";
      assert.equal(title, python.html, edition + " " + JSON.stringify(python));
    });
    const hot = stateFor(data, {t: 0});
    assert.ok(explorer.settingsText(data, hot).endsWith(" · T = " +
              data.temperatures[0].toFixed(2)), edition);
    const model = FIXTURE.editions[edition].model, M = explorer.initialState(model);
    assert.equal(explorer.settingsText(model, M),
                 common.fill(model.ui.layer_head, M.layer, M.head));
  });
});

test("dot and weighted sum on a non-square case", function () {
  assert.equal(explorer.dot([1, 2, 3], [4, -5, 6]), 12);
  // weights (n_k = 3,) × values (3, d_v = 2) -> (2,)
  assert.deepEqual(explorer.weightedSum([0.5, 0.25, 0.25], [[2, 4], [4, 0], [0, 8]]), [2, 4]);
});

test("a heatmap cell's text keeps 4.5:1 contrast on its red on either side of the switch", () => {
  function channel(c) {
    const s = c / 255;
    return s <= 0.03928 ? s / 12.92 : Math.pow((s + 0.055) / 1.055, 2.4);
  }
  function luminance(w) {  // rgba(192, 57, 43, w) over white
    const [r, g, b] = [192, 57, 43].map((c) => 255 * (1 - w) + c * w);
    return 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b);
  }
  for (let i = 0; i <= 1000; i++) {
    const w = i / 1000, L = luminance(w);
    const contrast = w > explorer.INK_SWITCH ? 1.05 / (L + 0.05) : (L + 0.05) / 0.05;
    assert.ok(contrast >= 4.5, "weight " + w + ": contrast " + contrast.toFixed(2));
  }
});
