"""rlplane's contract: what the trainer, the worker, the API and the CLI say to each other, torch-free.

    rlplane.spec      the run spec schema (RunSpec), its rules, builtin names and YAML/JSON reading
    rlplane.status    run and attempt status words, the transitions between them, trainer exit codes
    rlplane.limits    the sizes the API takes (rows per report, characters per line, ...)
    rlplane.wire      the records a worker and the API exchange: the lease, status updates, heartbeats, a gang's
                      node join, rendezvous and end
    rlplane.layout    a run directory: checkpoint step directories, manifests, which to keep, the attempt fence
    rlplane.client    one HTTP client of the API (worker, trainer reporting, CLI)
    rlplane.reports   the report sender: batches within the limits, retries, a disk spool
    rlplane.config    the CLI's saved login, RLPLANE_URL/RLPLANE_TOKEN, the local server's discovery
    rlplane.logformat JSON log lines for the API and the workers
    rlplane.reporting the reporter (a buffer a background thread drains into sinks), shared by our recipes and the SDK
    rlplane.manifest  a checkpoint's manifest (every file's size and sha256)
    rlplane.sdk       the logging SDK for any training script: rlplane.init(), run.log(), ... (docs/sdk.md)
    rlplane.integrations.hf  a transformers TrainerCallback (TRL's trainers too) over the SDK

It imports pydantic, httpx, PyYAML and orjson, never torch and never api/ (tests/test_layering.py); keep
this file free of imports so each part stays as light as it is (`rlplane.init` loads the SDK when first used).
"""

_SDK = ("init", "Run", "SdkError")


def __getattr__(name: str):
    if name in _SDK:
        from rlplane import sdk

        return getattr(sdk, name)
    raise AttributeError(f"module 'rlplane' has no attribute {name!r}")
