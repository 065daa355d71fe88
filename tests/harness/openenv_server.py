"""The guessing environment (tests/harness/openenv_guess.py) served as an OpenEnv environment server is: openenv-core's
own app (a WebSocket session per client at /ws, the Action's JSON schema at /schema) under uvicorn.

    python -m tests.harness.openenv_server PORT SESSIONS   # on 127.0.0.1, SESSIONS at once; stops on SIGTERM or Ctrl-C
"""

from __future__ import annotations

import sys

import uvicorn
from openenv.core.env_server.http_server import create_fastapi_app

from tests.harness.openenv_guess import GuessAction, GuessObservation, make


def main() -> None:
    app = create_fastapi_app(make, GuessAction, GuessObservation, max_concurrent_envs=int(sys.argv[2]))
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")


if __name__ == "__main__":
    main()
