"""A gang's node slots (api/runs/gang.py): join, meet at the rendezvous, end."""

from fastapi import APIRouter

from api.auth.deps import WorkerPrincipal
from api.db import SessionDep
from api.params import RunId
from api.runs import gang, schemas, views
from rlplane.wire import NodeEnd, NodeJoin, NodeLease, Rendezvous

router = APIRouter(prefix="/api/v1/runs/{run_id}/attempts/{attempt}", tags=["workers"])


@router.post("/nodes/{node_rank}/join", response_model=NodeLease)
def join_node(
    run_id: RunId, attempt: int, node_rank: int, body: NodeJoin, principal: WorkerPrincipal, session: SessionDep
) -> NodeLease:
    """The worker the API granted this node slot takes it; node 0 brings the rendezvous (its address and port), a
    generator node where its generator listens."""
    run, slot = gang.join(session, principal, run_id, attempt, node_rank, body)
    return NodeLease(
        run=views.leased_run(session, run),
        attempt=attempt,
        node_rank=slot.node_rank,
        role=gang.role_of(run, slot.node_rank),
        rendezvous=gang.rendezvous(session, run, attempt),
    )


@router.get("/rendezvous", response_model=Rendezvous)
def get_rendezvous(run_id: RunId, attempt: int, principal: WorkerPrincipal, session: SessionDep) -> Rendezvous:
    """Node 0's address and port once it has joined; `ended` once the attempt is over."""
    run = gang.part_of(session, principal, run_id)
    return gang.rendezvous(session, run, attempt)


@router.post("/nodes/{node_rank}/end", response_model=schemas.RunDetail)
def end_node(
    run_id: RunId, attempt: int, node_rank: int, body: NodeEnd, principal: WorkerPrincipal, session: SessionDep
) -> schemas.RunDetail:
    """A node other than 0 ended its part; a non-zero exit ends the attempt for every node."""
    gang.end_node(session, principal, run_id, attempt, node_rank, body)
    return views.run_detail(session, run_id, principal)
