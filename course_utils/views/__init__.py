"""What the learner looks at: plots, diagrams, the attention explorer, the live view and
the scaling widget (front-end files in ``static/``)."""
