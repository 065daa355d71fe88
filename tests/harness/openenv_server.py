"""An OpenEnv environment served as OpenEnv environment servers are: openenv-core's own app (a WebSocket session per
client at /ws, the Action's JSON schema at /schema) under uvicorn. `guess` is tests/harness/openenv_guess.py; `tools`,
the MCP tool environment of tests/harness/openenv_tools.py (served with CallToolAction, as OpenEnv's MCP environments
are).

    python -m tests.harness.openenv_server PORT SESSIONS [guess|tools]   # on 127.0.0.1, SESSIONS at once; stops on
                                                                          # SIGTERM or Ctrl-C
"""

from __future__ import annotations

import sys

import uvicorn
from openenv.core.env_server.http_server import create_fastapi_app


def main() -> None:
    port, sessions = int(sys.argv[1]), int(sys.argv[2])
    if (sys.argv[3] if len(sys.argv) > 3 else "guess") == "tools":
        from openenv.core.env_server.mcp_types import CallToolAction, CallToolObservation

        from tests.harness.openenv_tools import make

        app = create_fastapi_app(make, CallToolAction, CallToolObservation, max_concurrent_envs=sessions)
    else:
        from tests.harness.openenv_guess import GuessAction, GuessObservation
        from tests.harness.openenv_guess import make as make_guess

        app = create_fastapi_app(make_guess, GuessAction, GuessObservation, max_concurrent_envs=sessions)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()
