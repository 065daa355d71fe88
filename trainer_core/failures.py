"""How a run fails on its own account, shared by the layers that find it (the recipes' step judgement, the rollout's
sampling) and the command line that turns it into an exit code; torch-free."""


class Diverged(RuntimeError):
    """Training went non-finite: the run ends failed, with this message as its reason and no final model."""


class EngineLost(RuntimeError):
    """A rollout engine's process died under the run (not the run's doing): the attempt is lost, and the run resumes
    from its last checkpoint on another attempt."""
