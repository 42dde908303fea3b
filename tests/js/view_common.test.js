// The helpers every view's front end shares (course_utils/views/static/view_common.js,
// inlined before explorer.js, live.js and translator.js) under node's test runner. The
// softmax and entropy are also checked against torch's numbers in explorer.test.js, and
// through the live models in live.test.js and translator.test.js.
"use strict";
const test = require("node:test");
const assert = require("node:assert/strict");
const common = require("../../course_utils/views/static/view_common.js");

test("fill and esc", function () {
  assert.equal(common.fill("{1} {0} {1}", "a", "b"), "b a b");
  assert.equal(common.fill("no placeholder"), "no placeholder");
  assert.equal(common.esc('<b class="x">&</b>'), "&lt;b class=&quot;x&quot;&gt;&amp;&lt;/b&gt;");
  assert.equal(common.esc(3), "3");
});

test("the arrow keys, Home and End move the query along the tokens and stop at the ends", () => {
  assert.equal(common.arrowStep("ArrowRight", 2, 5), 3);
  assert.equal(common.arrowStep("ArrowDown", 2, 5), 3);
  assert.equal(common.arrowStep("ArrowLeft", 2, 5), 1);
  assert.equal(common.arrowStep("ArrowUp", 2, 5), 1);
  assert.equal(common.arrowStep("Home", 2, 5), 0);
  assert.equal(common.arrowStep("End", 2, 5), 4);
  assert.equal(common.arrowStep("ArrowLeft", 0, 5), 0);
  assert.equal(common.arrowStep("ArrowRight", 4, 5), 4);
  assert.equal(common.arrowStep("a", 2, 5), null);
  assert.equal(common.arrowStep("Enter", 2, 5), null);
});

test("softmax gives a plain array, the same from an array and from a Float64Array", () => {
  const logits = [2.5, -1, 0, -Infinity, 7.25, 3];
  const plain = common.softmax(logits), typed = common.softmax(new Float64Array(logits));
  assert.ok(Array.isArray(plain) && Array.isArray(typed));
  assert.deepEqual(typed, plain);  // bit for bit
  assert.equal(plain[3], 0);  // a masked key
  assert.ok(Math.abs(plain.reduce((a, b) => a + b, 0) - 1) < 1e-15);
  assert.ok(plain[4] > plain[5] && plain[5] > plain[0]);
  assert.deepEqual(common.softmax([1000, 1000]), [0.5, 0.5]);  // the largest is subtracted
});

test("entropy is log(n) when uniform and 0 when one-hot", () => {
  assert.ok(Math.abs(common.entropy([0.25, 0.25, 0.25, 0.25]) - Math.log(4)) < 1e-15);
  assert.equal(common.entropy([0, 1, 0]), 0);
});

test("a weight's colour is the course's red, its opacity clamped to 0..1", () => {
  assert.equal(common.colour(0.5), "rgba(192,57,43,0.500)");
  assert.equal(common.colour(1.5), "rgba(192,57,43,1.000)");
  assert.equal(common.colour(-0.1), "rgba(192,57,43,0.000)");
});
