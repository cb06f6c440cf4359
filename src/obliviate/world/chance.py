"""Chance levels of the world's evaluations (what a model that knows nothing scores)."""

N_CHOICES = 4
"""Every MCQ has the correct value and three distractors of the same relation."""

MCQ_CHANCE = 1.0 / N_CHOICES
"""Accuracy of uniform guessing on the world's MCQs: 0.25."""
