"""The one error the checkpoint package raises; its message names the file or field and the fix."""


class CheckpointError(RuntimeError):
    """A checkpoint could not be written, found, verified or loaded."""
