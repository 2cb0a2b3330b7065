"""The learner's error type."""


class LearnerError(ValueError):
    """Bad input to the learner (a shape, a name, a config value, a checkpoint); the message names it."""
