// ESLint's flat config for the course's JavaScript: the attention explorer's front end
// (course_utils/views/static/, a classic browser script that node can also require) and
// its unit tests (tests/js/, node's test runner). Run by tests/test_explorer_js.py.
"use strict";
const js = require("@eslint/js");
const globals = require("globals");

module.exports = [
  {ignores: [".venv*/", "build/"]},  // node_modules/ is ignored anyway
  js.configs.recommended,
  {
    files: ["course_utils/**/*.js"],
    languageOptions: {
      ecmaVersion: 5,
      sourceType: "script",
      // A browser script; `module` and `require` are read only where node loads it (to
      // export the logic, and to load view_common.js and live_common.js, which the page
      // inlines before it).
      globals: {...globals.browser, module: "readonly", require: "readonly"},
    },
  },
  {
    files: ["tests/js/**/*.js", "eslint.config.js"],
    languageOptions: {ecmaVersion: "latest", sourceType: "commonjs", globals: globals.node},
  },
];
