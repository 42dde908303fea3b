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
      // A browser script; `module` is read only to export the logic to node.
      globals: {...globals.browser, module: "readonly"},
    },
  },
  {
    files: ["tests/js/**/*.js", "eslint.config.js"],
    languageOptions: {ecmaVersion: "latest", sourceType: "commonjs", globals: globals.node},
  },
];
