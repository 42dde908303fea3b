// The translator view's model (course_utils/views/static/translator.js) under node's test
// runner, against lesson 15's Translator in Python. The fixture is written by
// tests/test_translator_view.py, which passes its path in TRANSLATOR_FIXTURE: run
// `pytest tests/test_translator_view.py`, not this file alone.
"use strict";
const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const translator = require("../../course_utils/views/static/translator.js");

const FIXTURE = process.env.TRANSLATOR_FIXTURE ?
  JSON.parse(fs.readFileSync(process.env.TRANSLATOR_FIXTURE, "utf8")) : null;
const SKIP = FIXTURE ? false : "TRANSLATOR_FIXTURE is not set: tests/test_translator_view.py " +
  "writes Python's numbers to a fixture and runs this file";

function maxDifference(actual, expected, what) {  // the largest |actual - expected| of two nests
  if (Array.isArray(expected)) {
    assert.equal(actual.length, expected.length, what + ": length");
    return expected.reduce(function (m, e, i) {
      return Math.max(m, maxDifference(actual[i], e, what + "[" + i + "]"));
    }, 0);
  }
  return Math.abs(actual - expected);
}
function models() {
  return FIXTURE.models.map(function (m) {
    return {name: m.name, cases: m.cases, model: translator.unpackTranslator(m.payload)};
  });
}

test("tokenisation reads what Python's readable_words reads", {skip: SKIP}, function () {
  models().forEach(function (m) {
    m.cases.forEach(function (c) {
      const what = m.name + ": " + JSON.stringify(c.text);
      const t = translator.readWords(m.model, c.text);
      assert.deepEqual(t.tokens, c.tokens, what);
      assert.deepEqual(t.unknown, c.unknown, what + ": unknown");
      assert.equal(t.cropped, c.cropped, what + ": cropped");
      if (c.source_ids) { assert.deepEqual(t.ids, c.source_ids, what + ": ids"); }
      assert.equal(t.words.length, c.tokens.length + c.unknown.length + c.cropped);
    });
  });
});

test("greedy output and cross-attention weights match the Python translator", {skip: SKIP},
     function () {
  const worst = {cross: 0, logit: 0};
  let checked = 0;
  models().forEach(function (m) {
    m.cases.filter(function (c) { return c.tokens.length; }).forEach(function (c) {
      const what = m.name + ": " + JSON.stringify(c.text);
      const r = translator.run(m.model, c.text);
      assert.deepEqual(r.tokens, c.tokens, what);
      assert.deepEqual(r.output, c.output, what + ": output");
      assert.equal(r.finished, c.finished, what + ": finished");
      worst.cross = Math.max(worst.cross, maxDifference(r.crossAttentions, c.cross, what));
      r.crossAttentions.forEach(function (heads) {  // (layers, heads, n_out, n_in)
        assert.equal(heads.length, m.model.config.num_heads);
        heads.forEach(function (rows) {
          assert.equal(rows.length, c.output.length);
          rows.forEach(function (row) {
            assert.equal(row.length, c.tokens.length);
            assert.ok(Math.abs(row.reduce(function (a, b) { return a + b; }, 0) - 1) < 1e-12);
          });
        });
      });
      // every step's logits, from the decoder run over the start token and the characters
      const encoded = translator.encode(m.model, c.source_ids);
      c.logits.forEach(function (expected, step) {
        const d = translator.decode(m.model, encoded, c.target_ids.slice(0, step + 1));
        worst.logit = Math.max(worst.logit, maxDifference(d.logits, expected, what));
      });
      checked++;
    });
  });
  assert.ok(checked >= 15, "cases checked: " + checked);
  console.log("# measured: max |JS - Python| over " + checked + " texts: cross-attention " +
              worst.cross.toExponential(2) + ", logits " + worst.logit.toExponential(2));
  Object.keys(worst).forEach(function (k) {
    assert.ok(worst[k] <= FIXTURE.tolerance, k + " differs by " + worst[k]);
  });
});

test("texts with nothing the translator knows write nothing, not an error", {skip: SKIP},
     function () {
  const m = models()[0].model;
  ["3005", "", "constructor", "  ,"].forEach(function (text) {
    const r = translator.run(m, text);
    if (text === "  ,") {  // "," alone is a source token: it is read and translated
      assert.deepEqual(r.tokens, [","]);
      return;
    }
    assert.deepEqual(r.tokens, [], text);
    assert.deepEqual(r.output, [], text);
    assert.deepEqual(r.crossAttentions, [], text);
  });
  assert.throws(function () { translator.encode(m, []); }, /encode reads 1\.\./);
});
