"""A queue bound to a Slurm cluster (RLPLANE_SLURM_QUEUES; docs/slurm.md): each attempt of a run is one Slurm job, a
"pilot job" whose batch script `srun`s one short-lived `rlplane worker --once` per node. Those workers serve a queue
of the job's own (`slurm.<job id>`): the run's launch (one node) or its gang's slots (api/runs/gang.py, granted to
the job's workers only) reach nobody else. From the lease on, the attempt is any other: node 0 publishes the
rendezvous, the workers report, fence and hand back as they always do, and each exits after its attempt.

    queued run, no job       -> sbatch (a worker token minted for the job, in a file only its user can read)
    queued run, job pending  -> the run waits with Slurm's reason ("pending in Slurm job 12: Resources")
    queued run, job running  -> the launch, or the gang's grant, goes to the job's workers
    job ended (done, failed, timed out, cancelled) -> its token revoked; a run still queued gets a new job
    run ended, job still there -> scancel (at once for a cancelled run, after a grace for the others)

Slurm's own requeue (a node failure; `--requeue`) runs the same job again: the attempt it served was lost (its workers
went silent), the run was requeued, and the job's new workers take it on from the last checkpoint. The time limit's
SIGTERM (`--signal`, signal_s ahead) is the workers' warm shutdown: a hand-back, and the next job resumes. sbatch and
squeue run on the API's host (not slurmrestd: docs/slurm.md, "Not yet").
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from api.auth.bootstrap import service_user, write_private
from api.auth.tokens import display_prefix, hash_token, new_token
from api.exceptions import Unprocessable
from api.executors.celery import CeleryExecutor
from api.models import ApiToken, Run, SlurmJob, User
from api.models.base import utcnow
from api.settings import SlurmQueue
from api.unit_of_work import transaction
from rlplane.limits import fit_reason
from rlplane.spec import RunSpec
from rlplane.spec.sections import PRIORITIES
from rlplane.status import TERMINAL

logger = logging.getLogger("rlplane.slurm")

PASSED = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ", "TMPDIR", "SLURM_CONF")  # the API's environment a job sees
SLURM_USER = "slurm-executor"  # the owner of the jobs' worker tokens
ENDED = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "ENDED"}
)
SCANCEL_AFTER_S = 30.0  # a run that ended on its own: its job's workers exit by themselves, given this long
COMMAND_S = 30.0  # the most one sbatch, squeue or scancel may take
RECOVER_AFTER_S = 2 * COMMAND_S  # a submission without its job recorded this long was cut short
UNREACHABLE = ("Unable to contact slurm controller", "Socket timed out", "Connection refused")  # the controller is away


@dataclass(frozen=True)
class JobState:
    state: str  # PENDING, RUNNING, COMPLETED, ...
    reason: str | None  # while pending: Resources, Priority, ...
    nodes: str  # its nodes once running (n[1-2])
    restarts: int  # how often Slurm requeued it: which run of the job this is


class SlurmError(Exception):
    """sbatch, squeue or sinfo could not be run, or refused (its words); `unreachable`: the controller did not answer
    (a restart, a network fault), which passes."""

    def __init__(self, message: str, unreachable: bool = False) -> None:
        super().__init__(message)
        self.unreachable = unreachable


def _comment(submission: int) -> str:
    return f"rlplane-submission-{submission}"


def job_queue(job_id: int) -> str:
    """The broker queue a job's pilot workers serve."""
    return f"slurm.{job_id}"


def pilot_of(job_id: int, restarts: int) -> Callable[[str], bool]:
    """Whether a worker is a pilot of this run of the job (after its `restarts`-th requeue: the batch script names
    them slurm-JOB-NODE, then slurm-JOB-NODE-rN). A requeued job's earlier pilots are dead but look alive until
    lost_after_s: its gang must not be granted to them."""
    pattern = re.compile(rf"slurm-{job_id}-\d+" + (f"-r{restarts}" if restarts else ""))
    return lambda name: pattern.fullmatch(name) is not None


class Slurm:
    """The Slurm commands on the API's host, with the queue's SLURM_CONF."""

    def __init__(self, config: SlurmQueue) -> None:
        # sbatch hands its own environment to the job (--export=ALL): only what a login shell has, never the API's
        # settings (its database URL, bootstrap token, signing key).
        kept = {k: v for k, v in os.environ.items() if k in PASSED}
        self.env = {**kept, **({"SLURM_CONF": config.slurm_conf} if config.slurm_conf else {})}

    def run(self, *argv: str) -> str:
        try:
            done = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=COMMAND_S)
        except FileNotFoundError:
            raise SlurmError(f"{argv[0]} is not installed on the API's host (install slurm-client)") from None
        except subprocess.TimeoutExpired:
            raise SlurmError(f"{argv[0]} did not answer within {COMMAND_S:g} s", unreachable=True) from None
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip()[:500]
            away = any(words in said for words in UNREACHABLE)
            raise SlurmError(f"{argv[0]} failed: {said}", unreachable=away)
        return done.stdout

    def submit(self, script: Path) -> int:
        return int(self.run("sbatch", "--parsable", str(script)).strip().split(";")[0])

    def jobs(self, job_ids: list[int]) -> dict[int, JobState]:
        """What squeue says of each job it still knows (recently ended ones included)."""
        if not job_ids:
            return {}
        fields = "JobID:20|,State:20|,Reason:300|,NodeList:2000|,RestartCnt:10|"
        out = self.run("squeue", "-h", "-t", "all", "-j", ",".join(map(str, job_ids)), "-O", fields)
        found = {}
        for line in out.splitlines():
            job, state, reason, nodes, restarts = (part.strip() for part in (line.split("|") + [""] * 5)[:5])
            if job.isdigit():
                found[int(job)] = JobState(state, reason if reason != "None" else None, nodes, int(restarts or 0))
        return found

    def submitted(self, name: str, submission: int) -> int | None:
        """The job of that name and submission (its comment), if squeue knows it."""
        out = self.run("squeue", "-h", "-t", "all", "-n", name, "-O", "JobID:20|,Comment:100|")
        for line in out.splitlines():
            job, comment = (part.strip() for part in (line.split("|") + [""] * 2)[:2])
            if job.isdigit() and comment == _comment(submission):
                return int(job)
        return None

    def cancel(self, job_id: int) -> None:
        self.run("scancel", str(job_id))

    def partition(self, name: str) -> tuple[int, int] | None:
        """(nodes, most GPUs on one node) of a partition; None if there is no such partition."""
        out = self.run("sinfo", "-h", "-p", name, "-N", "-o", "%N|%G")
        nodes: dict[str, int] = {}
        for line in out.splitlines():
            node, gres = (line.split("|") + [""])[:2]
            nodes[node.strip()] = max(nodes.get(node.strip(), 0), _gpus(gres))
        return (len(nodes), max(nodes.values(), default=0)) if nodes else None


def _gpus(gres: str) -> int:
    """GPUs in sinfo's %G (gpu:4, gpu:a100:8(S:0-1), (null))."""
    for part in gres.split(","):
        fields = part.split("(")[0].split(":")
        if fields[0] == "gpu" and fields[-1].isdigit():
            return int(fields[-1])
    return 0


def check_run(spec: RunSpec, config: SlurmQueue) -> None:
    """At submit: the queue's partition exists and holds the run's nodes and GPUs per node (Slurm would accept the job
    and leave it pending for ever: PartitionConfig, PartitionNodeLimit)."""
    queue = spec.resources.queue
    try:
        partition = Slurm(config).partition(config.partition)
    except SlurmError as exc:
        raise Unprocessable(["body", "resources", "queue"], f"queue {queue} is bound to a Slurm cluster: {exc}") from None
    if partition is None:
        raise Unprocessable(
            ["body", "resources", "queue"],
            f"queue {queue} is bound to Slurm partition {config.partition}, which the cluster does not have: "
            "ask your admin to fix RLPLANE_SLURM_QUEUES",
        )
    nodes, gpus = partition
    if spec.resources.nodes > nodes:
        raise Unprocessable(
            ["body", "resources", "nodes"],
            f"the run asks for {spec.resources.nodes} nodes and partition {config.partition} (queue {queue}) has {nodes}: "
            f"set resources.nodes to at most {nodes}",
        )
    if spec.resources.gpus > gpus:
        raise Unprocessable(
            ["body", "resources", "gpus"],
            f"the run asks for {spec.resources.gpus} GPUs per node and partition {config.partition}'s nodes have at "
            f"most {gpus}: set resources.gpus to at most {gpus}",
        )


def batch_script(run: Run, config: SlurmQueue, directory: Path, submission: int) -> str:
    """The job's batch script. It holds no secret (scontrol shows it): the token and the broker's URL are in files
    beside it that only the job's user can read. Its comment names the submission, by which a job whose record was
    lost is found again."""
    nodes, gpus = run.run_spec.resources.nodes, run.run_spec.resources.gpus
    lines = ["#!/bin/bash", f"#SBATCH --job-name=rlplane-run-{run.id}", f"#SBATCH --comment={_comment(submission)}"]
    lines += [f"#SBATCH --nodes={nodes}"]
    lines += ["#SBATCH --ntasks-per-node=1", f"#SBATCH --partition={config.partition}", "#SBATCH --requeue"]
    lines += [f"#SBATCH --signal=TERM@{config.signal_s}"] if config.signal_s else []
    lines += [f"#SBATCH --chdir={directory}"]
    lines += [f"#SBATCH --output={directory}/slurm-%j.out"]
    lines += [f"#SBATCH --gpus-per-node={gpus}"] if gpus else []
    lines += [f"#SBATCH --account={config.account}"] if config.account else []
    lines += [f"#SBATCH --qos={config.qos}"] if config.qos else []
    nice = max(0, PRIORITIES["normal"] - run.priority) * config.nice_per_point  # Slurm's priority is the site's: lower only
    lines += [f"#SBATCH --nice={nice}"] if nice else []
    lines += [f"#SBATCH --time={config.time_limit}"] if config.time_limit else []
    lines += [line if line.startswith("#SBATCH") else f"#SBATCH {line}" for line in config.sbatch_lines]
    worker = f'{config.worker} worker --once --queues slurm.$SLURM_JOB_ID --name "$name"'
    node = (
        'addr=$(scontrol show node "$SLURMD_NODENAME" | sed -n "s/.*NodeAddr=\\([^ ]*\\).*/\\1/p"); '
        # a requeued job's pilots take new names (pilot_of): its earlier ones may still look alive to the API
        'name=slurm-$SLURM_JOB_ID-$SLURM_NODEID; [ "${SLURM_RESTART_COUNT:-0}" = 0 ] || name=$name-r$SLURM_RESTART_COUNT; '
        f"export RLPLANE_HOME={config.scratch}; "
        f'exec {worker} --advertise-address "${{addr:-$(hostname -i)}}"'
    )
    lines += [
        f"# rlplane: run {run.id} ({run.name}); one worker per node serves this job's queue for one attempt, then exits",
        "set -a",
        f". {shlex.quote(str(directory / 'worker.env'))}",
        "set +a",
        f"srun --ntasks-per-node=1 --kill-on-bad-exit=0 bash -c {shlex.quote(node)}",
    ]
    return "\n".join(lines) + "\n"


class SlurmExecutor:
    def __init__(
        self,
        factory: sessionmaker[Session],
        queues: dict[str, SlurmQueue],
        celery: CeleryExecutor,
        *,
        broker_url: str,
        artifacts: str,
    ) -> None:
        self.factory, self.queues, self.celery = factory, queues, celery
        self.broker_url, self.artifacts = broker_url, artifacts

    def serves(self, queue: str) -> bool:
        return queue in self.queues

    def dispatch(self, run_id: int, queue: str, nodes: int) -> None:
        config = self.queues[queue]
        submission = None
        with transaction(self.factory) as uow:
            session = uow.session
            run = session.scalar(select(Run).where(Run.id == run_id).with_for_update())
            if run is None or run.status != "queued":
                return
            job = _active_job(session, run_id)
            if job is None:
                if _submission(session, run_id) is not None:
                    return  # sbatch under way (or cut short: tick recovers it)
                submission = self._prepare(session, run, config)
            else:
                _tell(run, job)
                if job.state != "RUNNING":
                    return
                job_id, restarts = job.job_id, job.restarts
        # sbatch runs outside the transaction: it may take COMMAND_S, and the run's row stays unlocked meanwhile
        if submission is not None:
            self._submit(run_id, submission, config)
        elif job is not None:
            self.celery.dispatch(run_id, queue, nodes, workers=job_queue(job_id), eligible=pilot_of(job_id, restarts))

    def _prepare(self, session: Session, run: Run, config: SlurmQueue) -> _Submission | None:
        """The job's token (its name marks the submission in flight: _submission), files and batch script."""
        directory = _job_dir(config, run)
        token, secret = _mint_token(session, run)
        try:
            directory.mkdir(parents=True, exist_ok=True)
            write_private(directory / "token", secret)
            settings = {"RLPLANE_BROKER_URL": config.broker_url or self.broker_url, "RLPLANE_API_URL": config.api_url}
            settings |= {"RLPLANE_ARTIFACTS": config.artifacts or self.artifacts, "RLPLANE_TOKEN_FILE": str(directory / "token")}
            settings |= config.environment
            write_private(directory / "worker.env", "".join(f"{k}={shlex.quote(v)}\n" for k, v in settings.items()))
            script = directory / "job.sh"
            script.write_text(batch_script(run, config, directory, submission=token.id))
        except OSError as exc:
            token.revoked_at = utcnow()
            _refused(session, run, exc)
            return None
        run.status_reason = f"submitting a Slurm job to partition {config.partition}"
        return _Submission(token.id, directory, script)

    def _submit(self, run_id: int, submission: _Submission, config: SlurmQueue) -> None:
        try:
            job_id: int | SlurmError = Slurm(config).submit(submission.script)
        except SlurmError as exc:
            job_id = exc
        with transaction(self.factory) as uow:
            session = uow.session
            run = session.scalar(select(Run).where(Run.id == run_id).with_for_update())
            token = session.get(ApiToken, submission.token_id)
            if isinstance(job_id, int):
                self._attach(session, run, token, job_id, submission.directory, config)
                return
            if token is not None:
                token.revoked_at = utcnow()
            if run is not None and run.status == "queued":
                _refused(session, run, job_id)

    def _attach(
        self, session: Session, run: Run | None, token: ApiToken | None, job_id: int, directory: Path, config: SlurmQueue
    ) -> None:
        """The submitted job on its run (also when the run ended meanwhile: tick cancels the job then)."""
        if run is None:
            return
        if token is not None:
            token.name = f"slurm job {job_id} (run {run.id})"
        session.add(
            SlurmJob(
                run_id=run.id,
                queue=run.queue,
                job_id=job_id,
                state="PENDING",
                output=str(directory / f"slurm-{job_id}.out"),
                directory=str(directory),
                token_id=token.id if token is not None else None,
            )
        )
        if run.status == "queued":
            run.status_reason = f"submitted as Slurm job {job_id} to partition {config.partition}"
        logger.info("run=%d: Slurm job %d submitted", run.id, job_id)

    def _recover(self, run_id: int, token_id: int, config: SlurmQueue) -> None:
        """A submission whose job was never recorded (the API stopped between sbatch and its record): the job sbatch
        made, found by its comment, is taken on; if there is none, the submission is dropped and the run, if still
        queued, gets a new one. Never two jobs for one run, never a job nobody watches."""
        try:
            found = Slurm(config).submitted(f"rlplane-run-{run_id}", submission=token_id)
        except SlurmError as exc:
            logger.warning("run=%d: squeue failed: %s", run_id, exc)
            return
        with transaction(self.factory) as uow:
            session = uow.session
            run = session.scalar(select(Run).where(Run.id == run_id).with_for_update())
            token = session.get(ApiToken, token_id)
            if token is None or token.revoked_at is not None or token.name != _in_flight_name(run_id):
                return  # settled meanwhile
            if found is None or run is None:
                token.revoked_at = utcnow()
                return
            self._attach(session, run, token, found, _job_dir(config, run), config)
            logger.warning("run=%d: took on Slurm job %d, whose submission was cut short", run_id, found)

    def tick(self) -> None:
        """Each active job's state from squeue; an ended job's token revoked; the job of a run that ended cancelled;
        a submission cut short recovered."""
        with self.factory() as session:
            stale = utcnow() - timedelta(seconds=RECOVER_AFTER_S)
            tokens = session.execute(
                select(ApiToken.id, ApiToken.name)
                .join(User, User.id == ApiToken.user_id)
                .where(User.name == SLURM_USER, ApiToken.revoked_at.is_(None), ApiToken.created_at < stale)
            ).all()  # the active jobs' tokens, and those of submissions without a job
            cut_short = [(token_id, int(m[1])) for token_id, name in tokens if (m := IN_FLIGHT.fullmatch(name))]
            queues = dict(session.execute(select(Run.id, Run.queue).where(Run.id.in_([r for _, r in cut_short]))).all())
        for token_id, run_id in cut_short:
            if (config := self.queues.get(queues.get(run_id, ""))) is not None:
                self._recover(run_id, token_id, config)
        with self.factory() as session:
            active = session.execute(
                select(SlurmJob.id, SlurmJob.queue, SlurmJob.job_id, Run.status, Run.ended_at)
                .join(Run, Run.id == SlurmJob.run_id)
                .where(SlurmJob.ended_at.is_(None))
            ).all()
        by_queue: dict[str, list] = {}
        for row in active:
            by_queue.setdefault(row.queue, []).append(row)
        for queue, rows in by_queue.items():
            config = self.queues.get(queue)
            if config is None:
                continue
            slurm = Slurm(config)
            try:
                seen = slurm.jobs([row.job_id for row in rows])
            except SlurmError as exc:
                logger.warning("squeue failed: %s", exc)
                continue
            for row in rows:
                state = seen.get(row.job_id)
                self._update(row.id, state)
                if state is not None and not _ended(state.state) and row.status in TERMINAL:
                    since = (utcnow() - row.ended_at).total_seconds() if row.ended_at else 0.0
                    if row.status == "cancelled" or since > SCANCEL_AFTER_S:
                        try:
                            slurm.cancel(row.job_id)
                        except SlurmError as exc:
                            logger.warning("scancel %d failed: %s", row.job_id, exc)

    def _update(self, job_row: int, state: JobState | None) -> None:
        with transaction(self.factory) as uow:
            job = uow.session.get(SlurmJob, job_row)
            if job is None:
                return
            if state is not None:
                job.state, job.reason, job.restarts = state.state[:32], state.reason and state.reason[:300], state.restarts
                job.node_list = fit_reason(state.nodes) or job.node_list
            if state is None or _ended(job.state):
                job.ended_at = utcnow()
                if state is None and not _ended(job.state):
                    job.state = "ENDED"  # gone from squeue (MinJobAge) before it was seen ending
                if job.token_id is not None:
                    token = uow.session.get(ApiToken, job.token_id)
                    if token is not None and token.revoked_at is None:
                        token.revoked_at = utcnow()
                Path(job.directory, "token").unlink(missing_ok=True)


def _ended(state: str) -> bool:
    """A job state after which nothing of the job runs (ENDED: gone from squeue before it was seen ending)."""
    return state in ENDED or state.startswith("CANCELLED")


def _job_dir(config: SlurmQueue, run: Run) -> Path:
    """Where the files of the job for the run's next attempt go: its script, token, worker.env and output."""
    return config.job_dir / f"run-{run.id}-attempt-{run.attempt_count + 1}"


def _active_job(session: Session, run_id: int) -> SlurmJob | None:
    return session.scalar(
        select(SlurmJob).where(SlurmJob.run_id == run_id, SlurmJob.ended_at.is_(None)).order_by(SlurmJob.id.desc())
    )


@dataclass(frozen=True)
class _Submission:
    token_id: int  # the job's token, which marks the submission until the job is recorded
    directory: Path
    script: Path


def _in_flight_name(run_id: int) -> str:
    return f"slurm job (run {run_id})"  # a job token's name until its job is known


IN_FLIGHT = re.compile(r"slurm job \(run (\d+)\)")


def _submission(session: Session, run_id: int) -> ApiToken | None:
    """The token of a submission for the run that has no job recorded yet: sbatch under way, or cut short."""
    user = service_user(session, SLURM_USER)
    return session.scalar(
        select(ApiToken).where(
            ApiToken.user_id == user.id, ApiToken.name == _in_flight_name(run_id), ApiToken.revoked_at.is_(None)
        )
    )


def _tell(run: Run, job: SlurmJob) -> None:
    """The run's reason from its job's state: not a status change (no event, no history entry for every tick)."""
    if job.state == "RUNNING":
        why = f"Slurm job {job.job_id} runs on {job.node_list or 'its nodes'}: its workers are starting"
    elif job.state in ("PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"):
        why = f"pending in Slurm job {job.job_id}" + (f": {job.reason}" if job.reason else "")
    else:
        why = f"Slurm job {job.job_id} is {job.state}"
    if run.status_reason != why:
        run.status_reason = why


def _refused(session: Session, run: Run, exc: OSError | SlurmError) -> None:
    from api.runs.service import set_status

    if isinstance(exc, SlurmError) and exc.unreachable:  # the controller is away: tried again next tick
        run.status_reason = fit_reason(f"the Slurm job could not be submitted yet (tried again shortly): {exc}")
    else:  # sbatch refused the job: another try would be refused the same way
        set_status(session, run, "failed", f"the Slurm job could not be submitted: {exc}")
        run.failure = "config"
    logger.warning("run=%d: sbatch failed: %s", run.id, exc)


def _mint_token(session: Session, run: Run) -> tuple[ApiToken, str]:
    """A worker token for one job: its workers' only credential, revoked when the job has ended."""
    user = service_user(session, SLURM_USER)
    secret = new_token()
    token = ApiToken(
        user_id=user.id,
        name=_in_flight_name(run.id),
        token_hash=hash_token(secret),
        prefix=display_prefix(secret),
        scopes=["worker"],
        expires_at=utcnow() + timedelta(days=30),
    )
    session.add(token)
    session.flush()
    return token, secret
