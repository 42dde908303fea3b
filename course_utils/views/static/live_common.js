/* What the live views share, inlined before their own script into every output of
   course_utils/views/live_view.py (lesson 12's GPT) and translator_view.py (lesson 15's
   translator): the weights decoded from float16 in base64 (course_utils/views/half_weights.py),
   the arithmetic of the course's layers (nn.Linear, nn.LayerNorm, GELU, ReLU, multi-head
   scaled dot-product attention, the FFN), and the start-up steps only they share (exposeModel:
   window.courseLiveModel; onQueryRow). What the explorer shares with them too (the text and
   DOM helpers, softmax, entropy, finding the root, reading the payload, removing the
   fallback) is view_common.js's, inlined before this script.

   Arithmetic in float64 on the float16 weights; node's test runner checks the models built
   from it against Python (tests/js/live.test.js, tests/js/translator.test.js).
   Pure functions (the page's exposeModel and onQueryRow aside, which only the pages call):
   exported for node when `module` exists, else as window.courseLiveCommon for the view
   scripts that follow it.
   Plain ES5-style code and typed arrays (every browser has them), no library. */
/* global Float64Array */
(function () {
  "use strict";

  // What every view shares (view_common.js, inlined before this script).
  var V = typeof module !== 'undefined' && module.exports ? require('./view_common.js') :
    window.courseViewCommon;
  var softmax = V.softmax;

  function halfToNumber(bits) {  // an IEEE 754 half (16 bits) as a number
    var sign = bits & 0x8000 ? -1 : 1, exponent = (bits >> 10) & 0x1f, fraction = bits & 0x3ff;
    if (exponent === 0) { return sign * fraction * Math.pow(2, -24); }  // subnormal
    if (exponent === 31) { return fraction ? NaN : sign * Infinity; }
    return sign * (1 + fraction / 1024) * Math.pow(2, exponent - 15);
  }
  function decodeHalves(base64) {  // little-endian float16 in base64 -> plain array of numbers
    var bytes = atob(base64), out = [];  // push, not new Array(n): V8 keeps it a packed array
    for (var i = 0; i + 1 < bytes.length; i += 2) {
      out.push(halfToNumber(bytes.charCodeAt(i) | (bytes.charCodeAt(i + 1) << 8)));
    }
    return out;
  }
  // An exported model ({tensors: [{name, shape}], weights: base64}) as name -> flat
  // Float64Array, row after row as in torch.
  function unpackWeights(exported) {
    var all = decodeHalves(exported.weights), offset = 0, p = {};
    exported.tensors.forEach(function (t) {
      var size = t.shape.reduce(function (a, b) { return a * b; }, 1);
      p[t.name] = new Float64Array(all.slice(offset, offset + size));
      offset += size;
    });
    if (offset !== all.length) { throw new Error('the weights do not match their shapes'); }
    return p;
  }

  function zeros(n) {
    var out = [];
    for (var i = 0; i < n; i++) { out.push(0); }
    return out;
  }
  // Activations are flat Float64Arrays, row after row: (n, width) is n * width numbers.
  // nn.Linear on every row: x (n, in), weight (out, in) flat, bias (out,) or null -> (n, out)
  function linear(x, n, weight, bias, outDim) {
    var inDim = x.length / n, y = new Float64Array(n * outDim);
    for (var r = 0; r < n; r++) {
      var at = r * inDim;
      for (var o = 0; o < outDim; o++) {
        var sum = bias ? bias[o] : 0, base = o * inDim;
        for (var i = 0; i < inDim; i++) { sum += weight[base + i] * x[at + i]; }
        y[r * outDim + o] = sum;
      }
    }
    return y;
  }
  function layerNorm(x, n, gain, shift, eps) {  // nn.LayerNorm: biased variance, eps inside
    var d = x.length / n, y = new Float64Array(x.length);
    for (var r = 0; r < n; r++) {
      var at = r * d, mean = 0, variance = 0, i;
      for (i = 0; i < d; i++) { mean += x[at + i]; }
      mean /= d;
      for (i = 0; i < d; i++) { variance += (x[at + i] - mean) * (x[at + i] - mean); }
      var inv = 1 / Math.sqrt(variance / d + eps);
      for (i = 0; i < d; i++) { y[at + i] = (x[at + i] - mean) * inv * gain[i] + shift[i]; }
    }
    return y;
  }
  // erf by Abramowitz and Stegun 7.1.26 (absolute error below 1.5e-7): JavaScript has none.
  function erf(x) {
    var sign = x < 0 ? -1 : 1, a = Math.abs(x), t = 1 / (1 + 0.3275911 * a);
    var poly = ((((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t +
                0.254829592) * t;
    return sign * (1 - poly * Math.exp(-a * a));
  }
  function gelu(x) { return 0.5 * x * (1 + erf(x / Math.SQRT2)); }  // nn.GELU(), exact form
  function relu(x) { return x > 0 ? x : 0; }  // nn.ReLU()
  function argmax(values) {  // the first index of the largest value, as torch.argmax
    var best = 0;
    for (var i = 1; i < values.length; i++) { if (values[i] > values[best]) { best = i; } }
    return best;
  }
  function addInPlace(x, more) { for (var i = 0; i < x.length; i++) { x[i] += more[i]; } }

  // Scaled dot-product attention in every head (course_utils.nn.attention.MultiHeadAttention
  // between its projections): q (nq, d), k and v (nk, d), already projected; head h reads
  // features h*d_k .. (h+1)*d_k - 1. With `causal`, query i reads keys 0..i alone (key j
  // sits at position j, as in a self-attention): the others get weight 0.
  // Returns {merged (nq, d): the heads side by side, before w_o; weights (heads, nq, nk) as
  // nested arrays}.
  function attendHeads(q, nq, k, v, nk, numHeads, causal) {
    var d = q.length / nq, dk = d / numHeads, scale = 1 / Math.sqrt(dk);
    var merged = new Float64Array(nq * d), weights = [];
    for (var h = 0; h < numHeads; h++) {
      var start = h * dk, head = [];
      for (var i = 0; i < nq; i++) {
        var logits = zeros(nk), qi = i * d + start, j, c;
        for (j = 0; j < nk; j++) {
          if (causal && j > i) { logits[j] = -Infinity; continue; }
          var s = 0, kj = j * d + start;
          for (c = 0; c < dk; c++) { s += q[qi + c] * k[kj + c]; }
          logits[j] = s * scale;
        }
        var w = softmax(logits);
        for (j = 0; j < nk; j++) {
          if (!w[j]) { continue; }  // a masked key adds nothing
          var vj = j * d + start;
          for (c = 0; c < dk; c++) { merged[qi + c] += w[j] * v[vj + c]; }
        }
        head.push(w);
      }
      weights.push(head);
    }
    return {merged: merged, weights: weights};
  }
  // The nn.Linear `name` under `prefix` (e.g. a MultiHeadAttention's w_q) on every row of x.
  function project(x, n, p, prefix, name) {
    var weight = p[prefix + name + '.weight'];
    return linear(x, n, weight, p[prefix + name + '.bias'], weight.length / (x.length / n));
  }

  // Multi-head self-attention (MultiHeadAttention with key = value = query) under `prefix`:
  // x (n, d_model) -> {out (n, d_model), weights (heads, n, n) as nested arrays}; `causal`
  // as in attendHeads (course_utils.nn.masks.causal_mask). With lastOnly, out is the last
  // query's row (1, d_model) alone: every weight is still made.
  function selfAttention(x, n, p, prefix, numHeads, causal, lastOnly) {
    var d = x.length / n;
    var a = attendHeads(project(x, n, p, prefix, 'w_q'), n, project(x, n, p, prefix, 'w_k'),
                        project(x, n, p, prefix, 'w_v'), n, numHeads, causal);
    var merged = lastOnly ? a.merged.subarray((n - 1) * d) : a.merged;
    return {out: project(merged, lastOnly ? 1 : n, p, prefix, 'w_o'), weights: a.weights};
  }
  // A position-wise FeedForward under `prefix` (its linear1, activation, linear2) on every
  // row of x (n, d_model); `activation` is gelu or relu.
  function feedForward(x, n, p, prefix, activation) {
    var hidden = project(x, n, p, prefix, 'linear1');
    for (var i = 0; i < hidden.length; i++) { hidden[i] = activation(hidden[i]); }
    return project(hidden, n, p, prefix, 'linear2');
  }

  // --- the page: called only where there is a document --------------------------------------

  // The view's model for the console and the tests: root.courseLive = api, and
  // window.courseLiveModel(element), the same function for lesson 12's and lesson 15's views.
  function exposeModel(root, api) {
    root.courseLive = api;
    window.courseLiveModel = function (element) {
      return element && element.courseLive ? element.courseLive : null;
    };
  }
  // A click on a heatmap's row (tr[data-query]) in `box` calls onPick(its query).
  function onQueryRow(box, onPick) {
    box.addEventListener('click', function (event) {
      var tr = event.target.closest ? event.target.closest('tr[data-query]') : null;
      if (tr) { onPick(Number(tr.getAttribute('data-query'))); }
    });
  }

  var common = {
    halfToNumber: halfToNumber, decodeHalves: decodeHalves, unpackWeights: unpackWeights,
    zeros: zeros, linear: linear, layerNorm: layerNorm, erf: erf, gelu: gelu, relu: relu,
    argmax: argmax, addInPlace: addInPlace, attendHeads: attendHeads, project: project,
    selfAttention: selfAttention, feedForward: feedForward, exposeModel: exposeModel,
    onQueryRow: onQueryRow
  };
  if (typeof module !== 'undefined' && module.exports) { module.exports = common; }
  if (typeof window !== 'undefined') { window.courseLiveCommon = common; }
})();
