/* What every view's front end shares, inlined first into every output of
   course_utils/views/explorer_html.py (the explorer, before explorer.js), live_view.py
   (lesson 12's GPT, before live_common.js and live.js) and translator_view.py (lesson 15's
   translator, before live_common.js and translator.js): the UI text helpers (fill, esc), the
   attention row's arithmetic (softmax, entropy), the red of a weight, the arrow keys' step,
   the DOM helpers (el, selector, pressable) and the start-up steps (claimRoot, readPayload,
   removeFallback).

   The pure functions are unit-tested by node's test runner (tests/js/view_common.test.js).
   Exported for node when `module` exists, else as window.courseViewCommon for the scripts
   that follow it. The DOM helpers run only where there is a document (the pages call them).
   Plain ES5-style code, no library. */
(function () {
  "use strict";

  // --- logic: no DOM ------------------------------------------------------------------------

  function fill(template) {  // UI text with {0}, {1} ... replaced by the arguments
    var parts = Array.prototype.slice.call(arguments, 1);
    return template.replace(/\{(\d+)\}/g, function (_, i) { return parts[Number(i)]; });
  }
  function esc(s) {
    return String(s).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;')
      .replace(/"/g, '&quot;');
  }
  // logits (an array or a typed array) -> a plain array of weights. -Infinity gets weight 0;
  // the largest logit is subtracted first.
  function softmax(logits) {
    var top = -Infinity, total = 0, e = [], i;
    for (i = 0; i < logits.length; i++) { if (logits[i] > top) { top = logits[i]; } }
    for (i = 0; i < logits.length; i++) { e.push(Math.exp(logits[i] - top)); total += e[i]; }
    for (i = 0; i < e.length; i++) { e[i] /= total; }
    return e;
  }
  function entropy(w) {  // in nats: log(n) when uniform, 0 when one-hot
    var h = 0;
    w.forEach(function (v) { if (v > 0) { h -= v * Math.log(v); } });
    return h;
  }
  function colour(w) {  // a weight's cell: the course's red, as opaque as the weight (0..1)
    return 'rgba(192,57,43,' + Math.max(0, Math.min(1, w)).toFixed(3) + ')';
  }
  // The query a key moves to from q among n tokens (null: not an arrow key): left/up one
  // back, right/down one on, Home the first, End the last; it stops at either end.
  function arrowStep(key, q, n) {
    var to = {ArrowLeft: q - 1, ArrowUp: q - 1, ArrowRight: q + 1, ArrowDown: q + 1,
              Home: 0, End: n - 1}[key];
    return to === undefined ? null : Math.max(0, Math.min(n - 1, to));
  }

  // --- the page: called only where there is a document --------------------------------------

  // An element with a class and a text.
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined && text !== null) { e.textContent = text; }
    return e;
  }
  // A labelled <select> of 0..count-1 (the label wraps it, so a screen reader names it and a
  // click on the words focuses it); the caller places s.parentNode, the label.
  function selector(cls, name, count, onChange) {
    var label = el('label', null, name + ' '), s = el('select', cls);
    for (var i = 0; i < count; i++) {
      var o = el('option', null, String(i)); o.value = String(i); s.appendChild(o);
    }
    s.addEventListener('change', function () { onChange(Number(s.value)); });
    label.appendChild(s);
    return s;
  }
  // A node (a head's thumbnail canvas) that acts as a button: in the tab order, named,
  // pressed by a click, Enter or Space.
  function pressable(node, name, onPress) {
    node.setAttribute('tabindex', '0'); node.setAttribute('role', 'button');
    node.setAttribute('aria-label', name);
    node.addEventListener('click', onPress);
    node.addEventListener('keydown', function (event) {
      if (event.key === 'Enter' || event.key === ' ') { event.preventDefault(); onPress(); }
    });
  }

  // The view's root element, marked data-ready: the parent of `me` (the running script,
  // document.currentScript) when it matches `rootSelector`, else (no currentScript) the last
  // element matching it on the page not yet started. null when it has started already.
  function claimRoot(me, rootSelector) {
    var parent = me && me.parentNode;
    var root = parent && parent.matches && parent.matches(rootSelector) ? parent : null;
    if (!root) {
      var waiting = document.querySelectorAll(rootSelector + ':not([data-ready])');
      root = waiting[waiting.length - 1];
    }
    if (!root || root.getAttribute('data-ready')) { return null; }
    root.setAttribute('data-ready', '1');
    return root;
  }
  // The JSON Python wrote into the root: the text of its application/json script of class cls.
  function readPayload(root, cls) {
    return JSON.parse(root.querySelector('script.' + cls).textContent);
  }
  // The no-script form (the opening state as text), once the script has drawn the view.
  function removeFallback(root, cls) {
    var fallback = root.querySelector('.' + cls);
    if (fallback) { fallback.parentNode.removeChild(fallback); }
  }

  var common = {
    fill: fill, esc: esc, softmax: softmax, entropy: entropy, colour: colour,
    arrowStep: arrowStep, el: el, selector: selector, pressable: pressable,
    claimRoot: claimRoot, readPayload: readPayload, removeFallback: removeFallback
  };
  if (typeof module !== 'undefined' && module.exports) { module.exports = common; }
  if (typeof window !== 'undefined') { window.courseViewCommon = common; }
})();
