"""The mutation tables of the exercises, one module per lesson: plausible wrong answers, each
with the words its message must hold, and right answers written differently from the
reference. Data, walked by tests/test_exercises.py."""
