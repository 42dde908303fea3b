"""What the tests share: the exercise-checking harness, lesson cells, the
browser, pytest plugins."""
