"""Interactive views for the lessons (ipywidgets 7.7 and 8)."""
