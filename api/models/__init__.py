"""ORM models, one file per table."""

from api.models.alert import Alert, AlertRule
from api.models.api_token import ApiToken
from api.models.attempt_node import AttemptNode
from api.models.base import Base
from api.models.checkpoint import Checkpoint
from api.models.dataset import Dataset
from api.models.log_line import LogLine
from api.models.membership import ROLES, Membership
from api.models.metric import Metric
from api.models.metric_rollup import MetricRollup
from api.models.pipeline import Pipeline, PipelineStage
from api.models.project import Project
from api.models.project_quota import ProjectQuota
from api.models.run import Run
from api.models.run_attempt import RunAttempt
from api.models.run_event import RunEvent
from api.models.run_link import RunLink
from api.models.sample import Sample
from api.models.slurm_job import SlurmJob
from api.models.sweep import Sweep, SweepTrial
from api.models.user import User
from api.models.worker import Worker

__all__ = [
    "ROLES",
    "Alert",
    "AlertRule",
    "ApiToken",
    "AttemptNode",
    "Base",
    "Checkpoint",
    "Dataset",
    "LogLine",
    "Membership",
    "Metric",
    "MetricRollup",
    "Pipeline",
    "PipelineStage",
    "Project",
    "ProjectQuota",
    "Run",
    "RunAttempt",
    "RunEvent",
    "RunLink",
    "Sample",
    "SlurmJob",
    "Sweep",
    "SweepTrial",
    "User",
    "Worker",
]
