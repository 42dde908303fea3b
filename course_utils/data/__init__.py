"""Data the lessons train on: the committed corpora and their tokenizer."""
