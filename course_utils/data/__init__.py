"""Data generators: the tasks lessons train on, made in code."""
