"""rlplane's contract: what the trainer, the worker, the API and the CLI say to each other, torch-free.

    rlplane.spec      the run spec schema (RunSpec), its rules, builtin names and YAML/JSON reading
    rlplane.status    run and attempt status words, the transitions between them, trainer exit codes
    rlplane.limits    the sizes the API takes (rows per report, characters per line, ...)
    rlplane.wire      the records sent over the wire: the lease, status updates, reports
    rlplane.layout    a run directory: checkpoint step directories, manifests, which to keep
    rlplane.client    one HTTP client of the API (worker, trainer reporting, CLI)

It imports pydantic and httpx, never torch and never api/; keep this file free of imports so each
part stays as light as it is.
"""
