"""Sphinx configuration of the course website (built by ``python3 tools/course.py site``).

tools/site.py copies this folder and the notebooks into build/site-src/ and runs Sphinx
there; read that module's docstring for why Sphinx + myst-nb + Furo, and how the site is
kept offline (every script, style sheet and font is served by the site itself).
"""

import os

# tools/site.py builds the site once per edition, naming it in this variable.
EDITION = os.environ.get("COURSE_EDITION", "en")
project = {"en": "Self-attention, hands-on", "zh-CN": "动手学自注意力"}[EDITION]
language = {"en": "en", "zh-CN": "zh_CN"}[EDITION]  # zh_CN: search splits words with jieba

if EDITION == "zh-CN":
    from sphinx import search
    from sphinx.search.zh import SearchChinese

    class _ChineseSearch(SearchChinese):
        """Sphinx 9.0's Chinese search ships the English stemmer but names it ChineseStemmer,
        so the search page stops with "ChineseStemmer is not defined" (sphinx-doc/sphinx
        #14229, fixed after 9.0.4): name the stemmer it ships."""

        language_name = "English"

    search.languages["zh"] = _ChineseSearch
author = "the course's contributors"
copyright = "the course's contributors"

extensions = ["myst_nb"]
# Notebooks are shown with the outputs committed in the repository: CI has already checked
# that they equal a fresh run, so the site never re-executes anything.
nb_execution_mode = "off"
myst_enable_extensions = ["dollarmath", "amsmath"]
# Lessons go from "# Title" to "###" in places; that is fine for a notebook.
suppress_warnings = ["myst.header"]
# notebooks/ holds the committed notebooks that the download links serve.
exclude_patterns = ["_build", "**.ipynb_checkpoints", "notebooks"]

html_theme = "furo"
html_title = project
html_static_path = ["_static"]
html_css_files = ["course.css"]
# The edition's own CJK font, when tools/site_font.py wrote its style sheet into this source.
if os.path.exists(os.path.join(os.path.dirname(__file__), "_static", "edition-font.css")):
    html_css_files.append("edition-font.css")
# Our own icon: without one the browser asks the server for /favicon.ico.
html_favicon = "_static/favicon.svg"
html_show_sourcelink = False
html_theme_options = {"navigation_with_keys": True}
# Every page links to the same page of the other edition (English at the site's root,
# Chinese under zh-CN/), from the sidebar: templates/sidebar/language.html.
templates_path = ["_templates"]
html_context = {"course_edition": EDITION}
html_sidebars = {"**": ["sidebar/scroll-start.html", "sidebar/brand.html", "sidebar/language.html",
                        "sidebar/search.html", "sidebar/navigation.html",
                        "sidebar/scroll-end.html"]}

# MathJax 3 from the npm package, copied into _static/mathjax by tools/site.py: the fonts
# it loads are found next to the script, so no page asks another host for anything.
mathjax_path = "mathjax/tex-chtml.js"
