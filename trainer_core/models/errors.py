"""The one error type of model loading (re-exported by `loading` and the package)."""


class ModelError(ValueError):
    """A model that cannot be built or loaded; the message says what was tried and how to fix it."""
