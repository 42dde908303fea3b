// The live view's model (course_utils/views/static/live.js) under node's test runner,
// against the course's GPT in Python. The fixture is written by tests/test_live.py, which
// passes its path in LIVE_FIXTURE: run `pytest tests/test_live.py`, not this file alone.
"use strict";
const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const live = require("../../course_utils/views/static/live.js");
const common = require("../../course_utils/views/static/live_common.js");

const FIXTURE = process.env.LIVE_FIXTURE ?
  JSON.parse(fs.readFileSync(process.env.LIVE_FIXTURE, "utf8")) : null;
const SKIP = FIXTURE ? false : "LIVE_FIXTURE is not set: tests/test_live.py writes Python's " +
  "numbers to a fixture and runs this file";

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
  return FIXTURE.models.map(function (m) { return {name: m.name, cases: m.cases,
                                                   model: live.unpackModel(m.payload)}; });
}

test("float16 bits decode to the numbers torch gives them", {skip: SKIP}, function () {
  FIXTURE.halves.bits.forEach(function (bits, i) {
    const given = FIXTURE.halves.values[i];
    const expected = given === "inf" ? Infinity : given === "-inf" ? -Infinity : given;
    const value = common.halfToNumber(bits & 0xffff);
    assert.ok(Object.is(value, expected), bits + " -> " + value + ", torch: " + expected);
  });
});

test("erf is within 2e-7 of Python's common.erf on [-6, 6]", {skip: SKIP}, function () {
  const worst = FIXTURE.erf.reduce(function (m, pair) {
    return Math.max(m, Math.abs(common.erf(pair[0]) - pair[1]));
  }, 0);
  assert.ok(worst < 2e-7, "erf differs by " + worst);
});

test("tokenisation keeps what Python's readable_text keeps", {skip: SKIP}, function () {
  models().forEach(function (m) {
    m.cases.forEach(function (c) {
      const t = live.tokenize(m.model, c.text);
      assert.deepEqual(t.ids, c.ids, m.name + ": " + JSON.stringify(c.text));
      assert.deepEqual(t.unknown, c.unknown, m.name + ": unknown of " + JSON.stringify(c.text));
      assert.equal(t.cropped, c.cropped, m.name + ": cropped of " + JSON.stringify(c.text));
      assert.equal(t.chars.length, Array.from(c.text).length);
    });
  });
});

test("attention weights, logits and next-token probabilities match the Python GPT",
     {skip: SKIP}, function () {
  const worst = {attention: 0, logit: 0, probability: 0};
  let checked = 0;
  models().forEach(function (m) {
    m.cases.filter(function (c) { return c.ids.length; }).forEach(function (c) {
      const what = m.name + ": " + JSON.stringify(c.text);
      const f = live.forward(m.model, c.ids);
      const logits = f.hidden.map(function (row) { return live.readout(m.model, row); });
      const r = live.run(m.model, c.text);
      worst.attention = Math.max(worst.attention, maxDifference(f.attentions, c.attentions, what));
      worst.logit = Math.max(worst.logit, maxDifference(logits, c.logits, what));
      worst.probability = Math.max(worst.probability, maxDifference(r.next, c.next, what));
      assert.deepEqual(r.attentions, f.attentions);
      r.attentions.forEach(function (heads) {
        heads.forEach(function (rows) {
          rows.forEach(function (row, i) {
            assert.ok(Math.abs(row.reduce(function (a, b) { return a + b; }, 0) - 1) < 1e-12);
            row.slice(i + 1).forEach(function (w) { assert.equal(w, 0, what + ": future"); });
          });
        });
      });
      checked++;
    });
  });
  assert.ok(checked >= 15, "cases checked: " + checked);
  console.log("# measured: max |JS - Python| over " + checked + " texts: attention " +
              worst.attention.toExponential(2) + ", logits " + worst.logit.toExponential(2) +
              ", next-token probabilities " + worst.probability.toExponential(2));
  Object.keys(worst).forEach(function (k) {
    assert.ok(worst[k] <= FIXTURE.tolerance, k + " differs by " + worst[k]);
  });
});

test("greedy continuation is the text Python's generate() gives", {skip: SKIP}, function () {
  models().forEach(function (m) {
    m.cases.filter(function (c) { return c.ids.length; }).forEach(function (c) {
      const greedy = live.continueText(m.model, c.text, 12, 0, live.seededRandom(0));
      assert.equal(greedy, c.greedy, m.name + ": " + JSON.stringify(c.text));
    });
  });
});

test("sampling is seeded and draws from the softmax", {skip: SKIP}, function () {
  const m = models()[0].model, hot = 5;  // the test model is sharp: sample it hot
  const a = live.continueText(m, "To be", 20, hot, live.seededRandom(7));
  assert.equal(a, live.continueText(m, "To be", 20, hot, live.seededRandom(7)));
  assert.notEqual(a, live.continueText(m, "To be", 20, hot, live.seededRandom(8)));
  assert.equal(Array.from(a).length, 20);
  // Inverse of the cumulative distribution: u below the first weight picks token 0, etc.
  const logits = [Math.log(0.2), Math.log(0.5), Math.log(0.3)];
  const pick = function (u) { return live.pickToken(logits, 1, function () { return u; }); };
  assert.deepEqual([0.1, 0.19, 0.21, 0.69, 0.71, 0.99].map(pick), [0, 0, 1, 1, 2, 2]);
  const random = live.seededRandom(0), counts = [0, 0, 0];
  for (let i = 0; i < 20000; i++) { counts[live.pickToken(logits, 1, random)]++; }
  [0.2, 0.5, 0.3].forEach(function (p, i) { assert.ok(Math.abs(counts[i] / 20000 - p) < 0.015); });
  assert.equal(live.pickToken(logits, 0, random), 1);
});

test("texts with nothing the model knows give no prediction, not an error", {skip: SKIP},
     function () {
  const m = models()[0].model, r = live.run(m, "✓✓");
  assert.deepEqual(r.tokens, []);
  assert.equal(r.next, null);
  assert.deepEqual(r.unknown, ["✓", "✓"]);
  assert.equal(live.continueText(m, "✓", 3, 0.8, live.seededRandom(0)), "");
  assert.deepEqual(live.characters("a🙂b"), ["a", "🙂", "b"]);
  assert.deepEqual(live.topTokens([0.1, 0.5, 0.1, 0.3], 3), [1, 3, 0]);
  assert.equal(live.shownCharacter(" ") + live.shownCharacter("\n"), "␣↵");
});

